//! What Trellis answers a server with, as an MCP client: its name, a re-list of the tools
//! whenever the server says they changed, and the person's reply when the server asks
//! something mid-call (elicitation).

use std::sync::Arc;

use parking_lot::Mutex;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability,
    ErrorData, FormElicitationCapability, Implementation, UrlElicitationCapability,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ClientHandler, RoleClient};
use tokio::sync::Notify;
use trellis_builtins::sources::elicit::{Person, Question, Reply};

/// The client side of one server's session.
#[derive(Clone)]
pub(crate) struct Handler {
    pub(super) server: String,
    /// Woken by `notifications/tools/list_changed`; the server's re-list task waits on it.
    pub(super) relist: Arc<Notify>,
    /// Who answers the server's questions: the people of its calls running now.
    pub(super) people: People,
}

/// The people of a server's calls that run now, latest last.
///
/// MCP does not say which call a question belongs to; it goes to the person of the
/// latest call that is still running (with one call at a time, the call that asks).
#[derive(Clone, Default)]
pub(crate) struct People(Arc<Mutex<Vec<Entry>>>);

/// A running call's person, by the number it entered with.
type Entry = (u64, Arc<dyn Person>);

/// A call's person, known to [`People`] until this is dropped (the call ended).
pub(crate) struct Present {
    people: People,
    id: u64,
}

impl People {
    /// `person` answers the server's questions while the returned guard lives.
    pub(crate) fn enter(&self, person: Arc<dyn Person>) -> Present {
        let mut all = self.0.lock();
        let id = all.last().map_or(0, |(id, _)| id + 1);
        all.push((id, person));
        Present { people: self.clone(), id }
    }

    pub(crate) fn latest(&self) -> Option<Arc<dyn Person>> {
        self.0.lock().last().map(|(_, person)| person.clone())
    }
}

impl Drop for Present {
    fn drop(&mut self) {
        self.people.0.lock().retain(|(id, _)| *id != self.id);
    }
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(
            ElicitationCapability::new()
                .with_form(FormElicitationCapability::new().with_schema_validation(true))
                .with_url(UrlElicitationCapability::new()),
        );
        ClientConfig::new(capabilities, Implementation::new("trellis", env!("CARGO_PKG_VERSION")))
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

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        elicit(&self.server, &self.people, request).await
    }
}

/// What the person of `server`'s latest running call answers to its question `request`
/// (a request of the server's own, or an input request of a multi-round-trip call).
pub(crate) async fn elicit(
    server: &str,
    people: &People,
    request: ElicitRequestParams,
) -> Result<ElicitResult, ErrorData> {
    let Some(person) = people.latest() else {
        tracing::info!(server, "the server asked something while no call of a conversation ran: cancelled");
        return Ok(ElicitResult::new(ElicitationAction::Cancel));
    };
    let question = match request {
        ElicitRequestParams::FormElicitationParams { message, requested_schema, .. } => {
            let schema = serde_json::to_value(requested_schema)
                .map_err(|e| ErrorData::invalid_params(format!("the requested schema cannot be read: {e}"), None))?;
            Question::form(message, schema)
        }
        ElicitRequestParams::UrlElicitationParams { message, url, .. } => {
            // Shown to a person as a link to follow: only the web's own schemes.
            if !(url.starts_with("https://") || url.starts_with("http://")) {
                tracing::warn!(server, "the server asked to visit a URL that is not http(s): declined");
                return Ok(ElicitResult::new(ElicitationAction::Decline));
            }
            Question::url(message, url)
        }
        _ => return Ok(ElicitResult::new(ElicitationAction::Decline)),
    };
    Ok(match person.ask(question).await {
        Reply::Accept(serde_json::Value::Null) => ElicitResult::new(ElicitationAction::Accept),
        Reply::Accept(content) => ElicitResult::new(ElicitationAction::Accept).with_content(content),
        Reply::Decline => ElicitResult::new(ElicitationAction::Decline),
        Reply::Cancel => ElicitResult::new(ElicitationAction::Cancel),
    })
}
