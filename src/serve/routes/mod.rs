//! The API's handlers, one module per resource; [`super::api`] lists them.

pub mod charms;
pub mod chat;
pub mod files;
pub mod interactions;
pub mod patterns;
pub mod plugins;
pub mod tokens;
pub mod watches;

use axum::http::StatusCode;

/// The status of a request that changed something and has nothing to answer.
pub const DONE: StatusCode = StatusCode::NO_CONTENT;
