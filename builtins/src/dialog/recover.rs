//! A request that survives its process: what a round's calls leave behind while they run,
//! and going on from it when the dialog starts again after the process stopped mid-request.
//!
//! Each call of a round has a key, `MESSAGE:CALL` (the index of the assistant message that
//! made it, and its place there), stable across processes. In a document of its own beside
//! the dialog (as `partial`'s, so a call never rewrites the conversation):
//!
//! - `ran/KEY`: a handler's receipt, written by its own transaction (`Runtime::send_once`),
//!   so a handler call made again after a restart answers what it returned and does not
//!   run twice;
//! - `started/KEY`: a durable mark written before a call outside the space runs (an MCP
//!   tool, a defined tool's server phase, a pattern tool), so that after a restart a call
//!   that started and has no result is told to the model as of unknown effect, unless its
//!   tool says running it again is safe ([`Tool::repeatable`](crate::catalog::Tool::repeatable)).
//!
//! Both are cleared in the transaction that appends the round's results.
//!
//! On a start that finds `pending` set, the dialog resumes the request (when its settings
//! say so, [`DialogSettings::resume`](super::DialogSettings::resume)): the streamed text of
//! a cut reply is kept, marked as cut off; calls without results are taken on as above; then
//! the model is asked again. A request that stops while resuming [`MAX_RESUMES`] times in
//! a row ends with an error instead, so a crash it causes cannot repeat at every start.

use trellis_runner::{Link, Read, Runtime, Tx, Value};

use super::interaction::{Held, HeldCall};
use super::{DialogCells, RequestId};
use crate::catalog::Catalog;
use crate::message::{Message, Role, ToolOutput};

/// How many starts in a row may resume a request before it ends with an error.
pub const MAX_RESUMES: u32 = 3;

/// What the streamed text of a reply cut off by a stop ends with.
pub const CUT_OFF: &str = "[cut off: the process stopped here]";

/// The result of a call that started outside the space and was cut off by a stop.
const UNKNOWN_EFFECT: &str = "the process stopped while this call ran, so whether it took effect is unknown: check \
     (with a tool that reads) before calling it again";

pub(super) use trellis_runner::this_process;

/// The document of a dialog's receipts and started marks.
fn marks(cells: &DialogCells) -> Link {
    cells.beside("calls")
}

/// The key of call `index` of the assistant message at `message`.
fn key(message: usize, index: usize) -> String {
    format!("{message}:{index}")
}

/// Where a handler call records that it ran.
pub(super) fn receipt(cells: &DialogCells, message: usize, index: usize) -> Link {
    marks(cells).child("ran").child(key(message, index))
}

/// Marks a call outside the space as started, durably (`transact` returns once the
/// commit is), before it runs.
pub(super) fn mark_started(rt: &Runtime, cells: &DialogCells, message: usize, index: usize) -> Result<(), String> {
    let at = marks(cells).child("started").child(key(message, index));
    rt.transact(|tx| tx.write(&at, Value::from(true))).map_err(|e| format!("could not mark a call as started: {e}"))
}

/// Forgets the round's marks, in the transaction that appends its results.
pub(super) fn clear(tx: &Tx, cells: &DialogCells) -> trellis_runner::Result<()> {
    let at = marks(cells);
    if tx.read(&at)? != Value::Null {
        tx.write(&at, Value::Null)?;
    }
    Ok(())
}

/// Whether call `index` of the message at `message` started and may have had its effect.
fn started(rt: &Runtime, cells: &DialogCells, message: usize, index: usize) -> bool {
    let at = marks(cells).child("started").child(key(message, index));
    rt.read(&at).is_ok_and(|marked| marked != Value::Null)
}

/// The round a resumed request goes on with: the calls of the conversation's last
/// assistant message that have no result, those cut off outside the space answered as of
/// unknown effect; `None` when no call waits for a result.
pub(super) fn cut_round(
    rt: &Runtime,
    cells: &DialogCells,
    id: RequestId,
    messages: &[Message],
    catalog: &Catalog,
) -> Option<Held> {
    let (message, open) = super::messages::unanswered(messages)?;
    let calls: Vec<HeldCall> = open
        .into_iter()
        .map(|call| HeldCall {
            id: call.id.to_string(),
            name: call.name.to_string(),
            input: call.input.clone(),
            output: None,
            approved: false,
            after_client: None,
            index: call.index,
            edited: false,
            previewed: None,
        })
        .collect();
    let round = answers_since_asked(&messages[..message]) + 1;
    let mut held = Held { request: id, round, calls, client_rounds: 0, message };
    answer_cut(rt, cells, catalog, &mut held);
    (!held.calls.is_empty()).then_some(held)
}

/// Answers each call of `held` that started outside the space and has no result as of
/// unknown effect, unless its tool may run again.
pub(super) fn answer_cut(rt: &Runtime, cells: &DialogCells, catalog: &Catalog, held: &mut Held) {
    for call in held.calls.iter_mut().filter(|call| call.output.is_none()) {
        let repeatable = catalog.get(&call.name).is_some_and(|tool| tool.repeatable());
        if !repeatable && started(rt, cells, held.message, call.index) {
            call.output = Some(ToolOutput::ErrorText(UNKNOWN_EFFECT.into()));
        }
    }
}

/// How many answers the model gave since the person's last message: the rounds of the
/// request so far.
pub(super) fn answers_since_asked(messages: &[Message]) -> u32 {
    let since = messages.iter().rev().take_while(|m| m.role != Role::User);
    since.filter(|m| m.role == Role::Assistant).count() as u32
}

/// The assistant message that keeps the streamed text of a reply a stop cut off.
pub(super) fn cut_reply(partial: &str) -> Option<Message> {
    (!partial.trim().is_empty()).then(|| Message::assistant(format!("{partial} {CUT_OFF}")))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;
    use trellis_runner::{DocId, Pattern};

    use super::*;
    use crate::dialog::tests::Recorder;
    use crate::dialog::{DialogHandle, LlmDialog};
    use crate::message::Part;
    use crate::model::Model;

    const WAIT: Duration = Duration::from_secs(10);

    /// Add to the count.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Increment {
        amount: i64,
    }

    /// The space at `path` with a counter and a chat whose dialog offers it and asks `model`.
    fn open(path: &std::path::Path, model: Arc<dyn Model>) -> Runtime {
        let rt = Runtime::open(path).expect("open the space");
        rt.register_builtin(Arc::new(LlmDialog::with_resolver(Arc::new(move |_| Ok(model.clone())))));
        rt.register_pattern(Pattern::new("counter", |b, _: serde_json::Value| {
            b.name("Counter")?;
            let count = b.state("count", 0i64)?;
            b.handler("increment", move |tx, e: Increment| count.update(tx, |n| n + e.amount))?;
            Ok(())
        }));
        rt.register_pattern(Pattern::new("chat", |b, tools: serde_json::Value| {
            b.builtin("dialog", "llm_dialog", json!({"model": "answers", "tools": tools}))?;
            Ok(())
        }));
        rt
    }

    /// A counter, and a chat stopped in the middle of the call `Counter.increment {amount: 2}`:
    /// the call's handler ran and committed (its receipt with it) when `committed`.
    async fn stopped_mid_call(path: &std::path::Path, committed: bool) -> (DocId, DocId) {
        let rt = open(path, Arc::new(Recorder::default()));
        let counter = rt.charms().create("counter", json!({})).expect("the counter");
        let tools = json!({"c": {"charm": rt.charms().result(&counter).to_json()}});
        let chat = rt.charms().create("chat", tools).expect("the chat");
        let cells = DialogCells::at(rt.charms().result(&chat).child("dialog"));
        let call = Part::ToolCall { id: "c1".into(), name: "Counter_increment".into(), input: json!({"amount": 2}) };
        let messages = vec![Message::user("add 2"), Message::new(Role::Assistant, vec![call])];
        rt.transact(|tx| {
            cells.messages().set(tx, messages.clone())?;
            cells.pending.set(tx, true)
        })
        .expect("the state the stop left");
        if committed {
            let increment = rt.charms().result(&counter).child("increment");
            rt.send_once(&increment, json!({"amount": 2}), &receipt(&cells, 1, 0)).await.expect("the handler ran");
        }
        (counter, chat)
    }

    /// Opens the space again: the chat starts, resumes, and its request ends.
    async fn resumed(path: &std::path::Path, chat: &DocId) -> (Runtime, DialogHandle, Arc<Recorder>) {
        let model = Arc::new(Recorder::default());
        let rt = open(path, model.clone());
        rt.charms().start(chat).expect("the chat starts");
        let dialog = DialogHandle::new(rt.clone(), rt.charms().result(chat).child("dialog"));
        dialog.wait(WAIT).await.expect("the resumed request ends");
        (rt, dialog, model)
    }

    fn count(rt: &Runtime, counter: &DocId) -> serde_json::Value {
        rt.read(&rt.charms().result(counter).child("count")).expect("the count").to_json()
    }

    fn results(dialog: &DialogHandle) -> Vec<ToolOutput> {
        let messages = dialog.messages();
        let parts = messages.iter().flat_map(|m| m.content.clone());
        parts
            .filter_map(|p| match p {
                Part::ToolResult { output, .. } => Some(output),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn a_handler_that_committed_before_the_stop_is_not_run_again() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("space.sqlite");
        let (counter, chat) = stopped_mid_call(&path, true).await;
        let (rt, dialog, model) = resumed(&path, &chat).await;
        assert_eq!(count(&rt, &counter), 2, "applied once");
        let results = results(&dialog);
        assert_eq!(results.len(), 1, "one result for the one call: {results:?}");
        assert!(results[0].as_text().contains("ran before the process restarted"), "{results:?}");
        assert_eq!(dialog.error(), None);
        let messages = dialog.messages();
        assert_eq!(messages.last().map(Message::text).as_deref(), Some("ok"), "the model was asked again");
        let asked = model.asked.lock();
        assert_eq!(asked.len(), 1, "asked once, with the call's result");
        assert!(asked[0].messages.iter().any(|m| m.role == Role::Tool));
        assert_eq!(rt.read(&cells_marks(&rt, &chat)).map(|v| v.to_json()).ok(), Some(serde_json::Value::Null));
    }

    #[tokio::test]
    async fn a_handler_the_stop_came_before_runs_once_after_it() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("space.sqlite");
        let (counter, chat) = stopped_mid_call(&path, false).await;
        let (rt, dialog, _) = resumed(&path, &chat).await;
        assert_eq!(count(&rt, &counter), 2);
        let results = results(&dialog);
        assert_eq!(results.len(), 1, "{results:?}");
        assert!(!results[0].as_text().contains("restarted"), "it ran now: {results:?}");
    }

    #[tokio::test]
    async fn a_request_that_keeps_stopping_ends_with_an_error() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("space.sqlite");
        let (counter, chat) = stopped_mid_call(&path, false).await;
        {
            let rt = open(&path, Arc::new(Recorder::default()));
            let cells = DialogCells::at(rt.charms().result(&chat).child("dialog"));
            rt.transact(|tx| cells.resumes.set(tx, MAX_RESUMES)).expect("three resumes so far");
        }
        let (rt, dialog, model) = resumed(&path, &chat).await;
        let error = dialog.error().expect("the request ended with an error");
        assert!(error.contains("stopped 3 times in a row"), "{error}");
        assert_eq!(count(&rt, &counter), 0, "not run");
        assert!(model.asked.lock().is_empty(), "the model was not asked");
        assert!(!dialog.pending());
    }

    /// A source whose one tool changes something outside the space, counting its calls.
    struct Outside(std::sync::atomic::AtomicU64);

    impl crate::sources::ToolSource for Outside {
        fn name(&self) -> &str {
            "out"
        }
        fn tools(&self) -> Arc<[crate::sources::SourceTool]> {
            Arc::new([crate::sources::SourceTool::new("send", "Sends a mail.", json!({}))])
        }
        fn version(&self) -> u64 {
            0
        }
        fn trusted(&self) -> bool {
            true
        }
        fn call(&self, _: &str, _: serde_json::Value, _: Duration) -> crate::sources::CallFuture {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async { ToolOutput::Text("sent".into()) })
        }
    }

    #[tokio::test]
    async fn a_call_outside_the_space_that_started_is_of_unknown_effect_and_not_run_again() {
        let dir = tempfile::tempdir().expect("a directory");
        let path = dir.path().join("space.sqlite");
        let chat = {
            let rt = open(&path, Arc::new(Recorder::default()));
            let chat = rt.charms().create("chat", json!({"out": {"source": "out"}})).expect("the chat");
            let cells = DialogCells::at(rt.charms().result(&chat).child("dialog"));
            let call = Part::ToolCall { id: "c1".into(), name: "out_send".into(), input: json!({}) };
            let messages = vec![Message::user("mail them"), Message::new(Role::Assistant, vec![call])];
            rt.transact(|tx| {
                cells.messages().set(tx, messages.clone())?;
                cells.pending.set(tx, true)
            })
            .expect("the state the stop left");
            mark_started(&rt, &cells, 1, 0).expect("marked before it ran");
            chat
        };
        let source = Arc::new(Outside(0.into()));
        let model = Arc::new(Recorder::default());
        let rt = open(&path, model.clone());
        crate::sources::attach(&rt, source.clone()).expect("attach the source");
        rt.charms().start(&chat).expect("the chat starts");
        let dialog = DialogHandle::new(rt.clone(), rt.charms().result(&chat).child("dialog"));
        dialog.wait(WAIT).await.expect("the resumed request ends");
        assert_eq!(source.0.load(std::sync::atomic::Ordering::SeqCst), 0, "not run again");
        let results = results(&dialog);
        assert_eq!(results.len(), 1, "{results:?}");
        assert!(results[0].as_text().contains("whether it took effect is unknown"), "{results:?}");
        assert_eq!(model.asked.lock().len(), 1, "the model was asked again, with that result");
    }

    /// The marks document of the chat's dialog.
    fn cells_marks(rt: &Runtime, chat: &DocId) -> Link {
        marks(&DialogCells::at(rt.charms().result(chat).child("dialog")))
    }
}
