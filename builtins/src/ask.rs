//! What a call that waits asks of a person or the client: the bottom of the tool protocol,
//! below the tools that ask (`tool`), the catalog that calls them (`catalog`) and the
//! dialog that keeps the waiting calls (`dialog`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a waiting call asks of a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InteractionKind {
    /// Approve or deny the call as the model made it (`approved`).
    Approval,
    /// Answer a question in words (`answer`: text).
    Question,
    /// Say yes or no (`answer`: a boolean, `yes` or `no`).
    Confirmation,
    /// Pick one of the `options` (`answer`: the option).
    Choice,
    /// Run the tool's client phase and send its `output` (a client-authority tool, or a
    /// handoff); the server phase checks it.
    ClientExecution,
    /// Show the server's result (`arguments` holds it); does not hold up the round, and
    /// an acknowledgement is informational.
    DisplayEffect,
    /// A tool outside the space (an MCP server's) asks the person mid-call: fill in a form
    /// (`input.schema`; answered with `output`, or `answer` when it has one field) or
    /// visit a URL (`input.url`; answered with any `answer` once done), decline, or
    /// cancel. The call runs on meanwhile; the answer goes back to the tool.
    Elicitation,
}

impl InteractionKind {
    /// What answers it, in words.
    pub fn what(self) -> &'static str {
        match self {
            InteractionKind::Approval => "an approval",
            InteractionKind::Question => "an answer (a question)",
            InteractionKind::Confirmation => "an answer (a confirmation)",
            InteractionKind::Choice => "an answer (a choice)",
            InteractionKind::ClientExecution => "the client's output (`output`)",
            InteractionKind::DisplayEffect => "an acknowledgement",
            InteractionKind::Elicitation => "the form's fields (`output`), or a decline or cancel",
        }
    }
}

/// What a call that waits for the client presents: the kind of interaction, what is
/// asked, and for a choice the options.
#[derive(Debug, Clone, PartialEq)]
pub struct Ask {
    /// The kind of interaction front ends show.
    pub kind: InteractionKind,
    /// What is asked, in words.
    pub prompt: String,
    /// For a choice, the options.
    pub options: Vec<String>,
}
