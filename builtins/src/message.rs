//! Conversation messages as `llm_dialog` keeps them and providers receive them.
//!
//! Messages keep their part structure (text, tool call, tool result) all the way to the
//! provider adapters, which translate them to each wire format.

use serde::{Deserialize, Serialize};

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The person chatting.
    User,
    /// The model.
    Assistant,
    /// Results of tool calls, sent back to the model.
    Tool,
}

/// One message: a role and its parts in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Message {
    /// Who said it.
    pub role: Role,
    /// What was said, in order.
    pub content: Vec<Part>,
    /// Tokens the provider counted for the answer this message holds (assistant
    /// messages from providers that report usage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// A piece of a message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Part {
    /// Plain text.
    Text {
        /// The text; never empty when sent to a provider.
        text: String,
    },
    /// The model asks for a tool to run.
    ToolCall {
        /// Provider-assigned id, echoed by the matching result.
        id: String,
        /// The tool's wire name, as the model used it.
        name: String,
        /// The arguments the model gave.
        input: serde_json::Value,
    },
    /// The outcome of a tool call.
    ToolResult {
        /// The id of the call this answers.
        id: String,
        /// The tool's wire name.
        name: String,
        /// What the tool returned.
        output: ToolOutput,
    },
}

/// What a tool call produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", content = "value", rename_all = "kebab-case")]
pub enum ToolOutput {
    /// Structured output.
    Json(serde_json::Value),
    /// Plain text output.
    Text(String),
    /// The call failed; the text tells the model why.
    ErrorText(String),
}

impl ToolOutput {
    /// The output as the text a provider sends: JSON as compact text, the others as they
    /// are (no "Error:" prefix; see the providers for that).
    pub fn as_text(&self) -> String {
        match self {
            ToolOutput::Json(value) => value.to_string(),
            ToolOutput::Text(text) | ToolOutput::ErrorText(text) => text.clone(),
        }
    }
}

impl Message {
    /// A message with these parts and no usage.
    pub fn new(role: Role, content: Vec<Part>) -> Self {
        Message { role, content, usage: None }
    }

    /// A user message with one text part.
    pub fn user(text: impl Into<String>) -> Self {
        Message::new(Role::User, vec![Part::Text { text: text.into() }])
    }

    /// An assistant message with one text part.
    pub fn assistant(text: impl Into<String>) -> Self {
        Message::new(Role::Assistant, vec![Part::Text { text: text.into() }])
    }

    /// The message's text parts joined together.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|p| match p {
                Part::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// Tokens a provider counted for one answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Usage {
    /// Tokens of the request (prompt, tools, conversation).
    pub input_tokens: u64,
    /// Tokens the model generated.
    pub output_tokens: u64,
}
