//! `GET /healthz` (the process answers) and `GET /readyz` (it can reach its storage), for
//! load balancers and orchestrators, and `GET /metrics`, the process's counters in
//! Prometheus's text format (commits, conflicts, lease changes, forwarded requests, tool
//! calls, model requests and tokens, by outcome; `crate::telemetry::metrics`). None needs a
//! sign-in, as a scraper has none, nor says more than counts, a status and a sentence: they
//! sit outside the API and its rate limit (and are not traced).

use std::sync::Arc;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Json;
use serde_json::{json, Value};

/// Whether the server can do its work now (its storage reachable, and still its own); the
/// reason when not. It may block (a round trip to a database): it runs on a blocking
/// thread.
pub type Readiness = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The probes' routes, and `/metrics`.
pub fn routes(ready: Readiness) -> axum::Router {
    let metrics = crate::telemetry::metrics::recorder();
    axum::Router::new()
        .route("/healthz", get(|| async { Json(json!({ "status": "alive" })) }))
        .route(
            "/readyz",
            get(move || {
                let ready = Arc::clone(&ready);
                async move { readyz(ready).await }
            }),
        )
        .route("/metrics", get(move || async move { crate::telemetry::metrics::text(metrics) }))
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
