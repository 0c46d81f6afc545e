//! Long calls as tasks (protocol 2025-11-25's tasks): a server that runs a tool only as a
//! task refuses a plain call ("requires task augmentation"); the call is sent again as
//! one (`tools/call` with `task`), and then `tasks/result` waits for its result, carrying
//! the server's questions meanwhile (elicitation, answered by the call's person), while
//! `tasks/get` is polled for how it goes (each new status message told to the person as
//! progress). The call's own bounds stay: the dialog's tool timeout, or a cancel, drops
//! the call, and a dropped call sends `tasks/cancel`.
//!
//! rmcp models the later tasks extension only, so these requests go as custom ones, and
//! what comes back is read from its JSON.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, ClientRequest, CustomRequest, ErrorCode};
use rmcp::service::Peer;
use rmcp::{RoleClient, ServiceError};
use serde_json::{json, Value};
use trellis_builtins::sources::elicit::Person;

/// How long the server is asked to keep a task's result (an hour).
const TTL_MS: u64 = 3_600_000;
/// The bounds on how often a task's state is asked for, whatever the server suggests.
const MIN_POLL: Duration = Duration::from_millis(200);
const MAX_POLL: Duration = Duration::from_secs(5);

/// Whether `answer` is a server's refusal to run a tool but as a task: an error (-32601),
/// or a result marked as one that says so (as the TypeScript SDK answers).
pub(super) fn needs_task(answer: &Result<CallToolResult, ServiceError>) -> bool {
    const SAID: &str = "requires task augmentation";
    match answer {
        Err(ServiceError::McpError(data)) => data.code == ErrorCode::METHOD_NOT_FOUND && data.message.contains(SAID),
        Ok(result) if result.is_error == Some(true) => {
            result.content.iter().filter_map(|block| block.as_text()).any(|text| text.text.contains(SAID))
        }
        _ => false,
    }
}

/// Calls the tool of `request` as a task, telling `person` (if any) how it goes.
pub(super) async fn call(
    server: &str,
    peer: &Peer<RoleClient>,
    request: CallToolRequestParams,
    person: Option<Arc<dyn Person>>,
) -> Result<CallToolResult, ServiceError> {
    let mut params = serde_json::to_value(&request).map_err(unreadable)?;
    params["task"] = json!({ "ttl": TTL_MS });
    let created = custom(peer, "tools/call", params).await?;
    let task = &created["task"];
    let Some(id) = task["taskId"].as_str().map(str::to_string) else {
        return Err(unreadable("the server's answer to a task call names no task"));
    };
    tracing::info!(server, task = %id, "the call runs as a task");
    let mut cancel = CancelOnDrop { peer: Some(peer.clone()), id: id.clone() };
    let every = task["pollInterval"].as_u64().map_or(MIN_POLL, Duration::from_millis).clamp(MIN_POLL, MAX_POLL);
    let result = custom(peer, "tasks/result", json!({ "taskId": id }));
    let watched = watch(peer, &id, every, person);
    let result = tokio::select! {
        result = result => result,
        never = watched => match never {},
    };
    cancel.peer = None;
    serde_json::from_value(result?).map_err(|e| unreadable(format!("the task's result is not a tool result: {e}")))
}

/// Asks for the task's state every `every`, telling `person` each new status message;
/// runs until dropped (the result came).
async fn watch(
    peer: &Peer<RoleClient>,
    id: &str,
    every: Duration,
    person: Option<Arc<dyn Person>>,
) -> std::convert::Infallible {
    let mut told = String::new();
    let mut first = true;
    loop {
        // The first look at once: a task's first stage is shown as it starts.
        if !std::mem::take(&mut first) {
            tokio::time::sleep(every).await;
        }
        let Ok(state) = custom(peer, "tasks/get", json!({ "taskId": id })).await else { continue };
        let status = state["status"].as_str().unwrap_or("working");
        let message = state["statusMessage"].as_str().unwrap_or(status);
        if message != told {
            told = message.to_string();
            tracing::debug!(task = %id, status, "{message}");
            if let Some(person) = &person {
                person.progress(message);
            }
        }
    }
}

/// Sends `method` with `params`; the answer's JSON.
async fn custom(peer: &Peer<RoleClient>, method: &str, params: Value) -> Result<Value, ServiceError> {
    let request = ClientRequest::CustomRequest(CustomRequest::new(method, Some(params)));
    let answer = peer.send_request(request).await?;
    serde_json::to_value(answer).map_err(unreadable)
}

fn unreadable(error: impl std::fmt::Display) -> ServiceError {
    ServiceError::McpError(rmcp::model::ErrorData::internal_error(error.to_string(), None))
}

/// Cancels the task when the call is dropped before its result came.
struct CancelOnDrop {
    /// `None` once the result came.
    peer: Option<Peer<RoleClient>>,
    id: String,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let (Some(peer), Ok(tokio)) = (self.peer.take(), tokio::runtime::Handle::try_current()) else { return };
        let id = std::mem::take(&mut self.id);
        tokio.spawn(async move {
            let cancelled = tokio::time::timeout(MAX_POLL, custom(&peer, "tasks/cancel", json!({ "taskId": id })));
            match cancelled.await {
                Ok(Ok(_)) => tracing::info!(task = %id, "the task was cancelled with its call"),
                _ => tracing::warn!(task = %id, "the task could not be cancelled; the server may still run it"),
            }
        });
    }
}
