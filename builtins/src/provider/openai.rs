//! OpenAI-compatible chat completions (OpenAI, Ollama, llama.cpp server, vLLM), streamed.
//!
//! [`OpenAiModel`] sends the request; [`OpenAiStreamParser`] is the pure parser of the
//! `data:` payloads, usable without HTTP.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use serde_json::{json, Map, Value};

use super::http::{self, Endpoint, HttpSettings, ParseError, StreamParser};
use crate::message::{Message, Part, Role};
use crate::model::{EventStream, Model, ModelError, ModelEvent, ModelRequest, ToolChoice, ToolSpec, Usage};

/// OpenAI's API, used when `OPENAI_BASE_URL` is not set.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// Ollama's OpenAI-compatible API, used when `OLLAMA_BASE_URL` is not set.
pub const OLLAMA_BASE_URL: &str = "http://localhost:11434/v1";

/// Where and how to reach an OpenAI-compatible endpoint.
#[derive(Clone)]
pub struct OpenAiConfig {
    /// Provider name for model names and errors (`openai`, `ollama`).
    pub provider: String,
    /// Base URL up to and including the version (`https://api.openai.com/v1`); the
    /// adapter appends `/chat/completions`.
    pub base_url: String,
    /// Sent as `Authorization: Bearer ...` when present.
    pub api_key: Option<String>,
    /// The model name the endpoint knows (`gpt-4o`, `llama3.2`).
    pub model: String,
    /// The request field carrying [`ModelRequest::max_tokens`]: OpenAI wants
    /// `max_completion_tokens`, most compatible servers `max_tokens`.
    pub max_tokens_field: String,
    /// Timeouts and retries.
    pub http: HttpSettings,
}

impl std::fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("max_tokens_field", &self.max_tokens_field)
            .field("http", &self.http)
            .finish()
    }
}

impl OpenAiConfig {
    /// OpenAI (or any compatible server at `OPENAI_BASE_URL`), keyed by
    /// `OPENAI_API_KEY`; `env` looks variables up (pass `|v| std::env::var(v).ok()`).
    pub fn openai(model: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Self, ModelError> {
        let api_key = non_empty(env("OPENAI_API_KEY")).ok_or_else(|| ModelError::MissingKey {
            var: "OPENAI_API_KEY".to_string(),
            provider: "openai".to_string(),
        })?;
        let base_url = non_empty(env("OPENAI_BASE_URL")).unwrap_or_else(|| OPENAI_BASE_URL.to_string());
        // Only OpenAI itself insists on the newer field; compatible servers know `max_tokens`.
        let max_tokens_field =
            if base_url.trim_end_matches('/') == OPENAI_BASE_URL { "max_completion_tokens" } else { "max_tokens" };
        Ok(OpenAiConfig {
            provider: "openai".to_string(),
            base_url,
            api_key: Some(api_key),
            model: model.to_string(),
            max_tokens_field: max_tokens_field.to_string(),
            http: HttpSettings::default(),
        })
    }

    /// A local Ollama at `OLLAMA_BASE_URL` (default [`OLLAMA_BASE_URL`]); no key needed.
    pub fn ollama(model: &str, env: &dyn Fn(&str) -> Option<String>) -> Self {
        OpenAiConfig {
            provider: "ollama".to_string(),
            base_url: non_empty(env("OLLAMA_BASE_URL")).unwrap_or_else(|| OLLAMA_BASE_URL.to_string()),
            api_key: None,
            model: model.to_string(),
            max_tokens_field: "max_tokens".to_string(),
            http: HttpSettings::default(),
        }
    }
}

fn non_empty(value: Option<String>) -> Option<String> {
    value.map(|v| v.trim().to_string()).filter(|v| !v.is_empty())
}

/// A model behind an OpenAI-compatible chat-completions endpoint.
#[derive(Debug, Clone)]
pub struct OpenAiModel {
    config: OpenAiConfig,
    client: reqwest::Client,
}

impl OpenAiModel {
    /// A model using `config`.
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelError> {
        let client = http::client(&config.provider, &config.http)?;
        Ok(OpenAiModel { config, client })
    }

    /// The configuration in use.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    async fn start(&self, request: ModelRequest) -> Result<EventStream, ModelError> {
        let body = request_body(&self.config.model, &self.config.max_tokens_field, &request);
        let url = format!("{}/chat/completions", self.config.base_url.trim_end_matches('/'));
        let endpoint = Endpoint { provider: self.config.provider.clone(), model: self.name(), url: url.clone() };
        let make = || {
            let builder = self.client.post(&url).header(reqwest::header::ACCEPT, "text/event-stream").json(&body);
            match &self.config.api_key {
                Some(key) => builder.bearer_auth(key),
                None => builder,
            }
        };
        http::answer(endpoint, &self.config.http, make, OpenAiStreamParser::new()).await
    }
}

impl Model for OpenAiModel {
    fn name(&self) -> String {
        format!("{}:{}", self.config.provider, self.config.model)
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> Pin<Box<dyn Future<Output = Result<EventStream, ModelError>> + Send + '_>> {
        Box::pin(self.start(request))
    }
}

/// The JSON body of a streamed chat-completions request.
///
/// It asks for the token usage (`stream_options.include_usage`: OpenAI, Ollama, vLLM and
/// llama.cpp send it in a last chunk). `tool_choice` is sent only when it is not the
/// default (`auto`), and only with tools, so servers that do not know the field keep
/// working.
pub fn request_body(model: &str, max_tokens_field: &str, request: &ModelRequest) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = request.system.as_deref().filter(|s| !s.trim().is_empty()) {
        messages.push(json!({"role": "system", "content": system}));
    }
    for message in &request.messages {
        translate_message(message, &mut messages);
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        body.insert("tools".into(), request.tools.iter().map(tool_json).collect());
        if let Some(choice) = tool_choice_json(&request.tool_choice) {
            body.insert("tool_choice".into(), choice);
        }
    }
    if let Some(max_tokens) = request.max_tokens {
        body.insert(max_tokens_field.to_string(), json!(max_tokens));
    }
    Value::Object(body)
}

/// `tool_choice` as the chat-completions API says it; nothing for the default.
fn tool_choice_json(choice: &ToolChoice) -> Option<Value> {
    match choice {
        ToolChoice::Auto => None,
        ToolChoice::None => Some(json!("none")),
        ToolChoice::Required => Some(json!("required")),
        ToolChoice::Tool(name) => Some(json!({"type": "function", "function": {"name": name}})),
    }
}

fn tool_json(tool: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.input_schema,
        }
    })
}

/// Appends the wire messages for `message`: a message's text parts become one `content`
/// string (empty text is dropped), tool calls become `tool_calls`, and every tool result
/// becomes its own `role: tool` message.
fn translate_message(message: &Message, out: &mut Vec<Value>) {
    let text: String = message
        .content
        .iter()
        .filter_map(|part| match part {
            Part::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    let has_text = !text.trim().is_empty();
    let tool_calls: Vec<Value> = message
        .content
        .iter()
        .filter_map(|part| match part {
            Part::ToolCall { id, name, input } => Some(json!({
                "id": id,
                "type": "function",
                "function": {"name": name, "arguments": arguments_string(input)},
            })),
            _ => None,
        })
        .collect();
    match message.role {
        Role::Assistant => {
            if has_text || !tool_calls.is_empty() {
                let mut wire = Map::new();
                wire.insert("role".into(), json!("assistant"));
                wire.insert("content".into(), if has_text { json!(text) } else { Value::Null });
                if !tool_calls.is_empty() {
                    wire.insert("tool_calls".into(), Value::Array(tool_calls));
                }
                out.push(Value::Object(wire));
            }
        }
        Role::User | Role::Tool => {
            // Results first: they must directly follow the assistant's calls.
            for part in &message.content {
                if let Part::ToolResult { id, output, .. } = part {
                    out.push(json!({
                        "role": "tool",
                        "tool_call_id": id,
                        "content": http::tool_output_text(output, true),
                    }));
                }
            }
            if has_text {
                out.push(json!({"role": "user", "content": text}));
            }
        }
    }
}

/// Arguments as OpenAI wants them: a JSON string. A raw string (arguments the model
/// sent that were not JSON) goes back exactly as the model wrote it.
fn arguments_string(input: &Value) -> String {
    match input {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

/// Pure parser of an OpenAI-compatible chat-completions stream.
///
/// Feed it each SSE `data:` payload with [`OpenAiStreamParser::push_data`]. Tool calls
/// are keyed by their `index` (which need not start at 0), their arguments concatenated
/// and parsed when the choice finishes; they are emitted then, in index order.
///
/// [`ModelEvent::Finish`] comes once, with the token usage when the server reports it:
/// at the finish chunk if it carries the usage (llama.cpp), else at the usage chunk that
/// follows it (OpenAI, with empty `choices`), else at `[DONE]` or the end of the body.
///
/// ```
/// use trellis_builtins::model::{ModelEvent, Usage};
/// use trellis_builtins::provider::openai::OpenAiStreamParser;
///
/// let mut parser = OpenAiStreamParser::new();
/// let events = parser
///     .push_data(r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}"#)
///     .unwrap();
/// assert_eq!(events, vec![ModelEvent::TextDelta("Hi".into())]);
/// let events =
///     parser.push_data(r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1}}"#).unwrap();
/// let usage = Some(Usage { input_tokens: 9, output_tokens: 1 });
/// assert_eq!(events, vec![ModelEvent::Finish { reason: "stop".into(), usage }]);
/// ```
#[derive(Debug, Default)]
pub struct OpenAiStreamParser {
    calls: BTreeMap<u64, PendingCall>,
    /// The key of the call the last fragment went to, for servers that omit `index`.
    last_key: Option<u64>,
    /// Why the choice finished, once it has: its tool calls are out, `Finish` may wait
    /// for the usage.
    reason: Option<String>,
    /// The latest token usage the server reported.
    usage: Option<Usage>,
    /// `Finish` is out.
    finished: bool,
    /// `[DONE]` arrived.
    done: bool,
}

#[derive(Debug, Default)]
struct PendingCall {
    /// The `index` the server used (keys can differ when a server reuses an index).
    index: u64,
    id: Option<String>,
    name: String,
    arguments: String,
}

impl OpenAiStreamParser {
    /// A parser at the start of an answer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Handles one `data:` payload (a JSON chunk or `[DONE]`).
    pub fn push_data(&mut self, data: &str) -> Result<Vec<ModelEvent>, ParseError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            let mut events = self.end_choice("stop")?;
            events.extend(self.finish_event());
            return Ok(events);
        }
        if data.is_empty() {
            return Ok(Vec::new());
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| ParseError::Malformed(format!("chunk is not JSON ({e}): {}", http::truncate(data, 200))))?;
        if let Some(error) = chunk.get("error") {
            return Err(ParseError::Provider(provider_error_text(error)));
        }
        if !chunk.is_object() {
            return Err(ParseError::Malformed(format!("chunk is not a JSON object: {}", http::truncate(data, 200))));
        }
        if let Some(usage) = usage(chunk.get("usage")) {
            self.usage = Some(usage);
        }
        let mut events = Vec::new();
        // After the finish only the usage counts: some servers send more chunks for the
        // choice (Azure's content filter results).
        if let Some(choice) = first_choice(&chunk).filter(|_| self.reason.is_none()) {
            events.extend(self.choice_delta(choice)?);
        }
        if self.usage.is_some() {
            events.extend(self.finish_event());
        }
        Ok(events)
    }

    /// The events of one chunk's choice.
    fn choice_delta(&mut self, choice: &Value) -> Result<Vec<ModelEvent>, ParseError> {
        let mut events = Vec::new();
        if let Some(delta) = choice.get("delta").filter(|d| d.is_object()) {
            for field in ["content", "refusal"] {
                if let Some(text) = delta.get(field).and_then(Value::as_str).filter(|t| !t.is_empty()) {
                    events.push(ModelEvent::TextDelta(text.to_string()));
                }
            }
            match delta.get("tool_calls") {
                None | Some(Value::Null) => {}
                Some(Value::Array(calls)) => {
                    for call in calls {
                        self.tool_call_delta(call)?;
                    }
                }
                Some(other) => return Err(ParseError::Malformed(format!("`tool_calls` is not an array: {other}"))),
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            events.extend(self.end_choice(reason)?);
        }
        Ok(events)
    }

    fn tool_call_delta(&mut self, call: &Value) -> Result<(), ParseError> {
        if !call.is_object() {
            return Err(ParseError::Malformed(format!("tool call delta is not an object: {call}")));
        }
        let id = call.get("id").and_then(Value::as_str).filter(|id| !id.is_empty());
        let key = match call.get("index").and_then(Value::as_u64) {
            Some(index) => {
                // Some servers reuse one index for parallel calls: a new id there is a new call.
                let existing =
                    self.calls.iter().rev().find(|(_, c)| c.index == index).map(|(key, c)| (*key, c.id.clone()));
                match (existing, id) {
                    (Some((_, Some(old))), Some(new)) if old != new => self.next_key(index),
                    (Some((key, _)), _) => key,
                    (None, _) => self.new_key(index),
                }
            }
            None => match (self.last_key, id) {
                (Some(key), None) => key,
                (Some(key), Some(new)) if self.calls.get(&key).and_then(|c| c.id.as_deref()) == Some(new) => key,
                _ => {
                    let index = self.calls.keys().next_back().map_or(0, |k| k.saturating_add(1));
                    self.new_key(index)
                }
            },
        };
        self.last_key = Some(key);
        let pending = self.calls.entry(key).or_default();
        if let Some(id) = id {
            pending.id.get_or_insert_with(|| id.to_string());
        }
        if let Some(function) = call.get("function").filter(|f| f.is_object()) {
            if let Some(name) = function.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
                pending.name = name.to_string();
            }
            match function.get("arguments") {
                None | Some(Value::Null) => {}
                Some(Value::String(fragment)) => pending.arguments.push_str(fragment),
                // A few servers send the arguments as an object rather than a string.
                Some(other) => pending.arguments.push_str(&other.to_string()),
            }
        }
        Ok(())
    }

    /// A fresh key for a call the server gave `index`; keys keep the server's order.
    fn new_key(&mut self, index: u64) -> u64 {
        if self.calls.contains_key(&index) {
            return self.next_key(index);
        }
        self.calls.insert(index, PendingCall { index, ..PendingCall::default() });
        index
    }

    /// A key after every key in use (for a second call reusing an index).
    fn next_key(&mut self, index: u64) -> u64 {
        let key = self.calls.keys().next_back().map_or(index, |k| k.saturating_add(1).max(index));
        self.calls.insert(key, PendingCall { index, ..PendingCall::default() });
        key
    }

    /// Ends the choice for `reason`: emits the tool calls, once.
    fn end_choice(&mut self, reason: &str) -> Result<Vec<ModelEvent>, ParseError> {
        if self.reason.is_some() {
            return Ok(Vec::new());
        }
        let mut events = Vec::new();
        for (key, call) in std::mem::take(&mut self.calls) {
            if call.name.is_empty() {
                return Err(ParseError::Malformed(format!("tool call {} has no function name", call.index)));
            }
            events.push(ModelEvent::ToolCall {
                id: call.id.unwrap_or_else(|| format!("call_{key}")),
                name: call.name,
                input: http::parse_arguments(&call.arguments),
            });
        }
        // Some servers (older Ollama) say `stop` after calling tools.
        let reason = if !events.is_empty() && reason == "stop" { "tool_calls" } else { reason };
        self.reason = Some(reason.to_string());
        Ok(events)
    }

    /// `Finish`, once, when the choice has ended.
    fn finish_event(&mut self) -> Option<ModelEvent> {
        if self.finished {
            return None;
        }
        let reason = self.reason.clone()?;
        self.finished = true;
        Some(ModelEvent::Finish { reason, usage: self.usage })
    }
}

impl StreamParser for OpenAiStreamParser {
    fn push(&mut self, event: &str, data: &str) -> Result<Vec<ModelEvent>, ParseError> {
        if event == "error" {
            return Err(ParseError::Provider(provider_error_text(
                &serde_json::from_str(data).unwrap_or_else(|_| json!(data)),
            )));
        }
        self.push_data(data)
    }

    fn finish(&mut self) -> Result<Vec<ModelEvent>, ParseError> {
        if self.reason.is_some() {
            // The usage did not come, or the body ended without `[DONE]`.
            Ok(self.finish_event().into_iter().collect())
        } else {
            Err(ParseError::Malformed(
                "the stream ended before the answer was finished (no finish_reason or [DONE])".into(),
            ))
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

/// The token usage of a chunk's `usage` object (`null` in most chunks).
fn usage(usage: Option<&Value>) -> Option<Usage> {
    let usage = usage?;
    let count = |field: &str| usage.get(field).and_then(Value::as_u64);
    let (input, output) = (count("prompt_tokens"), count("completion_tokens"));
    (input.is_some() || output.is_some())
        .then(|| Usage { input_tokens: input.unwrap_or(0), output_tokens: output.unwrap_or(0) })
}

fn first_choice(chunk: &Value) -> Option<&Value> {
    let choices = chunk.get("choices")?.as_array()?;
    choices.iter().find(|c| c.get("index").and_then(Value::as_u64) == Some(0)).or_else(|| choices.first())
}

/// The message of an `error` value inside a stream: a string or `{message, type, code}`.
fn provider_error_text(error: &Value) -> String {
    if let Some(text) = error.as_str() {
        return text.to_string();
    }
    let error = error.get("error").unwrap_or(error);
    if let Some(text) = error.as_str() {
        return text.to_string();
    }
    let message = error.get("message").and_then(Value::as_str).unwrap_or("unknown error");
    match error.get("type").and_then(Value::as_str) {
        Some(kind) => format!("{kind}: {message}"),
        None => message.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests {
    use super::*;
    use crate::message::ToolOutput;
    use crate::provider::http::test_support::{self, tool_round};

    fn chunk(delta: Value, finish: Option<&str>) -> String {
        json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).to_string()
    }

    fn call_fragment(index: u64, id: Option<&str>, name: Option<&str>, args: &str) -> String {
        let mut function = json!({"arguments": args});
        if let Some(name) = name {
            function["name"] = json!(name);
        }
        let mut call = json!({"index": index, "function": function});
        if let Some(id) = id {
            call["id"] = json!(id);
            call["type"] = json!("function");
        }
        chunk(json!({"tool_calls": [call]}), None)
    }

    fn run(payloads: &[String]) -> Result<Vec<ModelEvent>, ParseError> {
        test_support::run(OpenAiStreamParser::new(), payloads)
    }

    #[test]
    fn arguments_split_at_every_offset() {
        let args = r#"{"path": "dir/ä ö.txt", "lines": [1, 2], "deep": {"x": null}}"#;
        let expected: Value = serde_json::from_str(args).unwrap();
        for cut in 0..=args.len() {
            if !args.is_char_boundary(cut) {
                // Each fragment is a JSON string, so a split is always between characters.
                continue;
            }
            let (a, b) = args.split_at(cut);
            let events = run(&[
                call_fragment(1, Some("call_a"), Some("read_file"), ""),
                call_fragment(1, None, None, a),
                call_fragment(1, None, None, b),
                chunk(json!({}), Some("tool_calls")),
                "[DONE]".to_string(),
            ])
            .unwrap();
            assert_eq!(
                events,
                vec![
                    ModelEvent::ToolCall { id: "call_a".into(), name: "read_file".into(), input: expected.clone() },
                    ModelEvent::Finish { reason: "tool_calls".into(), usage: None },
                ],
                "split at {cut}"
            );
        }
    }

    #[test]
    fn every_byte_split_in_three() {
        let args = r#"{"a":"bc","d":[1]}"#;
        let expected: Value = serde_json::from_str(args).unwrap();
        for i in 0..=args.len() {
            for j in i..=args.len() {
                let events = run(&[
                    call_fragment(0, Some("c"), Some("t"), &args[..i]),
                    call_fragment(0, None, None, &args[i..j]),
                    call_fragment(0, None, None, &args[j..]),
                    chunk(json!({}), Some("tool_calls")),
                ])
                .unwrap();
                assert_eq!(
                    events[0],
                    ModelEvent::ToolCall { id: "c".into(), name: "t".into(), input: expected.clone() }
                );
            }
        }
    }

    #[test]
    fn parallel_calls_interleaved_keep_index_order() {
        let events = run(&[
            chunk(json!({"content": "Two things."}), None),
            call_fragment(0, Some("id0"), Some("first"), "{\"a\":"),
            call_fragment(1, Some("id1"), Some("second"), ""),
            call_fragment(1, None, None, "{\"b\":2}"),
            call_fragment(0, None, None, "1}"),
            chunk(json!({}), Some("tool_calls")),
            "[DONE]".into(),
        ])
        .unwrap();
        assert_eq!(
            events,
            vec![
                ModelEvent::TextDelta("Two things.".into()),
                ModelEvent::ToolCall { id: "id0".into(), name: "first".into(), input: json!({"a": 1}) },
                ModelEvent::ToolCall { id: "id1".into(), name: "second".into(), input: json!({"b": 2}) },
                ModelEvent::Finish { reason: "tool_calls".into(), usage: None },
            ]
        );
    }

    #[test]
    fn empty_and_bad_arguments() {
        let events = run(&[
            call_fragment(0, Some("a"), Some("none"), ""),
            call_fragment(1, Some("b"), Some("bad"), "{\"unclosed\": "),
            chunk(json!({}), Some("tool_calls")),
        ])
        .unwrap();
        assert_eq!(events[0], ModelEvent::ToolCall { id: "a".into(), name: "none".into(), input: json!({}) });
        assert_eq!(
            events[1],
            ModelEvent::ToolCall { id: "b".into(), name: "bad".into(), input: json!("{\"unclosed\": ") }
        );
    }

    #[test]
    fn reused_index_with_new_id_is_a_new_call() {
        let events = run(&[
            call_fragment(0, Some("a"), Some("one"), "{}"),
            call_fragment(0, Some("b"), Some("two"), "{\"x\":1}"),
            chunk(json!({}), Some("stop")),
        ])
        .unwrap();
        assert_eq!(events.len(), 3);
        assert_eq!(events[1], ModelEvent::ToolCall { id: "b".into(), name: "two".into(), input: json!({"x": 1}) });
        // `stop` after tool calls is reported as `tool_calls`.
        assert_eq!(events[2], ModelEvent::Finish { reason: "tool_calls".into(), usage: None });
    }

    #[test]
    fn missing_index_appends_to_the_last_call() {
        let calls = |call: Value| chunk(json!({"tool_calls": [call]}), None);
        let events = run(&[
            calls(json!({"id": "x", "function": {"name": "f", "arguments": "{\"k\""}})),
            calls(json!({"function": {"arguments": ":true}"}})),
            calls(json!({"id": "y", "function": {"name": "g", "arguments": "{}"}})),
            "[DONE]".into(),
        ])
        .unwrap();
        assert_eq!(events[0], ModelEvent::ToolCall { id: "x".into(), name: "f".into(), input: json!({"k": true}) });
        assert_eq!(events[1], ModelEvent::ToolCall { id: "y".into(), name: "g".into(), input: json!({}) });
        assert_eq!(events[2], ModelEvent::Finish { reason: "tool_calls".into(), usage: None });
    }

    #[test]
    fn errors_and_truncation() {
        assert!(matches!(run(&["{not json".into()]), Err(ParseError::Malformed(_))));
        assert!(matches!(run(&["[1,2]".into()]), Err(ParseError::Malformed(_))));
        assert_eq!(
            run(&[json!({"error": {"message": "overloaded", "type": "server_error"}}).to_string()]),
            Err(ParseError::Provider("server_error: overloaded".into()))
        );
        assert!(matches!(run(&[chunk(json!({"content": "cut"}), None)]), Err(ParseError::Malformed(_))));
        assert!(matches!(
            run(&[call_fragment(0, Some("a"), None, "{}"), "[DONE]".into()]),
            Err(ParseError::Malformed(_))
        ));
    }

    fn usage_chunk(prompt: u64, completion: u64) -> String {
        json!({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
            .to_string()
    }

    /// Each payload's events, one list per payload, then those of the end of the body.
    fn run_stepwise(payloads: &[String]) -> Vec<Vec<ModelEvent>> {
        let mut parser = OpenAiStreamParser::new();
        let mut steps: Vec<_> = payloads.iter().map(|p| parser.push("message", p).unwrap()).collect();
        steps.push(parser.finish().unwrap());
        steps
    }

    #[test]
    fn finish_comes_once_with_the_usage_that_follows_it() {
        let finish = |usage| ModelEvent::Finish { reason: "stop".into(), usage };
        let counted = Some(Usage { input_tokens: 15, output_tokens: 5 });
        let mut stop = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": null});
        let text = chunk(json!({"content": "ok"}), None);
        // OpenAI and Azure: `usage: null` on every chunk, the finish, a chunk for the
        // choice after it (Azure's content filter results), the usage with no choices.
        let late_choice = json!({"choices": [{"index": 0, "finish_reason": null, "content_filter_results": {}}]});
        let steps = run_stepwise(&[
            text.clone(),
            stop.to_string(),
            late_choice.to_string(),
            usage_chunk(15, 5),
            "[DONE]".into(),
        ]);
        assert_eq!(
            steps,
            vec![vec![ModelEvent::TextDelta("ok".into())], vec![], vec![], vec![finish(counted)], vec![], vec![]]
        );
        // llama.cpp: the usage on the finish chunk itself.
        stop["usage"] = json!({"prompt_tokens": 15, "completion_tokens": 5});
        let steps = run_stepwise(&[stop.to_string(), "[DONE]".into()]);
        assert_eq!(steps, vec![vec![finish(counted)], vec![], vec![]]);
        // No usage: `[DONE]` right after the finish, or the end of the body.
        stop["usage"] = Value::Null;
        assert_eq!(run_stepwise(&[stop.to_string(), "[DONE]".into()]), vec![vec![], vec![finish(None)], vec![]]);
        assert_eq!(run_stepwise(&[stop.to_string()]), vec![vec![], vec![finish(None)]]);
        // Tool calls come at the finish, the usage does not hold them back.
        let steps = run_stepwise(&[
            call_fragment(0, Some("c"), Some("t"), "{}"),
            chunk(json!({}), Some("tool_calls")),
            usage_chunk(7, 3),
        ]);
        assert_eq!(
            steps,
            vec![
                vec![],
                vec![ModelEvent::ToolCall { id: "c".into(), name: "t".into(), input: json!({}) }],
                vec![ModelEvent::Finish {
                    reason: "tool_calls".into(),
                    usage: Some(Usage { input_tokens: 7, output_tokens: 3 })
                }],
                vec![],
            ]
        );
    }

    #[test]
    fn tool_choice_is_sent_only_when_it_says_something() {
        let tool = ToolSpec::new("Counter_increment", "Counter.increment", "Adds one", json!({"type": "object"}));
        let body = |tools: Vec<ToolSpec>, tool_choice| {
            request_body("m", "max_tokens", &ModelRequest { tools, tool_choice, ..ModelRequest::default() })
        };
        let cases = [
            (ToolChoice::Auto, None),
            (ToolChoice::None, Some(json!("none"))),
            (ToolChoice::Required, Some(json!("required"))),
            (
                ToolChoice::Tool("Counter_increment".into()),
                Some(json!({"type": "function", "function": {"name": "Counter_increment"}})),
            ),
        ];
        for (choice, expected) in cases {
            assert_eq!(body(vec![tool.clone()], choice.clone()).get("tool_choice"), expected.as_ref(), "{choice:?}");
            assert_eq!(body(Vec::new(), choice.clone()).get("tool_choice"), None, "{choice:?} without tools");
        }
    }

    #[test]
    fn body_translates_messages() {
        let [calls, results] = tool_round(vec![
            ("c1", "read_file", json!({"path": "a.txt"}), ToolOutput::Json(json!({"text": "hi"}))),
            ("c2", "oops", json!("{bad"), ToolOutput::ErrorText("unknown tool".into())),
        ]);
        let request = ModelRequest {
            system: Some("Be brief.".into()),
            messages: vec![
                Message::user("Read a.txt"),
                calls,
                results,
                Message::new(Role::Assistant, vec![Part::Text { text: String::new() }]),
                Message::assistant("It says hi."),
            ],
            tools: vec![ToolSpec {
                name: "read_file".into(),
                display_name: "read_file".into(),
                description: "Reads a file".into(),
                input_schema: json!({"type": "object"}).into(),
            }],
            max_tokens: Some(50),
            tool_choice: Default::default(),
        };
        let body = request_body("m", "max_tokens", &request);
        assert_eq!(
            body,
            json!({
                "model": "m",
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_tokens": 50,
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Read a.txt"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}},
                        {"id": "c2", "type": "function", "function": {"name": "oops", "arguments": "{bad"}},
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "{\"text\":\"hi\"}"},
                    {"role": "tool", "tool_call_id": "c2", "content": "Error: unknown tool"},
                    {"role": "assistant", "content": "It says hi."},
                ],
                "tools": [{"type": "function", "function": {
                    "name": "read_file", "description": "Reads a file", "parameters": {"type": "object"}
                }}],
            })
        );
    }
}
