//! Serving an axum router over HTTP/1.1, each connection by hyper with deadlines: what
//! `trellis serve` and `trellis mcp serve --http` listen with.
//!
//! `axum::serve` sets no timer, and without one hyper waits for ever: for a request's
//! headers, for a client to read its answer, for a body to arrive. A client that connects
//! and stalls (or sends its headers a byte at a time, or never reads what it asked for)
//! holds its connection, and a file descriptor, until it goes. A thousand such clients,
//! and nobody else is answered. So each connection has [`Limits`]: a deadline for each
//! request's headers (and for silence between requests), one for each request's body,
//! one for each write the client does not read, and a number of connections per address.
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! let router = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! // Until the process ends; any future that resolves stops it.
//! let stop = std::future::pending();
//! trellis_http::serve(listener, router, trellis_http::Limits::default(), stop).await;
//! # Ok(())
//! # }
//! ```

mod deadline;
mod per_address;
mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::ServiceExt;

use deadline::WriteDeadline;
pub use deadline::{is_body_timeout, BodyTimeout, DeadlineBody};
use per_address::PerAddress;
pub use tls::{Tls, TlsError};

/// How long to wait before accepting again when accepting failed (out of file descriptors,
/// mostly): the connections that hold them close meanwhile.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The most a connection buffers of its answers beyond what the socket took (and the
/// longest request head): a client that stops reading holds this much and one more
/// chunk of the answer (an event, for a stream of them), not everything written to it
/// since. hyper's default is about 400 KiB.
pub const MAX_BUFFER: usize = 64 * 1024;

/// The kernel's send buffer for each connection (Linux doubles it), instead of one that
/// grows to megabytes: what a client does not read fills it soon, and the write deadline
/// then applies. A quarter of a MiB a round trip is plenty for a chat and its API.
pub const SEND_BUFFER: usize = 128 * 1024;

/// How long a client may take to send a request's headers, or stay silent between requests.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a request's body may take to arrive, from when the handler starts reading it.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a write may wait for a client that reads nothing of the answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// How many connections one client address may hold at once. Every client on the
/// server's own machine comes from one loopback address: a browser holds up to six (each
/// page's event stream one of them), each command reaching the server one more, and an MCP
/// host up to 64 `subscriptions/listen` streams (half of `trellis mcp serve`'s budget),
/// each on a connection of its own. Well under the usual 1,024 file descriptors.
pub const PER_ADDRESS: usize = 256;

/// The deadlines and the cap each connection is served with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// How long a client may take to send a request's headers, or stay silent on an open
    /// connection between requests, before the connection is closed.
    pub header_timeout: Duration,
    /// How long a request's body may take to arrive in full, once the handler reads it;
    /// past it, reading the body fails with [`BodyTimeout`].
    pub body_timeout: Duration,
    /// How long a write may wait with the client reading none of it before the connection
    /// is closed (a stream of events too: its client must keep reading).
    pub write_timeout: Duration,
    /// How many connections one address may hold (an IPv6 /64 counts as one); the next is
    /// answered 503 and closed at once.
    pub per_address: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_timeout: HEADER_TIMEOUT,
            body_timeout: BODY_TIMEOUT,
            write_timeout: WRITE_TIMEOUT,
            per_address: PER_ADDRESS,
        }
    }
}

/// Serves `router` on `listener` until `stop` resolves; then stops accepting, lets each
/// connection finish the response it is sending, and returns once all have closed. Each
/// connection is held to `limits`. Requests reach the router with a [`DeadlineBody`] and
/// their client's address (`ConnectInfo<SocketAddr>`).
pub async fn serve(listener: TcpListener, router: axum::Router, limits: Limits, stop: impl Future<Output = ()>) {
    serve_with(listener, router, limits, stop, None).await;
}

/// [`serve`] over TLS: each connection's handshake first, within the header deadline.
pub async fn serve_tls(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
    stop: impl Future<Output = ()>,
    tls: Tls,
) {
    serve_with(listener, router, limits, stop, Some(tls)).await;
}

async fn serve_with(
    listener: TcpListener,
    router: axum::Router,
    limits: Limits,
    stop: impl Future<Output = ()>,
    tls: Option<Tls>,
) {
    let (closing, closed) = watch::channel(());
    let mut connections = JoinSet::new();
    let per_address = PerAddress::new(limits.per_address);
    let mut stop = std::pin::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::debug!(%error, "could not accept a connection");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        // Let go of the connections that closed meanwhile.
        while connections.try_join_next().is_some() {}
        let Some(slot) = per_address.take(peer.ip()) else {
            tracing::debug!(%peer, "refused a connection: its address holds the most it may");
            per_address.refuse(stream);
            continue;
        };
        // Each request carries its client's address, for `ConnectInfo` (the rate limit
        // counts per address); the router itself is shared, not layered per connection.
        let router = router.clone();
        let service = service_fn(move |request: Request<Incoming>| {
            let mut request = request.map(|body| DeadlineBody::new(body, limits.body_timeout));
            request.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
            router.clone().oneshot(request)
        });
        if let Err(error) = socket2::SockRef::from(&stream).set_send_buffer_size(SEND_BUFFER) {
            tracing::debug!(%error, %peer, "could not bound a connection's send buffer");
        }
        // An event stream writes small events one at a time: Nagle's algorithm would hold
        // each behind the last one's delayed ACK (tens of milliseconds; the p99 of an
        // event forwarded through another node fell from 40-55 ms to 5-10 ms without it,
        // `trellis-bench cluster`).
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, %peer, "could not turn Nagle's algorithm off on a connection");
        }
        let closed = closed.clone();
        let tls = tls.clone();
        connections.spawn(async move {
            match tls {
                None => connection(stream, service, limits, closed, peer).await,
                Some(tls) => match tokio::time::timeout(limits.header_timeout, tls.acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => connection(stream, service, limits, closed, peer).await,
                    Ok(Err(error)) => tracing::debug!(%error, %peer, "a TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "a TLS handshake took longer than the header deadline"),
                },
            }
            drop(slot);
        });
    }
    drop(listener);
    // Every connection hears it, and finishes what it answers.
    closing.send_replace(());
    while connections.join_next().await.is_some() {}
}

/// Serves one connection (over TCP or TLS) until it ends, or finishes what it answers
/// once the server stops.
async fn connection<S, IO>(stream: IO, service: S, limits: Limits, mut closed: watch::Receiver<()>, peer: SocketAddr)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::HttpService<Incoming> + Send,
    S::Future: Send + 'static,
    S::ResBody: Send + 'static,
    <S::ResBody as hyper::body::Body>::Data: Send,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout).max_buf_size(MAX_BUFFER);
    let io = TokioIo::new(WriteDeadline::new(stream, limits.write_timeout));
    let mut connection = std::pin::pin!(http.serve_connection(io, service));
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        _ = closed.changed() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(error) = ended {
        tracing::debug!(%error, %peer, "a connection ended with an error");
    }
}
