//! `GET /api/patterns`.

use axum::extract::State;
use axum::Json;

use crate::serve::Server;
use crate::session::{pattern_infos, PatternInfo};

/// The registered patterns.
pub async fn list(State(server): State<Server>) -> Json<Vec<PatternInfo>> {
    Json(pattern_infos(server.runtime()))
}
