//! Calls that wait for a person: the pending interactions of a dialog, and `resolve`.
//!
//! When the model calls a tool that needs approval (its stream says so, see
//! `Builder::require_approval`), the round's other calls run, and the request stops
//! **waiting**: each such call becomes an [`Interaction`] in the dialog's `interactions`
//! (what front ends read), and what the round needs to go on is kept in `held` (the calls
//! in order and the results so far; front ends do not need it). Both are cells, so a
//! waiting dialog survives a restart and every front end sees the same state.
//!
//! A call of a tool that needs the client (a client-authority tool, a handoff, the model's
//! question through `request_human_input`) waits the same way, with the client's input in
//! the interaction and the last server phase's state in `held`. A server tool with a
//! client phase gets a display effect: an interaction that does not hold up the round.
//!
//! A front end answers by sending [`Resolve`] to the dialog's `resolve` stream. The
//! handler refuses a call that is not waiting, a different tool, or a dialog that was
//! cancelled meanwhile. A client's output is checked against the tool's client-output
//! schema and by its server phase there, in the handler: a bad output becomes an error
//! result the model reads (a person's mistyped answer is refused and keeps waiting).
//! Once the last waiting call is answered, the request goes on: the approved calls run,
//! the denied ones get an error result the model reads, and the next round starts.
//! Cancel while waiting closes every call as cancelled.

use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use trellis_runner::{Cell, Read, Runtime, Tx};

use super::resolve::{Resolution, Resolve};
use super::{DialogCells, RequestId};
use crate::ask::InteractionKind;
use crate::message::{Part, ToolOutput};
use crate::tool::{person_only, ToolRegistry};

/// Which phase of a call waits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Nothing ran yet: a person approves or denies the call.
    #[default]
    Approval,
    /// The client phase: the client (or the person at it) produces the output.
    Client,
    /// The call has its result; the client shows it (does not hold up the round).
    Display,
}

/// One call waiting for a person or the client.
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
    /// Which phase of the call waits.
    #[serde(default)]
    pub phase: Phase,
    /// What is asked: the approval reason, the model's question, or the tool's description.
    pub prompt: String,
    /// For a choice, what the answer is picked from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// What the client phase gets: the arguments, what a handoff handed over, or the
    /// result to display.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub input: serde_json::Value,
    /// The registered tool whose client phase a client executor runs (see
    /// `ToolRegistry`), when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_tool: Option<String>,
    /// For an approval: the fields of the arguments only the person sets (see
    /// `Builder::person_only`); the approval must give them (`input`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub person_only: Vec<String>,
    /// For an approval of a handler: what the call would change (approving commits
    /// exactly that, or asks again with what it would change then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<crate::invoke::Preview>,
    /// When it was asked, in milliseconds since the Unix epoch.
    pub asked_at: u64,
}

impl Interaction {
    /// Whether the round waits for it (everything but a display effect).
    pub fn blocks(&self) -> bool {
        self.kind != InteractionKind::DisplayEffect
    }
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
    /// How many rounds of this request waited for the client so far (`max_tool_rounds`).
    #[serde(default)]
    pub client_rounds: u32,
    /// The index of the assistant message that made the calls (see `recover`).
    #[serde(default)]
    pub message: usize,
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
    /// The phases still to run after the client: kept here, out of what front ends read.
    #[serde(default)]
    pub after_client: Option<AfterClient>,
    /// Its place among the calls of its assistant message (see `recover`).
    #[serde(default)]
    pub index: usize,
    /// A person changed its arguments (now `input`) when approving it.
    #[serde(default)]
    pub edited: bool,
    /// What the person was shown the call would change, while it waits for approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previewed: Option<trellis_runner::Previewed>,
}

/// What the last server phase of a call that waits for the client needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct AfterClient {
    /// The registered tool; `None` for a client tool, whose output is the result.
    pub tool: Option<String>,
    /// The checked arguments.
    pub arguments: serde_json::Value,
    /// What the first server phase kept.
    pub state: serde_json::Value,
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

pub(super) use trellis_runner::now_ms;

/// Whether the dialog waits for a person.
pub(super) fn is_waiting(tx: &impl Read, cells: &DialogCells) -> trellis_runner::Result<bool> {
    Ok(held_cell(cells).get(tx)?.is_some())
}

/// The largest answer or client output taken, as JSON, and the longest reason for a
/// denial: either goes into the conversation.
const MAX_OUTPUT_BYTES: usize = 1 << 20;

/// The most display effects kept unacknowledged; older ones are dropped.
const MAX_EFFECTS: usize = 32;

/// Records `asked` if request `id` is still current: with `held` the round waits; without,
/// `asked` are display effects beside a round that goes on. False when superseded.
pub(super) fn ask(
    rt: &Runtime,
    cells: &DialogCells,
    id: RequestId,
    held: Option<&Held>,
    asked: &[Interaction],
) -> Result<bool, String> {
    rt.transact(|tx| {
        if cells.request.get(tx)? != id {
            return Ok(false);
        }
        if let Some(held) = held {
            held_cell(cells).set(tx, Some(held.clone()))?;
        }
        let mut all = interactions_cell(cells).get(tx)?;
        all.extend(asked.iter().cloned());
        let effects = all.iter().filter(|i| !i.blocks()).count();
        let mut drop = effects.saturating_sub(MAX_EFFECTS);
        all.retain(|i| {
            let old_effect = !i.blocks() && drop > 0;
            drop -= usize::from(old_effect);
            !old_effect
        });
        interactions_cell(cells).set(tx, all)?;
        Ok(true)
    })
    .map_err(|e| format!("could not store the calls waiting for an answer: {e}"))
}

/// The `resolve` handler: checks the answer against what waits and records it (running a
/// client execution's last server phase). Returns the request to go on with once nothing
/// waits any more.
pub(super) fn resolve(
    cells: &DialogCells,
    tx: &Tx,
    answer: Resolve,
    registry: &ToolRegistry,
    timeout: Duration,
) -> trellis_runner::Result<Option<RequestId>> {
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
    let asked = &waiting[at];
    if let Some(tool) = answer.tool.as_deref().filter(|tool| *tool != asked.tool) {
        return Err(format!("call `{}` is for {}, not {tool}", answer.call_id, asked.tool).into());
    }
    if answer.asked_at.is_some_and(|when| when != asked.asked_at) {
        return Err(format!("call `{}` was asked again since; answer the call waiting now", answer.call_id).into());
    }
    if asked.kind == InteractionKind::Elicitation {
        // The call runs on, waiting for this reply alone.
        return super::elicitation::answer(tx, cells, asked, &answer).map(|()| None);
    }
    if !asked.blocks() {
        // A display effect was shown: what the client says about it is informational.
        tracing::debug!(call = %answer.call_id, resolution = ?answer.resolution, "display effect acknowledged");
        waiting.remove(at);
        return interactions_cell(cells).set(tx, waiting).map(|()| None);
    }
    let mut held =
        held_cell(cells).get(tx)?.ok_or("the dialog lost the round that was waiting; send the message again")?;
    let Some(call) = held.calls.iter_mut().find(|c| c.id == answer.call_id && c.output.is_none()) else {
        return Err(format!("call `{}` has an answer already", answer.call_id).into());
    };
    let (given, reason) = match &answer.resolution {
        Resolution::Answered(given) | Resolution::Output(given) => (Some(given), None),
        Resolution::Denied { reason } | Resolution::TimedOut { reason } => (None, reason.as_deref()),
        Resolution::Approved | Resolution::Cancelled => (None, None),
    };
    let why = reason.map(str::trim).filter(|r| !r.is_empty()).unwrap_or("no reason given");
    let too_large = given
        .is_some_and(|given| serde_json::to_vec(given).map_or(true, |json| json.len() > MAX_OUTPUT_BYTES))
        || reason.is_some_and(|reason| reason.len() > MAX_OUTPUT_BYTES);
    if too_large {
        let limit = MAX_OUTPUT_BYTES >> 10;
        return Err(format!("the answer to call `{}` is larger than {limit} KiB; send less", answer.call_id).into());
    }
    let kind = asked.kind;
    call.output = match (kind, &answer.resolution) {
        (_, Resolution::TimedOut { .. }) => {
            Some(ToolOutput::ErrorText(format!("no answer came in time ({why}); the call did not finish")))
        }
        (InteractionKind::Approval, Resolution::Approved) => {
            let catalog = cells.catalog.latest();
            let person_only = catalog.as_ref().and_then(|c| c.get(&call.name)).map(|t| t.person_only.clone());
            if let Some(fields) = person_only.filter(|fields| !fields.is_empty()) {
                let tool = &asked.tool;
                if let Some(field) = person_only::missing(&fields, answer.input.as_ref()) {
                    return Err(format!(
                        "nothing was approved: `{field}` of {tool} is yours to set; approve with the arguments you \
                         want, --input '{{...}}' (the model's were {})",
                        call.input
                    )
                    .into());
                }
                if answer.always {
                    return Err(format!(
                        "nothing was approved: calls of {tool} always wait for you to set {}; approve this one \
                         without --always",
                        person_only::reason(&fields).unwrap_or_default()
                    )
                    .into());
                }
            }
            if let Some(input) = &answer.input {
                call.input = edited(cells, &call.name, input.clone()).map_err(|why| {
                    format!("nothing was approved: the arguments given for call `{}` {why}", answer.call_id)
                })?;
                call.edited = true;
            }
            if answer.always {
                allow(tx, cells, &asked.tool)?;
            }
            call.approved = true;
            None
        }
        // An answer or an output approves nothing, and taking it as a denial would use the
        // call up: say what it needs, and keep it waiting.
        (InteractionKind::Approval, Resolution::Answered(_) | Resolution::Output(_)) => {
            let call = &answer.call_id;
            return Err(format!("call `{call}` asks for an approval or a denial, not an answer").into());
        }
        (InteractionKind::Approval, Resolution::Denied { .. }) => {
            Some(ToolOutput::ErrorText(format!("the user denied this call: {why}")))
        }
        // Approving a question answers nothing: say what it needs, and keep it waiting.
        (kind, Resolution::Approved) => {
            let (call, what) = (&answer.call_id, kind.what());
            return Err(format!("call `{call}` asks for {what}, not an approval").into());
        }
        (InteractionKind::ClientExecution, Resolution::Denied { .. }) => {
            Some(ToolOutput::ErrorText(format!("the client sent no output: {why}")))
        }
        (_, Resolution::Denied { .. }) => Some(ToolOutput::ErrorText(format!("the user did not answer: {why}"))),
        (_, Resolution::Cancelled) => {
            Some(ToolOutput::ErrorText("the user dismissed this call without answering".into()))
        }
        (kind, Resolution::Answered(given) | Resolution::Output(given)) => {
            match finish(call, given.clone(), registry, timeout) {
                Ok(result) => Some(ToolOutput::Json(result)),
                // A person who mistyped is told and asked again; a client's bad output is the
                // model's to read.
                Err(why) if kind != InteractionKind::ClientExecution => return Err(why.into()),
                Err(why) => Some(ToolOutput::ErrorText(why)),
            }
        }
    };
    waiting.remove(at);
    let done = !waiting.iter().any(Interaction::blocks);
    interactions_cell(cells).set(tx, waiting)?;
    held_cell(cells).set(tx, Some(held.clone()))?;
    Ok(done.then_some(held.request))
}

/// A person's `input` for a call of the tool `name`, checked against the tool's schema as
/// the round offered it (when the dialog still has that catalog; the call checks again
/// when it runs); why it does not fit.
fn edited(cells: &DialogCells, name: &str, input: serde_json::Value) -> Result<serde_json::Value, String> {
    if serde_json::to_vec(&input).map_or(true, |json| json.len() > MAX_OUTPUT_BYTES) {
        return Err(format!("are larger than {} KiB", MAX_OUTPUT_BYTES >> 10));
    }
    let catalog = cells.catalog.latest();
    match catalog.as_ref().and_then(|catalog| catalog.get(name)) {
        Some(tool) => tool.check_arguments(input).map_err(|e| {
            let text = e.to_string();
            format!("do not fit ({}); give them again", text.strip_suffix(crate::invoke::CALL_AGAIN).unwrap_or(&text))
        }),
        None => Ok(input),
    }
}

/// The tools (display names) a person allowed to run without asking, in this
/// conversation: the dialog's `allowed` output.
pub(super) fn allowed_cell(cells: &DialogCells) -> Cell<Vec<String>> {
    Cell::from_link(cells.base.child(super::DialogOutput::Allowed.key()))
}

/// Lets `tool`'s calls in this conversation run without asking.
fn allow(tx: &Tx, cells: &DialogCells, tool: &str) -> trellis_runner::Result<()> {
    let mut allowed = allowed_cell(cells).get(tx).unwrap_or_default();
    if !allowed.iter().any(|t| t == tool) {
        allowed.push(tool.to_string());
    }
    allowed_cell(cells).set(tx, allowed)
}

/// The event of the dialog's `disallow` stream: a tool's calls ask again.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Disallow {
    /// The tool, by its display name (as `allowed` lists it).
    pub tool: String,
}

/// The `disallow` handler: `tool`'s calls ask for approval again; an error when it was not
/// allowed.
pub(super) fn disallow(tx: &Tx, cells: &DialogCells, event: Disallow) -> trellis_runner::Result<()> {
    let mut allowed = allowed_cell(cells).get(tx).unwrap_or_default();
    let before = allowed.len();
    allowed.retain(|t| *t != event.tool);
    if allowed.len() == before {
        let listed =
            if allowed.is_empty() { "none is".to_string() } else { format!("allowed: {}", allowed.join(", ")) };
        return Err(format!("`{}` was not allowed to run without asking ({listed})", event.tool).into());
    }
    allowed_cell(cells).set(tx, allowed)
}

/// Runs the last server phase of a call that waited for the client, with its `output`,
/// for at most `timeout`. It runs inside the `resolve` handler, which holds the engine
/// while it waits: a phase that hangs holds it for `timeout` (the dialog's tool timeout),
/// not for ever, and a panic is an error, not a failed handler. The phase runs on a thread
/// of its own, left to finish alone after a timeout; the call ends with the error.
fn finish(
    call: &HeldCall,
    output: serde_json::Value,
    registry: &ToolRegistry,
    timeout: Duration,
) -> Result<serde_json::Value, String> {
    let after = call.after_client.as_ref().ok_or("this call does not take a client output")?;
    let Some(name) = &after.tool else { return Ok(output) };
    let tool =
        registry.get(name).ok_or_else(|| format!("the tool `{name}` is not registered in this process any more"))?;
    let (arguments, state) = (after.arguments.clone(), after.state.clone());
    let (sender, receiver) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name(format!("finish {name}"))
        .spawn(move || {
            let _ = sender.send(tool.finish(arguments, state, output));
        })
        .map_err(|e| format!("could not run the last phase of `{name}`: {e}"))?;
    match receiver.recv_timeout(timeout) {
        Ok(result) => result.map_err(String::from),
        Err(RecvTimeoutError::Timeout) => Err(format!(
            "`{name}` did not finish its last phase within {} s; the call did not finish",
            timeout.as_secs_f64()
        )),
        Err(RecvTimeoutError::Disconnected) => Err(format!("`{name}` failed (it panicked) in its last phase")),
    }
}

/// Forgets a waiting round (cancel, a round that went on); display effects stay until
/// the client acknowledges them.
pub(super) fn forget(tx: &Tx, cells: &DialogCells) -> trellis_runner::Result<()> {
    held_cell(cells).set(tx, None)?;
    let mut left = interactions_cell(cells).get(tx)?;
    left.retain(|i| !i.blocks());
    interactions_cell(cells).set(tx, left)
}
