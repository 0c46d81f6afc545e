//! One request, from the message that starts it to its end, however it ends.
//!
//! `add_message` (a handler) appends the message and bumps the dialog's `request`; its
//! after-commit hook starts the request as a tokio task the runtime tracks (`start`). The
//! task begins with the model's first answer, goes on with a round whose waiting calls
//! are all answered (`resume`), or with one its process stopped in (`recover`); the
//! rounds themselves are the `rounds` module's. However the task ends (done, failed,
//! panicked or aborted), `finish` clears `pending` and starts what was queued meanwhile.
//! Every write checks first that the request is still the dialog's current one
//! (`is_current`), so a cancelled or superseded request never touches a newer one's state.

use std::sync::Arc;

use tracing::Instrument;
use trellis_runner::{Read, Runtime};

use super::calls;
use super::interaction::{self, Held};
use super::rounds::run;
use super::{DialogCells, DialogInput, RequestId, Shared};
use crate::message::{Message, ToolOutput};

/// Where a request task begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Begin {
    /// With the model's first answer to a new message.
    Fresh,
    /// With the calls of a round that waited for a person, now all answered.
    Resume,
    /// Where the process stopped in it (see `recover`).
    Recover,
}

/// Appends `messages` and starts a new request with them, once `tx` commits.
pub(super) fn begin(
    shared: &Arc<Shared>,
    cells: &DialogCells,
    tx: &trellis_runner::Tx,
    messages: Vec<Message>,
) -> trellis_runner::Result<()> {
    for message in messages {
        cells.messages().push(tx, message)?;
    }
    let request = cells.request.get(tx)?.next();
    cells.request.set(tx, request)?;
    cells.pending.set(tx, true)?;
    cells.error.set(tx, None)?;
    cells.partial.set(tx, String::new())?;
    cells.result.set(tx, serde_json::Value::Null)?;
    cells.notice.set(tx, None)?;
    let (shared, cells) = (shared.clone(), cells.clone());
    tx.after_commit(move |rt| start(shared, rt.clone(), cells, request, Begin::Fresh));
    Ok(())
}

/// Starts request `id` of a dialog on tokio, tracked by the runtime (so `idle` and
/// `settled` wait for it) and abortable by `cancel_generation`.
pub(super) fn start(shared: Arc<Shared>, rt: Runtime, cells: DialogCells, id: RequestId, begin: Begin) {
    if tokio::runtime::Handle::try_current().is_err() {
        let message = "llm_dialog needs a tokio runtime to run requests".to_string();
        finish(&shared, &rt, &cells, id, Some(message));
        return;
    }
    let span = tracing::info_span!("llm_request", dialog = %cells.base, request = id.0);
    let task_rt = rt.clone();
    let task_cells = cells.clone();
    let task_shared = shared.clone();
    let handle = rt.spawn_tracked(
        cells.base.doc.clone(),
        async move {
            // Ends the request even if `run` panics: `pending` must never stay true.
            let guard = Finish {
                shared: task_shared.clone(),
                rt: task_rt.clone(),
                cells: task_cells.clone(),
                id,
                error: Some("the request stopped unexpectedly".into()),
            };
            let outcome = match begin {
                Begin::Fresh => run(&task_shared, &task_rt, &task_cells, id, 1, 0).await,
                Begin::Resume => resume(&task_shared, &task_rt, &task_cells, id).await,
                Begin::Recover => recover(&task_shared, &task_rt, &task_cells, id).await,
            };
            task_shared.forget(&task_cells.base, id);
            let mut guard = guard;
            guard.error = outcome.err();
        }
        .instrument(span)
        .instrument(crate::traced::agent(&cells.base.doc)),
    );
    shared.remember(cells.base, id, handle.abort_handle());
}

/// Finishes request `id` when dropped: on completion, on a panic, and on abort (where the
/// request is no longer current, so nothing changes).
struct Finish {
    shared: Arc<Shared>,
    rt: Runtime,
    cells: DialogCells,
    id: RequestId,
    error: Option<String>,
}

impl Drop for Finish {
    fn drop(&mut self) {
        finish(&self.shared, &self.rt, &self.cells, self.id, self.error.take());
    }
}

/// Whether `id` is still the dialog's current request.
pub(super) fn is_current(tx: &impl Read, cells: &DialogCells, id: RequestId) -> trellis_runner::Result<bool> {
    Ok(cells.request.get(tx)? == id)
}

/// Ends the request: clears `pending` and records its error unless a newer request took
/// over; messages queued while it ran start the next one. Only then is the error logged: a
/// request cancelled or superseded stops short by design (its task is aborted mid-way), and
/// nobody waits for its outcome.
fn finish(shared: &Arc<Shared>, rt: &Runtime, cells: &DialogCells, id: RequestId, error: Option<String>) {
    let result = rt.transact(|tx| {
        let current = is_current(tx, cells, id)?;
        if current {
            cells.pending.set(tx, false)?;
            cells.partial.set(tx, String::new())?;
            cells.error.set(tx, error.clone())?;
            cells.resumes.set(tx, 0)?;
            let queued = cells.queued.get(tx).unwrap_or_default();
            if !queued.is_empty() {
                cells.queued.set(tx, Vec::new())?;
                begin(shared, cells, tx, queued)?;
            }
        }
        Ok(current)
    });
    match (result, &error) {
        (Ok(true), Some(error)) => tracing::warn!(%error, "llm request failed"),
        (Ok(_), _) => {}
        (Err(e), _) => rt.report(e),
    }
    // A watch's message that could not start a turn while a call waited tries again.
    let idle = !cells.pending.get(rt).unwrap_or(true) && !super::interaction::is_waiting(rt, cells).unwrap_or(true);
    if shared.settings.resume && idle {
        super::watching::deliver_soon(rt, &cells.base);
    }
}

/// Appends a message if the request is still current; false when it was superseded.
pub(super) fn append(rt: &Runtime, cells: &DialogCells, id: RequestId, message: Message) -> Result<bool, String> {
    rt.transact(|tx| {
        if !is_current(tx, cells, id)? {
            return Ok(false);
        }
        cells.messages().push(tx, message.clone())?;
        cells.partial.set(tx, String::new())?;
        Ok(true)
    })
    .map_err(|e| format!("could not store the reply: {e}"))
}

/// Reads an input that may be a literal or a link; `null` when absent.
pub(super) fn input(rt: &Runtime, cells: &DialogCells, key: DialogInput) -> serde_json::Value {
    rt.read(&cells.inputs.child(key.key())).map(|v| v.to_json()).unwrap_or_default()
}

/// Goes on with a round whose waiting calls are all answered: runs the approved ones,
/// appends the round's results, and continues with the next round.
async fn resume(shared: &Shared, rt: &Runtime, cells: &DialogCells, id: RequestId) -> Result<(), String> {
    let held = interaction::held_cell(cells).get(rt).map_err(|e| format!("the waiting round is not valid: {e}"))?;
    let Some(held) = held.filter(|held| held.request == id) else { return Ok(()) };
    go_on(shared, rt, cells, id, held).await
}

/// Goes on with a request its process stopped in: a round that had all its answers goes
/// on as [`resume`] does; else the calls of the last answer that have no result are taken
/// on (see `recover`), and the model is asked again.
async fn recover(shared: &Shared, rt: &Runtime, cells: &DialogCells, id: RequestId) -> Result<(), String> {
    tracing::info!("resuming a request the process stopped in");
    let held = interaction::held_cell(cells).get(rt).map_err(|e| format!("the waiting round is not valid: {e}"))?;
    let catalog = cells.catalog.get(rt, &input(rt, cells, DialogInput::Tools));
    if let Some(mut held) = held {
        held.request = id;
        super::recover::answer_cut(rt, cells, &catalog, &mut held);
        return go_on(shared, rt, cells, id, held).await;
    }
    let messages = cells.messages().get(rt).map_err(|e| format!("the messages are not valid: {e}"))?;
    match super::recover::cut_round(rt, cells, id, &messages, &catalog) {
        Some(held) => match calls::settle_round(shared, rt, cells, id, &catalog, held.clone()).await? {
            true => run(shared, rt, cells, id, held.round + 1, held.client_rounds).await,
            false => Ok(()),
        },
        None => run(shared, rt, cells, id, super::recover::answers_since_asked(&messages) + 1, 0).await,
    }
}

/// Runs the approved calls of a round whose answers are all in, appends its results, and
/// continues with the next round.
async fn go_on(
    shared: &Shared,
    rt: &Runtime,
    cells: &DialogCells,
    id: RequestId,
    mut held: Held,
) -> Result<(), String> {
    for call in held.calls.iter_mut().filter(|call| call.output.is_none() && !call.approved) {
        call.output = Some(ToolOutput::ErrorText("no answer was given for this call".into()));
    }
    let catalog = cells.catalog.get(rt, &input(rt, cells, DialogInput::Tools));
    if calls::settle_round(shared, rt, cells, id, &catalog, held.clone()).await? {
        run(shared, rt, cells, id, held.round + 1, held.client_rounds).await
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request-id guard on its own, with no task to abort: a request that is no
    /// longer the dialog's current one writes nothing, neither a message nor its end.
    #[test]
    fn a_superseded_request_writes_nothing_though_it_is_never_aborted() {
        use super::super::{DialogCells, RequestId};
        let rt = Runtime::in_memory();
        let cells = DialogCells::at(trellis_runner::Link::new(rt.space().new_doc_id("dialog"), Default::default()));
        rt.transact(|tx| {
            cells.messages().set(tx, Vec::new())?;
            cells.pending.set(tx, true)?;
            cells.error.set(tx, None)?;
            // Request 1 was superseded (a new message, a cancel) by request 2.
            cells.request.set(tx, RequestId(2))
        })
        .expect("a dialog's state");

        assert_eq!(append(&rt, &cells, RequestId(1), Message::assistant("late")), Ok(false));
        let shared = super::super::LlmDialog::new().shared;
        finish(&shared, &rt, &cells, RequestId(1), Some("a late failure".into()));
        assert!(cells.messages().get(&rt).expect("messages").is_empty(), "no late message");
        assert!(cells.pending.get(&rt).expect("pending"), "the current request is still running");
        assert_eq!(cells.error.get(&rt).expect("error"), None, "no late error");

        assert_eq!(append(&rt, &cells, RequestId(2), Message::assistant("on time")), Ok(true));
        finish(&shared, &rt, &cells, RequestId(2), None);
        assert_eq!(cells.messages().get(&rt).expect("messages").len(), 1);
        assert!(!cells.pending.get(&rt).expect("pending"), "the current request ended");
    }
}
