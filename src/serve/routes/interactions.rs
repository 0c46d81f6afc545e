//! `/api/interactions`: the calls waiting for a person or the client (approvals,
//! questions, confirmations, choices, client executions, display effects), and answering
//! one. This module is the server's one use of
//! the tool protocol's pending interactions (through `crate::session::Session`, so the
//! terminal and the page answer the same way).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use schemars::JsonSchema;
use serde::Deserialize;
use trellis_builtins::dialog::Interaction;

use super::chat::Accepted;
use crate::serve::error::ApiError;
use crate::serve::limits::Body;
use crate::serve::Server;
use crate::session::Reply;

/// `POST /api/interactions/{call}/resolve`: `"approve"`, `{"approve_with": {"always",
/// "input"}}`, `{"deny": "why"}`, `{"answer": "text"}`, `{"output": JSON}`, `"decline"` or
/// `"cancel"`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// Let a call waiting for approval run.
    Approve,
    /// Let it run, and maybe the tool's later calls too, or with other arguments.
    ApproveWith(ApproveWith),
    /// Refuse it, or decline to answer; the reason is told to the model.
    Deny(String),
    /// Answer a question (text), a confirmation (yes or no) or a choice (an option).
    Answer(String),
    /// The output of a client execution (checked against the tool's output schema, then
    /// by its server phase), the acknowledgement of a display effect, or the fields of a
    /// tool's form (checked against the form's schema).
    Output(serde_json::Value),
    /// Say no to a tool's question (an MCP server's elicitation).
    Decline,
    /// Dismiss a tool's question without answering.
    Cancel,
}

/// An approval that says more than yes.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveWith {
    /// Later calls of the same tool in this conversation run without asking.
    #[serde(default)]
    pub always: bool,
    /// The arguments to run the call with instead of the model's (checked against the
    /// tool's schema; the model is told they were changed).
    #[serde(default)]
    pub input: Option<serde_json::Value>,
}

/// `GET /api/interactions`.
pub async fn list(State(server): State<Server>) -> Json<Vec<Interaction>> {
    Json(server.chat().interactions())
}

/// `POST /api/interactions/{call}/resolve`: answers the call; once none waits, the
/// conversation goes on (202; follow it on `GET /api/chat/events`). A call that is not
/// waiting is a conflict (409); an answer of the wrong shape is refused (422).
pub async fn resolve(
    State(server): State<Server>,
    Path(call): Path<String>,
    Body(answer): Body<Resolution>,
) -> Result<impl IntoResponse, ApiError> {
    let waiting = server.chat().interactions();
    if !waiting.iter().any(|i| i.call_id == call) {
        let ids: Vec<&str> = waiting.iter().map(|i| i.call_id.as_str()).collect();
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "call `{call}` is not waiting for an answer; waiting: {}",
                if ids.is_empty() { "none".to_string() } else { ids.join(", ") }
            ),
        ));
    }
    let reply = match answer {
        Resolution::Approve => Reply::APPROVE,
        Resolution::ApproveWith(ApproveWith { always, input }) => Reply::Approve { always, input },
        Resolution::Deny(reason) => Reply::Deny(reason),
        Resolution::Answer(text) => Reply::Answer(text),
        Resolution::Output(output) => Reply::Output(output),
        Resolution::Decline => Reply::Decline,
        Resolution::Cancel => Reply::Cancel,
    };
    let index = server.chat().resolve(Some(&call), reply).await.map_err(|e| {
        // Answered between the check above and this answer (another tab): a conflict, as
        // if this answer had come second all along; otherwise the answer's shape was wrong.
        let still_waiting = server.chat().interactions().iter().any(|i| i.call_id == call);
        let status = if still_waiting { StatusCode::UNPROCESSABLE_ENTITY } else { StatusCode::CONFLICT };
        ApiError::new(status, format!("{e:#}"))
    })?;
    Ok((StatusCode::ACCEPTED, Json(Accepted { index })))
}
