//! `/api/plugins`: the space's enabled plugins as the page runs them. The server offers
//! their tools to the model as client tools (see `crate::session::Session`); a call to
//! one waits as a client execution, and the page runs the plugin's WebAssembly module in
//! the browser (`assets/plugin-worker.js`) and resolves the call with its result. The
//! bundles were verified when the server loaded them (signature against the trusted keys,
//! imports against the permissions granted), exactly as `trellis chat` loads them.
//!
//! A call runs in the page in a fresh Web Worker with only the `trellis` imports granted
//! at install, its memory's maximum lowered to the plugin's cap before the module is
//! compiled; it is stopped after `TIME_BUDGET_MS` and always resolves with a JSON value
//! (`{"error": ...}` on a trap, a refusal or a timeout). With several tabs open the first
//! answer counts; a later one is refused (409).

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use schemars::JsonSchema;
use serde::Serialize;
use trellis_plugins::sandbox::DEFAULT_MEMORY_MIB;
use trellis_plugins::store::Loaded;

use crate::serve::error::ApiError;
use crate::serve::Server;

/// How long one call may run in the page before its worker is stopped, in milliseconds
/// (the browser has no fuel meter: a loop is stopped by time).
pub const TIME_BUDGET_MS: u64 = 5_000;

/// A plugin the page runs.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct PagePlugin {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// What it is for.
    pub description: String,
    /// The key that signed it, or none: installed unsigned.
    pub signed_by: Option<String>,
    /// The permissions granted at install: the only `trellis` imports its module gets.
    pub granted: Vec<String>,
    /// The most linear memory a call may leave behind, in MiB.
    pub memory_mib: u32,
    /// How long a call may run, in milliseconds.
    pub time_budget_ms: u64,
    /// Where its module is (`application/wasm`).
    pub module: String,
    /// Its tools.
    pub tools: Vec<PageTool>,
}

/// A plugin's tool, and the export of its module that runs it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct PageTool {
    /// The tool's name (the wire name the model calls it by).
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its parameters, a JSON Schema.
    pub parameters: serde_json::Value,
    /// The module's function that runs it: `(ptr, len) -> i64`.
    pub export: String,
}

fn page_plugin(loaded: &Loaded) -> PagePlugin {
    let manifest = &loaded.bundle.manifest;
    PagePlugin {
        name: manifest.name.clone(),
        version: manifest.version.clone(),
        description: manifest.description.clone(),
        signed_by: loaded.bundle.signature.as_ref().map(|s| s.public_key.clone()),
        granted: loaded.granted.iter().map(ToString::to_string).collect(),
        memory_mib: manifest.limits.memory_mib.unwrap_or(DEFAULT_MEMORY_MIB),
        time_budget_ms: TIME_BUDGET_MS,
        module: format!("/api/plugins/{}/module", manifest.name),
        tools: manifest
            .tools
            .iter()
            .map(|tool| PageTool {
                name: tool.name.clone(),
                description: tool.description.clone(),
                parameters: tool.parameters.clone(),
                export: tool.export().to_string(),
            })
            .collect(),
    }
}

/// `GET /api/plugins`: the enabled plugins that loaded, with their tools.
pub async fn list(State(server): State<Server>) -> Json<Vec<PagePlugin>> {
    Json(server.chat().plugin_bundles().iter().map(page_plugin).collect())
}

/// `GET /api/plugins/{name}/module`: the plugin's WebAssembly module, as verified at load.
pub async fn module(State(server): State<Server>, Path(name): Path<String>) -> Result<Response, ApiError> {
    let loaded = server.chat().plugin_bundles().iter().find(|l| l.bundle.manifest.name == name).ok_or_else(|| {
        ApiError::not_found(format!(
            "no enabled plugin named `{name}` is loaded (`{program} plugin list` shows the installed ones; the \
             server loads them when it starts)",
            program = crate::program::name()
        ))
    })?;
    let headers = [
        (header::CONTENT_TYPE, "application/wasm"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CACHE_CONTROL, "no-cache"),
    ];
    Ok((headers, loaded.bundle.module.clone()).into_response())
}
