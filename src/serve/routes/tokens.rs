//! `/api/tokens`: the space's bearer tokens, as `trellis token` manages them.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::serve::error::ApiError;
use crate::serve::limits::{Body, NAME_PATTERN};
use crate::serve::Server;
use crate::tokens::{self, TokenError, TokenInfo};

/// `POST /api/tokens`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct NewTokenName {
    /// What the token is for.
    #[schemars(pattern(NAME_PATTERN))]
    pub name: String,
}

impl From<TokenError> for ApiError {
    fn from(error: TokenError) -> Self {
        match error {
            TokenError::BadName(_) => ApiError::unprocessable(error.to_string()),
            TokenError::Unknown(_) => ApiError::not_found(error.to_string()),
            TokenError::Random => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()),
            TokenError::Space(e) => e.into(),
        }
    }
}

/// `GET /api/tokens`.
pub async fn list(State(server): State<Server>) -> Json<Vec<TokenInfo>> {
    Json(tokens::list(server.runtime()).into_iter().map(TokenInfo::from).collect())
}

/// `POST /api/tokens`: the answer is the only time the token is shown.
pub async fn create(
    State(server): State<Server>,
    Body(new): Body<NewTokenName>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((StatusCode::CREATED, Json(tokens::make(server.runtime(), &new.name)?)))
}

/// `DELETE /api/tokens/{id}`: revokes it at once.
pub async fn revoke(State(server): State<Server>, Path(id): Path<String>) -> Result<Json<TokenInfo>, ApiError> {
    Ok(Json(tokens::revoke(server.runtime(), &id)?.into()))
}
