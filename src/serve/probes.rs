//! `GET /healthz` (the process answers) and `GET /readyz` (it can reach its storage), for
//! load balancers and orchestrators, and `GET /metrics`, the process's counters in
//! Prometheus's text format (commits, conflicts, lease changes, forwarded requests, tool
//! calls, model requests and tokens, by outcome). None needs a sign-in, as a scraper
//! has none, nor says more than counts, a status and a sentence: they sit outside the API
//! and its rate limit.

use std::sync::{Arc, OnceLock};

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Json;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use serde_json::{json, Value};

/// Whether the server can do its work now (its storage reachable, and still its own); the
/// reason when not. It may block (a round trip to a database): it runs on a blocking
/// thread.
pub type Readiness = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The probes' routes, and `/metrics`.
pub fn routes(ready: Readiness) -> axum::Router {
    let metrics = recorder();
    axum::Router::new()
        .route("/healthz", get(|| async { Json(json!({ "status": "alive" })) }))
        .route(
            "/readyz",
            get(move || {
                let ready = Arc::clone(&ready);
                async move { readyz(ready).await }
            }),
        )
        .route("/metrics", get(move || async move { metrics_text(metrics) }))
}

/// The process's Prometheus recorder, installed the first time a server starts; `None`
/// when the program installed a recorder of its own (its counters go there).
fn recorder() -> Option<&'static PrometheusHandle> {
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

fn metrics_text(recorder: Option<&'static PrometheusHandle>) -> axum::response::Response {
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

async fn readyz(ready: Readiness) -> (StatusCode, Json<Value>) {
    let checked = tokio::task::spawn_blocking(move || ready()).await;
    match checked {
        Ok(Ok(())) => (StatusCode::OK, Json(json!({ "status": "ready" }))),
        Ok(Err(why)) => (StatusCode::SERVICE_UNAVAILABLE, Json(json!({ "status": "not ready", "error": why }))),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "not ready", "error": "the readiness check failed; see the server's log" })),
        ),
    }
}
