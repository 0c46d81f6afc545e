//! Trellis and the Model Context Protocol, both ways.
//!
//! **As a server** ([`server`]): every handler of a space's charms is an MCP tool, for any
//! MCP host (desktop and IDE assistants), over stdio or Streamable HTTP.
//! Tools come from the same catalog the chat uses, with the same wire names
//! (`Counter_increment`, the title `Counter.increment`), input schemas, validation and
//! change summaries. A handler that needs a person's approval is listed but refused: the
//! host's user approves such calls in `trellis chat`, where the approval is recorded.
//! Each charm's data is a resource, `trellis://charm/ID` (JSON, streams left out), and it
//! is live: a client that subscribes to one gets `notifications/resources/updated` each
//! time the charm's cells change, whoever changed them. [`CREATE_CHARM`] makes a charm of
//! any registered pattern; when charms come, go or are renamed, the client gets
//! `notifications/tools/list_changed` and `notifications/resources/list_changed`. Clients
//! subscribe the current revision's way (2026-07-28, `subscriptions/listen`) or with
//! `resources/subscribe`, at most [`MAX_SUBSCRIPTIONS`] at once.
//!
//! ```no_run
//! # async fn serve() -> Result<(), trellis_mcp::ServeError> {
//! let rt = trellis_runner::Runtime::open("space.sqlite")?;
//! trellis_mcp::serve_stdio(rt).await
//! # }
//! ```
//!
//! **As a client** ([`client`]): any MCP server (a command over stdio, or a Streamable
//! HTTP URL) attached as a tool source of a runtime, so its tools are in every dialog's
//! catalog, displayed `server.tool`.

pub mod client;
pub mod server;

pub use server::{
    serve_http, serve_stdio, HttpOptions, ServeError, TokenCheck, TrellisMcp, CALL_TIMEOUT, CHARM_URI, CREATE_CHARM,
    MAX_SUBSCRIPTIONS, SESSION_IDLE, SESSION_SHARE,
};
