//! Conversation messages as `llm_dialog` keeps them and providers receive them.
//!
//! Messages keep their part structure (text, file, tool call, tool result) all the way to
//! the provider adapters, which translate them to each wire format. A file part's bytes
//! live in a document of their own once the dialog keeps it (see [`crate::files`]).

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
    /// An image, a PDF or another file.
    File(FilePart),
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
    /// Text and files (an MCP tool's image, say), in order.
    Content(Vec<Part>),
}

/// A file in a message: its media type, its bytes and maybe a name.
///
/// A part as a person or a tool sends it carries its bytes in `data`; the dialog moves
/// them into a document of their own (`doc`) before the message joins the conversation,
/// so the conversation does not grow by megabytes, and loads them again only for the
/// request a provider receives.
///
/// ```
/// use trellis_builtins::message::FilePart;
///
/// let part = FilePart::from_bytes("image/png", Some("dot.png".into()), b"\x89PNG");
/// assert_eq!(part.size, 4);
/// assert_eq!(part.data.as_deref(), Some("iVBORw=="));
/// assert_eq!(part.describe(), "dot.png (image/png, 4 bytes)");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FilePart {
    /// The media type: `image/png`, `application/pdf`, `text/plain`, ...
    pub media_type: String,
    /// The file's name, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its size in bytes (counted again from `data` when the dialog keeps it).
    #[serde(default)]
    pub size: u64,
    /// The bytes, base64 (standard alphabet, padded), while the part carries them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// The document that keeps the bytes, once the dialog has stored them; never
    /// accepted from a sender.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doc: Option<String>,
}

impl FilePart {
    /// A part carrying `bytes`.
    pub fn from_bytes(media_type: impl Into<String>, name: Option<String>, bytes: &[u8]) -> Self {
        use base64::Engine;
        FilePart {
            media_type: media_type.into(),
            name,
            size: bytes.len() as u64,
            data: Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
            doc: None,
        }
    }

    /// Whether it is an image.
    pub fn is_image(&self) -> bool {
        self.media_type.starts_with("image/")
    }

    /// `name (media type, size)`, or `an image (media type, size)` without a name.
    pub fn describe(&self) -> String {
        let kind = if self.is_image() { "an image" } else { "a file" };
        format!("{} ({}, {})", self.name.as_deref().unwrap_or(kind), self.media_type, size_text(self.size))
    }

    /// What a model that cannot read this file reads in its place.
    pub fn placeholder(&self) -> String {
        format!("[{}: not shown, this model cannot read it]", self.describe())
    }
}

/// A size as people read it: `812 bytes`, `14.2 KB`, `5.0 MB` (powers of 1024).
pub fn size_text(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} bytes"),
        1024..1_048_576 => format!("{:.1} KB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MB", bytes as f64 / 1_048_576.0),
    }
}

impl ToolOutput {
    /// The output as the text a provider sends: JSON as compact text, the others as they
    /// are (no "Error:" prefix; see the providers for that).
    pub fn as_text(&self) -> String {
        match self {
            ToolOutput::Json(value) => value.to_string(),
            ToolOutput::Text(text) | ToolOutput::ErrorText(text) => text.clone(),
            ToolOutput::Content(parts) => parts_text(parts),
        }
    }
}

/// Text parts as they are and files described (`[dot.png (image/png, 4 bytes)]`), one
/// per line: what a reader of text only is shown of `parts`.
pub fn parts_text(parts: &[Part]) -> String {
    let shown: Vec<String> = parts
        .iter()
        .filter_map(|part| match part {
            Part::Text { text } => Some(text.clone()),
            Part::File(file) => Some(format!("[{}]", file.describe())),
            _ => None,
        })
        .collect();
    shown.join("\n")
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

    /// The message's file parts.
    pub fn files(&self) -> impl Iterator<Item = &FilePart> {
        self.content.iter().filter_map(|p| match p {
            Part::File(file) => Some(file),
            _ => None,
        })
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
