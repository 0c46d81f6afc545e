//! The transports [`TrellisMcp`] is served over: stdio and Streamable HTTP.
//!
//! Over stdio, lines pass through `super::stdio` first, so every line a client sends is
//! answered. Over Streamable HTTP (at `/mcp`, served by `trellis_http::serve` with its
//! deadlines), a client of an earlier revision gets a session and one of the current
//! revision none; every client shares one [`TrellisMcp`]'s watches and subscription budget
//! (`for_client`). Browser `Origin`s are refused, `Host` must be a loopback name unless
//! the server is remote, and a quiet stream gets a keep-alive, so that a client that
//! dropped it is noticed and its subscriptions given back.

use std::net::SocketAddr;

use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::ServiceExt;
use trellis_runner::Runtime;

use super::sessions::IdleSessions;
use super::TrellisMcp;

/// How often a quiet Streamable HTTP stream gets a keep-alive comment.
const SSE_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(5);

/// Why the server stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The space could not be opened.
    #[error(transparent)]
    Space(#[from] trellis_runner::storage::StorageError),
    /// The MCP session could not start or ended with an error.
    #[error("MCP over stdio: {0}")]
    Protocol(String),
}

/// How [`serve_http`] serves.
#[derive(Clone)]
pub struct HttpOptions {
    /// Where to listen; a port of 0 picks a free one.
    pub addr: SocketAddr,
    /// Whether requests whose `Host` is not a loopback name are served (else refused, so
    /// that DNS rebinding cannot reach the charms).
    pub remote: bool,
    /// Each connection's deadlines and the cap per address (see `trellis_http`).
    pub limits: trellis_http::Limits,
    /// How long a session with no stream open may stay silent before it is closed
    /// (default [`SESSION_IDLE`](super::SESSION_IDLE)).
    pub session_idle: std::time::Duration,
    /// TLS, to serve `https://ADDR/mcp`.
    pub tls: Option<trellis_http::Tls>,
    /// The bearer tokens let in; `None` lets every request in (loopback only: see
    /// [`serve_http`]).
    pub tokens: Option<super::bearer::TokenCheck>,
}

impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("addr", &self.addr)
            .field("remote", &self.remote)
            .field("tls", &self.tls.is_some())
            .field("tokens", &self.tokens.is_some())
            .finish_non_exhaustive()
    }
}

/// Serves the space `rt` over Streamable HTTP at `http://ADDR/mcp` (`https://` with TLS)
/// until the process ends. `ready` is called with the address bound.
///
/// Requests from web pages (any `Origin`) are refused, so a page in the user's browser
/// cannot reach the charms. A server that takes requests from other machines (`remote`)
/// must check bearer tokens: without [`HttpOptions::tokens`] it does not start.
pub async fn serve_http(rt: Runtime, options: HttpOptions, ready: impl FnOnce(SocketAddr)) -> Result<(), ServeError> {
    let HttpOptions { addr, remote, limits, session_idle, tls, tokens } = options;
    if remote && tokens.is_none() {
        return Err(ServeError::Protocol("a server other machines reach must check bearer tokens".into()));
    }
    let io = |e: std::io::Error| ServeError::Protocol(format!("HTTP on {addr}: {e}"));
    // A client that drops a quiet stream is noticed only when the server next writes to
    // it: a keep-alive every few seconds gives its subscriptions back soon after.
    let mut config =
        StreamableHttpServerConfig::default().enforce_origin_validation().with_sse_keep_alive(Some(SSE_KEEP_ALIVE));
    if remote {
        config = config.disable_allowed_hosts();
    }
    let mut router = axum::Router::new().nest_service("/mcp", service(rt, session_idle, config));
    if let Some(check) = tokens {
        let bearer = super::bearer::Bearer { check, scheme: if tls.is_some() { "https" } else { "http" } };
        let metadata = axum::routing::get(super::bearer::metadata).with_state(bearer.clone());
        router = router
            .layer(axum::middleware::from_fn_with_state(bearer, super::bearer::require))
            .route(super::bearer::METADATA_PATH, metadata.clone())
            .route(&format!("{}/mcp", super::bearer::METADATA_PATH), metadata);
    }
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(io)?;
    ready(listener.local_addr().map_err(io)?);
    match tls {
        Some(tls) => trellis_http::serve_tls(listener, router, limits, std::future::pending(), tls).await,
        None => trellis_http::serve(listener, router, limits, std::future::pending()).await,
    }
    Ok(())
}

/// The Streamable HTTP endpoint of the space `rt`, for a server that mounts it among
/// routes of its own (`trellis serve`, at `/mcp`) and checks `Host` and credentials
/// itself. Requests from web pages (any `Origin`) are still refused.
pub fn http_service(rt: Runtime, session_idle: std::time::Duration) -> StreamableHttpService<TrellisMcp, IdleSessions> {
    let config = StreamableHttpServerConfig::default()
        .enforce_origin_validation()
        .with_sse_keep_alive(Some(SSE_KEEP_ALIVE))
        .disable_allowed_hosts();
    service(rt, session_idle, config)
}

/// One server for all clients: they share its watches and subscription budget.
fn service(
    rt: Runtime,
    session_idle: std::time::Duration,
    config: StreamableHttpServerConfig,
) -> StreamableHttpService<TrellisMcp, IdleSessions> {
    let server = TrellisMcp::new(rt);
    StreamableHttpService::new(move || Ok(server.for_client()), IdleSessions::start(session_idle), config)
}

/// Serves the space `rt` over standard input and output until the client leaves.
pub async fn serve_stdio(rt: Runtime) -> Result<(), ServeError> {
    let (transport, writer) = super::stdio::transport(tokio::io::stdin(), tokio::io::stdout());
    let service = TrellisMcp::new(rt).serve(transport).await.map_err(|e| ServeError::Protocol(e.to_string()))?;
    let ended = service.waiting().await.map_err(|e| ServeError::Protocol(e.to_string()));
    // rmcp is done writing; the last of it reaches standard output.
    let _ = writer.await;
    ended.map(drop)
}
