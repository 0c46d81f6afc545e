//! The names of `llm_dialog`'s inputs and outputs, in one typed place: the dialog reads
//! and writes through them, and patterns (the chatbot) wire and re-export through them.

use serde::Serialize;

/// An input of `llm_dialog`: a literal or a link to a cell the pattern owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DialogInput {
    /// The conversation (`Vec<Message>`); the dialog keeps its own when not given.
    Messages,
    /// The system prompt.
    System,
    /// The model string (`offline`, `openai:MODEL`, ...).
    Model,
    /// Upper bound on generated tokens per answer.
    MaxTokens,
    /// The tools map (`{handler}`, `{pattern}`, `{charm}` entries).
    Tools,
    /// `auto`, `none`, `required`, or one tool's display name.
    ToolChoice,
    /// How many rounds of one request may wait for the client to execute tools (default
    /// 5, 0 = unlimited): a runaway client tool loop stops with a message.
    MaxToolRounds,
    /// How many bytes of each tool result a request carries (default
    /// [`TOOL_RESULT_CAP`](super::TOOL_RESULT_CAP)); the model reads on with
    /// [`READ_RESULT`](super::READ_RESULT).
    ToolResultCap,
    /// A JSON Schema: the request ends with one value of it, stored in
    /// [`DialogOutput::Result`] (see [`crate::structured`]).
    ResultSchema,
    /// What a message sent while a reply runs does: `steer` (the default) joins the
    /// conversation at the next step (after the running calls' results, before the next
    /// model request); `queue` waits until the reply ends, then starts the next one.
    WhileRunning,
    /// How many tokens (estimated) a request may carry before the oldest turns are
    /// compacted into a summary (default: three quarters of the model's context window
    /// when it is known, else [`CONTEXT_BUDGET`](super::CONTEXT_BUDGET)).
    ContextBudget,
}

impl DialogInput {
    /// The key under the dialog's `inputs`.
    pub fn key(self) -> &'static str {
        match self {
            DialogInput::Messages => "messages",
            DialogInput::System => "system",
            DialogInput::Model => "model",
            DialogInput::MaxTokens => "max_tokens",
            DialogInput::Tools => "tools",
            DialogInput::ToolChoice => "tool_choice",
            DialogInput::MaxToolRounds => "max_tool_rounds",
            DialogInput::ToolResultCap => "tool_result_cap",
            DialogInput::ResultSchema => "result_schema",
            DialogInput::ContextBudget => "context_budget",
            DialogInput::WhileRunning => "while_running",
        }
    }
}

/// An output `llm_dialog` writes under its key in the charm's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DialogOutput {
    /// Stream: a user message; while a reply is being generated it waits in `queued` (see
    /// [`DialogInput::WhileRunning`]).
    AddMessage,
    /// Stream: stops the running request.
    CancelGeneration,
    /// Whether a reply is being generated.
    Pending,
    /// Why the last request failed, or `null`.
    Error,
    /// The text of the reply being streamed.
    Partial,
    /// The tool catalog as a UI shows it.
    FlattenedTools,
    /// The id of the latest request.
    Request,
    /// The calls waiting for a person ([`Interaction`](super::Interaction)s).
    Interactions,
    /// Stream: a person's answer to a waiting call ([`Resolve`](super::Resolve)).
    Resolve,
    /// The value the last request ended with, when `result_schema` asked for one, or
    /// `null`.
    Result,
    /// The [`Compaction`](super::Compaction) of the conversation's oldest turns the model
    /// reads in their place, or `null`.
    Compaction,
    /// Something the person should know that is no failure (a model that cannot take the
    /// images it was sent), or `null`; each is said once.
    Notice,
    /// The messages sent while the reply runs, waiting to join the conversation.
    Queued,
    /// The tools (display names) a person allowed to run without asking in this
    /// conversation (an approval with `always`).
    Allowed,
    /// Stream: a tool's calls ask for approval again (`{"tool": NAME}`).
    Disallow,
}

impl DialogOutput {
    /// The outputs a pattern built on the dialog re-exports at its top level.
    pub const PUBLIC: [DialogOutput; 14] = [
        DialogOutput::AddMessage,
        DialogOutput::CancelGeneration,
        DialogOutput::Pending,
        DialogOutput::Error,
        DialogOutput::Partial,
        DialogOutput::FlattenedTools,
        DialogOutput::Interactions,
        DialogOutput::Resolve,
        DialogOutput::Result,
        DialogOutput::Compaction,
        DialogOutput::Notice,
        DialogOutput::Queued,
        DialogOutput::Allowed,
        DialogOutput::Disallow,
    ];

    /// The key under the dialog's location.
    pub fn key(self) -> &'static str {
        match self {
            DialogOutput::AddMessage => "add_message",
            DialogOutput::CancelGeneration => "cancel_generation",
            DialogOutput::Pending => "pending",
            DialogOutput::Error => "error",
            DialogOutput::Partial => "partial",
            DialogOutput::FlattenedTools => "flattened_tools",
            DialogOutput::Request => "request",
            DialogOutput::Interactions => "interactions",
            DialogOutput::Resolve => "resolve",
            DialogOutput::Result => "result",
            DialogOutput::Compaction => "compaction",
            DialogOutput::Notice => "notice",
            DialogOutput::Queued => "queued",
            DialogOutput::Allowed => "allowed",
            DialogOutput::Disallow => "disallow",
        }
    }
}

/// The inputs of one dialog, built with typed keys.
///
/// ```
/// use trellis_builtins::dialog::DialogInputs;
///
/// let inputs = DialogInputs::new().model("offline").system("Be brief.").tool_choice("required");
/// assert_eq!(inputs.to_json()["tool_choice"], "required");
/// ```
#[derive(Debug, Clone, Default)]
pub struct DialogInputs(serde_json::Map<String, serde_json::Value>);

impl DialogInputs {
    /// No inputs: the dialog's defaults (its own messages, the offline model, no tools).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets one input to a literal or a cell (cells serialise as links).
    ///
    /// A value that cannot be serialised is left out (with a warning): the dialog then
    /// uses that input's default.
    pub fn set(mut self, input: DialogInput, value: impl Serialize) -> Self {
        match serde_json::to_value(value) {
            Ok(value) => {
                self.0.insert(input.key().to_string(), value);
            }
            Err(error) => tracing::warn!(input = input.key(), %error, "dialog input left out"),
        }
        self
    }

    /// The conversation.
    pub fn messages(self, value: impl Serialize) -> Self {
        self.set(DialogInput::Messages, value)
    }

    /// The system prompt.
    pub fn system(self, value: impl Serialize) -> Self {
        self.set(DialogInput::System, value)
    }

    /// The model string.
    pub fn model(self, value: impl Serialize) -> Self {
        self.set(DialogInput::Model, value)
    }

    /// The bound on generated tokens.
    pub fn max_tokens(self, value: impl Serialize) -> Self {
        self.set(DialogInput::MaxTokens, value)
    }

    /// The tools map.
    pub fn tools(self, value: impl Serialize) -> Self {
        self.set(DialogInput::Tools, value)
    }

    /// Whether the model may, must or must not call tools, or which one.
    pub fn tool_choice(self, value: impl Serialize) -> Self {
        self.set(DialogInput::ToolChoice, value)
    }

    /// How many rounds of a request may wait for the client (0 = unlimited).
    pub fn max_tool_rounds(self, value: impl Serialize) -> Self {
        self.set(DialogInput::MaxToolRounds, value)
    }

    /// How many bytes of each tool result a request carries.
    pub fn tool_result_cap(self, value: impl Serialize) -> Self {
        self.set(DialogInput::ToolResultCap, value)
    }

    /// How many tokens (estimated) a request may carry before older turns are compacted.
    pub fn context_budget(self, value: impl Serialize) -> Self {
        self.set(DialogInput::ContextBudget, value)
    }

    /// `steer` or `queue`: what a message sent while a reply runs does.
    pub fn while_running(self, value: impl Serialize) -> Self {
        self.set(DialogInput::WhileRunning, value)
    }

    /// The JSON Schema of the value each request ends with.
    pub fn result_schema(self, value: impl Serialize) -> Self {
        self.set(DialogInput::ResultSchema, value)
    }

    /// [`DialogInputs::result_schema`] of the type `T` (doc comments as descriptions).
    pub fn result_schema_of<T: schemars::JsonSchema>(self) -> Self {
        self.result_schema(schemars::schema_for!(T).to_value())
    }

    /// The inputs as the JSON object `Builder::builtin` takes.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::Value::Object(self.0.clone())
    }
}
