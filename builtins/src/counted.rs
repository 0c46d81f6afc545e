//! What the builtins count for operations (`/metrics` of `trellis serve`): tool calls and
//! model requests by outcome, and the tokens providers reported. Counted through the
//! `metrics` facade: nothing is kept unless the program installed a recorder.

use crate::model::Usage;

/// A tool call's first step ended: `"done"`, `"failed"`, or `"waiting"` (for a person or
/// the client).
pub(crate) fn tool_call(outcome: &'static str) {
    metrics::counter!("trellis_tool_calls_total", "outcome" => outcome).increment(1);
}

/// A request to the model of the model string `spec` ended: answered (with the tokens it
/// reported) or failed. Counted by provider (`openai`, `anthropic`, `ollama`, `offline`,
/// `scripted`: the few a model string can name), never by model, whose names are many.
pub(crate) fn model_request(spec: &str, answered: Result<Option<Usage>, ()>) {
    let provider = crate::traced::provider_and_model(spec).0.to_owned();
    let outcome = if answered.is_ok() { "answered" } else { "failed" };
    metrics::counter!("trellis_model_requests_total", "provider" => provider.clone(), "outcome" => outcome)
        .increment(1);
    if let Ok(Some(usage)) = answered {
        let tokens = |kind: &'static str| metrics::counter!("trellis_model_tokens_total", "provider" => provider.clone(), "kind" => kind);
        tokens("input").increment(usage.input_tokens);
        tokens("output").increment(usage.output_tokens);
    }
}
