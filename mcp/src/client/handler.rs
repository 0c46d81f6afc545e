//! What Trellis answers a server with, as an MCP client: its name, and a re-list of the
//! tools whenever the server says they changed.

use std::sync::Arc;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, RoleClient};
use tokio::sync::Notify;

/// The client side of one server's session.
#[derive(Clone)]
pub(crate) struct Handler {
    pub(super) server: String,
    /// Woken by `notifications/tools/list_changed`; the server's re-list task waits on it.
    pub(super) relist: Arc<Notify>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("trellis", env!("CARGO_PKG_VERSION")))
    }

    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        tracing::debug!(server = %self.server, "the server's tools changed");
        // A wake-up that comes while a listing runs is kept: one more listing follows.
        self.relist.notify_one();
        std::future::ready(())
    }
}
