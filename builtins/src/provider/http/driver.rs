//! The driver of one answer: the request, retried, then its body through the SSE decoder
//! and a pure parser to [`ModelEvent`]s, with an idle timeout between chunks and a
//! deadline for the whole answer.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use eventsource_stream::{Event, EventStreamError};
use futures::{Stream, StreamExt};
use parking_lot::Mutex;
use tokio::time::Instant;

use super::retry::send_with_retries;
use super::sse::{deadline_message, sse_events, BodyError, Feeder, StreamParser, Tap};
use super::{Endpoint, HttpSettings};
use crate::model::{EventStream, ModelError, ModelEvent};

/// One answer: sends the request built by `make` (retried as `settings` say), then
/// streams its body through `parser`.
///
/// Everything, retries included, must end within `settings.answer_timeout`; the stream
/// ends at the parser's last event, the first error, a silence longer than
/// `settings.idle_timeout`, or that deadline. Dropping the stream drops the body, which
/// closes the connection.
pub(crate) async fn answer<P: StreamParser>(
    endpoint: Endpoint,
    settings: &HttpSettings,
    make: impl Fn() -> reqwest::RequestBuilder,
    parser: P,
) -> Result<EventStream, ModelError> {
    let limits = TimeLimits::start(settings);
    let response = match tokio::time::timeout_at(limits.deadline, send_with_retries(&endpoint, settings, make)).await {
        Ok(response) => response?,
        Err(_) => return Err(endpoint.timed_out(deadline_message(limits.answer))),
    };
    let content_type =
        response.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_string);
    Ok(drive(endpoint, content_type, response.bytes_stream(), parser, limits))
}

/// The time an answer has: between two chunks, and in all.
#[derive(Debug, Clone, Copy)]
struct TimeLimits {
    idle: Duration,
    /// The answer timeout, for messages.
    answer: Duration,
    deadline: Instant,
}

impl TimeLimits {
    /// For an answer starting now.
    fn start(settings: &HttpSettings) -> Self {
        TimeLimits {
            idle: settings.idle_timeout,
            answer: settings.answer_timeout,
            deadline: Instant::now() + settings.answer_timeout,
        }
    }
}

/// Streams `bytes` (a response body) through the SSE decoder and `parser`.
fn drive<P, S, B, E>(
    endpoint: Endpoint,
    content_type: Option<String>,
    bytes: S,
    parser: P,
    limits: TimeLimits,
) -> EventStream
where
    P: StreamParser,
    S: Stream<Item = Result<B, E>> + Send + 'static,
    B: AsRef<[u8]> + Send + 'static,
    E: std::error::Error + Send + 'static,
{
    let tap = Arc::new(Mutex::new(Tap::new()));
    let driver = Driver {
        endpoint,
        events: Box::pin(sse_events(within(bytes, limits), tap.clone())),
        feeder: Feeder::new(tap, content_type),
        parser,
        pending: VecDeque::new(),
        finished: false,
    };
    Box::pin(futures::stream::unfold(driver, |mut driver| async move {
        let item = driver.next_item().await?;
        Some((item, driver))
    }))
}

/// `bytes`, with an error instead of a silence longer than the idle timeout or a chunk
/// after the deadline.
fn within<S, B, E>(bytes: S, limits: TimeLimits) -> impl Stream<Item = Result<B, BodyError<E>>>
where
    S: Stream<Item = Result<B, E>>,
{
    futures::stream::unfold(Some(Box::pin(bytes)), move |bytes| async move {
        let mut bytes = bytes?;
        let idle_end = Instant::now() + limits.idle;
        let (end, error) = if limits.deadline <= idle_end {
            (limits.deadline, BodyError::Deadline(limits.answer))
        } else {
            (idle_end, BodyError::Stalled(limits.idle))
        };
        match tokio::time::timeout_at(end, bytes.next()).await {
            Err(_) => Some((Err(error), None)),
            Ok(None) => None,
            Ok(Some(chunk)) => Some((chunk.map_err(BodyError::Transport), Some(bytes))),
        }
    })
}

type SseStream<E> = Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<BodyError<E>>>> + Send>>;

struct Driver<P, E> {
    endpoint: Endpoint,
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
                    self.pending.push_back(Err(failure.into_model_error(&self.endpoint)));
                    self.finished = true;
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests {
    use super::*;
    use crate::provider::openai::OpenAiStreamParser;

    fn endpoint() -> Endpoint {
        Endpoint { provider: "test".into(), model: "test:model".into(), url: "http://test.invalid/v1".into() }
    }

    fn limits(idle: Duration, answer: Duration) -> TimeLimits {
        TimeLimits { idle, answer, deadline: Instant::now() + answer }
    }

    /// Every item of `stream`, under a timeout far above any limit a test sets, so a
    /// regression fails instead of hanging.
    async fn all_items(stream: EventStream) -> Vec<Result<ModelEvent, ModelError>> {
        tokio::time::timeout(Duration::from_secs(30), stream.collect()).await.expect("the stream ends")
    }

    /// The idle timeout is between chunks: a slow stream that keeps sending outlives it.
    #[tokio::test]
    async fn idle_timeout_is_per_chunk() {
        let idle = Duration::from_millis(1500);
        // Each gap is far below the idle timeout (margin for a loaded machine); together
        // they are above it, which is what the test is about.
        let gap = Duration::from_millis(400);
        let chunks: Vec<&'static [u8]> = vec![
            b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
            b": still thinking\n\n",
            b": still thinking\n\n",
            b": still thinking\n\n",
            b"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        ];
        let slow = futures::stream::iter(chunks).then(move |chunk| async move {
            tokio::time::sleep(gap).await;
            Ok::<_, std::io::Error>(chunk)
        });
        let started = Instant::now();
        let stream = drive(endpoint(), None, slow, OpenAiStreamParser::new(), limits(idle, Duration::from_secs(60)));
        let items = all_items(stream).await;
        assert_eq!(
            items.into_iter().collect::<Result<Vec<_>, _>>().unwrap(),
            vec![ModelEvent::TextDelta("Hi".into()), ModelEvent::Finish { reason: "stop".into(), usage: None }]
        );
        assert!(started.elapsed() > idle, "the stream lasted longer than the idle timeout");
    }

    #[tokio::test]
    async fn a_silence_longer_than_the_idle_timeout_stalls() {
        let stalled =
            futures::stream::iter([Ok::<_, std::io::Error>(&b": hello\n\n"[..])]).chain(futures::stream::pending());
        let limits = limits(Duration::from_millis(50), Duration::from_secs(60));
        let items = all_items(drive(endpoint(), None, stalled, OpenAiStreamParser::new(), limits)).await;
        assert!(
            matches!(&items[..], [Err(ModelError::TimedOut { message, .. })] if message.contains("stalled: nothing received for 50ms")),
            "{items:?}"
        );
    }

    /// A server that keeps the stream alive without ever finishing (keep-alive comments,
    /// or one character at a time of an event that never ends) meets the deadline.
    #[tokio::test]
    async fn a_trickle_meets_the_deadline() {
        let comments = futures::stream::repeat_with(|| b": ping\n\n".to_vec());
        let characters =
            futures::stream::once(async { b"data: ".to_vec() }).chain(futures::stream::repeat_with(|| b"x".to_vec()));
        let trickles: [Pin<Box<dyn Stream<Item = Vec<u8>> + Send>>; 2] = [Box::pin(comments), Box::pin(characters)];
        for trickle in trickles {
            let trickle = trickle.then(|chunk| async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                Ok::<_, std::io::Error>(chunk)
            });
            let limits = limits(Duration::from_secs(5), Duration::from_millis(300));
            let items = all_items(drive(endpoint(), None, trickle, OpenAiStreamParser::new(), limits)).await;
            match &items[..] {
                [Err(error @ ModelError::TimedOut { message, .. })] => {
                    assert!(message.contains("not finished within 300ms"), "{message}");
                    assert!(error.to_string().starts_with("test:model at http://test.invalid/v1: "), "{error}");
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
}
