//! `/api/interactions`: the calls waiting for a person (approvals, questions,
//! confirmations, choices), and answering one. This module is the server's one use of
//! the tool protocol's pending interactions (through the CLI's chat session, so the
//! terminal and the page answer the same way).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use schemars::JsonSchema;
use serde::Deserialize;
use trellis_builtins::dialog::Interaction;

use super::chat::Accepted;
use crate::cli::chat::Reply;
use crate::serve::error::ApiError;
use crate::serve::limits::{check_message, Body};
use crate::serve::Server;

/// `POST /api/interactions/{call}/resolve`: exactly one of the three.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Answer {
    /// Let a call waiting for approval run.
    #[serde(default)]
    pub approve: bool,
    /// Refuse it, or decline to answer; the reason is told to the model.
    #[serde(default)]
    pub deny: Option<String>,
    /// Answer a question (text), a confirmation (yes or no) or a choice (an option).
    #[serde(default)]
    pub answer: Option<String>,
}

/// `GET /api/interactions`.
pub async fn list(State(server): State<Server>) -> Json<Vec<Interaction>> {
    Json(server.chat().interactions())
}

/// `POST /api/interactions/{call}/resolve`: answers the call; once none waits, the
/// conversation goes on (202; follow it on `GET /api/chat/events`). A call that is not
/// waiting, or an answer of the wrong shape, is refused (422).
pub async fn resolve(
    State(server): State<Server>,
    Path(call): Path<String>,
    Body(answer): Body<Answer>,
) -> Result<impl IntoResponse, ApiError> {
    let reply = match (answer.approve, answer.deny, answer.answer) {
        (true, None, None) => Reply::Approve,
        (false, Some(reason), None) => {
            check_message(&format!("{reason}."))?;
            Reply::Deny(reason)
        }
        (false, None, Some(text)) => {
            check_message(&text)?;
            Reply::Answer(text)
        }
        _ => return Err(ApiError::unprocessable("give exactly one of `approve: true`, `deny` or `answer`")),
    };
    let index =
        server.chat().resolve(Some(&call), reply).await.map_err(|e| ApiError::unprocessable(format!("{e:#}")))?;
    Ok((StatusCode::ACCEPTED, Json(Accepted { index })))
}
