//! Who changed what, and undoing a turn. Each tool call of a request runs as a
//! [`Writer`] of kind `model` that names the conversation, the request, the call and the
//! model, and journals its writes in a document of the request's own; so the space
//! knows, per path, which call wrote it last (`Runtime::provenance`), and a request's
//! writes can be put back together (`Runtime::undo`). What a call did outside the space
//! (an MCP server's tool, a plugin's) is noted in the journal as not undoable.
//!
//! An undo tells the model, in the conversation, that its turn was undone, in the same
//! transaction as the undo itself.

use serde::{Deserialize, Serialize};
use trellis_runner::{Error, Later, Runtime, Writer};

use super::request::input;
use super::{DialogCells, DialogInput, RequestId};
use crate::invoke::preview::{place, Preview};
use crate::message::Message;

/// The kind of writer a model's tool call is.
pub const MODEL_WRITER: &str = "model";

/// The journal of request `id`: a document of the dialog's own.
pub(super) fn journal_of(cells: &DialogCells, id: RequestId) -> String {
    cells.beside(&format!("journal-{id}")).doc.to_string()
}

/// The writer of request `id`'s calls, before a call names itself (see [`for_call`]).
pub(super) fn writer(rt: &Runtime, cells: &DialogCells, id: RequestId) -> Writer {
    let model = input(rt, cells, DialogInput::Model).as_str().unwrap_or("offline").to_string();
    let conversation = place(rt, &cells.base.doc, &[]);
    Writer::new(MODEL_WRITER, format!("the model ({model}) in request {id} of {conversation}"))
        .with("conversation", conversation)
        .with("request", id.0)
        .with("model", model)
        .journaled(journal_of(cells, id))
}

/// The request's writer, for its call `call_id` of `tool`.
pub(super) fn for_call(request: &Writer, call_id: &str, tool: &str) -> Writer {
    let model = request.details.get("model").and_then(|m| m.as_str()).unwrap_or("?");
    let id = request.details.get("request").map(ToString::to_string).unwrap_or_default();
    let conversation = request.details.get("conversation").and_then(|c| c.as_str()).unwrap_or("?");
    let mut writer = request.clone().with("call", call_id).with("tool", tool);
    writer.name = format!("the model ({model}) calling {tool} in request {id} of {conversation}");
    writer
}

/// What undoing a request did.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UndoneRequest {
    /// The request undone.
    pub request: RequestId,
    /// What was put back, as a preview shows a change.
    pub changes: Preview,
    /// What its calls did outside the space, which was not undone.
    pub not_undone: Vec<String>,
}

/// Why a request was not undone.
#[derive(Debug, thiserror::Error)]
pub enum UndoError {
    /// Someone wrote again what the request wrote; nothing was changed.
    #[error("cannot undo request {request}: {} written again since, and nothing was changed:\n{}", what(.later.len()), .later.join("\n"))]
    WrittenSince {
        /// The request.
        request: RequestId,
        /// Each path written again: `Counter.count is 9 (request 3 left it at 7), written by charm send`.
        later: Vec<String>,
    },
    /// The request is still running.
    #[error("cannot undo request {0} while it runs; wait for the reply, or cancel it first")]
    Running(RequestId),
    /// A call of the request waits for a person.
    #[error("cannot undo request {0} while a call of it waits for an answer; answer or cancel it first")]
    Waiting(RequestId),
    /// There is nothing to undo, or it cannot be undone.
    #[error("cannot undo request {request}: {why}")]
    Not {
        /// The request.
        request: RequestId,
        /// Why.
        why: String,
    },
    /// No request of the conversation changed anything in the space.
    #[error("nothing to undo: no request of this conversation changed anything in the space")]
    Nothing,
    /// The space could not be read or written.
    #[error(transparent)]
    Runtime(Error),
}

fn what(n: usize) -> String {
    match n {
        1 => "1 value it wrote was".into(),
        n => format!("{n} values it wrote were"),
    }
}

/// How far back from the latest request an undo without one looks for a request that
/// changed something.
const LOOK_BACK: u64 = 1000;

/// Undoes request `request` of the dialog (when `None`, the latest that changed anything
/// in the space) as `by`.
pub(super) fn undo(
    rt: &Runtime,
    cells: &DialogCells,
    request: Option<RequestId>,
    by: Writer,
) -> Result<UndoneRequest, UndoError> {
    let latest = cells.request.get(rt).map_err(UndoError::Runtime)?;
    if request.is_none_or(|r| r == latest) {
        if cells.pending.get(rt).unwrap_or(false) {
            return Err(UndoError::Running(latest));
        }
        if super::interaction::is_waiting(rt, cells).unwrap_or(false) {
            return Err(UndoError::Waiting(latest));
        }
    }
    // A cancel, or a reply without tool calls, takes a request id of its own too.
    let journaled = |r: &RequestId| rt.journal(&journal_of(cells, *r)).ok().flatten().is_some();
    let given = request.is_some();
    let request = request.unwrap_or_else(|| {
        (latest.0.saturating_sub(LOOK_BACK)..=latest.0).rev().map(RequestId).find(journaled).unwrap_or(latest)
    });
    let journal = journal_of(cells, request);
    if rt.journal(&journal).map_err(UndoError::Runtime)?.is_none() {
        if !given {
            return Err(UndoError::Nothing);
        }
        let why = match request > latest {
            true => format!("this conversation's latest request is {latest}"),
            false => "its tool calls changed nothing in the space".to_string(),
        };
        return Err(UndoError::Not { request, why });
    }
    let told = |undone: &trellis_runner::Undone| {
        let changes = Preview::of(rt, &undone.reverted);
        let mut text = format!(
            "(From Trellis, not the user's words.) The user undid your turn of request {request}: what its tool calls \
             changed in the space was put back ({}).",
            changes.lines.join("; ")
        );
        if !undone.effects.is_empty() {
            text.push_str(&format!(
                " Not undone, because it happened outside the space: {}.",
                undone.effects.join("; ")
            ));
        }
        (changes, Message::user(text))
    };
    let undone = rt.undo_then(&journal, by, |tx, undone| cells.messages().push(tx, told(undone).1));
    match undone {
        Ok(undone) => {
            let changes = told(&undone).0;
            Ok(UndoneRequest { request, changes, not_undone: undone.effects })
        }
        Err(Error::UndoRefused { later }) => Err(UndoError::WrittenSince {
            request,
            later: later.iter().map(|l| written_since(rt, request, l)).collect(),
        }),
        Err(Error::NotUndoable(why)) => Err(UndoError::Not { request, why }),
        Err(other) => Err(UndoError::Runtime(other)),
    }
}

/// `Counter.count is 9 (request 3 left it at 7), written by charm send`.
fn written_since(rt: &Runtime, request: RequestId, later: &Later) -> String {
    let by = later.by.as_ref().map_or("a writer that was not recorded", |w| w.by.name.as_str());
    let shown = |v: &serde_json::Value| crate::text::truncate(&v.to_string(), 200);
    format!(
        "{} is {} (request {request} left it at {}), written by {by}",
        place(rt, &later.doc, &later.path),
        shown(&later.now),
        shown(&later.left)
    )
}
