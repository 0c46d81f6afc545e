//! How the chat shows a conversation: messages, tool calls and tool results as
//! transcript lines. Text from the model, tools and charm names is escaped for the
//! terminal here (see [`safe`], [`safe_line`]).

use trellis_builtins::message::{Message, Part, Role, ToolOutput};

use super::session::Session;
use crate::cli::terminal::{safe, safe_line};

/// Renders messages as a transcript for people.
pub fn transcript(session: &Session, messages: &[Message]) -> String {
    let mut lines = Vec::new();
    for message in messages {
        for part in &message.content {
            lines.push(line(session, message.role, part));
        }
    }
    lines.join("\n")
}

/// One part of a message as a transcript line: `you: …`, `assistant: …`, a tool call
/// (`  → Counter.increment {"amount":5}`) or a tool result (`  ← count: 0 → 5`).
pub fn line(session: &Session, role: Role, part: &Part) -> String {
    match (role, part) {
        (Role::User, Part::Text { text }) => format!("you: {}", safe(text)),
        (_, Part::Text { text }) => format!("{ASSISTANT}{}", safe(text)),
        // The input is JSON, whose strings serde has escaped already.
        (_, Part::ToolCall { name, input, .. }) => format!("  → {} {input}", safe_line(&session.display_name(name))),
        (_, Part::ToolResult { output, .. }) => format!("  ← {}", safe_line(&describe(output))),
    }
}

/// What starts the model's text in a transcript.
pub const ASSISTANT: &str = "assistant: ";

/// One line for a tool result.
fn describe(output: &ToolOutput) -> String {
    match output {
        ToolOutput::Json(json) => match json.get("summary").and_then(|s| s.as_str()) {
            Some(summary) => summary.to_string(),
            None => json.to_string(),
        },
        ToolOutput::Text(text) => text.clone(),
        ToolOutput::ErrorText(text) => format!("error: {text}"),
    }
}
