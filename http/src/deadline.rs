//! Deadlines inside a connection, after its headers: on writing the answer (a client that
//! stops reading) and on reading a request's body (a client that stops sending it).
//!
//! hyper's timer covers only a request's headers: once it writes, it waits for the socket
//! for as long as it takes, and once a handler reads the body, so does the handler. A
//! client that sends requests and never reads their answers, or stops halfway through a
//! body, would hold its connection for ever.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// A request body that did not arrive in full within the deadline; handlers find it in
/// the chain of sources of the error reading the body gave them (see [`is_body_timeout`]).
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {} s; send it at once, and whole", .0.as_secs())]
pub struct BodyTimeout(pub Duration);

/// Whether `error`, or one of its sources, is a [`BodyTimeout`].
pub fn is_body_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if error.is::<BodyTimeout>() {
            return true;
        }
        next = error.source();
    }
    false
}

/// A writer that fails (`TimedOut`) once a write or flush has waited `limit` without
/// the socket taking a byte: the client stopped reading. Each byte taken starts the
/// wait anew, so a slow reader keeps its connection; one that reads nothing does not.
pub(crate) struct WriteDeadline<T> {
    io: T,
    limit: Duration,
    /// Since the socket last refused a write, while it still refuses.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> WriteDeadline<T> {
    pub(crate) fn new(io: T, limit: Duration) -> Self {
        WriteDeadline { io, limit, stalled: None }
    }

    /// Passes on what the socket did; if it could not take anything, the wait counts
    /// toward the deadline (and the timer wakes the connection when it passes).
    fn progress<R>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let limit = self.limit;
        let stalled = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        ready!(stalled.as_mut().poll(cx));
        let why = format!("the client read nothing of the answer for {} s", limit.as_secs_f64());
        Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, why)))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.progress(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.progress(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_flush(cx);
        self.progress(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.io).poll_shutdown(cx);
        self.progress(cx, polled)
    }
}

/// A request's body that must arrive in full within `limit` of the handler first
/// reading it: a client that trickles it, or stops halfway, gets an error
/// ([`BodyTimeout`]) instead of holding the handler (and its connection).
pub struct DeadlineBody {
    body: Incoming,
    limit: Duration,
    deadline: Option<Pin<Box<Sleep>>>,
}

impl DeadlineBody {
    pub(crate) fn new(body: Incoming, limit: Duration) -> Self {
        DeadlineBody { body, limit, deadline: None }
    }
}

impl Body for DeadlineBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let limit = this.limit;
        let deadline = this.deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Box::new(BodyTimeout(limit)))));
        }
        Pin::new(&mut this.body).poll_frame(cx).map_err(Into::into)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
