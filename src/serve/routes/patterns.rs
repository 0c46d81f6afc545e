//! `GET /api/patterns`.

use axum::extract::State;
use axum::Json;

use crate::cli::output::{pattern_infos, PatternInfo};
use crate::serve::Server;

/// The registered patterns.
pub async fn list(State(server): State<Server>) -> Json<Vec<PatternInfo>> {
    Json(pattern_infos(server.runtime()))
}
