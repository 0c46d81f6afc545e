//! `/api/watches`: the standing watches models set with their `watch` tool.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use trellis_builtins::watch::{self, Watch, WatchError};

use super::DONE;
use crate::serve::error::ApiError;
use crate::serve::Server;

/// `GET /api/watches`: every watch of the space, with what it holds now and how often it
/// fired.
pub async fn list(State(server): State<Server>) -> Json<Vec<Watch>> {
    Json(watch::watches(server.runtime()))
}

/// `DELETE /api/watches/{id}`.
pub async fn remove(State(server): State<Server>, Path(id): Path<String>) -> Result<StatusCode, ApiError> {
    match watch::remove(server.runtime(), &id) {
        Ok(_) => Ok(DONE),
        Err(e @ WatchError::Unknown(_)) => Err(ApiError::not_found(e.to_string())),
        Err(WatchError::Runtime(e)) => Err(e.into()),
        Err(e) => Err(ApiError::unprocessable(e.to_string())),
    }
}
