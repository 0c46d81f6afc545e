//! Anthropic Messages API, streamed.
//!
//! [`AnthropicModel`] sends the request; [`AnthropicStreamParser`] is the pure parser of
//! the stream's events, usable without HTTP.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use serde_json::{json, Map, Value};

use super::http::{self, truncate, Endpoint, HttpSettings, ParseError, StreamParser};
use crate::message::{Message, Part, Role};
use crate::model::{EventStream, Model, ModelError, ModelEvent, ModelRequest, ToolChoice, Usage};
use crate::structured::RESULT_TOOL;

/// Anthropic's API, used when `ANTHROPIC_BASE_URL` is not set.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com";
/// The API version header this adapter speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Where and how to reach the Anthropic Messages API.
#[derive(Clone)]
pub struct AnthropicConfig {
    /// Base URL without the version (`https://api.anthropic.com`); the adapter appends
    /// `/v1/messages`.
    pub base_url: String,
    /// Sent as `x-api-key`.
    pub api_key: String,
    /// The model name (`claude-sonnet-4-5`).
    pub model: String,
    /// `max_tokens` when the request has none (the API requires one).
    pub default_max_tokens: u32,
    /// Timeouts and retries.
    pub http: HttpSettings,
}

impl std::fmt::Debug for AnthropicConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &"<redacted>")
            .field("model", &self.model)
            .field("default_max_tokens", &self.default_max_tokens)
            .field("http", &self.http)
            .finish()
    }
}

impl AnthropicConfig {
    /// Keyed by `ANTHROPIC_API_KEY`, at `ANTHROPIC_BASE_URL` (default
    /// [`ANTHROPIC_BASE_URL`]); `env` looks variables up.
    pub fn from_env(model: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Self, ModelError> {
        let non_empty = |var: &str| env(var).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let api_key = non_empty("ANTHROPIC_API_KEY").ok_or_else(|| ModelError::MissingKey {
            var: "ANTHROPIC_API_KEY".to_string(),
            provider: "anthropic".to_string(),
        })?;
        Ok(AnthropicConfig {
            base_url: non_empty("ANTHROPIC_BASE_URL").unwrap_or_else(|| ANTHROPIC_BASE_URL.to_string()),
            api_key,
            model: model.to_string(),
            default_max_tokens: 4096,
            http: HttpSettings::default(),
        })
    }
}

/// A Claude model behind the Anthropic Messages API.
#[derive(Debug, Clone)]
pub struct AnthropicModel {
    config: AnthropicConfig,
    client: reqwest::Client,
}

impl AnthropicModel {
    /// A model using `config`.
    pub fn new(config: AnthropicConfig) -> Result<Self, ModelError> {
        let client = http::client("anthropic", &config.http)?;
        Ok(AnthropicModel { config, client })
    }

    /// The configuration in use.
    pub fn config(&self) -> &AnthropicConfig {
        &self.config
    }

    async fn start(&self, request: ModelRequest) -> Result<EventStream, ModelError> {
        let body = request_body(&self.config.model, self.config.default_max_tokens, &request);
        let url = format!("{}/v1/messages", self.config.base_url.trim_end_matches('/'));
        let endpoint = Endpoint { provider: "anthropic".to_string(), model: self.name(), url: url.clone() };
        let make = || {
            self.client
                .post(&url)
                .header("x-api-key", &self.config.api_key)
                .header("anthropic-version", ANTHROPIC_VERSION)
                .header(reqwest::header::ACCEPT, "text/event-stream")
                .json(&body)
        };
        http::answer(endpoint, &self.config.http, make, AnthropicStreamParser::new()).await
    }
}

impl Model for AnthropicModel {
    fn name(&self) -> String {
        format!("anthropic:{}", self.config.model)
    }

    fn context_window(&self) -> Option<u64> {
        super::known_context_window(&self.config.model)
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> Pin<Box<dyn Future<Output = Result<EventStream, ModelError>> + Send + '_>> {
        Box::pin(self.start(request))
    }
}

/// The JSON body of a streamed Messages request; `tool_choice` is sent only with tools,
/// and not for the default (`auto`).
pub fn request_body(model: &str, default_max_tokens: u32, request: &ModelRequest) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert("max_tokens".into(), json!(request.max_tokens.unwrap_or(default_max_tokens)));
    body.insert("stream".into(), json!(true));
    if let Some(system) = request.system.as_deref().filter(|s| !s.trim().is_empty()) {
        body.insert("system".into(), json!(system));
    }
    body.insert("messages".into(), Value::Array(translate_messages(&request.messages)));
    let mut tools: Vec<Value> = request
        .tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
        .collect();
    let mut choice = tool_choice_json(&request.tool_choice);
    if let Some(result) = &request.result {
        // The model ends by calling this tool with the value (see `crate::structured`):
        // it must call a tool each time, this one last.
        tools.push(json!({
            "name": RESULT_TOOL,
            "description": "Give your final answer: call this once, last, with the value asked for.",
            "input_schema": result.object_schema(),
        }));
        choice = Some(match request.tool_choice {
            ToolChoice::None => json!({"type": "tool", "name": RESULT_TOOL}),
            ToolChoice::Tool(_) => choice.unwrap_or_else(|| json!({"type": "any"})),
            ToolChoice::Auto | ToolChoice::Required => json!({"type": "any"}),
        });
    }
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
        if let Some(choice) = choice {
            body.insert("tool_choice".into(), choice);
        }
    }
    Value::Object(body)
}

/// `tool_choice` as the Messages API says it; nothing for the default.
fn tool_choice_json(choice: &ToolChoice) -> Option<Value> {
    match choice {
        ToolChoice::Auto => None,
        ToolChoice::None => Some(json!({"type": "none"})),
        ToolChoice::Required => Some(json!({"type": "any"})),
        ToolChoice::Tool(name) => Some(json!({"type": "tool", "name": name})),
    }
}

/// A file as a content block: an image or document block, or a text block.
fn file_block(file: &crate::message::FilePart) -> Value {
    match http::file_form(file) {
        http::FileForm::Image { media_type, data } => {
            json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}})
        }
        http::FileForm::Pdf { data } => {
            json!({"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": data}})
        }
        http::FileForm::Text(text) => json!({"type": "text", "text": text}),
    }
}

/// Our messages as Anthropic turns: tool results go in user turns as `tool_result`
/// blocks (before any text, as the API requires), consecutive turns of one role are
/// merged, empty text is dropped and turns left empty are skipped.
fn translate_messages(messages: &[Message]) -> Vec<Value> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in messages {
        let role = match message.role {
            Role::Assistant => "assistant",
            Role::User | Role::Tool => "user",
        };
        let mut blocks = Vec::new();
        for part in &message.content {
            match part {
                Part::Text { text } if text.trim().is_empty() => {}
                Part::Text { text } => blocks.push(json!({"type": "text", "text": text})),
                Part::File(file) => blocks.push(file_block(file)),
                Part::ToolCall { id, name, input } => {
                    blocks.push(json!({"type": "tool_use", "id": id, "name": name, "input": input_object(input)}))
                }
                Part::ToolResult { id, output, .. } => {
                    let content = match output {
                        // Text and files, as blocks: a result may carry images and documents.
                        crate::message::ToolOutput::Content(parts) => {
                            let text = json!([{"type": "text", "text": http::tool_output_text(output, false)}]);
                            let files = parts.iter().filter_map(|part| match part {
                                Part::File(file) => Some(file_block(file)),
                                _ => None,
                            });
                            Value::Array(text.as_array().into_iter().flatten().cloned().chain(files).collect())
                        }
                        _ => json!(http::tool_output_text(output, false)),
                    };
                    let mut block = json!({"type": "tool_result", "tool_use_id": id, "content": content});
                    if matches!(output, crate::message::ToolOutput::ErrorText(_)) {
                        block["is_error"] = json!(true);
                    }
                    blocks.push(block);
                }
            }
        }
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, mut blocks)| {
            if role == "user" {
                // Stable: results keep their order, text keeps its order after them.
                blocks.sort_by_key(|b| b.get("type").and_then(Value::as_str) != Some("tool_result"));
            }
            json!({"role": role, "content": blocks})
        })
        .collect()
}

/// `tool_use.input` must be an object: anything else (arguments that were not JSON) is
/// wrapped so the model still sees what it sent.
fn input_object(input: &Value) -> Value {
    match input {
        Value::Object(_) => input.clone(),
        other => json!({"value": other}),
    }
}

/// Pure parser of an Anthropic Messages stream.
///
/// Feed it each event's JSON payload with [`AnthropicStreamParser::push_data`] (the
/// payload's `type` names the event, so the SSE `event:` line is not needed); the
/// message's events must follow its one `message_start`. Text
/// deltas come out as they arrive; a tool call comes out at its `content_block_stop`
/// with its `input_json_delta` fragments concatenated and parsed; `message_stop` ends
/// the answer with [`ModelEvent::Finish`], whose reason uses the common vocabulary
/// (`end_turn` → `stop`, `tool_use` → `tool_calls`, `max_tokens` → `length`) and the
/// token usage: the input counted in `message_start` (cache reads and writes included,
/// which Anthropic counts apart), the output in the last `message_delta`.
///
/// ```
/// use trellis_builtins::model::ModelEvent;
/// use trellis_builtins::provider::anthropic::AnthropicStreamParser;
///
/// let mut parser = AnthropicStreamParser::new();
/// let mut events = Vec::new();
/// for data in [
///     r#"{"type":"message_start","message":{}}"#,
///     r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"add","input":{}}}"#,
///     r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
///     r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"1}"}}"#,
///     r#"{"type":"content_block_stop","index":0}"#,
/// ] {
///     events.extend(parser.push_data(data).unwrap());
/// }
/// assert_eq!(
///     events,
///     vec![ModelEvent::ToolCall { id: "t1".into(), name: "add".into(), input: serde_json::json!({"a": 1}) }]
/// );
/// ```
#[derive(Debug, Default)]
pub struct AnthropicStreamParser {
    tool_blocks: BTreeMap<u64, ToolBlock>,
    /// How many tool_use blocks the message started (see [`crate::model::MAX_TOOL_CALLS`]).
    calls_started: usize,
    stop_reason: Option<String>,
    usage: TokenCounts,
    calls_emitted: bool,
    /// `message_start` came: the message's content and end may follow.
    started: bool,
    done: bool,
}

/// The token counts of a Messages stream so far; each event's `usage` holds running
/// totals, so the latest value of a field is the one that counts.
#[derive(Debug, Default)]
struct TokenCounts {
    input: u64,
    cache_write: u64,
    cache_read: u64,
    output: u64,
    seen: bool,
}

impl TokenCounts {
    /// Takes the counts present in a `usage` object.
    fn update(&mut self, usage: Option<&Value>) {
        let Some(usage) = usage.filter(|u| u.is_object()) else {
            return;
        };
        for (field, count) in [
            ("input_tokens", &mut self.input),
            ("cache_creation_input_tokens", &mut self.cache_write),
            ("cache_read_input_tokens", &mut self.cache_read),
            ("output_tokens", &mut self.output),
        ] {
            if let Some(value) = usage.get(field).and_then(Value::as_u64) {
                *count = value;
                self.seen = true;
            }
        }
    }

    fn usage(&self) -> Option<Usage> {
        self.seen.then(|| Usage {
            input_tokens: self.input.saturating_add(self.cache_write).saturating_add(self.cache_read),
            output_tokens: self.output,
        })
    }
}

#[derive(Debug)]
struct ToolBlock {
    id: String,
    name: String,
    /// `input` of `content_block_start`; used only when no fragments follow.
    initial: Value,
    json: String,
}

impl AnthropicStreamParser {
    /// A parser at the start of an answer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Handles one event payload.
    pub fn push_data(&mut self, data: &str) -> Result<Vec<ModelEvent>, ParseError> {
        self.push_typed(None, data)
    }

    fn push_typed(&mut self, sse_event: Option<&str>, data: &str) -> Result<Vec<ModelEvent>, ParseError> {
        let malformed = |what: &str| ParseError::Malformed(format!("{what}: {}", truncate(data, 200)));
        let payload: Value = serde_json::from_str(data).map_err(|e| malformed(&format!("event is not JSON ({e})")))?;
        if !payload.is_object() {
            return Err(malformed("event is not a JSON object"));
        }
        let kind = payload.get("type").and_then(Value::as_str).or(sse_event).unwrap_or_default();
        let index = || payload.get("index").and_then(Value::as_u64).ok_or_else(|| malformed("event has no index"));
        self.check_order(kind)?;
        let mut events = Vec::new();
        match kind {
            "content_block_start" => {
                let block = payload.get("content_block").ok_or_else(|| malformed("no content_block"))?;
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => push_text(&mut events, block.get("text")),
                    Some("tool_use") => {
                        let index = index()?;
                        let name = block
                            .get("name")
                            .and_then(Value::as_str)
                            .filter(|n| !n.is_empty())
                            .ok_or_else(|| malformed("tool_use block has no name"))?;
                        let id = block
                            .get("id")
                            .and_then(Value::as_str)
                            .map_or_else(|| format!("toolu_{index}"), str::to_string);
                        ParseError::check_calls(self.calls_started)?;
                        if self.tool_blocks.contains_key(&index) {
                            // Taking the second for the first would lose a call.
                            return Err(malformed("a tool_use block starts at the index of one not stopped"));
                        }
                        self.calls_started += 1;
                        let initial = block.get("input").cloned().unwrap_or(Value::Null);
                        self.tool_blocks
                            .insert(index, ToolBlock { id, name: name.to_string(), initial, json: String::new() });
                    }
                    // Thinking and server-side tool blocks are not part of the answer's text.
                    _ => {}
                }
            }
            "content_block_delta" => {
                let delta = payload.get("delta").ok_or_else(|| malformed("no delta"))?;
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => push_text(&mut events, delta.get("text")),
                    Some("input_json_delta") => {
                        let index = index()?;
                        let fragment = delta.get("partial_json").and_then(Value::as_str).unwrap_or_default();
                        let block = self
                            .tool_blocks
                            .get_mut(&index)
                            .ok_or_else(|| malformed("input_json_delta for a block that is not a started tool_use"))?;
                        ParseError::check_arguments(&block.name, block.json.len(), fragment.len())?;
                        block.json.push_str(fragment);
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                if let Some(block) = self.tool_blocks.remove(&index()?) {
                    events.push(self.tool_call(block));
                }
            }
            "message_start" => {
                self.started = true;
                self.usage.update(payload.pointer("/message/usage"));
            }
            "message_delta" => {
                self.usage.update(payload.get("usage"));
                if let Some(reason) = payload.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_string());
                }
            }
            "message_stop" => {
                // Blocks never stopped still count: the message is over.
                for block in std::mem::take(&mut self.tool_blocks).into_values() {
                    events.push(self.tool_call(block));
                }
                let reason = match self.stop_reason.as_deref() {
                    Some("end_turn") | Some("stop_sequence") => "stop",
                    Some("tool_use") => "tool_calls",
                    Some("max_tokens") => "length",
                    Some(other) => other,
                    None if self.calls_emitted => "tool_calls",
                    None => "stop",
                };
                events.push(ModelEvent::Finish { reason: reason.to_string(), usage: self.usage.usage() });
                self.done = true;
            }
            "error" => {
                let error = payload.get("error").unwrap_or(&payload);
                let message = error.get("message").and_then(Value::as_str).unwrap_or("unknown error");
                let text = match error.get("type").and_then(Value::as_str) {
                    Some(kind) => format!("{kind}: {message}"),
                    None => message.to_string(),
                };
                return Err(ParseError::Provider(text));
            }
            // `ping`, and event types added later, carry nothing we use.
            _ => {}
        }
        Ok(events)
    }

    /// Refuses an event of the message before its `message_start`, or a second start: a
    /// stream out of order may have lost part of the answer, so an empty answer taken from
    /// it would be a wrong one. `ping` and `error` may come at any time.
    fn check_order(&self, kind: &str) -> Result<(), ParseError> {
        let out_of_order = match kind {
            "message_start" => self.started,
            "content_block_start" | "content_block_delta" | "content_block_stop" | "message_delta" | "message_stop" => {
                !self.started
            }
            _ => false,
        };
        match (out_of_order, kind) {
            (false, _) => Ok(()),
            (true, "message_start") => Err(ParseError::Malformed("the stream sent a second message_start".into())),
            (true, kind) => Err(ParseError::Malformed(format!("the stream sent {kind} before message_start"))),
        }
    }

    fn tool_call(&mut self, block: ToolBlock) -> ModelEvent {
        self.calls_emitted = true;
        let input = if block.json.trim().is_empty() {
            match block.initial {
                Value::Object(map) if !map.is_empty() => Value::Object(map),
                _ => Value::Object(Map::new()),
            }
        } else {
            http::parse_arguments(&block.json)
        };
        ModelEvent::ToolCall { id: block.id, name: block.name, input }
    }
}

fn push_text(events: &mut Vec<ModelEvent>, text: Option<&Value>) {
    if let Some(text) = text.and_then(Value::as_str).filter(|t| !t.is_empty()) {
        events.push(ModelEvent::TextDelta(text.to_string()));
    }
}

impl StreamParser for AnthropicStreamParser {
    fn push(&mut self, event: &str, data: &str) -> Result<Vec<ModelEvent>, ParseError> {
        self.push_typed(Some(event), data)
    }

    fn finish(&mut self) -> Result<Vec<ModelEvent>, ParseError> {
        if self.done {
            Ok(Vec::new())
        } else {
            Err(ParseError::Malformed("the stream ended before message_stop".into()))
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests {
    use super::*;
    use crate::message::ToolOutput;
    use crate::model::ToolSpec;
    use crate::provider::http::test_support::{self, tool_round};

    fn run(payloads: &[String]) -> Result<Vec<ModelEvent>, ParseError> {
        test_support::run(AnthropicStreamParser::new(), payloads)
    }

    fn message_start() -> String {
        json!({"type": "message_start", "message": {}}).to_string()
    }

    fn tool_stream(fragments: &[&str]) -> Vec<String> {
        let mut payloads = vec![
            message_start(),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}).to_string(),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Sure."}}).to_string(),
            json!({"type": "content_block_stop", "index": 0}).to_string(),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}}}).to_string(),
        ];
        for fragment in fragments {
            payloads.push(
                json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": fragment}})
                    .to_string(),
            );
        }
        payloads.push(json!({"type": "content_block_stop", "index": 1}).to_string());
        payloads.push(json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}}).to_string());
        payloads.push(json!({"type": "message_stop"}).to_string());
        payloads
    }

    #[test]
    fn arguments_split_at_every_offset() {
        let args = r#"{"city": "Zürich", "days": [1, 2], "units": {"t": "C"}}"#;
        let expected: Value = serde_json::from_str(args).unwrap();
        for cut in (0..=args.len()).filter(|&c| args.is_char_boundary(c)) {
            let (a, b) = args.split_at(cut);
            let events = run(&tool_stream(&["", a, b])).unwrap();
            assert_eq!(
                events,
                vec![
                    ModelEvent::TextDelta("Sure.".into()),
                    ModelEvent::ToolCall { id: "t".into(), name: "f".into(), input: expected.clone() },
                    ModelEvent::Finish { reason: "tool_calls".into(), usage: None },
                ],
                "split at {cut}"
            );
        }
    }

    #[test]
    fn endless_or_repeated_tool_blocks_end_the_stream() {
        let piece = "x".repeat(64 * 1024);
        let endless: Vec<&str> = std::iter::once("{\"text\": \"").chain((0..20).map(|_| piece.as_str())).collect();
        let error = run(&tool_stream(&endless)).unwrap_err().to_string();
        assert!(error.contains("the arguments of tool call `f` are larger than 1024 KiB"), "{error}");
        let start = |index: usize| {
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "tool_use", "id": format!("t{index}"), "name": "f"}})
                .to_string()
        };
        let many: Vec<String> = std::iter::once(message_start()).chain((0..100).map(start)).collect();
        let error = run(&many).unwrap_err().to_string();
        assert!(error.contains("more than 64 tool calls"), "{error}");
        // A second block at the index of one not stopped would replace it: a call lost.
        let error = run(&[message_start(), start(1), start(1)]).unwrap_err().to_string();
        assert!(error.contains("starts at the index of one not stopped"), "{error}");
    }

    #[test]
    fn no_fragments_or_empty_fragment_is_empty_object() {
        for fragments in [&[][..], &[""][..], &["", ""][..]] {
            let events = run(&tool_stream(fragments)).unwrap();
            assert_eq!(events[1], ModelEvent::ToolCall { id: "t".into(), name: "f".into(), input: json!({}) });
        }
        let events = run(&tool_stream(&["{\"a\": tru"])).unwrap();
        assert_eq!(events[1], ModelEvent::ToolCall { id: "t".into(), name: "f".into(), input: json!("{\"a\": tru") });
    }

    #[test]
    fn stop_reasons_are_normalised() {
        for (wire, ours) in [("end_turn", "stop"), ("max_tokens", "length"), ("refusal", "refusal")] {
            let events = run(&[
                message_start(),
                json!({"type": "message_delta", "delta": {"stop_reason": wire}}).to_string(),
                json!({"type": "message_stop"}).to_string(),
            ])
            .unwrap();
            assert_eq!(events, vec![ModelEvent::Finish { reason: ours.into(), usage: None }]);
        }
    }

    #[test]
    fn usage_from_message_start_and_the_last_message_delta() {
        let start = json!({"type": "message_start", "message": {"usage": {
            "input_tokens": 10, "cache_creation_input_tokens": 3, "cache_read_input_tokens": 5, "output_tokens": 1
        }}});
        let events = run(&[
            start.to_string(),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 40}})
                .to_string(),
            json!({"type": "message_delta", "delta": {}, "usage": {"output_tokens": 42}}).to_string(),
            json!({"type": "message_stop"}).to_string(),
        ])
        .unwrap();
        let usage = Some(Usage { input_tokens: 18, output_tokens: 42 });
        assert_eq!(events, vec![ModelEvent::Finish { reason: "stop".into(), usage }]);
    }

    #[test]
    fn tool_choice_is_sent_only_when_it_says_something() {
        let tool = ToolSpec::new("Counter_increment", "Counter.increment", "Adds one", json!({"type": "object"}));
        let body = |tools: Vec<ToolSpec>, tool_choice| {
            request_body("m", 100, &ModelRequest { tools, tool_choice, ..ModelRequest::default() })
        };
        let cases = [
            (ToolChoice::Auto, None),
            (ToolChoice::None, Some(json!({"type": "none"}))),
            (ToolChoice::Required, Some(json!({"type": "any"}))),
            (ToolChoice::Tool("Counter_increment".into()), Some(json!({"type": "tool", "name": "Counter_increment"}))),
        ];
        for (choice, expected) in cases {
            assert_eq!(body(vec![tool.clone()], choice.clone()).get("tool_choice"), expected.as_ref(), "{choice:?}");
            assert_eq!(body(Vec::new(), choice.clone()).get("tool_choice"), None, "{choice:?} without tools");
        }
    }

    #[test]
    fn errors() {
        assert_eq!(
            run(
                &[json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}).to_string()]
            ),
            Err(ParseError::Provider("overloaded_error: Overloaded".into()))
        );
        assert!(matches!(run(&["nope".into()]), Err(ParseError::Malformed(_))));
        let stray = json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "{"}});
        let error = run(&[message_start(), stray.to_string()]).unwrap_err().to_string();
        assert!(error.contains("input_json_delta for a block that is not a started tool_use"), "{error}");
        // Cut off before message_stop.
        let mut cut = tool_stream(&["{}"]);
        cut.pop();
        assert!(matches!(run(&cut), Err(ParseError::Malformed(_))));
    }

    #[test]
    fn the_message_starts_first_and_once() {
        // A recorded stream with its events out of order: the end of an answer before its
        // start is a broken stream, not an empty answer.
        let stop = json!({"type": "message_stop"}).to_string();
        let delta = json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}).to_string();
        assert_eq!(
            run(&[stop.clone(), message_start()]),
            Err(ParseError::Malformed("the stream sent message_stop before message_start".into()))
        );
        let mut late_start = tool_stream(&["{}"]);
        late_start.remove(0);
        late_start.push(message_start());
        assert_eq!(
            run(&late_start),
            Err(ParseError::Malformed("the stream sent content_block_start before message_start".into()))
        );
        assert_eq!(
            run(&[delta.clone(), message_start(), stop.clone()]),
            Err(ParseError::Malformed("the stream sent message_delta before message_start".into()))
        );
        assert_eq!(
            run(&[message_start(), message_start(), stop.clone()]),
            Err(ParseError::Malformed("the stream sent a second message_start".into()))
        );
        // Pings (and errors) may come before the start.
        let ping = json!({"type": "ping"}).to_string();
        assert_eq!(
            run(&[ping, message_start(), delta, stop]),
            Ok(vec![ModelEvent::Finish { reason: "stop".into(), usage: None }])
        );
    }

    #[test]
    fn a_result_is_asked_for_as_a_tool_the_model_must_end_with() {
        let result = crate::structured::ResultFormat::new(json!({"type": "object", "properties": {}})).unwrap();
        let ask = |tool_choice| ModelRequest { result: Some(result.clone()), tool_choice, ..ModelRequest::default() };
        let body = request_body("m", 100, &ask(ToolChoice::Auto));
        assert_eq!(body["tools"][0]["name"], RESULT_TOOL);
        assert_eq!(body["tools"][0]["input_schema"], json!({"type": "object", "properties": {}}));
        assert_eq!(body["tool_choice"], json!({"type": "any"}));
        let body = request_body("m", 100, &ask(ToolChoice::None));
        assert_eq!(body["tool_choice"], json!({"type": "tool", "name": RESULT_TOOL}), "no other tool, then");
    }

    #[test]
    fn files_go_as_image_and_document_blocks_and_others_as_text() {
        use crate::provider::http::test_support::{file, files_request};
        let request = files_request(vec![
            file("image/png", "a.png", b"png"),
            file("application/pdf", "b.pdf", b"pdf"),
            file("text/plain", "c.txt", b"hello"),
            file("application/zip", "d.zip", b"zip"),
        ]);
        let body = request_body("claude", 100, &request);
        assert_eq!(
            body["messages"][0]["content"],
            json!([
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "cG5n"}},
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "cGRm"}},
                {"type": "text", "text": "[c.txt (text/plain, 5 bytes)]\nhello"},
                {"type": "text", "text": "[d.zip (application/zip, 3 bytes): not shown, this model cannot read it]"},
            ])
        );
        assert_eq!(
            body["messages"][2]["content"][0]["content"],
            json!([
                {"type": "text", "text": "here\n[e.gif (image/gif, 3 bytes)]"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": "Z2lm"}},
            ])
        );
    }

    #[test]
    fn body_translates_messages() {
        let [calls, results] = tool_round(vec![
            ("c1", "read_file", json!({"path": "a.txt"}), ToolOutput::Text("hi".into())),
            ("c2", "bad", json!("{oops"), ToolOutput::ErrorText("invalid arguments".into())),
        ]);
        let request = ModelRequest {
            system: Some("Be brief.".into()),
            messages: vec![Message::user("Read a.txt"), calls, results, Message::user("and then?")],
            tools: vec![ToolSpec {
                name: "read_file".into(),
                display_name: "read_file".into(),
                description: "Reads".into(),
                input_schema: json!({"type": "object"}).into(),
            }],
            max_tokens: None,
            tool_choice: Default::default(),
            result: None,
        };
        assert_eq!(
            request_body("claude", 1000, &request),
            json!({
                "model": "claude",
                "max_tokens": 1000,
                "stream": true,
                "system": "Be brief.",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "Read a.txt"}]},
                    {"role": "assistant", "content": [
                        {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "a.txt"}},
                        {"type": "tool_use", "id": "c2", "name": "bad", "input": {"value": "{oops"}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "c1", "content": "hi"},
                        {"type": "tool_result", "tool_use_id": "c2", "content": "invalid arguments", "is_error": true},
                        {"type": "text", "text": "and then?"},
                    ]},
                ],
                "tools": [{"name": "read_file", "description": "Reads", "input_schema": {"type": "object"}}],
            })
        );
    }
}
