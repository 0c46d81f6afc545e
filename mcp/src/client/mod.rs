//! Trellis as an MCP client: any MCP server's tools in every dialog.
//!
//! [`McpServer::connect`] starts a server's command (stdio) or opens its Streamable HTTP
//! URL, shakes hands and lists its tools (page by page; a cursor that never advances
//! stops the listing). [`attach`] makes it a tool source of a runtime
//! ([`trellis_builtins::sources`]): its tools are in every catalog, displayed
//! `server.tool`. When the server sends `notifications/tools/list_changed`, the tools are
//! listed again and catalogs rebuild. A call has the dialog's timeout; a result marked
//! `isError` and a JSON-RPC error both reach the model as error texts. The server's
//! standard error goes to the log. [`detach`] shuts it down (its input closes, then it is
//! killed if it lingers, and reaped); a server that dies on its own is reaped, logged,
//! shown as stopped, and its tools leave the catalogs.
//!
//! Servers come from `--mcp 'name=command args'` flags and `mcpServers` files
//! ([`config`]).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use trellis_mcp::client::{attach, detach, McpServer, ServerSpec};
//! let rt = trellis_runner::Runtime::in_memory();
//! let spec = ServerSpec::from_flag("time=python3 -m mcp_server_time")?;
//! let server = McpServer::connect(spec, Duration::from_secs(30)).await?;
//! attach(&rt, &server)?;
//! let catalog = trellis_builtins::catalog::Catalog::build(&rt, &serde_json::Value::Null);
//! assert!(catalog.get("time.get_current_time").is_some());
//! detach(&rt, &server).await;
//! # Ok(()) }
//! ```

pub mod config;
mod connection;
mod handler;
mod http;
mod listing;
mod outcome;
mod rounds;
pub mod signin;
mod stdio;
mod tasks;
mod transport;

use std::sync::Arc;
use std::time::Duration;

pub use config::{ConfigError, OAuthClient, ServerSpec, Transport};
pub use connection::{McpServer, State};
pub use listing::MAX_TOOLS;
use trellis_builtins::sources::{self, SourceError};
use trellis_runner::Runtime;

/// How long connecting to a server (start, handshake, first listing) may take by default.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a server could not be attached.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Starting, the handshake or the listing failed.
    #[error("MCP server `{server}`: {message}")]
    Failed {
        /// The server.
        server: String,
        /// What failed.
        message: String,
    },
    /// It took too long.
    #[error(
        "MCP server `{server}` did not answer within {after:?}; is it an MCP server, and does it start that slowly?"
    )]
    Timeout {
        /// The server.
        server: String,
        /// The time allowed.
        after: Duration,
    },
    /// A source with its name is attached already.
    #[error(transparent)]
    Source(#[from] SourceError),
}

/// Offers `server`'s tools in every catalog `rt` builds.
///
/// While the server is attached, each change of its tools (a re-list after
/// `tools/list_changed`, the server stopping) is announced to `rt`
/// ([`sources::announce_change`]), so what the space derives from the catalog follows.
/// That needs a tokio runtime; attached outside one, the catalogs built for requests still
/// follow, and the derived tool lists catch up at their next change.
pub fn attach(rt: &Runtime, server: &McpServer) -> Result<(), SourceError> {
    // Subscribed before attaching: a change in between is not missed.
    let mut versions = server.versions();
    sources::attach(rt, Arc::new(server.clone()))?;
    if let Ok(tokio) = tokio::runtime::Handle::try_current() {
        // Holds neither the server (its last handle going stops the child and ends this
        // task) nor the runtime.
        let weak = rt.downgrade();
        tokio.spawn(async move {
            while versions.changed().await.is_ok() {
                let Some(rt) = weak.upgrade() else { break };
                sources::announce_change(&rt);
                drop(rt);
                // A server that changes its tools without pause costs a commit per
                // ANNOUNCE_GAP at most: changes meanwhile are one announcement.
                tokio::time::sleep(ANNOUNCE_GAP).await;
            }
        });
    }
    Ok(())
}

/// The shortest time between two announcements of one server's tool changes.
const ANNOUNCE_GAP: Duration = Duration::from_millis(100);

/// Takes `server`'s tools away from `rt` and shuts it down.
pub async fn detach(rt: &Runtime, server: &McpServer) {
    sources::detach(rt, server.name());
    server.shutdown().await;
}

/// Connects to every server of `specs` at once; each result in the order given.
pub async fn connect_all(specs: Vec<ServerSpec>, timeout: Duration) -> Vec<Result<McpServer, ConnectError>> {
    let connecting = specs.into_iter().map(|spec| McpServer::connect(spec, timeout));
    futures::future::join_all(connecting).await
}
