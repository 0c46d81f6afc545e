//! What both provider adapters share: timeouts, retries with backoff, error bodies, and
//! the driver that turns an HTTP body into [`ModelEvent`]s through a pure parser.
//!
//! Server-Sent Events are decoded by the `eventsource-stream` crate; this module adds
//! what a model answer needs around it: an idle timeout between chunks, a size limit, a
//! clear error for a body that is not an event stream, and the mapping to [`ModelError`].

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use parking_lot::Mutex;

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
    /// Handles one SSE event: its type (`message` when the server named none, as the SSE
    /// rules say) and its data (the `data:` lines joined with `\n`).
    fn push(&mut self, event: &str, data: &str) -> Result<Vec<ModelEvent>, ParseError>;
    /// Handles the end of the body; an answer cut short is an error.
    fn finish(&mut self) -> Result<Vec<ModelEvent>, ParseError>;
    /// The answer is complete; whatever follows is not read.
    fn is_done(&self) -> bool;
}

/// Runs `parser` over a whole SSE body given as one byte slice: a helper for tests and
/// fuzzing that goes through the same SSE decoding and end-of-body checks as the HTTP
/// driver.
pub fn parse_body<P: StreamParser>(parser: &mut P, body: &[u8]) -> Result<Vec<ModelEvent>, ParseError> {
    parse_chunks(parser, &[body])
}

/// [`parse_body`] with the body split into `chunks`, the way a network may deliver it.
pub fn parse_chunks<P: StreamParser>(parser: &mut P, chunks: &[&[u8]]) -> Result<Vec<ModelEvent>, ParseError> {
    let tap = Arc::new(Mutex::new(Tap::new()));
    let body = futures::stream::iter(chunks.iter().map(|chunk| Ok::<_, BodyError<Infallible>>(*chunk)));
    let mut events = futures::executor::block_on_stream(Box::pin(sse_events(body, tap.clone())));
    let mut feeder = Feeder { tap, content_type: None, seen_event: false };
    let mut out = Vec::new();
    loop {
        let (delivered, done) = feeder.step(parser, events.next()).map_err(Failure::into_parse_error)?;
        out.extend(delivered);
        if done {
            return Ok(out);
        }
    }
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

/// The most bytes accepted without a complete event, so a misbehaving server cannot
/// exhaust memory.
pub const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

/// How much of the start of the body is kept, to quote a body that is not an event stream.
const HEAD_BYTES: usize = 1024;

/// Streams `response`'s body through the SSE decoder and `parser`, ending at the parser's
/// last event, the first error, or a silence between two chunks longer than
/// `idle_timeout`.
///
/// Dropping the returned stream drops the body, which closes the connection.
pub(crate) fn event_stream<P: StreamParser>(
    provider: String,
    response: reqwest::Response,
    parser: P,
    idle_timeout: Duration,
) -> EventStream {
    let content_type =
        response.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_string);
    drive(provider, content_type, response.bytes_stream(), parser, idle_timeout)
}

/// [`event_stream`] over any byte stream.
fn drive<P, S, B, E>(
    provider: String,
    content_type: Option<String>,
    bytes: S,
    parser: P,
    idle_timeout: Duration,
) -> EventStream
where
    P: StreamParser,
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: std::error::Error + Send + 'static,
{
    let tap = Arc::new(Mutex::new(Tap::new()));
    let driver = Driver {
        provider,
        events: Box::pin(sse_events(with_idle_timeout(bytes, idle_timeout), tap.clone())),
        feeder: Feeder { tap, content_type, seen_event: false },
        parser,
        pending: VecDeque::new(),
        finished: false,
    };
    Box::pin(futures::stream::unfold(driver, |mut driver| async move {
        let item = driver.next_item().await?;
        Some((item, driver))
    }))
}

/// Why the body could not be read to its end, apart from its SSE syntax.
#[derive(Debug)]
enum BodyError<E> {
    /// The connection failed.
    Transport(E),
    /// Nothing arrived for this long.
    Stalled(Duration),
    /// More than [`MAX_EVENT_BYTES`] arrived without completing an event.
    TooLong,
    /// The body is not UTF-8 (found by [`Tap::record`]; the decoder finds the rest).
    NotUtf8,
}

/// What the driver learns about the raw body on its way to the SSE decoder.
#[derive(Debug)]
struct Tap {
    /// The first [`HEAD_BYTES`] bytes (after a byte-order mark).
    head: Vec<u8>,
    /// Bytes received since the last complete event.
    since_event: usize,
    /// Bytes of a byte-order mark seen at the start of the body, or `None` once past it.
    bom: Option<usize>,
}

/// The UTF-8 byte-order mark an event stream may start with.
const BOM: &[u8] = b"\xEF\xBB\xBF";

impl Tap {
    /// At the start of a body.
    fn new() -> Self {
        Tap { head: Vec::new(), since_event: 0, bom: Some(0) }
    }

    /// Records `bytes`; returns how many of them start the body as (part of) a byte-order
    /// mark, which the SSE decoder must not see: eventsource-stream 0.2.3 panics on a
    /// stream that starts with one (it cuts the 3-byte mark at byte 1). `None`: the body
    /// starts with part of a mark and then something else, so it is not UTF-8.
    fn record(&mut self, bytes: &[u8]) -> Option<usize> {
        let skip = match self.bom {
            None => 0,
            Some(seen) => {
                let rest = &BOM[seen..];
                let same = rest.iter().zip(bytes).take_while(|(a, b)| a == b).count();
                if same == rest.len() {
                    self.bom = None;
                } else if same == bytes.len() {
                    self.bom = Some(seen + same);
                } else if seen + same == 0 {
                    self.bom = None;
                } else {
                    return None;
                }
                same
            }
        };
        let bytes = &bytes[skip..];
        let room = HEAD_BYTES.saturating_sub(self.head.len()).min(bytes.len());
        self.head.extend_from_slice(&bytes[..room]);
        self.since_event = self.since_event.saturating_add(bytes.len());
        Some(skip)
    }
}

/// A chunk for the SSE decoder: one of the body less its first `skip` bytes, or the end
/// of the body.
enum Chunk<B> {
    Body { bytes: B, skip: usize },
    End,
}

impl<B: AsRef<[u8]>> AsRef<[u8]> for Chunk<B> {
    fn as_ref(&self) -> &[u8] {
        match self {
            Chunk::Body { bytes, skip } => bytes.as_ref().get(*skip..).unwrap_or_default(),
            // Ends a last line or event the server did not close (a body may end with
            // `data: [DONE]\n`): the SSE rules would drop it, we keep it, as before.
            Chunk::End => b"\n\n",
        }
    }
}

/// `bytes`, with an error instead of a silence longer than `idle_timeout`.
fn with_idle_timeout<S, B, E>(bytes: S, idle_timeout: Duration) -> impl Stream<Item = Result<B, BodyError<E>>>
where
    S: Stream<Item = Result<B, E>>,
{
    futures::stream::unfold(Some(Box::pin(bytes)), move |bytes| async move {
        let mut bytes = bytes?;
        match tokio::time::timeout(idle_timeout, bytes.next()).await {
            Err(_) => Some((Err(BodyError::Stalled(idle_timeout)), None)),
            Ok(None) => None,
            Ok(Some(chunk)) => Some((chunk.map_err(BodyError::Transport), Some(bytes))),
        }
    })
}

/// The SSE events of `body`, decoded by `eventsource-stream`; every chunk is recorded in
/// `tap` and checked against [`MAX_EVENT_BYTES`] first.
fn sse_events<S, B, E>(
    body: S,
    tap: Arc<Mutex<Tap>>,
) -> impl Stream<Item = Result<Event, EventStreamError<BodyError<E>>>>
where
    S: Stream<Item = Result<B, BodyError<E>>>,
    B: AsRef<[u8]>,
{
    body.map(move |chunk| {
        let chunk = chunk?;
        let mut tap = tap.lock();
        let skip = tap.record(chunk.as_ref()).ok_or(BodyError::NotUtf8)?;
        if tap.since_event > MAX_EVENT_BYTES {
            return Err(BodyError::TooLong);
        }
        Ok(Chunk::Body { bytes: chunk, skip })
    })
    .chain(futures::stream::iter([Ok(Chunk::End)]))
    .eventsource()
}

/// Why a stream failed, before it is told as a [`ModelError`] or a [`ParseError`].
enum Failure {
    Parse(ParseError),
    Network(String),
}

impl Failure {
    fn into_model_error(self, provider: &str) -> ModelError {
        match self {
            Failure::Parse(error) => error.into_model_error(provider),
            Failure::Network(message) => ModelError::Network { provider: provider.to_string(), message },
        }
    }

    /// For [`parse_chunks`], whose in-memory body has no network to fail.
    fn into_parse_error(self) -> ParseError {
        match self {
            Failure::Parse(error) => error,
            Failure::Network(message) => ParseError::Malformed(message),
        }
    }
}

/// Hands decoded SSE events to a parser: what the HTTP driver and [`parse_chunks`] share.
struct Feeder {
    tap: Arc<Mutex<Tap>>,
    /// The response's `content-type`, to tell when the body is not an event stream.
    content_type: Option<String>,
    seen_event: bool,
}

impl Feeder {
    /// Handles the next item of the SSE decoder (`None`: the body ended): the model events
    /// it gives, and whether the answer is over (nothing more is to be read).
    fn step<P: StreamParser, E: std::error::Error + 'static>(
        &mut self,
        parser: &mut P,
        item: Option<Result<Event, EventStreamError<BodyError<E>>>>,
    ) -> Result<(Vec<ModelEvent>, bool), Failure> {
        match item {
            Some(Ok(event)) => {
                self.seen_event = true;
                self.tap.lock().since_event = 0;
                let events = parser.push(&event.event, &event.data).map_err(Failure::Parse)?;
                Ok((events, parser.is_done()))
            }
            Some(Err(error)) => Err(self.failure(error)),
            None => {
                if let Some(message) = self.not_an_event_stream() {
                    return Err(Failure::Parse(ParseError::Malformed(message)));
                }
                Ok((parser.finish().map_err(Failure::Parse)?, true))
            }
        }
    }

    fn failure<E: std::error::Error + 'static>(&self, error: EventStreamError<BodyError<E>>) -> Failure {
        let malformed = |message: String| Failure::Parse(ParseError::Malformed(message));
        match error {
            EventStreamError::Transport(BodyError::Transport(error)) => {
                Failure::Network(format!("the answer was cut off: {}", describe(&error)))
            }
            EventStreamError::Transport(BodyError::Stalled(idle)) => {
                Failure::Network(format!("the answer stalled: nothing received for {:.1}s", idle.as_secs_f64()))
            }
            EventStreamError::Transport(BodyError::TooLong) => match self.not_an_event_stream() {
                Some(message) => malformed(message),
                None => malformed(format!("more than {} MiB arrived without a complete event", MAX_EVENT_BYTES >> 20)),
            },
            EventStreamError::Utf8(_) | EventStreamError::Transport(BodyError::NotUtf8) => {
                malformed("the event stream is not valid UTF-8".to_string())
            }
            EventStreamError::Parser(error) => {
                malformed(format!("the event stream is not valid SSE: {}", truncate(&error.to_string(), 200)))
            }
        }
    }

    /// Before any event, a body with content that made none (a JSON or HTML error page sent
    /// with a success status) is not an event stream: the message says so and quotes it.
    fn not_an_event_stream(&self) -> Option<String> {
        if self.seen_event {
            return None;
        }
        let body = error_message(&String::from_utf8_lossy(&self.tap.lock().head))?;
        Some(match &self.content_type {
            Some(kind) => format!("the response is not an event stream (content-type `{kind}`): {body}"),
            None => format!("the response is not an event stream: {body}"),
        })
    }
}

type SseStream<E> = Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<BodyError<E>>>> + Send>>;

struct Driver<P, E> {
    provider: String,
    events: SseStream<E>,
    feeder: Feeder,
    parser: P,
    pending: VecDeque<Result<ModelEvent, ModelError>>,
    finished: bool,
}

impl<P: StreamParser, E: std::error::Error + 'static> Driver<P, E> {
    async fn next_item(&mut self) -> Option<Result<ModelEvent, ModelError>> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                return Some(item);
            }
            if self.finished {
                return None;
            }
            let item = self.events.next().await;
            match self.feeder.step(&mut self.parser, item) {
                Ok((events, done)) => {
                    self.pending.extend(events.into_iter().map(Ok));
                    self.finished = done;
                }
                Err(failure) => {
                    self.pending.push_back(Err(failure.into_model_error(&self.provider)));
                    self.finished = true;
                }
            }
        }
    }
}

/// The first `max` characters of `text`, with `…` when cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
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

    /// Feeds `payloads` to `parser` as `data:` payloads of unnamed (`message`) events, then
    /// ends the stream: every event until the first error.
    pub(crate) fn run(mut parser: impl StreamParser, payloads: &[String]) -> Result<Vec<ModelEvent>, ParseError> {
        let mut events = Vec::new();
        for payload in payloads {
            events.extend(parser.push("message", payload)?);
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
        [Message::new(Role::Assistant, asked), Message::new(Role::Tool, answered)]
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

    /// A parser that records the SSE events it is given, to test the decoding path alone.
    #[derive(Default)]
    struct Recorder(Vec<(String, String)>);

    impl StreamParser for Recorder {
        fn push(&mut self, event: &str, data: &str) -> Result<Vec<ModelEvent>, ParseError> {
            self.0.push((event.to_string(), data.to_string()));
            Ok(Vec::new())
        }
        fn finish(&mut self) -> Result<Vec<ModelEvent>, ParseError> {
            Ok(Vec::new())
        }
        fn is_done(&self) -> bool {
            false
        }
    }

    /// The SSE events of `body` cut into pieces at `cuts`.
    fn decode_in_pieces(body: &[u8], cuts: &[usize]) -> Result<Vec<(String, String)>, ParseError> {
        let mut pieces = Vec::new();
        let mut start = 0;
        for &cut in cuts {
            pieces.push(&body[start..cut]);
            start = cut;
        }
        pieces.push(&body[start..]);
        let mut recorder = Recorder::default();
        parse_chunks(&mut recorder, &pieces)?;
        Ok(recorder.0)
    }

    fn event(name: &str, data: &str) -> (String, String) {
        (name.to_string(), data.to_string())
    }

    #[test]
    fn fixture_split_at_every_byte_offset() {
        let whole = decode_in_pieces(OPENAI, &[]).unwrap();
        assert_eq!(whole.len(), 9);
        assert_eq!(whole[8], event("message", "[DONE]"), "the last event, closed by a single line end, counts");
        let answer = parse_body(&mut OpenAiStreamParser::new(), OPENAI).unwrap();
        for cut in 0..=OPENAI.len() {
            assert_eq!(decode_in_pieces(OPENAI, &[cut]).unwrap(), whole, "cut at {cut}");
            let pieces = [&OPENAI[..cut], &OPENAI[cut..]];
            assert_eq!(parse_chunks(&mut OpenAiStreamParser::new(), &pieces).unwrap(), answer, "cut at {cut}");
        }
    }

    #[test]
    fn line_ends_and_multibyte_characters_split_anywhere() {
        let body = "event: a\r\ndata: ünï\r\n\r\ndata: x\rdata: y\r\r: comment\ndata:z\n\n".as_bytes();
        let expected = vec![event("a", "ünï"), event("message", "x\ny"), event("message", "z")];
        for i in 0..=body.len() {
            for j in i..=body.len() {
                assert_eq!(decode_in_pieces(body, &[i, j]).unwrap(), expected, "cuts at {i}, {j}");
            }
        }
    }

    #[test]
    fn spec_corner_cases() {
        let body = b"\xEF\xBB\xBFdata\n\ndata:\ndata:\n\nevent: lonely\n\nid: 1\nretry: 5\ndata: last";
        let events = decode_in_pieces(body, &[]).unwrap();
        let data: Vec<&str> = events.iter().map(|(_, data)| data.as_str()).collect();
        assert_eq!(data, vec!["", "\n", "last"], "a byte-order mark is skipped; an unclosed last event counts");
        assert_eq!(events[2].0, "message", "an event without data is not dispatched and its name is dropped");
        for cut in 0..=3 {
            assert_eq!(decode_in_pieces(body, &[cut]).unwrap(), events, "byte-order mark cut at {cut}");
            assert_eq!(decode_in_pieces(body, &[cut, cut + 1]).unwrap(), events, "cuts at {cut}, {}", cut + 1);
        }
        let later_mark = decode_in_pieces(b"data: a\n\n\xEF\xBB\xBFdata: b\n\n", &[]).unwrap();
        assert_eq!(later_mark, vec![event("message", "a")], "only a first byte-order mark is skipped");
        for broken in [&b"\xEF\xBBdata: x\n\n"[..], b"\xEFdata: x\n\n"] {
            for cut in 0..=broken.len() {
                let error = parse_chunks(&mut Recorder::default(), &[&broken[..cut], &broken[cut..]]).unwrap_err();
                assert_eq!(error, ParseError::Malformed("the event stream is not valid UTF-8".into()), "cut at {cut}");
            }
        }
    }

    #[test]
    fn not_sse_is_an_error() {
        let error = parse_body(&mut OpenAiStreamParser::new(), b"{\"error\": {\"message\": \"quota exceeded\"}}\n")
            .unwrap_err();
        assert_eq!(error, ParseError::Malformed("the response is not an event stream: quota exceeded".into()));
        let error = parse_body(&mut Recorder::default(), b"<html>\n<body>Bad Gateway</body>\n</html>\n").unwrap_err();
        assert!(
            matches!(&error, ParseError::Malformed(m) if m.contains("not an event stream") && m.contains("Bad Gateway"))
        );
        let error = parse_body(&mut OpenAiStreamParser::new(), b"data: \xFF\xFE\n\n").unwrap_err();
        assert_eq!(error, ParseError::Malformed("the event stream is not valid UTF-8".into()));
        // An empty body is an answer that never started.
        let error = parse_body(&mut AnthropicStreamParser::new(), b"").unwrap_err();
        assert!(matches!(&error, ParseError::Malformed(m) if m.contains("ended")), "{error:?}");
    }

    #[test]
    fn an_endless_event_is_cut_short() {
        let mut body = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n".to_vec();
        let start = body.len();
        body.extend(std::iter::repeat_n(b'x', MAX_EVENT_BYTES + 1));
        let error = parse_chunks(&mut OpenAiStreamParser::new(), &[&body[..start], &body[start..]]).unwrap_err();
        assert_eq!(error, ParseError::Malformed("more than 8 MiB arrived without a complete event".into()));
        let error = parse_body(&mut OpenAiStreamParser::new(), &body[start..]).unwrap_err();
        assert!(matches!(&error, ParseError::Malformed(m) if m.contains("not an event stream")), "{error:?}");
    }

    /// The idle timeout is between chunks: a slow stream that keeps sending is not cut.
    #[tokio::test]
    async fn idle_timeout_is_per_chunk() {
        let chunks: Vec<&'static [u8]> = vec![
            b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
            b": still thinking\n\n",
            b": still thinking\n\n",
            b": still thinking\n\n",
            b"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        ];
        let slow = futures::stream::iter(chunks).then(|chunk| async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            Ok::<_, std::io::Error>(chunk)
        });
        let stream = drive("test".into(), None, slow, OpenAiStreamParser::new(), Duration::from_millis(400));
        let items: Vec<_> = stream.collect().await;
        assert_eq!(
            items.into_iter().collect::<Result<Vec<_>, _>>().unwrap(),
            vec![ModelEvent::TextDelta("Hi".into()), ModelEvent::Finish { reason: "stop".into(), usage: None }]
        );

        let stalled =
            futures::stream::iter([Ok::<_, std::io::Error>(&b": hello\n\n"[..])]).chain(futures::stream::pending());
        let stream = drive("test".into(), None, stalled, OpenAiStreamParser::new(), Duration::from_millis(50));
        let items: Vec<_> = stream.collect().await;
        assert!(
            matches!(&items[..], [Err(ModelError::Network { message, .. })] if message.contains("stalled")),
            "{items:?}"
        );
    }

    /// Deterministic fuzzing of the decoding path: mutated and random inputs, cut
    /// anywhere, give events or errors, never a panic.
    #[test]
    fn garbage_never_panics() {
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..300 {
            let mut body = OPENAI.to_vec();
            for _ in 0..(next() % 20) {
                let at = (next() as usize) % body.len();
                match next() % 3 {
                    0 => body[at] = next() as u8,
                    1 => {
                        body.remove(at);
                    }
                    _ => body.insert(at, b"\n\r:{}\"\\ "[(next() % 8) as usize]),
                }
            }
            let cut = (next() as usize) % (body.len() + 1);
            let _ = decode_in_pieces(&body, &[cut]);
        }
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
