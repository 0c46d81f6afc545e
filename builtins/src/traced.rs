//! Spans of a conversation for OpenTelemetry, named and described as its GenAI semantic
//! conventions say: `invoke_agent` for one request of a dialog, `chat {model}` for each
//! request to a model (`gen_ai.provider.name`, `gen_ai.request.model`, the tokens it
//! reported), `execute_tool {tool}` for each tool call (`gen_ai.tool.name`,
//! `gen_ai.tool.call.id`).
//!
//! They are `tracing` spans of [`TARGET`]: this crate knows no exporter. The program
//! sends them to OpenTelemetry when its operator asks for it, and keeps them out of its log
//! (the log has its own `llm_request` and `tool_call` spans). Nothing a person or a model
//! wrote (messages, tool arguments, results) goes into a span unless the operator sets
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` ([`capture_content`]): a
//! trace backend is often read by more people than the conversation was meant for.

use std::sync::OnceLock;

use serde_json::{json, Value};
use tracing::field::Empty;
use tracing::Span;

use crate::message::{Message, Part, Role, ToolOutput};
use crate::model::{ModelRequest, Usage};

/// The target of every span meant for OpenTelemetry (the program's log leaves them out).
pub const TARGET: &str = "trellis::telemetry";

/// The environment variable of the GenAI conventions that lets content into spans.
pub const CAPTURE_CONTENT: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// The most of one captured value a span keeps: a conversation can be megabytes, and a
/// trace backend refuses or cuts such attributes anyway.
const MAX_CAPTURED: usize = 16 * 1024;

/// Whether the operator asked for messages, tool arguments and results in spans
/// ([`CAPTURE_CONTENT`] is `true`); read once per process.
pub fn capture_content() -> bool {
    static CAPTURE: OnceLock<bool> = OnceLock::new();
    *CAPTURE.get_or_init(|| std::env::var(CAPTURE_CONTENT).is_ok_and(|v| v.trim().eq_ignore_ascii_case("true")))
}

/// How a trace crosses to another process (W3C Trace Context: `traceparent`,
/// `tracestate`): the program's own, installed with [`propagate_with`] when it sends spans
/// anywhere; this crate knows no propagator.
#[derive(Debug, Clone, Copy)]
pub struct Propagation {
    /// The current span's trace, as the header (or `_meta`) fields that carry it.
    pub inject: fn() -> Vec<(String, String)>,
    /// Makes a span continue the trace that fields (looked up by name) name.
    pub adopt: fn(&Span, &Lookup<'_>),
}

/// The fields of a call that came in, looked up by name (`traceparent`).
pub type Lookup<'a> = dyn Fn(&str) -> Option<String> + 'a;

static PROPAGATION: OnceLock<Propagation> = OnceLock::new();

/// Installs the program's propagation (once; a second is ignored).
pub fn propagate_with(propagation: Propagation) {
    let _ = PROPAGATION.set(propagation);
}

/// The current span's trace, to send with a call leaving the process (an MCP call's
/// `_meta`); empty when the program propagates none.
pub fn outgoing() -> Vec<(String, String)> {
    PROPAGATION.get().map(|p| (p.inject)()).unwrap_or_default()
}

/// Makes `span` continue the trace `incoming` names (a call that came with `traceparent`),
/// when the program propagates traces.
pub fn adopt(span: &Span, incoming: &Lookup<'_>) {
    if let Some(propagation) = PROPAGATION.get() {
        (propagation.adopt)(span, incoming);
    }
}

/// The span of one request of the dialog whose document is `dialog`: the model's answers
/// and the tool calls they asked for, until the model is done or waits.
pub(crate) fn agent(dialog: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "invoke_agent",
        otel.name = "invoke_agent llm_dialog",
        otel.kind = "internal",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = "llm_dialog",
        gen_ai.conversation.id = dialog,
    )
}

/// The provider and the model of a model string: `openai:gpt-4o` is OpenAI's `gpt-4o`;
/// `offline` is itself.
pub(crate) fn provider_and_model(spec: &str) -> (&str, &str) {
    spec.split_once(':').unwrap_or((spec, spec))
}

/// One request to a model, `chat {model}`.
pub(crate) struct Chat(Span);

impl Chat {
    /// The span of `request` to the model of the model string `spec`.
    pub(crate) fn start(spec: &str, request: &ModelRequest) -> Chat {
        let (provider, model) = provider_and_model(spec);
        let span = tracing::info_span!(
            target: TARGET,
            "chat",
            otel.name = %format_args!("chat {model}"),
            otel.kind = "client",
            otel.status_code = Empty,
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = provider,
            gen_ai.request.model = model,
            gen_ai.request.max_tokens = request.max_tokens,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            gen_ai.system_instructions = Empty,
            gen_ai.input.messages = Empty,
            gen_ai.output.messages = Empty,
            error.type = Empty,
        );
        if capture_content() && !span.is_disabled() {
            if let Some(system) = &request.system {
                span.record("gen_ai.system_instructions", captured(&json!([{"type": "text", "content": system}])));
            }
            let messages: Vec<Value> = request.messages.iter().map(message).collect();
            span.record("gen_ai.input.messages", captured(&Value::Array(messages)));
        }
        Chat(span)
    }

    /// The span, for the future that asks the model and reads its answer.
    pub(crate) fn span(&self) -> Span {
        self.0.clone()
    }

    /// Records how the request ended: the answer's text and calls with the tokens the
    /// provider reported, or that it failed.
    pub(crate) fn end(self, answered: Result<(Option<Usage>, &str, Vec<&Part>), ()>) {
        let span = self.0;
        match answered {
            Ok((usage, text, calls)) => {
                if let Some(usage) = usage {
                    span.record("gen_ai.usage.input_tokens", usage.input_tokens);
                    span.record("gen_ai.usage.output_tokens", usage.output_tokens);
                }
                if capture_content() && !span.is_disabled() {
                    let mut content = vec![Part::Text { text: text.to_owned() }];
                    content.extend(calls.into_iter().cloned());
                    let answer = Message::new(Role::Assistant, content);
                    span.record("gen_ai.output.messages", captured(&json!([message(&answer)])));
                }
            }
            Err(()) => {
                span.record("otel.status_code", "error");
                span.record("error.type", "model_error");
            }
        }
    }
}

/// The span of a call of the tool `tool` (its display name), the model's call `call_id`
/// when a model made it.
pub(crate) fn tool(tool: &str, call_id: Option<&str>, arguments: &Value) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "execute_tool",
        otel.name = %format_args!("execute_tool {tool}"),
        otel.kind = "internal",
        otel.status_code = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        gen_ai.tool.type = "function",
        gen_ai.tool.call.id = call_id,
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        trellis.tool.outcome = Empty,
        error.type = Empty,
    );
    if capture_content() && !span.is_disabled() {
        span.record("gen_ai.tool.call.arguments", captured(arguments));
    }
    span
}

/// Records a tool call's first step on its span: `outcome` (`done`, `failed`, `waiting`
/// for a person or the client), and the result when content is captured.
pub(crate) fn tool_ended(span: &Span, outcome: &'static str, output: Option<&ToolOutput>) {
    span.record("trellis.tool.outcome", outcome);
    if outcome == "failed" {
        span.record("otel.status_code", "error");
        span.record("error.type", "tool_error");
    }
    if let Some(output) = output.filter(|_| capture_content() && !span.is_disabled()) {
        span.record("gen_ai.tool.call.result", captured(&output_value(output)));
    }
}

/// A message as the GenAI conventions write one: a role and typed parts. A file is named,
/// never its bytes.
fn message(message: &Message) -> Value {
    let role = match message.role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let parts: Vec<Value> = message
        .content
        .iter()
        .filter(|part| !matches!(part, Part::Text { text } if text.is_empty()))
        .map(|part| match part {
            Part::Text { text } => json!({"type": "text", "content": text}),
            Part::File(file) => json!({"type": "file", "mime_type": file.media_type, "name": file.name}),
            Part::ToolCall { id, name, input } => {
                json!({"type": "tool_call", "id": id, "name": name, "arguments": input})
            }
            Part::ToolResult { id, output, .. } => {
                json!({"type": "tool_call_response", "id": id, "response": output_value(output)})
            }
        })
        .collect();
    json!({"role": role, "parts": parts})
}

/// A tool's output as a JSON value (files named, not carried).
fn output_value(output: &ToolOutput) -> Value {
    match output {
        ToolOutput::Json(value) => value.clone(),
        ToolOutput::Text(text) => Value::String(text.clone()),
        ToolOutput::ErrorText(text) => json!({"error": text}),
        ToolOutput::Content(parts) => {
            let files: Vec<&str> = parts
                .iter()
                .filter_map(|part| match part {
                    Part::File(file) => Some(file.name.as_deref().unwrap_or(&file.media_type)),
                    _ => None,
                })
                .collect();
            match files.is_empty() {
                true => Value::String(output.as_text()),
                false => json!({"text": output.as_text(), "files": files}),
            }
        }
    }
}

/// A value as a span attribute's text, cut at [`MAX_CAPTURED`] bytes.
fn captured(value: &Value) -> String {
    let text = value.to_string();
    if text.len() <= MAX_CAPTURED {
        return text;
    }
    let cut = (0..=MAX_CAPTURED).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    format!("{}… (cut at {MAX_CAPTURED} bytes)", &text[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_string_names_its_provider_and_model() {
        assert_eq!(provider_and_model("openai:gpt-4o-mini"), ("openai", "gpt-4o-mini"));
        assert_eq!(provider_and_model("ollama:qwen3:8b"), ("ollama", "qwen3:8b"));
        assert_eq!(provider_and_model("offline"), ("offline", "offline"));
    }

    #[test]
    fn captured_content_is_cut_on_a_character_boundary() {
        let long = Value::String("é".repeat(MAX_CAPTURED));
        let text = captured(&long);
        assert!(text.len() < MAX_CAPTURED + 40 && text.ends_with("bytes)"), "{}", &text[text.len() - 30..]);
        assert_eq!(captured(&json!({"a": 1})), r#"{"a":1}"#);
    }

    #[test]
    fn messages_are_written_as_the_conventions_say_without_file_bytes() {
        let file = crate::message::FilePart {
            media_type: "image/png".into(),
            name: Some("cat.png".into()),
            size: 3,
            data: Some("AAAA".into()),
            doc: None,
        };
        let user = Message::new(Role::User, vec![Part::Text { text: "hi".into() }, Part::File(file)]);
        let written = message(&user);
        assert_eq!(written["role"], "user");
        assert_eq!(written["parts"][0], json!({"type": "text", "content": "hi"}));
        assert_eq!(written["parts"][1]["name"], "cat.png");
        assert!(!written.to_string().contains("AAAA"), "{written}");
        let result = Part::ToolResult { id: "c1".into(), name: "t".into(), output: ToolOutput::ErrorText("no".into()) };
        let tool = message(&Message::new(Role::Tool, vec![result]));
        assert_eq!(tool["parts"][0], json!({"type": "tool_call_response", "id": "c1", "response": {"error": "no"}}));
    }
}
