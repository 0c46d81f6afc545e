//! Calls that wait for a person: the pending interactions of a dialog, and `resolve`.
//!
//! When the model calls a tool that needs approval (its stream says so, see
//! `Builder::require_approval`), the round's other calls run, and the request stops
//! **waiting**: each such call becomes an [`Interaction`] in the dialog's `interactions`
//! (what front ends read), and what the round needs to go on is kept in `held` (the calls
//! in order and the results so far; front ends do not need it). Both are cells, so a
//! waiting dialog survives a restart and every front end sees the same state.
//!
//! A front end answers by sending [`Resolve`] to the dialog's `resolve` stream. The
//! handler refuses a call that is not waiting, a different tool, or a dialog that was
//! cancelled meanwhile; once the last waiting call is answered, the request goes on: the
//! approved calls run, the denied ones get an error result the model reads, and the next
//! round starts. Cancel while waiting closes every call as cancelled.

use std::time::{SystemTime, UNIX_EPOCH};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use trellis_runner::{Cell, Read, Runtime, Tx};

use super::{DialogCells, RequestId};
use crate::message::{Part, ToolOutput};

/// What a waiting call asks of a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InteractionKind {
    /// Approve or deny the call as the model made it (`approved`).
    Approval,
    /// Answer a question in words (`answer`: text).
    Question,
    /// Say yes or no (`answer`: a boolean, `yes` or `no`).
    Confirmation,
    /// Pick one of the `options` (`answer`: the option).
    Choice,
}

/// One call waiting for a person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Interaction {
    /// The model's call id; `resolve` names it.
    pub call_id: String,
    /// The tool as people know it (`Notes.delete`).
    pub tool: String,
    /// The tool's wire name, as the model called it.
    pub wire: String,
    /// The arguments the model gave.
    pub arguments: serde_json::Value,
    /// What is asked.
    pub kind: InteractionKind,
    /// What is asked: the stream's approval reason, or the model's question.
    pub prompt: String,
    /// For a choice, what the answer is picked from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// When it was asked, in milliseconds since the Unix epoch.
    pub asked_at: u64,
}

/// The event of `resolve`: a person's answer to one waiting call.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct Resolve {
    /// The call answered (an [`Interaction::call_id`]).
    pub call_id: String,
    /// For an approval: whether the call may run.
    #[serde(default)]
    pub approved: bool,
    /// For a question, a confirmation or a choice: the answer.
    #[serde(default)]
    pub answer: Option<serde_json::Value>,
    /// Why it was denied, or why there is no answer (told to the model).
    #[serde(default)]
    pub reason: Option<String>,
    /// The tool the answer is for (display name); when given, it must be the waiting
    /// call's, so an answer meant for another call is refused.
    #[serde(default)]
    pub tool: Option<String>,
}

/// What a waiting round keeps to go on: its calls in order, with the results so far.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub(super) struct Held {
    /// The request that waits.
    pub request: RequestId,
    /// The round whose calls wait.
    pub round: u32,
    /// The round's calls, in the model's order.
    pub calls: Vec<HeldCall>,
}

/// One call of a waiting round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct HeldCall {
    pub id: String,
    pub name: String,
    pub input: serde_json::Value,
    /// Its result, once it has one (ran, was refused, or was denied).
    pub output: Option<ToolOutput>,
    /// A person approved it; it runs when the round goes on.
    #[serde(default)]
    pub approved: bool,
}

impl Held {
    /// The round's tool message parts, in call order, for the calls that have a result.
    pub fn results(&self) -> Vec<Part> {
        self.calls
            .iter()
            .filter_map(|c| {
                let output = c.output.clone()?;
                Some(Part::ToolResult { id: c.id.clone(), name: c.name.clone(), output })
            })
            .collect()
    }
}

/// The `interactions` output: the calls waiting for a person.
pub(super) fn interactions_cell(cells: &DialogCells) -> Cell<Vec<Interaction>> {
    Cell::from_link(cells.base.child(super::DialogOutput::Interactions.key()))
}

/// Where a waiting round keeps what it needs to go on.
pub(super) fn held_cell(cells: &DialogCells) -> Cell<Option<Held>> {
    Cell::from_link(cells.base.child("held"))
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub(super) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Whether the dialog waits for a person.
pub(super) fn is_waiting(tx: &impl Read, cells: &DialogCells) -> trellis_runner::Result<bool> {
    Ok(held_cell(cells).get(tx)?.is_some())
}

/// Stores a waiting round if request `id` is still current; false when it was superseded.
pub(super) fn wait(
    rt: &Runtime,
    cells: &DialogCells,
    id: RequestId,
    held: &Held,
    asked: &[Interaction],
) -> Result<bool, String> {
    rt.transact(|tx| {
        if cells.request.get(tx)? != id {
            return Ok(false);
        }
        held_cell(cells).set(tx, Some(held.clone()))?;
        interactions_cell(cells).set(tx, asked.to_vec())?;
        Ok(true)
    })
    .map_err(|e| format!("could not store the calls waiting for approval: {e}"))
}

/// The `resolve` handler: checks the answer against what waits and records it. Returns the
/// request to go on with once nothing waits any more.
pub(super) fn resolve(cells: &DialogCells, tx: &Tx, answer: Resolve) -> trellis_runner::Result<Option<RequestId>> {
    let mut waiting = interactions_cell(cells).get(tx)?;
    let Some(at) = waiting.iter().position(|i| i.call_id == answer.call_id) else {
        let ids: Vec<&str> = waiting.iter().map(|i| i.call_id.as_str()).collect();
        return Err(if ids.is_empty() {
            format!("no call is waiting for an answer (`{}` was answered, cancelled, or never asked)", answer.call_id)
        } else {
            format!("call `{}` is not waiting; waiting: {}", answer.call_id, ids.join(", "))
        }
        .into());
    };
    if let Some(tool) = answer.tool.as_deref().filter(|tool| *tool != waiting[at].tool) {
        return Err(format!("call `{}` is for {}, not {tool}", answer.call_id, waiting[at].tool).into());
    }
    let mut held =
        held_cell(cells).get(tx)?.ok_or("the dialog lost the round that was waiting; send the message again")?;
    let Some(call) = held.calls.iter_mut().find(|c| c.id == answer.call_id && c.output.is_none()) else {
        return Err(format!("call `{}` has an answer already", answer.call_id).into());
    };
    let why = answer.reason.as_deref().map(str::trim).filter(|r| !r.is_empty()).unwrap_or("no reason given");
    match (waiting[at].kind, &answer.answer) {
        (InteractionKind::Approval, _) if answer.approved => call.approved = true,
        (InteractionKind::Approval, _) => {
            call.output = Some(ToolOutput::ErrorText(format!("the user denied this call: {why}")));
        }
        // Approving a question answers nothing: say what it needs, and keep it waiting.
        (kind, None) if answer.approved => {
            let kind = format!("{kind:?}").to_lowercase();
            return Err(format!("call `{}` asks for an answer (a {kind}), not an approval", answer.call_id).into());
        }
        (_, None) => call.output = Some(ToolOutput::ErrorText(format!("the user did not answer: {why}"))),
        (kind, Some(given)) => call.output = Some(ToolOutput::Json(checked_answer(kind, given, &waiting[at].options)?)),
    }
    waiting.remove(at);
    let done = waiting.is_empty();
    interactions_cell(cells).set(tx, waiting)?;
    held_cell(cells).set(tx, Some(held.clone()))?;
    Ok(done.then_some(held.request))
}

/// The result the model reads for `given`, an answer to a question, confirmation or
/// choice; an answer of the wrong shape is refused (the call keeps waiting).
fn checked_answer(
    kind: InteractionKind,
    given: &serde_json::Value,
    options: &[String],
) -> trellis_runner::Result<serde_json::Value> {
    let text = given.as_str().map(str::trim);
    Ok(match kind {
        InteractionKind::Question => match text.filter(|t| !t.is_empty()) {
            Some(text) => serde_json::json!({ "answer": text }),
            None => return Err("the answer to a question is some text".into()),
        },
        InteractionKind::Confirmation => {
            let yes = match (given.as_bool(), text.map(str::to_lowercase).as_deref()) {
                (Some(yes), _) => yes,
                (None, Some("yes" | "y" | "true")) => true,
                (None, Some("no" | "n" | "false")) => false,
                _ => return Err("the answer to a confirmation is yes or no".into()),
            };
            serde_json::json!({ "confirmed": yes })
        }
        InteractionKind::Choice => {
            let picked = text.and_then(|t| options.iter().find(|o| o.eq_ignore_ascii_case(t)));
            match picked {
                Some(option) => serde_json::json!({ "choice": option }),
                None => return Err(format!("the answer to this choice is one of: {}", options.join(", ")).into()),
            }
        }
        InteractionKind::Approval => return Err("an approval is answered with approved, not an answer".into()),
    })
}

/// Forgets a waiting round (cancel, a fresh conversation).
pub(super) fn forget(tx: &Tx, cells: &DialogCells) -> trellis_runner::Result<()> {
    held_cell(cells).set(tx, None)?;
    interactions_cell(cells).set(tx, Vec::new())
}
