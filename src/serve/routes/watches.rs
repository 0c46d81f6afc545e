//! `/api/watches`: the standing watches models set with their `watch` tool.

use axum::extract::{Path, State};
use axum::Json;
use trellis_builtins::watch::{self, Watch, WatchError};

use crate::serve::error::ApiError;
use crate::serve::Server;

/// `GET /api/watches`: every watch of the space, with what it holds now and how often it
/// fired.
pub async fn list(State(server): State<Server>) -> Json<Vec<Watch>> {
    Json(watch::watches(server.runtime()))
}

/// `DELETE /api/watches/{id}`: the watch removed.
pub async fn remove(State(server): State<Server>, Path(id): Path<String>) -> Result<Json<Watch>, ApiError> {
    match watch::remove(server.runtime(), &id) {
        Ok(removed) => Ok(Json(removed)),
        Err(e @ WatchError::Unknown(_)) => Err(ApiError::not_found(e.to_string())),
        Err(WatchError::Runtime(e)) => Err(e.into()),
        Err(e) => Err(ApiError::unprocessable(e.to_string())),
    }
}
