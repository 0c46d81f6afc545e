//! The page, embedded in the binary at build time: no build step, nothing to install.
//! `GET /` serves it (and, with `?token=`, first trades the one-time token for a session
//! cookie, see `super::auth`).

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Extension;
use serde::Deserialize;

use super::{Base, Server};

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/app.js");
const FILES: &str = include_str!("assets/files.js");
const PROMPTS: &str = include_str!("assets/prompts.js");
const HISTORY: &str = include_str!("assets/history.js");
const STYLE: &str = include_str!("assets/style.css");
const WORKER: &str = include_str!("assets/plugin-worker.js");

/// What the page's own headers say: no framing by other sites, scripts and styles only
/// from here, no inline script and no `eval`, so text that reached the page can never run
/// as code. WebAssembly may be compiled (`'wasm-unsafe-eval'`, which allows nothing for
/// JavaScript) and run in a worker from here: plugins' modules, fetched from the API.
const POLICY: &str = "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'; worker-src 'self'; \
                      style-src 'self'; connect-src 'self'; img-src 'self'; frame-ancestors 'none'; \
                      base-uri 'none'; form-action 'none'";

#[derive(Deserialize)]
struct SignIn {
    token: Option<String>,
}

async fn index(State(server): State<Server>, base: Option<Extension<Base>>, Query(sign_in): Query<SignIn>) -> Response {
    match sign_in.token {
        Some(token) => super::auth::exchange(&server, &token, &base.map(|b| b.0).unwrap_or_default()),
        None => asset("text/html; charset=utf-8", INDEX),
    }
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// The page's routes: `/`, `/app.js`, `/files.js`, `/prompts.js`, `/history.js`, `/style.css`,
/// `/plugin-worker.js`.
pub fn routes() -> axum::Router<Server> {
    axum::Router::new()
        .route("/", get(index))
        .route("/app.js", get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
        .route("/files.js", get(|| async { asset("text/javascript; charset=utf-8", FILES) }))
        .route("/prompts.js", get(|| async { asset("text/javascript; charset=utf-8", PROMPTS) }))
        .route("/history.js", get(|| async { asset("text/javascript; charset=utf-8", HISTORY) }))
        .route("/style.css", get(|| async { asset("text/css; charset=utf-8", STYLE) }))
        .route("/plugin-worker.js", get(|| async { asset("text/javascript; charset=utf-8", WORKER) }))
}
