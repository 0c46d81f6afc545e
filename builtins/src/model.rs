//! The interface every language model implements: providers, the scripted model and the
//! offline model.

use std::future::Future;
use std::pin::Pin;

use futures::Stream;

use crate::message::Message;
pub use crate::message::Usage;

/// The most tool calls one answer may hold: providers end a stream that goes past it,
/// and the dialog refuses such an answer from any model.
pub const MAX_TOOL_CALLS: usize = 64;

/// The largest arguments of one tool call, in bytes of JSON: they are kept in the
/// conversation and sent back with every later request.
pub const MAX_TOOL_ARGUMENTS: usize = 1 << 20;

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ToolSpec {
    /// The wire name: matches `^[a-zA-Z0-9_-]{1,64}$`.
    pub name: String,
    /// The name people see (`Counter.increment`); never sent to a provider, which only
    /// takes wire names.
    #[serde(skip)]
    pub display_name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments (always an object schema), shared with the catalog.
    pub input_schema: std::sync::Arc<serde_json::Value>,
}

impl ToolSpec {
    /// A tool as a model sees it: wire name, display name, description, argument schema.
    pub fn new(
        name: impl Into<String>,
        display_name: impl Into<String>,
        description: impl Into<String>,
        input_schema: serde_json::Value,
    ) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            display_name: display_name.into(),
            description: description.into(),
            input_schema: std::sync::Arc::new(input_schema),
        }
    }
}

/// One request to a model.
#[derive(Debug, Clone, Default)]
pub struct ModelRequest {
    /// The system prompt, if any.
    pub system: Option<String>,
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// Tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// Upper bound on generated tokens.
    pub max_tokens: Option<u32>,
    /// Whether the model may, must, or must not call tools.
    pub tool_choice: ToolChoice,
    /// The value the model must end with, when one is asked for (see
    /// [`structured`](crate::structured)).
    pub result: Option<crate::structured::ResultFormat>,
}

/// Which tools the model may call in one answer.
///
/// Small local models often answer with an empty turn unless a tool is required.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ToolChoice {
    /// The model decides (the default).
    #[default]
    Auto,
    /// No tool calls: answer in text.
    None,
    /// At least one tool call.
    Required,
    /// A call to this tool (its wire name).
    Tool(String),
}

/// What a model streams back while answering.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelEvent {
    /// A piece of the answer's text.
    TextDelta(String),
    /// A complete tool call (arguments fully received and parsed).
    ToolCall {
        /// Provider-assigned id.
        id: String,
        /// Wire name of the tool.
        name: String,
        /// Parsed arguments; malformed argument JSON arrives as a string value.
        input: serde_json::Value,
    },
    /// The answer is complete.
    Finish {
        /// Why the model stopped (`stop`, `tool_calls`, `length`, ...).
        reason: String,
        /// Tokens counted, when the provider reports them.
        usage: Option<Usage>,
    },
}

/// Errors a model can report.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A required API key is not in the environment.
    #[error("{var} is not set; export it to use {provider}, or use --model offline")]
    MissingKey {
        /// The environment variable to set.
        var: String,
        /// The provider that needs it.
        provider: String,
    },
    /// The model string could not be understood.
    #[error("unknown model `{0}`; use offline, scripted:PATH, openai:MODEL, anthropic:MODEL or ollama:MODEL")]
    UnknownModel(String),
    /// The provider refused the request (bad model name, bad key, invalid request).
    #[error("{provider} refused the request ({status}): {message}")]
    Refused {
        /// Provider name.
        provider: String,
        /// HTTP status.
        status: u16,
        /// The provider's error message.
        message: String,
    },
    /// The provider could not be reached or the connection failed.
    #[error("could not reach {provider}: {message}")]
    Network {
        /// Provider name.
        provider: String,
        /// What went wrong.
        message: String,
    },
    /// The provider took too long: no connection, no response, a silence in the stream,
    /// or an answer still unfinished at its deadline.
    #[error("{model} at {url}: {message}")]
    TimedOut {
        /// The model asked (`openai:gpt-4o`).
        model: String,
        /// The URL the request went to.
        url: String,
        /// What took too long, and what to do about it.
        message: String,
    },
    /// The provider's stream could not be parsed.
    #[error("malformed stream from {provider}: {message}")]
    Malformed {
        /// Provider name.
        provider: String,
        /// What was wrong.
        message: String,
    },
    /// The provider reported an error in the middle of its answer (overloaded, internal
    /// error) after the stream had started.
    #[error("{provider} stopped answering with an error: {message}")]
    Interrupted {
        /// Provider name.
        provider: String,
        /// The provider's error message.
        message: String,
    },
    /// The model's configuration (from the environment) is not usable.
    #[error("{0}")]
    Config(String),
    /// A scripted model's script is missing, invalid or used up.
    #[error("scripted model: {0}")]
    Script(String),
}

/// The stream of events of one answer.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<ModelEvent, ModelError>> + Send>>;

/// A language model.
pub trait Model: Send + Sync {
    /// A short name for logs and the CLI (`offline`, `openai:gpt-4o`, ...).
    fn name(&self) -> String;

    /// Whether it can summarise the older turns of a conversation that outgrew its budget
    /// (see the dialog's `context_budget`); a model that cannot (the offline and scripted
    /// ones) has them listed instead.
    fn summarizes(&self) -> bool {
        true
    }

    /// How many tokens the model reads at most (its context window), when known: a
    /// dialog without a `context_budget` keeps its requests to three quarters of it.
    fn context_window(&self) -> Option<u64> {
        None
    }

    /// Starts answering `request`; dropping the stream cancels the request.
    fn stream(
        &self,
        request: ModelRequest,
    ) -> Pin<Box<dyn Future<Output = Result<EventStream, ModelError>> + Send + '_>>;
}
