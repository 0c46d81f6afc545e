//! What a client tool is to the model and to its plugin: a definition (name, description,
//! JSON-Schema parameters) that travels with a request, and a call to execute.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A client tool as the model sees it: the definition sent with a request. It carries no
/// code; the server never executes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDefinition {
    /// The name the model calls it by: letters, digits, `_` and `-`, at most 64.
    pub name: String,
    /// What it does, for the model.
    #[serde(default)]
    pub description: String,
    /// A JSON Schema of an object: the tool's arguments.
    pub parameters: Value,
}

impl ToolDefinition {
    /// A definition with an object schema for its parameters.
    ///
    /// ```
    /// use trellis_plugins::ToolDefinition;
    /// let tool = ToolDefinition::new("count_words", "Count the words of a text", serde_json::json!({
    ///     "type": "object",
    ///     "properties": {"text": {"type": "string"}},
    ///     "required": ["text"]
    /// }));
    /// assert_eq!(tool.name, "count_words");
    /// ```
    pub fn new(name: impl Into<String>, description: impl Into<String>, parameters: Value) -> ToolDefinition {
        ToolDefinition { name: name.into(), description: description.into(), parameters }
    }
}

/// A model's call of a client tool, as hooks and executors see it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    /// The tool's name.
    pub tool: String,
    /// The plugin that provides the tool.
    pub plugin: String,
    /// The model's arguments (validated against the tool's schema before its executor runs).
    pub arguments: Value,
}

/// The result the model reads when a call fails: `{"error": message}`.
pub fn error_result(message: impl std::fmt::Display) -> Value {
    serde_json::json!({"error": message.to_string()})
}
