//! Accepting connections: each is served over HTTP/1.1 by hyper, with a deadline for the
//! headers of each request. Without one, a client that connects and stalls (or sends its
//! headers a byte at a time) holds its connection, and the process's file descriptors with
//! it, for ever: a thousand such connections and nobody else is answered.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Extension;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

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
        // What `ConnectInfo` extracts (the rate limit counts per client address).
        let service = TowerToHyperService::new(router.clone().layer(Extension(ConnectInfo::<SocketAddr>(peer))));
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
