//! `trellis serve`: the space over HTTP, a JSON API and a web chat, in one process.
//!
//! - `routes/`: the API, one module per resource (`patterns`, `charms`, `chat`, `files`
//!   (the conversation's files), `interactions`, `plugins`, `tokens`), and [`api`]: the
//!   table of endpoints that builds both the router and the OpenAPI document
//!   (`/openapi.json`), so the two cannot drift apart;
//! - `auth`: same-origin checks, the one-time token, session cookies, bearer tokens
//!   (`crate::tokens`: kept in the space as hashes), JSON writes only (415);
//! - `limits`: body size (413; a message's files have a larger limit), message length
//!   and file count (422), request rate (429);
//! - `events`: charm and chat changes as server-sent events, from the runtime's observers
//!   (`delta`: a chat stream sends the conversation once, then what changed), each stream
//!   ending when the token that opened it is revoked;
//! - `assets`: the page (HTML, CSS, JS, and the Web Worker that runs plugins' WebAssembly),
//!   embedded in the binary.
//!
//! It uses `crate::session` and `crate::tokens`, never `crate::cli`: the command starts
//! the server and talks to it through `crate::client::Remote`; the server does not reach
//! back. Each connection is held to the `trellis_http::Limits` in `Options` (the
//! command's `--header-timeout`, `--body-timeout`, `--write-timeout`,
//! `--connections-per-address`).

mod api;
mod assets;
mod auth;
mod delta;
mod error;
mod events;
mod follower;
mod forward;
mod limits;
mod openapi;
mod probes;
mod routes;
mod scripts;
mod spaces;

pub use spaces::{run_many, NoSuchSpace, Node, OpenRequest, Opened};

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use axum::middleware::from_fn_with_state;
use trellis_runner::Runtime;

use crate::handoff;
use crate::session::Session;

/// How `trellis serve` runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where to listen (a port of 0 picks one).
    pub addr: SocketAddr,
    /// Whether `addr` may be an address other machines reach.
    pub allow_remote: bool,
    /// The chatbot pattern whose conversation the chat routes drive.
    pub chatbot: String,
    /// Requests per minute per client address.
    pub rate_per_minute: u32,
    /// The deadlines and the cap per address each connection is held to.
    pub limits: trellis_http::Limits,
    /// The space's file, when it is kept in one (its hand-off file goes beside it); a
    /// space in PostgreSQL has its address in its lease instead.
    pub space: Option<std::path::PathBuf>,
    /// The program's tools defined in Rust, which its chatbot's dialog may refer to.
    pub tools: trellis_builtins::tool::ToolRegistry,
    /// The directory clients may choose scripted models from (`scripted:PATH`), if any.
    pub scripts: Option<std::path::PathBuf>,
}

/// The path a space's routes are served under: empty for a server of one space,
/// `/spaces/NAME` for a server of many (a request extension; the page's sign-in redirects
/// and scopes its cookie there).
#[derive(Debug, Clone, Default)]
pub struct Base(pub String);

/// What a server does with its space's conversation.
enum Role {
    /// It holds the space: it runs the conversation, offers the page's plugin tools, and
    /// tells the conversation what its watches found while nobody ran it.
    Holder,
    /// Beside a chat, which runs the conversation and its plugins as it did.
    BesideChat,
    /// It answers from a copy of a space another node holds (see [`follower`]), which
    /// runs the conversation.
    Copy(follower::Following),
}

/// The server's shared state: cheap to clone, one per process.
#[derive(Clone)]
pub struct Server(Arc<Inner>);

struct Inner {
    rt: Runtime,
    chat: Session,
    auth: auth::Auth,
    /// Shared by the spaces a server of many serves: a client's rate is the node's.
    limits: Arc<limits::RateLimit>,
    addr: SocketAddr,
    remote: bool,
    scripts: scripts::Scripts,
    /// For a copy of a space another node holds: held, never read, so that the copy is
    /// kept up to date while a server of it lives (an event stream's too).
    _following: Option<follower::Following>,
}

impl Server {
    /// The state of a server of `rt`'s space at `addr`, with its one-time sign-in token
    /// and the bearer token of the hand-off file.
    async fn new(
        rt: Runtime,
        options: &Options,
        addr: SocketAddr,
        limits: Arc<limits::RateLimit>,
        role: Role,
    ) -> anyhow::Result<(Server, String, String)> {
        let scripts = scripts::Scripts::new(options.scripts.as_deref())?;
        // The page runs installed bundles; a program's Rust plugins run in `trellis chat`.
        let chat = Session::attach(&rt, &options.chatbot, options.tools.clone(), &[])?;
        if let Role::Holder = role {
            // The page runs the enabled plugins' tools: the model is offered them as client tools.
            chat.offer_plugin_tools().await?;
            // What the watches fired while nobody ran the conversation starts a turn now.
            let dialog = chat.dialog().clone();
            tokio::spawn(async move {
                if let Err(error) = dialog.deliver_watches().await {
                    tracing::warn!(%error, "could not tell the conversation what its watches found");
                }
            });
        }
        let (auth, token, local) = auth::Auth::new()?;
        let following = match role {
            Role::Copy(following) => Some(following),
            Role::Holder | Role::BesideChat => None,
        };
        let inner =
            Inner { rt, chat, auth, limits, addr, remote: options.allow_remote, scripts, _following: following };
        Ok((Server(Arc::new(inner)), token, local))
    }

    fn runtime(&self) -> &Runtime {
        &self.0.rt
    }

    fn chat(&self) -> &Session {
        &self.0.chat
    }

    fn scripts(&self) -> &scripts::Scripts {
        &self.0.scripts
    }

    fn auth(&self) -> &auth::Auth {
        &self.0.auth
    }

    fn limits(&self) -> &limits::RateLimit {
        &self.0.limits
    }

    fn listening(&self) -> auth::Listening {
        auth::Listening { addr: self.0.addr, remote: self.0.remote }
    }
}

/// Runs the server on `rt` until the process ends; prints the address to open, with its
/// one-time sign-in token, on standard error.
pub async fn run(rt: Runtime, options: Options) -> anyhow::Result<()> {
    let (listener, addr) = listen(&options).await?;
    let limits = Arc::new(limits::RateLimit::new(options.rate_per_minute));
    let checked = rt.clone();
    let ready: probes::Readiness = Arc::new(move || checked.space().check_writable());
    let (server, token, local) = Server::new(rt, &options, addr, limits, Role::Holder).await?;
    // A server of many spaces counts a client's requests before it finds their space.
    let limited = from_fn_with_state(server.clone(), auth::rate_limit);
    // Traced outermost (a request refused by the rate limit too), the probes not at all.
    let traced = axum::middleware::from_fn(crate::telemetry::http::traced);
    let router = router(server).layer(limited).layer(traced).merge(probes::routes(ready));
    // Other `trellis` commands on this space find the server here while it runs.
    // They reach it on loopback only (they refuse to send the token elsewhere).
    let local_addr = match addr.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::from(([127, 0, 0, 1], addr.port())),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, addr.port()))
        }
        _ => addr,
    };
    let handoff = handoff::Handoff { url: format!("http://{local_addr}"), token: local };
    let written = options.space.as_deref().map(|space| handoff.write(space)).transpose()?;
    // Said once the hand-off file is there: a command run as soon as the server says where
    // it listens finds the server, not a space in use.
    let name = crate::program::name();
    eprintln!("{name} serve: open http://{addr}/?token={token}");
    eprintln!("(the link works once; API clients send `Authorization: Bearer TOKEN` from `{name} token new`)");
    trellis_http::serve(listener, router, options.limits, stopped()).await;
    if let Some(written) = written {
        written.remove();
    }
    Ok(())
}

/// The API of a chat's space, served on loopback beside the chat while it waits for an
/// answer only a person can give mid-call (a tool's question), so that `trellis resolve`
/// and `trellis pending` in another process reach the conversation (and the answering
/// command can follow the reply): its hand-off file beside the space says where, until
/// this is dropped.
pub struct BesideChat {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    written: Option<handoff::Written>,
}

impl BesideChat {
    /// Serves `rt`'s space (its file `space`, the conversation of `chatbot`) on a port of
    /// 127.0.0.1 it picks.
    pub async fn start(
        rt: Runtime,
        space: &std::path::Path,
        chatbot: &str,
        tools: trellis_builtins::tool::ToolRegistry,
    ) -> anyhow::Result<BesideChat> {
        let options = Options {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            allow_remote: false,
            chatbot: chatbot.to_string(),
            rate_per_minute: 600,
            limits: trellis_http::Limits::default(),
            space: Some(space.to_path_buf()),
            tools,
            scripts: None,
        };
        let (listener, addr) = listen(&options).await?;
        let limits = Arc::new(limits::RateLimit::new(options.rate_per_minute));
        let (server, _sign_in, local) = Server::new(rt, &options, addr, limits, Role::BesideChat).await?;
        let router = router(server);
        let written = handoff::Handoff { url: format!("http://{addr}"), token: local }.write(space)?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(trellis_http::serve(listener, router, options.limits, async {
            let _ = stopped.await;
        }));
        Ok(BesideChat { stop: Some(stop), written: Some(written) })
    }
}

impl Drop for BesideChat {
    fn drop(&mut self) {
        if let Some(written) = self.written.take() {
            written.remove();
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Binds `options.addr` (refusing an address other machines reach unless allowed); the
/// listener and the address it took.
async fn listen(options: &Options) -> anyhow::Result<(tokio::net::TcpListener, SocketAddr)> {
    if !options.addr.ip().is_loopback() && !options.allow_remote {
        anyhow::bail!(
            "{} is not a loopback address: other machines could reach your charms there (anyone with a token \
             acts as you, over plain HTTP); use 127.0.0.1, or pass --allow-remote if that is what you want",
            options.addr
        );
    }
    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .with_context(|| format!("cannot listen on {}", options.addr))?;
    let addr = listener.local_addr().context("cannot read the address bound")?;
    Ok((listener, addr))
}

/// Resolves on Ctrl-C or SIGTERM, so the server can remove its hand-off file.
async fn stopped() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

/// A space's whole router: the API (authenticated), the page and the OpenAPI document,
/// behind the origin check (the rate limit is the caller's).
fn router(server: Server) -> axum::Router {
    let api = api::endpoints()
        .into_iter()
        .fold(axum::Router::new(), |router, endpoint| router.route(endpoint.path, endpoint.handler))
        // Signed in first (401), then a JSON write (415).
        .layer(axum::middleware::from_fn(auth::require_json))
        .layer(from_fn_with_state(server.clone(), auth::require_auth));
    // MCP hosts reach the space's charms at `/mcp` with a bearer token, as the API does.
    let mcp = trellis_mcp::server::http_service(server.runtime().clone(), trellis_mcp::server::SESSION_IDLE);
    let mcp =
        axum::Router::new().nest_service("/mcp", mcp).layer(from_fn_with_state(server.clone(), auth::require_auth));
    axum::Router::new()
        .merge(api)
        .merge(mcp)
        .merge(assets::routes())
        .route("/openapi.json", axum::routing::get(openapi::document))
        .fallback(|| async { error::ApiError::not_found("no such route; /openapi.json lists the API") })
        .method_not_allowed_fallback(|| async {
            let status = axum::http::StatusCode::METHOD_NOT_ALLOWED;
            error::ApiError::new(
                status,
                "this route does not take that method (see `Allow`; /openapi.json lists the API)",
            )
        })
        .layer(from_fn_with_state(server.clone(), auth::same_origin))
        .with_state(server)
}
