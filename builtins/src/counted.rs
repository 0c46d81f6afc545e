//! What the builtins count for operations (`/metrics` of `trellis serve`): tool calls and
//! model requests by outcome, and the tokens providers reported. Counted through the
//! `metrics` facade: nothing is kept unless the program installed a recorder.

use crate::model::Usage;

/// A tool call's first step ended: `"done"`, `"failed"`, or `"waiting"` (for a person or
/// the client).
pub(crate) fn tool_call(outcome: &'static str) {
    metrics::counter!("trellis_tool_calls_total", "outcome" => outcome).increment(1);
}

/// The providers a model string names, as counted; any other (a program's own model) is
/// `other`, so the series stay few whatever the model strings.
const PROVIDERS: [&str; 5] = ["openai", "anthropic", "ollama", "offline", "scripted"];

/// A request to the model of the model string `spec` ended: answered (with the tokens it
/// reported) or failed. Counted by provider ([`PROVIDERS`]), never by model, whose names
/// are many.
pub(crate) fn model_request(spec: &str, answered: Result<Option<Usage>, ()>) {
    let named = crate::traced::provider_and_model(spec).0;
    let provider = PROVIDERS.into_iter().find(|known| *known == named).unwrap_or("other");
    let outcome = if answered.is_ok() { "answered" } else { "failed" };
    metrics::counter!("trellis_model_requests_total", "provider" => provider, "outcome" => outcome).increment(1);
    if let Ok(Some(usage)) = answered {
        let tokens = |kind: &'static str| metrics::counter!("trellis_model_tokens_total", "provider" => provider, "kind" => kind);
        tokens("input").increment(usage.input_tokens);
        tokens("output").increment(usage.output_tokens);
    }
}
