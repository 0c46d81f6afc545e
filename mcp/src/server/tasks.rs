//! Long calls as tasks (the tasks extension, `io.modelcontextprotocol/tasks`), for a host
//! that declares it. A call that needs approval answers at once with a task waiting for
//! the host's person (`input_required`, the question as an elicitation form); one that
//! runs past [`TASK_AFTER`] answers with a task that goes on working. The host polls
//! `tasks/get` for its state and, once completed, its result; answers the approval with
//! `tasks/update`; and may `tasks/cancel` it.
//!
//! Tasks are kept in the space (the document [`TASKS_DOC`]), so a restarted server knows
//! them: a task waiting for approval waits on, and one that was running when its server
//! stopped is failed, saying the call may have applied (a handler's change is all or
//! nothing, but whether it committed before the stop is not known here). At most
//! [`MAX_TASKS`] are kept; the oldest finished ones go first.

use std::collections::BTreeMap;
use std::time::Duration;

use rmcp::model::{
    CallToolResult, ContentBlock, CreateTaskResult, DetailedTask, GetTaskResult, JsonObject, Task, TaskPayload,
    TaskStatus,
};
use rmcp::ErrorData;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use trellis_runner::{now_ms, this_process, Cell, Link, Path, Runtime};

use super::elicit;

/// The document the space keeps its MCP tasks in.
pub const TASKS_DOC: &str = "mcp-tasks";
/// A call that takes longer than this (for a host that takes tasks) becomes a task.
pub const TASK_AFTER: Duration = Duration::from_secs(1);
/// The most tasks kept.
pub const MAX_TASKS: usize = 256;
/// How often the host is asked to poll, in milliseconds.
const POLL_MS: u64 = 500;

/// Where a task stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
enum State {
    Working,
    /// Waiting for the host's person to approve (the question asked).
    Approval {
        question: String,
    },
    /// The call's result (a `CallToolResult`, as JSON).
    Completed {
        result: Value,
    },
    Failed {
        error: String,
    },
    Cancelled,
}

/// One task, as the space keeps it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Stored {
    /// The tool's wire name, and its arguments.
    pub tool: String,
    pub arguments: Value,
    /// The client it runs for, as the writer of its changes names it.
    pub client: String,
    state: State,
    /// A short word on how it goes.
    #[serde(default)]
    message: Option<String>,
    created_ms: u64,
    updated_ms: u64,
    /// The process running the call (see `this_process`).
    run_by: String,
}

fn cell() -> Cell<BTreeMap<String, Stored>> {
    Cell::from_link(Link::new(TASKS_DOC, Path::root()))
}

fn iso(ms: u64) -> String {
    let at = i64::try_from(ms).ok().and_then(chrono::DateTime::from_timestamp_millis).unwrap_or_default();
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn failed(error: impl std::fmt::Display) -> ErrorData {
    ErrorData::internal_error(format!("the space could not keep the task: {error}"), None)
}

/// A new task of `tool` for `client`, running in this process, or waiting for the
/// approval `question`; its id and what the host is answered.
pub(super) fn create(
    rt: &Runtime,
    (tool, arguments, client): (&str, &Value, &str),
    question: Option<String>,
) -> Result<(String, CreateTaskResult), ErrorData> {
    let now = now_ms();
    let state = match question {
        Some(question) => State::Approval { question },
        None => State::Working,
    };
    let stored = Stored {
        tool: tool.to_string(),
        arguments: arguments.clone(),
        client: client.to_string(),
        state,
        message: None,
        created_ms: now,
        updated_ms: now,
        run_by: this_process().to_string(),
    };
    // Unguessable: a task is answered by whoever names it.
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).map_err(|e| failed(format!("no randomness for its id: {e}")))?;
    let id: String = std::iter::once("task-".to_string()).chain(random.iter().map(|b| format!("{b:02x}"))).collect();
    rt.transact(|tx| {
        let mut all = cell().get(tx).unwrap_or_default();
        all.insert(id.clone(), stored.clone());
        prune(&mut all);
        cell().set(tx, all)
    })
    .map_err(failed)?;
    Ok((id.clone(), CreateTaskResult::new(task(&id, &stored))))
}

/// Drops the oldest finished tasks past [`MAX_TASKS`] (then the oldest of any kind).
fn prune(all: &mut BTreeMap<String, Stored>) {
    while all.len() > MAX_TASKS {
        let finished =
            |s: &Stored| matches!(s.state, State::Completed { .. } | State::Failed { .. } | State::Cancelled);
        let oldest = all.iter().min_by_key(|(_, s)| (!finished(s), s.updated_ms)).map(|(id, _)| id.clone());
        match oldest {
            Some(id) => all.remove(&id),
            None => break,
        };
    }
}

/// The task's base fields, as the host sees them.
fn task(id: &str, stored: &Stored) -> Task {
    let mut task = Task::new(id, status(&stored.state), iso(stored.created_ms), iso(stored.updated_ms))
        .with_poll_interval_ms(POLL_MS);
    if let Some(message) = &stored.message {
        task = task.with_status_message(message.clone());
    }
    task
}

fn status(state: &State) -> TaskStatus {
    match state {
        State::Working => TaskStatus::Working,
        State::Approval { .. } => TaskStatus::InputRequired,
        State::Completed { .. } => TaskStatus::Completed,
        State::Failed { .. } => TaskStatus::Failed,
        State::Cancelled => TaskStatus::Cancelled,
    }
}

/// The task `id` as `tasks/get` answers it.
pub(super) fn get(rt: &Runtime, id: &str) -> Result<GetTaskResult, ErrorData> {
    let stored = find(rt, id)?;
    let payload = match &stored.state {
        State::Working => TaskPayload::Working,
        State::Approval { question } => TaskPayload::InputRequired { input_requests: elicit::approval(question)? },
        State::Completed { result } => TaskPayload::Completed { result: object(result.clone()) },
        State::Failed { error } => TaskPayload::Failed { error: object(json!({ "code": -32603, "message": error })) },
        State::Cancelled => TaskPayload::Cancelled,
    };
    Ok(GetTaskResult::new(DetailedTask::new(task(id, &stored), payload)))
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => JsonObject::from_iter([("value".to_string(), other)]),
    }
}

fn find(rt: &Runtime, id: &str) -> Result<Stored, ErrorData> {
    cell().get(rt).unwrap_or_default().get(id).cloned().ok_or_else(|| unknown(id))
}

/// What a host hears of a task this space does not keep.
fn unknown(id: &str) -> ErrorData {
    ErrorData::invalid_params(format!("no task `{}` here (finished tasks are kept for a while only)", text(id)), None)
}

fn text(id: &str) -> String {
    trellis_builtins::text::truncate(id, 80)
}

/// Takes the task `id` from waiting for approval to `next`; the task, or why not.
pub(super) fn answer(rt: &Runtime, id: &str, approve: bool) -> Result<Stored, ErrorData> {
    let next = if approve {
        State::Working
    } else {
        let result =
            CallToolResult::error(vec![ContentBlock::text("the user did not approve this call; nothing was run")]);
        State::Completed { result: serde_json::to_value(result).map_err(failed)? }
    };
    let changed = rt
        .transact(|tx| {
            let mut all = cell().get(tx).unwrap_or_default();
            let Some(stored) = all.get_mut(id) else { return Ok(None) };
            if !matches!(stored.state, State::Approval { .. }) {
                return Ok(Some(Err(stored.state.clone())));
            }
            stored.state = next.clone();
            stored.updated_ms = now_ms();
            stored.run_by = this_process().to_string();
            let stored = stored.clone();
            cell().set(tx, all)?;
            Ok(Some(Ok(stored)))
        })
        .map_err(failed)?;
    match changed {
        None => Err(unknown(id)),
        Some(Err(state)) => {
            let status = serde_json::to_value(status(&state)).unwrap_or_default();
            let status = status.as_str().unwrap_or("finished").to_owned();
            Err(ErrorData::invalid_params(format!("task `{}` is {status}, not waiting for an answer", text(id)), None))
        }
        Some(Ok(stored)) => Ok(stored),
    }
}

/// Records the call's result for task `id`, unless it was cancelled meanwhile.
pub(super) fn finish(rt: &Runtime, id: &str, result: &CallToolResult) {
    let result = match serde_json::to_value(result) {
        Ok(result) => State::Completed { result },
        Err(error) => State::Failed { error: format!("the result could not be kept: {error}") },
    };
    let done = rt.transact(|tx| {
        let mut all = cell().get(tx).unwrap_or_default();
        if let Some(stored) = all.get_mut(id).filter(|s| s.state == State::Working) {
            stored.state = result.clone();
            stored.updated_ms = now_ms();
            cell().set(tx, all)?;
        }
        Ok(())
    });
    if let Err(error) = done {
        tracing::warn!(task = %id, %error, "the space could not keep a task's result");
    }
}

/// Cancels the task `id`: one waiting for approval never runs; a running handler cannot
/// be stopped, which its status message says.
pub(super) fn cancel(rt: &Runtime, id: &str) -> Result<(), ErrorData> {
    find(rt, id)?;
    rt.transact(|tx| {
        let mut all = cell().get(tx).unwrap_or_default();
        if let Some(stored) = all.get_mut(id) {
            match stored.state {
                State::Approval { .. } => stored.message = Some("cancelled before it ran".into()),
                State::Working => {
                    stored.message = Some("cancelled while it ran: the handler may still apply its change".into())
                }
                _ => return Ok(()),
            }
            stored.state = State::Cancelled;
            stored.updated_ms = now_ms();
            cell().set(tx, all)?;
        }
        Ok(())
    })
    .map_err(failed)
}

/// Fails the tasks a stopped process was running: it cannot finish them.
pub(super) fn recover(rt: &Runtime) {
    let here = this_process();
    let done = rt.transact(|tx| {
        let mut all = cell().get(tx).unwrap_or_default();
        let mut changed = false;
        for stored in all.values_mut().filter(|s| s.state == State::Working && s.run_by != here) {
            let error = "the server stopped while the call ran; look at the charm to see whether it applied";
            stored.state = State::Failed { error: error.into() };
            stored.updated_ms = now_ms();
            changed = true;
        }
        if changed {
            cell().set(tx, all)?;
        }
        Ok(())
    });
    if let Err(error) = done {
        tracing::warn!(%error, "could not fail the MCP tasks a stopped server left");
    }
}
