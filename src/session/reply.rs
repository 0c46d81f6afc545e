//! A person's reply to a waiting call, as every front end gives it.

/// A person's reply to a waiting call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Let the call run.
    Approve {
        /// And later calls of its tool in this conversation, without asking.
        always: bool,
        /// The arguments to run it with instead of the model's (the model is told).
        input: Option<serde_json::Value>,
    },
    /// Refuse it (or decline to answer); the model is told why.
    Deny(String),
    /// Answer the model's question, confirmation (yes or no) or choice.
    Answer(String),
    /// The output of a tool's client phase (a client execution), an acknowledgement of
    /// a display effect, or the fields of a tool's form.
    Output(serde_json::Value),
    /// Say no to a tool's question (MCP elicitation's `decline`); for a call that waits,
    /// a denial.
    Decline,
    /// Dismiss a tool's question without answering (MCP elicitation's `cancel`); for a
    /// call that waits, a denial.
    Cancel,
}

impl Reply {
    /// A plain approval: this call, with the model's arguments.
    pub const APPROVE: Reply = Reply::Approve { always: false, input: None };

    /// The reply `trellis resolve` was given: `--deny REASON`, `--answer TEXT`, `--output
    /// JSON`, `--decline`, `--cancel`, or else `--approve` (with `--always` and `--input
    /// JSON`).
    pub fn from_flags(
        deny: Option<String>,
        answer: Option<String>,
        output: Option<String>,
        (decline, cancel): (bool, bool),
        (always, input): (bool, Option<String>),
    ) -> anyhow::Result<Reply> {
        let approving = deny.is_none() && answer.is_none() && output.is_none() && !decline && !cancel;
        if !approving && (always || input.is_some()) {
            anyhow::bail!(
                "--always and --input go with --approve, not with --deny, --answer, --output, --decline or --cancel"
            );
        }
        if decline {
            return Ok(Reply::Decline);
        }
        if cancel {
            return Ok(Reply::Cancel);
        }
        let input = input.map(|json| serde_json::from_str(&json)).transpose().map_err(|e| {
            anyhow::anyhow!("--input takes the call's arguments as JSON, for example '{{\"id\": 2}}' ({e})")
        })?;
        Ok(match (deny, answer, output) {
            (Some(reason), _, _) => Reply::Deny(reason),
            (None, Some(text), _) => Reply::Answer(text),
            (None, None, Some(json)) => Reply::Output(serde_json::from_str(&json).map_err(|e| {
                anyhow::anyhow!(
                    "--output takes the client's output as JSON, for example '{{\"confirmed\": true}}' ({e})"
                )
            })?),
            (None, None, None) => Reply::Approve { always, input },
        })
    }
}
