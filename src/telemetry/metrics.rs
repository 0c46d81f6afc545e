//! The counters of `GET /metrics`, in Prometheus's text format. The crates count through
//! the `metrics` facade where things happen (`trellis_commits_total` and
//! `trellis_conflicts_total` in the runtime, `trellis_lease_changes_total` in
//! `trellis-postgres`, tool calls and model requests in `trellis-builtins`' `counted`,
//! `trellis_forwarded_requests_total` and the followers' counters in `crate::serve`), with
//! no registry passed around; this module installs the recorder they count into and
//! renders it.

use std::sync::OnceLock;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde_json::json;

/// The process's Prometheus recorder, installed the first time a server starts (counting
/// costs nothing until then); `None` when the program installed a recorder of its own
/// (its counters go there).
pub(crate) fn recorder() -> Option<&'static PrometheusHandle> {
    static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    RECORDER
        .get_or_init(|| match PrometheusBuilder::new().install_recorder() {
            Ok(handle) => Some(handle),
            Err(error) => {
                tracing::warn!(%error, "the counters go to the program's own metrics recorder; /metrics shows none");
                None
            }
        })
        .as_ref()
}

/// The answer to `GET /metrics`: every counter so far, or 404 when the program records
/// them elsewhere.
pub(crate) fn text(recorder: Option<&'static PrometheusHandle>) -> Response {
    match recorder {
        Some(handle) => {
            ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], handle.render()).into_response()
        }
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({ "error": "this program records its metrics elsewhere (its own recorder)" })),
        )
            .into_response(),
    }
}
