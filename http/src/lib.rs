//! Serving an axum router over HTTP/1.1, each connection by hyper with a deadline for the
//! headers of each request: what `trellis serve` and `trellis mcp serve --http` listen with.
//!
//! `axum::serve` sets no timer, and without one hyper waits for a request's headers for
//! ever: a client that connects and stalls (or sends its headers a byte at a time) holds
//! its connection, and a file descriptor, until it goes. A thousand such clients, and
//! nobody else is answered.
//!
//! ```no_run
//! # async fn run() -> std::io::Result<()> {
//! let router = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! // Until the process ends; any future that resolves stops it.
//! let stop = std::future::pending();
//! trellis_http::serve(listener, router, std::time::Duration::from_secs(10), stop).await;
//! # Ok(())
//! # }
//! ```

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

/// How long to wait before accepting again when accepting failed (out of file descriptors,
/// mostly): the connections that hold them close meanwhile.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `router` on `listener` until `stop` resolves; then stops accepting, lets each
/// connection finish the response it is sending, and returns once all have closed. A
/// request whose headers take longer than `header_timeout` closes its connection, as does
/// a connection that sends nothing for that long (idle between requests too).
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    header_timeout: Duration,
    stop: impl Future<Output = ()>,
) {
    let (closing, closed) = watch::channel(());
    let mut connections = JoinSet::new();
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
        // Each request carries its client's address, for `ConnectInfo` (the rate limit
        // counts per address); the router itself is shared, not layered per connection.
        let router = router.clone();
        let service = service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
            router.clone().oneshot(request)
        });
        let mut closed = closed.clone();
        connections.spawn(async move {
            let mut http = http1::Builder::new();
            http.timer(TokioTimer::new()).header_read_timeout(header_timeout);
            let mut connection = std::pin::pin!(http.serve_connection(TokioIo::new(stream), service));
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
        });
    }
    drop(listener);
    // Every connection hears it, and finishes what it answers.
    closing.send_replace(());
    while connections.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};

    /// A client that connects and says nothing, or stops halfway through its headers, is
    /// cut off after the deadline; one that asks is answered meanwhile, with the address it
    /// came from (`ConnectInfo`).
    #[test]
    fn stalled_clients_are_cut_off_and_others_answered() {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
        let addr = listener.local_addr().expect("addr");
        let router = axum::Router::new().route(
            "/",
            axum::routing::get(
                |axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<std::net::SocketAddr>| async move {
                    peer.ip().to_string()
                },
            ),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = runtime.spawn(super::serve(listener, router, Duration::from_secs(1), async {
            let _ = stopped.await;
        }));
        let connect = || {
            let stream = std::net::TcpStream::connect(addr).expect("connect");
            stream.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
            stream
        };
        let silent = connect();
        let mut halfway = connect();
        halfway.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").expect("write");
        let mut asking = connect();
        asking.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("write");
        let mut answer = String::new();
        asking.read_to_string(&mut answer).expect("an answer");
        assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("127.0.0.1"), "{answer}");
        let started = Instant::now();
        for mut stream in [silent, halfway] {
            // Closed by the server: the read ends instead of waiting out its own 20 s.
            let _ = stream.read_to_end(&mut Vec::new());
        }
        assert!(started.elapsed() < Duration::from_secs(10), "cut off after about a second");
        stop.send(()).expect("the server listens for its stop");
        runtime.block_on(served).expect("the server stops");
    }
}
