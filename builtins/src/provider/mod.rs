//! LLM provider adapters, and the model string (`--model`) that picks one.
//!
//! - [`openai`]: OpenAI-compatible chat completions (OpenAI, Ollama, llama.cpp, vLLM).
//! - [`anthropic`]: Anthropic Messages.
//! - [`http`]: what both share: settings, retries with backoff and error bodies, event-stream
//!   decoding (Server-Sent Events by `eventsource-stream`), and the stream driver.
//!
//! Each adapter is split into a request builder, an HTTP layer, and a pure stream parser
//! (SSE payloads in, [`crate::model::ModelEvent`]s out) that tests and fuzzers drive
//! without a network.

pub mod anthropic;
pub mod http;
pub mod openai;

use std::sync::Arc;

use crate::model::{Model, ModelError};

pub use anthropic::{AnthropicConfig, AnthropicModel};
pub use http::{HttpSettings, RetryPolicy};
pub use openai::{OpenAiConfig, OpenAiModel};

/// The model a `--model` string names, with keys and base URLs from the process
/// environment.
///
/// Accepted: `offline`, `scripted:PATH`, `openai:MODEL`, `anthropic:MODEL`,
/// `ollama:MODEL`. A provider whose key is not set fails here, before any request.
/// `TRELLIS_CONNECT_TIMEOUT` and `TRELLIS_ANSWER_TIMEOUT` (seconds) override the
/// connect timeout (10 s) and the deadline of one answer (600 s).
///
/// ```
/// use trellis_builtins::model::ModelError;
/// use trellis_builtins::provider::model_from_str;
///
/// assert!(matches!(model_from_str("gpt-4o"), Err(ModelError::UnknownModel(_))));
/// ```
pub fn model_from_str(spec: &str) -> Result<Arc<dyn Model>, ModelError> {
    model_from_str_with_env(spec, &|var| std::env::var(var).ok())
}

/// [`model_from_str`] with environment variables looked up through `env`, so callers
/// and tests control keys and base URLs without touching the process environment.
pub fn model_from_str_with_env(spec: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Arc<dyn Model>, ModelError> {
    let spec = spec.trim();
    if spec == "offline" {
        return offline_model();
    }
    let unknown = || ModelError::UnknownModel(spec.to_string());
    let (kind, rest) = spec.split_once(':').ok_or_else(unknown)?;
    let rest = rest.trim();
    if rest.is_empty() {
        return Err(unknown());
    }
    let http = || HttpSettings::from_env(env);
    Ok(match kind {
        "openai" => Arc::new(OpenAiModel::new(OpenAiConfig { http: http()?, ..OpenAiConfig::openai(rest, env)? })?),
        "ollama" => Arc::new(OpenAiModel::new(OpenAiConfig { http: http()?, ..OpenAiConfig::ollama(rest, env) })?),
        "anthropic" => {
            Arc::new(AnthropicModel::new(AnthropicConfig { http: http()?, ..AnthropicConfig::from_env(rest, env)? })?)
        }
        "scripted" => Arc::new(crate::scripted::ScriptedModel::from_file(rest)?),
        _ => return Err(unknown()),
    })
}

/// The context windows of the models of OpenAI and Anthropic, by the start of their names
/// (the providers publish them in their model documentation, not in their APIs). A model
/// served by another OpenAI-compatible server has the window its server was started
/// with, which no name tells.
const CONTEXT_WINDOWS: [(&str, u64); 9] = [
    ("claude-", 200_000),
    ("gpt-5", 400_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-3.5-turbo", 16_385),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
];

/// The context window of a model of OpenAI or Anthropic, by its name; `None` for a name
/// not among those known.
///
/// ```
/// use trellis_builtins::provider::known_context_window;
///
/// assert_eq!(known_context_window("gpt-4o-mini"), Some(128_000));
/// assert_eq!(known_context_window("llama3.2"), None);
/// ```
pub fn known_context_window(model: &str) -> Option<u64> {
    CONTEXT_WINDOWS.iter().find(|(start, _)| model.starts_with(start)).map(|&(_, window)| window)
}

/// The embedded offline model (no network, no key).
fn offline_model() -> Result<Arc<dyn Model>, ModelError> {
    Ok(Arc::new(crate::offline::OfflineModel::new()))
}
