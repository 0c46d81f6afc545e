//! What both provider adapters share: timeouts, retries with backoff, error bodies, and
//! the driver that turns an HTTP body into [`ModelEvent`]s through a pure parser.

use std::collections::VecDeque;
use std::time::Duration;

use futures::{Stream, StreamExt};

use super::sse::{truncate, SseDecoder, SseEvent};
use crate::model::{EventStream, ModelError, ModelEvent};

/// How an adapter talks HTTP: timeouts and retries.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpSettings {
    /// Longest wait for the response headers of one attempt.
    pub request_timeout: Duration,
    /// Longest silence between two chunks of a streamed answer.
    pub idle_timeout: Duration,
    /// When and how often to try again.
    pub retry: RetryPolicy,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            request_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(300),
            retry: RetryPolicy::default(),
        }
    }
}

/// Retries on 429, 5xx, timeouts and connection errors, with exponential backoff.
///
/// Only the request is retried, never a stream that has started: events already
/// delivered cannot be taken back.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (so `3` means at most 4 attempts).
    pub max_retries: u32,
    /// Delay before the first retry; doubled for each further one.
    pub initial_delay: Duration,
    /// Cap of the doubled delay.
    pub max_delay: Duration,
    /// A `retry-after` longer than this is not waited for: the error is reported instead.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The backoff before retry number `retry` (0-based), without `retry-after`.
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry).unwrap_or(u32::MAX);
        self.initial_delay.saturating_mul(factor).min(self.max_delay)
    }
}

/// Why an answer stream could not be parsed, as the pure parsers report it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The provider sent something that does not follow its protocol.
    #[error("{0}")]
    Malformed(String),
    /// The provider reported an error inside the stream.
    #[error("{0}")]
    Provider(String),
}

impl ParseError {
    pub(crate) fn into_model_error(self, provider: &str) -> ModelError {
        match self {
            ParseError::Malformed(message) => ModelError::Malformed { provider: provider.to_string(), message },
            ParseError::Provider(message) => ModelError::Interrupted { provider: provider.to_string(), message },
        }
    }
}

/// A pure parser of one provider's stream: SSE events in, model events out.
pub trait StreamParser: Send + 'static {
    /// Handles one SSE event.
    fn push(&mut self, event: &SseEvent) -> Result<Vec<ModelEvent>, ParseError>;
    /// Handles the end of the body; an answer cut short is an error.
    fn finish(&mut self) -> Result<Vec<ModelEvent>, ParseError>;
    /// The answer is complete; whatever follows is not read.
    fn is_done(&self) -> bool;
}

/// Runs `parser` over a whole SSE body given as one byte slice: a helper for tests and
/// fuzzing that mirrors what the HTTP driver does chunk by chunk.
pub fn parse_body<P: StreamParser>(parser: &mut P, body: &[u8]) -> Result<Vec<ModelEvent>, ParseError> {
    let mut decoder = SseDecoder::new();
    let mut out = Vec::new();
    let sse = |e: super::sse::SseError| ParseError::Malformed(e.to_string());
    for event in decoder.feed(body).map_err(sse)? {
        out.extend(parser.push(&event)?);
        if parser.is_done() {
            return Ok(out);
        }
    }
    for event in decoder.finish().map_err(sse)? {
        out.extend(parser.push(&event)?);
        if parser.is_done() {
            return Ok(out);
        }
    }
    out.extend(parser.finish()?);
    Ok(out)
}

/// Sends the request built by `make` until it succeeds, retrying as `settings` say.
///
/// Non-success statuses become [`ModelError::Refused`] with the provider's message;
/// transport failures become [`ModelError::Network`].
pub(crate) async fn send_with_retries(
    provider: &str,
    settings: &HttpSettings,
    make: impl Fn() -> reqwest::RequestBuilder,
) -> Result<reqwest::Response, ModelError> {
    let mut retry = 0;
    loop {
        let (error, retry_after) = match attempt(provider, settings, make()).await {
            Attempt::Done(response) => return Ok(response),
            Attempt::Fatal(error) => return Err(error),
            Attempt::Retryable { error, retry_after } => (error, retry_after),
        };
        if retry >= settings.retry.max_retries {
            return Err(error);
        }
        let delay = match retry_after {
            Some(wait) if wait > settings.retry.max_retry_after => return Err(error),
            Some(wait) => wait,
            None => settings.retry.backoff(retry),
        };
        tokio::time::sleep(delay).await;
        retry += 1;
    }
}

enum Attempt {
    Done(reqwest::Response),
    Fatal(ModelError),
    Retryable { error: ModelError, retry_after: Option<Duration> },
}

async fn attempt(provider: &str, settings: &HttpSettings, request: reqwest::RequestBuilder) -> Attempt {
    let network = |message: String| ModelError::Network { provider: provider.to_string(), message };
    let response = match tokio::time::timeout(settings.request_timeout, request.send()).await {
        Err(_) => {
            let error = network(format!("no response within {:.1}s", settings.request_timeout.as_secs_f64()));
            return Attempt::Retryable { error, retry_after: None };
        }
        Ok(Err(error)) if error.is_builder() => return Attempt::Fatal(network(describe(&error))),
        Ok(Err(error)) => return Attempt::Retryable { error: network(describe(&error)), retry_after: None },
        Ok(Ok(response)) => response,
    };
    let status = response.status();
    if status.is_success() {
        return Attempt::Done(response);
    }
    let retry_after = retry_after(response.headers());
    let body = match tokio::time::timeout(settings.request_timeout, response.text()).await {
        Ok(Ok(body)) => body,
        _ => String::new(),
    };
    let message = error_message(&body).unwrap_or_else(|| {
        status.canonical_reason().map_or_else(|| format!("HTTP {}", status.as_u16()), str::to_string)
    });
    let error = ModelError::Refused { provider: provider.to_string(), status: status.as_u16(), message };
    if status.as_u16() == 429 || status.is_server_error() {
        Attempt::Retryable { error, retry_after }
    } else {
        Attempt::Fatal(error)
    }
}

/// The wait a `retry-after-ms` or `retry-after` (seconds) header asks for.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let number = |name: &str| -> Option<f64> {
        let value = headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok()?;
        (value.is_finite() && value >= 0.0).then_some(value)
    };
    if let Some(ms) = number("retry-after-ms") {
        return Some(Duration::from_secs_f64(ms.min(1e9) / 1000.0));
    }
    number("retry-after").map(|s| Duration::from_secs_f64(s.min(1e6)))
}

/// The human-readable message of a provider's JSON error body.
///
/// Understands OpenAI (`{"error": {"message"}}`), Anthropic
/// (`{"type": "error", "error": {"type", "message"}}`), Ollama (`{"error": "..."}`) and
/// a few common variants; any other non-empty body is returned shortened.
pub fn error_message(body: &str) -> Option<String> {
    let body = body.trim();
    if body.is_empty() {
        return None;
    }
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(body) {
        let error = json.get("error");
        let candidates = [error.and_then(|e| e.get("message")), error, json.get("message"), json.get("detail")];
        for candidate in candidates.into_iter().flatten() {
            if let Some(text) = candidate.as_str().filter(|t| !t.trim().is_empty()) {
                return Some(truncate(text.trim(), 1000));
            }
        }
    }
    Some(truncate(body, 500))
}

/// An error and its sources, joined: reqwest's own message alone hides the cause.
fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Streams the body `bytes` through an SSE decoder and `parser`, ending at the parser's
/// last event, the first error, or a silence longer than `idle_timeout`.
///
/// Dropping the returned stream drops the body, which closes the connection.
pub(crate) fn event_stream<P, S, B, E>(provider: String, bytes: S, parser: P, idle_timeout: Duration) -> EventStream
where
    P: StreamParser,
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]>,
    E: std::error::Error + 'static,
{
    let driver = Driver {
        provider,
        bytes: Box::pin(bytes),
        decoder: SseDecoder::new(),
        parser,
        pending: VecDeque::new(),
        finished: false,
        idle_timeout,
    };
    Box::pin(futures::stream::unfold(driver, |mut driver| async move {
        let item = driver.next_item().await?;
        Some((item, driver))
    }))
}

struct Driver<P, S> {
    provider: String,
    bytes: std::pin::Pin<Box<S>>,
    decoder: SseDecoder,
    parser: P,
    pending: VecDeque<Result<ModelEvent, ModelError>>,
    finished: bool,
    idle_timeout: Duration,
}

impl<P, S, B, E> Driver<P, S>
where
    P: StreamParser,
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
    E: std::error::Error + 'static,
{
    async fn next_item(&mut self) -> Option<Result<ModelEvent, ModelError>> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(item);
            }
            if self.finished {
                return None;
            }
            match tokio::time::timeout(self.idle_timeout, self.bytes.next()).await {
                Err(_) => {
                    let message =
                        format!("the answer stalled: nothing received for {:.1}s", self.idle_timeout.as_secs_f64());
                    self.fail(ModelError::Network { provider: self.provider.clone(), message });
                }
                Ok(Some(Err(error))) => {
                    let message = format!("the answer was cut off: {}", describe(&error));
                    self.fail(ModelError::Network { provider: self.provider.clone(), message });
                }
                Ok(Some(Ok(chunk))) => {
                    let events = self.decoder.feed(chunk.as_ref());
                    self.handle(events);
                }
                Ok(None) => {
                    let events = self.decoder.finish();
                    self.handle(events);
                    if !self.finished {
                        self.finished = true;
                        let last = self.parser.finish();
                        self.deliver(last);
                    }
                }
            }
        }
    }

    fn handle(&mut self, events: Result<Vec<SseEvent>, super::sse::SseError>) {
        let events = match events {
            Ok(events) => events,
            Err(error) => {
                let error = ParseError::Malformed(error.to_string());
                return self.fail(error.into_model_error(&self.provider));
            }
        };
        for event in events {
            let result = self.parser.push(&event);
            self.deliver(result);
            if self.finished {
                return;
            }
            if self.parser.is_done() {
                self.finished = true;
                return;
            }
        }
    }

    fn deliver(&mut self, result: Result<Vec<ModelEvent>, ParseError>) {
        match result {
            Ok(events) => self.pending.extend(events.into_iter().map(Ok)),
            Err(error) => {
                let error = error.into_model_error(&self.provider);
                self.fail(error);
            }
        }
    }

    fn fail(&mut self, error: ModelError) {
        self.pending.push_back(Err(error));
        self.finished = true;
    }
}

/// Parsed tool-call arguments: empty means `{}`, unparsable JSON is kept as a string so
/// nothing the model said is lost and the tool's validation can report it.
pub fn parse_arguments(raw: &str) -> serde_json::Value {
    if raw.trim().is_empty() {
        return serde_json::Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| serde_json::Value::String(raw.to_string()))
}

/// The text sent to a provider for a tool's output; never empty.
pub(crate) fn tool_output_text(output: &crate::message::ToolOutput, prefix_errors: bool) -> String {
    use crate::message::ToolOutput;
    let text = match output {
        ToolOutput::Json(value) => value.to_string(),
        ToolOutput::Text(text) => text.clone(),
        ToolOutput::ErrorText(text) if prefix_errors => format!("Error: {text}"),
        ToolOutput::ErrorText(text) => text.clone(),
    };
    if text.trim().is_empty() {
        match output {
            ToolOutput::ErrorText(_) => "Error: the tool failed without a message".to_string(),
            _ => "(no output)".to_string(),
        }
    } else {
        text
    }
}

/// Fixtures the adapters' unit tests share.
#[cfg(test)]
pub(crate) mod test_support {
    use super::{ParseError, StreamParser};
    use crate::message::{Message, Part, Role, ToolOutput};
    use crate::model::ModelEvent;
    use crate::provider::sse::SseEvent;

    /// Feeds `payloads` to `parser` as `data:` payloads without an `event:` name, then ends
    /// the stream: every event until the first error.
    pub(crate) fn run(mut parser: impl StreamParser, payloads: &[String]) -> Result<Vec<ModelEvent>, ParseError> {
        let mut events = Vec::new();
        for payload in payloads {
            events.extend(parser.push(&SseEvent { event: None, data: payload.clone() })?);
        }
        events.extend(parser.finish()?);
        Ok(events)
    }

    /// One round of tool use: the assistant's calls (after an empty text part, as streamed
    /// answers often start) and the tool turn answering each call, in order. A call is
    /// `(id, name, input, output)`.
    pub(crate) fn tool_round(calls: Vec<(&str, &str, serde_json::Value, ToolOutput)>) -> [Message; 2] {
        let mut asked = vec![Part::Text { text: String::new() }];
        let mut answered = Vec::new();
        for (id, name, input, output) in calls {
            asked.push(Part::ToolCall { id: id.into(), name: name.into(), input });
            answered.push(Part::ToolResult { id: id.into(), name: name.into(), output });
        }
        [Message { role: Role::Assistant, content: asked }, Message { role: Role::Tool, content: answered }]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests {
    use super::*;
    use crate::provider::anthropic::AnthropicStreamParser;
    use crate::provider::openai::OpenAiStreamParser;

    const OPENAI: &[u8] = include_bytes!("../../tests/fixtures/providers/openai-compatible-tool-call.sse");
    const ANTHROPIC: &str = include_str!("../../tests/fixtures/providers/anthropic-json-tool.jsonl");

    fn anthropic_sse() -> Vec<u8> {
        ANTHROPIC.lines().map(|line| format!("data: {line}\n\n")).collect::<String>().into_bytes()
    }

    #[test]
    fn error_messages_from_provider_bodies() {
        let cases = [
            (
                r#"{"error": {"message": "The model `x` does not exist", "type": "invalid_request_error"}}"#,
                "The model `x` does not exist",
            ),
            (
                r#"{"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}"#,
                "invalid x-api-key",
            ),
            (r#"{"error": "model 'llama9' not found"}"#, "model 'llama9' not found"),
            (r#"{"detail": "Not Found"}"#, "Not Found"),
            ("<html>Bad Gateway</html>", "<html>Bad Gateway</html>"),
        ];
        for (body, expected) in cases {
            assert_eq!(error_message(body).as_deref(), Some(expected));
        }
        assert_eq!(error_message("  "), None);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let policy = RetryPolicy {
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(500),
            ..RetryPolicy::default()
        };
        let delays: Vec<u128> = (0..5).map(|r| policy.backoff(r).as_millis()).collect();
        assert_eq!(delays, vec![100, 200, 400, 500, 500]);
        assert_eq!(policy.backoff(200), Duration::from_millis(500));
    }

    #[test]
    fn retry_after_headers() {
        let mut headers = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert("retry-after", reqwest::header::HeaderValue::from_static("2"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert("retry-after-ms", reqwest::header::HeaderValue::from_static("150"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(150)));
        headers.insert("retry-after-ms", reqwest::header::HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
    }

    #[test]
    fn parse_body_matches_fixtures() {
        let events = parse_body(&mut OpenAiStreamParser::new(), OPENAI).unwrap();
        assert_eq!(events.len(), 4);
        let events = parse_body(&mut AnthropicStreamParser::new(), &anthropic_sse()).unwrap();
        assert_eq!(events.len(), 2);
    }

    /// Deterministic fuzzing of decoder and parsers together: mutated recordings give
    /// events or errors, never a panic.
    #[test]
    fn mutated_streams_never_panic() {
        let mut state = 0x2545_F491_4F6C_DD1D_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let anthropic = anthropic_sse();
        for round in 0..400 {
            let mut body = if round % 2 == 0 { OPENAI.to_vec() } else { anthropic.clone() };
            for _ in 0..(1 + next() % 6) {
                let at = (next() as usize) % body.len();
                match next() % 4 {
                    0 => body[at] = b"{}[]\":,0-9e\\"[(next() % 12) as usize],
                    1 => {
                        body.remove(at);
                    }
                    2 => body.insert(at, b"\n"[0]),
                    _ => body.truncate(at),
                }
                if body.is_empty() {
                    break;
                }
            }
            let _ = parse_body(&mut OpenAiStreamParser::new(), &body);
            let _ = parse_body(&mut AnthropicStreamParser::new(), &body);
        }
    }
}
