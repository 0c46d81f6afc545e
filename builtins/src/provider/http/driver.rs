//! The stream driver: an HTTP body through the SSE decoder and a pure parser to
//! [`ModelEvent`]s, with an idle timeout between chunks.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use eventsource_stream::{Event, EventStreamError};
use futures::{Stream, StreamExt};
use parking_lot::Mutex;

use super::sse::{sse_events, BodyError, Feeder, StreamParser, Tap};
use crate::model::{EventStream, ModelError, ModelEvent};

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

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests {
    use super::*;
    use crate::provider::openai::OpenAiStreamParser;

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
}
