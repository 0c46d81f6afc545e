//! Event-stream decoding: Server-Sent Events are decoded by the `eventsource-stream`
//! crate; this module adds what a model answer needs around it: a size limit for one
//! event, a clear error for a body that is not an event stream, and the pure
//! [`StreamParser`] interface the adapters implement.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::{Stream, StreamExt};
use parking_lot::Mutex;

use super::{describe, error_message, seconds, truncate, Endpoint};
use crate::model::{ModelError, ModelEvent, MAX_TOOL_ARGUMENTS, MAX_TOOL_CALLS};

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
    /// Refuses one more tool call when an answer holds [`MAX_TOOL_CALLS`] already.
    pub(crate) fn check_calls(calls: usize) -> Result<(), ParseError> {
        match calls < MAX_TOOL_CALLS {
            true => Ok(()),
            false => Err(ParseError::Malformed(format!("the answer has more than {MAX_TOOL_CALLS} tool calls"))),
        }
    }

    /// Refuses a fragment that would make a call's arguments larger than
    /// [`MAX_TOOL_ARGUMENTS`] bytes.
    pub(crate) fn check_arguments(name: &str, so_far: usize, fragment: usize) -> Result<(), ParseError> {
        match so_far.saturating_add(fragment) <= MAX_TOOL_ARGUMENTS {
            true => Ok(()),
            false => Err(ParseError::Malformed(format!(
                "the arguments of tool call `{}` are larger than {} KiB",
                truncate(name, 64),
                MAX_TOOL_ARGUMENTS >> 10
            ))),
        }
    }

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
    let mut feeder = Feeder::new(tap, None);
    let mut out = Vec::new();
    loop {
        let (delivered, done) = feeder.step(parser, events.next()).map_err(Failure::into_parse_error)?;
        out.extend(delivered);
        if done {
            return Ok(out);
        }
    }
}

/// The most bytes one event may hold (its lines up to the blank line that ends it), so a
/// misbehaving server cannot exhaust memory.
pub const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

/// How much of the start of the body is kept, to quote a body that is not an event stream.
const HEAD_BYTES: usize = 1024;

/// Why the body could not be read to its end, apart from its SSE syntax.
#[derive(Debug)]
pub(super) enum BodyError<E> {
    /// The connection failed.
    Transport(E),
    /// Nothing arrived for this long (the idle timeout).
    Stalled(Duration),
    /// The answer was not over at its deadline, this long (the answer timeout) after it
    /// was asked for.
    Deadline(Duration),
    /// An event is larger than [`MAX_EVENT_BYTES`].
    TooLong,
    /// The body is not UTF-8 (found by [`Tap::record`]; the decoder finds the rest).
    NotUtf8,
}

/// What the driver learns about the raw body on its way to the SSE decoder.
#[derive(Debug)]
pub(super) struct Tap {
    /// The first [`HEAD_BYTES`] bytes (after a byte-order mark).
    head: Vec<u8>,
    /// Bytes of the event being received: since the last blank line.
    since_event: usize,
    /// Bytes of the line being received.
    line: usize,
    /// The last byte was a carriage return, so a line feed now ends no further line.
    after_cr: bool,
    /// Bytes of a byte-order mark seen at the start of the body, or `None` once past it.
    bom: Option<usize>,
}

/// The UTF-8 byte-order mark an event stream may start with.
const BOM: &[u8] = b"\xEF\xBB\xBF";

impl Tap {
    /// At the start of a body.
    pub(super) fn new() -> Self {
        Tap { head: Vec::new(), since_event: 0, line: 0, after_cr: false, bom: Some(0) }
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
        self.count_event_bytes(bytes);
        Some(skip)
    }

    /// Follows the lines of `bytes` to know the size of the event being received. An
    /// event ends at a blank line, the line ends of SSE being `\r\n`, `\n` or `\r`;
    /// counting here rather than per decoded event keeps a chunk holding many small
    /// events within the limit.
    fn count_event_bytes(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            let after_cr = std::mem::replace(&mut self.after_cr, byte == b'\r');
            match byte {
                b'\n' if after_cr => {}
                b'\r' | b'\n' if self.line == 0 => self.since_event = 0,
                b'\r' | b'\n' => self.line = 0,
                _ => {
                    self.line += 1;
                    self.since_event += 1;
                }
            }
        }
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

/// The SSE events of `body`, decoded by `eventsource-stream`; every chunk is recorded in
/// `tap` and checked against [`MAX_EVENT_BYTES`] first.
pub(super) fn sse_events<S, B, E>(
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

/// The message for an answer not over by its deadline, `answer_timeout` after it was asked
/// for.
pub(super) fn deadline_message(answer_timeout: Duration) -> String {
    format!(
        "the answer was not finished within {}, the limit for one answer (the answer timeout); \
         try again, or allow longer answers",
        seconds(answer_timeout)
    )
}

/// Why a stream failed, before it is told as a [`ModelError`] or a [`ParseError`].
pub(super) enum Failure {
    Parse(ParseError),
    Network(String),
    TimedOut(String),
}

impl Failure {
    pub(super) fn into_model_error(self, endpoint: &Endpoint) -> ModelError {
        match self {
            Failure::Parse(error) => error.into_model_error(&endpoint.provider),
            Failure::Network(message) => endpoint.network(message),
            Failure::TimedOut(message) => endpoint.timed_out(message),
        }
    }

    /// For [`parse_chunks`], whose in-memory body has no network to fail.
    fn into_parse_error(self) -> ParseError {
        match self {
            Failure::Parse(error) => error,
            Failure::Network(message) | Failure::TimedOut(message) => ParseError::Malformed(message),
        }
    }
}

/// Hands decoded SSE events to a parser: what the HTTP driver and [`parse_chunks`] share.
pub(super) struct Feeder {
    tap: Arc<Mutex<Tap>>,
    /// The response's `content-type`, to tell when the body is not an event stream.
    content_type: Option<String>,
    seen_event: bool,
}

impl Feeder {
    /// A feeder at the start of a body whose raw bytes `tap` records.
    pub(super) fn new(tap: Arc<Mutex<Tap>>, content_type: Option<String>) -> Self {
        Feeder { tap, content_type, seen_event: false }
    }

    /// Handles the next item of the SSE decoder (`None`: the body ended): the model events
    /// it gives, and whether the answer is over (nothing more is to be read).
    pub(super) fn step<P: StreamParser, E: std::error::Error + 'static>(
        &mut self,
        parser: &mut P,
        item: Option<Result<Event, EventStreamError<BodyError<E>>>>,
    ) -> Result<(Vec<ModelEvent>, bool), Failure> {
        match item {
            Some(Ok(event)) => {
                self.seen_event = true;
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
                Failure::TimedOut(format!("the answer stalled: nothing received for {}", seconds(idle)))
            }
            EventStreamError::Transport(BodyError::Deadline(answer)) => Failure::TimedOut(deadline_message(answer)),
            EventStreamError::Transport(BodyError::TooLong) => match self.not_an_event_stream() {
                Some(message) => malformed(message),
                None => malformed(format!(
                    "{} is larger than {} MiB, the most one event may hold",
                    if self.seen_event { "an event" } else { "the first event" },
                    MAX_EVENT_BYTES >> 20
                )),
            },
            EventStreamError::Utf8(_) | EventStreamError::Transport(BodyError::NotUtf8) => {
                malformed("the event stream is not valid UTF-8".to_string())
            }
            EventStreamError::Parser(error) => {
                malformed(format!("the event stream is not valid SSE: {}", truncate(&error.to_string(), 200)))
            }
        }
    }

    /// Before any event, a body with content that made none and does not start like an
    /// event stream (a JSON or HTML error page sent with a success status) is not an event
    /// stream: the message says so and quotes it.
    fn not_an_event_stream(&self) -> Option<String> {
        let tap = self.tap.lock();
        if self.seen_event || starts_like_sse(&tap.head) {
            return None;
        }
        let body = error_message(&String::from_utf8_lossy(&tap.head))?;
        Some(match &self.content_type {
            Some(kind) => format!("the response is not an event stream (content-type `{kind}`): {body}"),
            None => format!("the response is not an event stream: {body}"),
        })
    }
}

/// Whether the first line of `head` (after blank lines) is an SSE comment or one of the
/// fields SSE defines. Any line is valid SSE (an unknown field is ignored), so this tells
/// an event stream whose first event is still arriving from, say, an HTML page.
fn starts_like_sse(head: &[u8]) -> bool {
    let Some(start) = head.iter().position(|b| !matches!(b, b'\r' | b'\n')) else {
        return false;
    };
    let line = &head[start..];
    line.starts_with(b":")
        || ["data", "event", "id", "retry"].iter().any(|field| {
            line.strip_prefix(field.as_bytes())
                .is_some_and(|rest| matches!(rest.first(), None | Some(b':' | b'\r' | b'\n')))
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests {
    use super::*;
    use crate::provider::anthropic::AnthropicStreamParser;
    use crate::provider::openai::OpenAiStreamParser;

    const OPENAI: &[u8] = include_bytes!("../../../tests/fixtures/providers/openai-compatible-tool-call.sse");
    const ANTHROPIC: &str = include_str!("../../../tests/fixtures/providers/anthropic-json-tool.jsonl");

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
        assert_eq!(error, ParseError::Malformed("an event is larger than 8 MiB, the most one event may hold".into()));
        let error = parse_body(&mut OpenAiStreamParser::new(), &body[start..]).unwrap_err();
        assert!(matches!(&error, ParseError::Malformed(m) if m.contains("not an event stream")), "{error:?}");
    }

    /// A valid event stream whose first event is over the limit says so; it was reported
    /// as "not an event stream".
    #[test]
    fn an_oversized_first_event_is_named() {
        let expected =
            ParseError::Malformed("the first event is larger than 8 MiB, the most one event may hold".into());
        for start in [&b"data: {\"text\": \""[..], b"\r\nevent: delta\r\ndata: ", b": hi\n\ndata", b"id: 7\ndata:"] {
            let mut body = start.to_vec();
            body.extend(std::iter::repeat_n(b'x', MAX_EVENT_BYTES));
            let error = parse_chunks(&mut Recorder::default(), &[&body[..10], &body[10..]]).unwrap_err();
            assert_eq!(error, expected, "{:?}", String::from_utf8_lossy(start));
        }
    }

    /// The limit is per event: a chunk holding more than the limit in small events passes.
    /// (Checked on the tap: the decoder itself is slow on one huge chunk of many events.)
    #[test]
    fn the_size_counted_is_that_of_the_event_being_received() {
        let mut tap = Tap::new();
        let event = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ab\"}}]}\r\n\r\n";
        let chunk = event.repeat(MAX_EVENT_BYTES / event.len() + 1);
        assert!(chunk.len() > MAX_EVENT_BYTES);
        tap.record(&chunk).unwrap();
        assert_eq!(tap.since_event, 0);
        for (pieces, open) in [
            (&[&b"data: ab\r"[..], b"\n\r", b"\n"][..], 0),
            (&[b"data: ab\r", b"\r"], 0),
            (&[b"data: ab\n", b"data: c"], 15),
            (&[b"event: x\r\r\n", b"data: c\n"], 7),
        ] {
            let mut tap = Tap::new();
            for piece in pieces {
                tap.record(piece).unwrap();
            }
            assert_eq!(tap.since_event, open, "{pieces:?}");
        }
    }

    #[test]
    fn garbage_never_panics() {
        let mut next = crate::test_rng::xorshift(0x9E37_79B9_7F4A_7C15);
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
        let mut next = crate::test_rng::xorshift(0x2545_F491_4F6C_DD1D);
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
