//! What the builtins count for operations (`/metrics` of `trellis serve`): tool calls and
//! model requests by outcome, and the tokens providers reported. Counted through the
//! `metrics` facade: nothing is kept unless the program installed a recorder.

use crate::model::Usage;

/// A tool call's first step ended: `"done"`, `"failed"`, or `"waiting"` (for a person or
/// the client).
pub(crate) fn tool_call(outcome: &'static str) {
    metrics::counter!("trellis_tool_calls_total", "outcome" => outcome).increment(1);
}

/// A request to a model ended: answered (with the tokens it reported) or failed.
pub(crate) fn model_request(answered: Result<Option<Usage>, ()>) {
    let outcome = if answered.is_ok() { "answered" } else { "failed" };
    metrics::counter!("trellis_model_requests_total", "outcome" => outcome).increment(1);
    if let Ok(Some(usage)) = answered {
        metrics::counter!("trellis_model_tokens_total", "kind" => "input").increment(usage.input_tokens);
        metrics::counter!("trellis_model_tokens_total", "kind" => "output").increment(usage.output_tokens);
    }
}
