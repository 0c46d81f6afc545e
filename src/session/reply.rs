//! A person's reply to a waiting call, as every front end gives it.

/// A person's reply to a waiting call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Let the call run.
    Approve,
    /// Refuse it (or decline to answer); the model is told why.
    Deny(String),
    /// Answer the model's question, confirmation (yes or no) or choice.
    Answer(String),
    /// The output of a tool's client phase (a client execution), or an acknowledgement of
    /// a display effect.
    Output(serde_json::Value),
}

impl Reply {
    /// The reply `trellis resolve` was given: `--deny REASON`, `--answer TEXT`, `--output
    /// JSON`, or else `--approve`.
    pub fn from_flags(deny: Option<String>, answer: Option<String>, output: Option<String>) -> anyhow::Result<Reply> {
        Ok(match (deny, answer, output) {
            (Some(reason), _, _) => Reply::Deny(reason),
            (None, Some(text), _) => Reply::Answer(text),
            (None, None, Some(json)) => Reply::Output(serde_json::from_str(&json).map_err(|e| {
                anyhow::anyhow!(
                    "--output takes the client's output as JSON, for example '{{\"confirmed\": true}}' ({e})"
                )
            })?),
            (None, None, None) => Reply::Approve,
        })
    }
}
