//! OpenAI-compatible chat completions (OpenAI, Ollama, llama.cpp server, vLLM), streamed.
//!
//! [`OpenAiModel`] sends the request; [`OpenAiStreamParser`] (`stream`) is the pure
//! parser of the `data:` payloads, usable without HTTP.

mod stream;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::{json, Map, Value};

pub use stream::OpenAiStreamParser;

use super::http::{self, Endpoint, HttpSettings};
use crate::message::{FilePart, Message, Part, Role, ToolOutput};
use crate::model::{EventStream, Model, ModelError, ModelRequest, ToolChoice, ToolSpec};

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
    /// Whether the server refused a `json_schema` response format: it is asked for a
    /// result with the older `json_object` one (and the schema beside it) from then on.
    json_object: Arc<AtomicBool>,
}

impl OpenAiModel {
    /// A model using `config`.
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelError> {
        let client = http::client(&config.provider, &config.http)?;
        Ok(OpenAiModel { config, client, json_object: Arc::default() })
    }

    /// The configuration in use.
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// Sends `request`. A server that refuses a result's `json_schema` response format
    /// (llama-cpp-python's, which knows only `json_object`) is asked again the older way.
    async fn start(&self, request: ModelRequest) -> Result<EventStream, ModelError> {
        let older = self.json_object.load(Ordering::Relaxed);
        match self.send(&request, older).await {
            Err(ModelError::Refused { message, .. })
                if request.result.is_some() && !older && message.contains("response_format") =>
            {
                tracing::info!(model = %self.name(), "the server refused a json_schema response format; asking with json_object");
                self.json_object.store(true, Ordering::Relaxed);
                self.send(&request, true).await
            }
            sent => sent,
        }
    }

    async fn send(&self, request: &ModelRequest, json_object: bool) -> Result<EventStream, ModelError> {
        let mut body = request_body(&self.config.model, &self.config.max_tokens_field, request);
        if json_object {
            as_json_object(&mut body);
        }
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

    fn context_window(&self) -> Option<u64> {
        // Ollama's window is whatever its `num_ctx` is, whatever the model's name.
        (self.config.provider == "openai").then(|| super::known_context_window(&self.config.model)).flatten()
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
    if let Some(result) = &request.result {
        // The answer's text is then the value (see `crate::structured`).
        let format = json!({"name": "result", "schema": result.object_schema()});
        body.insert("response_format".into(), json!({"type": "json_schema", "json_schema": format}));
    }
    Value::Object(body)
}

/// A body's `json_schema` response format as the older `json_object` one, the schema beside
/// it (as llama-cpp-python's server and llama.cpp's take it).
fn as_json_object(body: &mut Value) {
    if let Some(format) = body.get_mut("response_format") {
        let schema = format["json_schema"]["schema"].take();
        *format = json!({"type": "json_object", "schema": schema});
    }
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
/// becomes its own `role: tool` message. A message with files sends `content` as parts
/// (images as data URLs, PDFs as `file` parts); the files a tool returned follow its
/// results in a user message, since a tool message carries text only.
///
/// `content` is always a string or parts, `""` beside tool calls without text:
/// llama-cpp-python's server refuses `null` and a missing `content` (its chat template
/// reads it), and OpenAI, vLLM and Ollama all accept `""`.
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
                wire.insert("content".into(), json!(if has_text { text.as_str() } else { "" }));
                if !tool_calls.is_empty() {
                    wire.insert("tool_calls".into(), Value::Array(tool_calls));
                }
                out.push(Value::Object(wire));
            }
        }
        Role::User | Role::Tool => {
            // Results first: they must directly follow the assistant's calls.
            let mut parts = Vec::new();
            for part in &message.content {
                if let Part::ToolResult { id, name, output } = part {
                    out.push(json!({
                        "role": "tool",
                        "tool_call_id": id,
                        "content": http::tool_output_text(output, true),
                    }));
                    let files: Vec<Value> = output_files(output).map(file_part).collect();
                    if !files.is_empty() {
                        parts.push(json!({"type": "text", "text": format!("The files `{name}` returned:")}));
                        parts.extend(files);
                    }
                }
            }
            let files: Vec<&FilePart> = message.files().collect();
            if parts.is_empty() && files.is_empty() {
                if has_text {
                    out.push(json!({"role": "user", "content": text}));
                }
                return;
            }
            if has_text {
                parts.push(json!({"type": "text", "text": text}));
            }
            parts.extend(files.into_iter().map(file_part));
            out.push(json!({"role": "user", "content": parts}));
        }
    }
}

/// The files among a tool's output.
fn output_files(output: &ToolOutput) -> impl Iterator<Item = &FilePart> {
    let parts = match output {
        ToolOutput::Content(parts) => parts.as_slice(),
        _ => &[],
    };
    parts.iter().filter_map(|part| match part {
        Part::File(file) => Some(file),
        _ => None,
    })
}

/// A file as a content part.
fn file_part(file: &FilePart) -> Value {
    match http::file_form(file) {
        http::FileForm::Image { media_type, data } => {
            json!({"type": "image_url", "image_url": {"url": format!("data:{media_type};base64,{data}")}})
        }
        http::FileForm::Pdf { data } => json!({"type": "file", "file": {
            "filename": file.name.as_deref().unwrap_or("document.pdf"),
            "file_data": format!("data:application/pdf;base64,{data}"),
        }}),
        http::FileForm::Text(text) => json!({"type": "text", "text": text}),
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

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests {
    use super::*;
    use crate::message::ToolOutput;
    use crate::provider::http::test_support::tool_round;

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
    fn a_result_is_asked_for_as_the_response_format() {
        let result = crate::structured::ResultFormat::new(json!({"type": "array"})).unwrap();
        let body = request_body("m", "max_tokens", &ModelRequest { result: Some(result), ..ModelRequest::default() });
        assert_eq!(body["response_format"]["type"], "json_schema");
        let schema = &body["response_format"]["json_schema"]["schema"];
        assert_eq!(schema["properties"]["value"], json!({"type": "array"}), "wrapped: an object schema only");
    }

    #[test]
    fn files_go_as_content_parts_and_a_tools_images_follow_its_result() {
        use crate::provider::http::test_support::{file, files_request};
        let request = files_request(vec![file("image/png", "a.png", b"png"), file("application/pdf", "b.pdf", b"pdf")]);
        let body = request_body("m", "max_tokens", &request);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(
            messages[0]["content"],
            json!([
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,cG5n"}},
                {"type": "file", "file": {"filename": "b.pdf", "file_data": "data:application/pdf;base64,cGRm"}},
            ])
        );
        assert_eq!(
            messages[2],
            json!({"role": "tool", "tool_call_id": "c1", "content": "here\n[e.gif (image/gif, 3 bytes)]"})
        );
        assert_eq!(
            messages[3],
            json!({"role": "user", "content": [
                {"type": "text", "text": "The files `snap` returned:"},
                {"type": "image_url", "image_url": {"url": "data:image/gif;base64,Z2lm"}},
            ]})
        );
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
            result: None,
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
                    {"role": "assistant", "content": "", "tool_calls": [
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
