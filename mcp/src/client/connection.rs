//! [`McpServer`]: one attached MCP server: its tools (listed page by page by `listing`,
//! re-listed when it says they changed), its calls, its state, and shutting it down.
//!
//! The re-list is woken by a plain `notifications/tools/list_changed` or, from
//! revision 2026-07-28 on, by a `subscriptions/listen` subscription (cancelled before
//! shutdown). A task owning the session notices when it ends: the server is reported
//! stopped and its tools leave every catalog.

use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use rmcp::model::{CallToolRequestParams, ServerNotification, SubscriptionFilter};
use rmcp::service::{Peer, RunningServiceCancellationToken, Subscription};
use rmcp::RoleClient;
use serde_json::Value;
use tokio::sync::{oneshot, watch, Notify};
use trellis_builtins::message::ToolOutput;
use trellis_builtins::sources::{CallFuture, SourceTool, ToolSource};

use super::config::{ServerSpec, Transport};
use super::handler::{Handler, People};
use super::listing::list_all;
use super::{outcome, transport, ConnectError};

/// How long a server may take to stop when detached before it is killed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Where a server stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Connected; its tools are offered.
    Ready,
    /// It went away on its own (the process exited, the connection closed): why.
    Stopped(String),
    /// It was detached and shut down.
    Detached,
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            State::Ready => f.write_str("ready"),
            State::Stopped(why) => write!(f, "stopped: {why}"),
            State::Detached => f.write_str("detached"),
        }
    }
}

/// An attached MCP server: a [`ToolSource`] whose tools are the server's.
///
/// Cloning gives another handle to the same session. The session ends with
/// [`McpServer::shutdown`], or when the last handle is dropped (the child is killed).
#[derive(Clone)]
pub struct McpServer {
    inner: Arc<Inner>,
}

struct Inner {
    spec: ServerSpec,
    peer: Peer<RoleClient>,
    pid: Option<u32>,
    /// `name version` as the server introduced itself.
    info: Option<String>,
    /// The protocol revision agreed on.
    protocol: Option<String>,
    tools: Mutex<Arc<[SourceTool]>>,
    /// What went wrong in the last listing (a cursor that did not advance, too many tools).
    notes: Mutex<Vec<String>>,
    state: Mutex<State>,
    /// Bumped each time the tools change; catalogs compare it.
    version: watch::Sender<u64>,
    /// Ends the session; taken when used.
    cancel: Mutex<Option<RunningServiceCancellationToken>>,
    /// The task that owns the session and notices its end.
    session: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The task reading the subscription to list changes, and what stops it.
    listening: Mutex<Option<(oneshot::Sender<()>, tokio::task::JoinHandle<()>)>>,
    /// Who answers the server's questions (elicitation) while calls run.
    people: People,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(cancel) = self.cancel.lock().take() {
            cancel.cancel();
        }
    }
}

impl McpServer {
    /// Starts (or opens) the server, shakes hands and lists its tools, all within
    /// `timeout`. Needs a Tokio runtime.
    pub async fn connect(spec: ServerSpec, timeout: Duration) -> Result<McpServer, ConnectError> {
        let relist = Arc::new(Notify::new());
        let people = People::default();
        let handler = Handler { server: spec.name.clone(), relist: relist.clone(), people: people.clone() };
        let session = transport::open(&spec, handler, timeout).await?;
        let peer = session.service.peer().clone();
        let info = peer.peer_info().and_then(|i| i.server_info.as_ref().map(|s| format!("{} {}", s.name, s.version)));
        let protocol = peer.peer_info().map(|i| i.protocol_version.as_str().to_string());
        // From 2026-07-28 on, a server tells of list changes only to a subscription.
        let subscribe = peer.peer_info().is_some_and(|i| {
            !i.protocol_version.has_initialize()
                && i.capabilities.tools.as_ref().and_then(|t| t.list_changed) == Some(true)
        });
        let mut listening = None;
        if subscribe {
            // Subscribed before the first listing, so no change falls between the two.
            let subscribed = tokio::time::timeout(timeout, subscribe_to_changes(&spec.name, &peer)).await;
            if let Ok(Some(subscription)) = subscribed {
                let (stop, stopped) = oneshot::channel();
                let task = tokio::spawn(relist_on_notice(spec.name.clone(), subscription, relist.clone(), stopped));
                listening = Some((stop, task));
            }
        }
        let listed = tokio::time::timeout(timeout, list_all(&peer, &spec)).await;
        let (tools, notes) = match listed {
            Ok(Ok(listed)) => listed,
            Ok(Err(message)) => return Err(ConnectError::Failed { server: spec.name, message }),
            Err(_) => return Err(ConnectError::Timeout { server: spec.name, after: timeout }),
        };
        tracing::info!(server = %spec.name, tools = tools.len(), pid = ?session.pid, "MCP server attached");
        let inner = Arc::new(Inner {
            pid: session.pid,
            info,
            protocol,
            tools: Mutex::new(tools.into()),
            notes: Mutex::new(notes),
            state: Mutex::new(State::Ready),
            version: watch::Sender::new(0),
            cancel: Mutex::new(Some(session.service.cancellation_token())),
            session: Mutex::new(None),
            listening: Mutex::new(listening),
            people,
            peer,
            spec,
        });
        let watcher = Arc::downgrade(&inner);
        let running = session.service;
        *inner.session.lock() = Some(tokio::spawn(async move {
            let ended = running.waiting().await;
            if let Some(inner) = watcher.upgrade() {
                inner.ended(&format!("{ended:?}"));
            }
        }));
        tokio::spawn(relist_on_change(Arc::downgrade(&inner), relist));
        Ok(McpServer { inner })
    }

    /// The name its tools are displayed under.
    pub fn name(&self) -> &str {
        &self.inner.spec.name
    }

    /// How it was configured.
    pub fn spec(&self) -> &ServerSpec {
        &self.inner.spec
    }

    /// Where it stands.
    pub fn state(&self) -> State {
        self.inner.state.lock().clone()
    }

    /// The name and version the server gave in the handshake.
    pub fn server_info(&self) -> Option<&str> {
        self.inner.info.as_deref()
    }

    /// The protocol revision the handshake agreed on (`2025-11-25`).
    pub fn protocol(&self) -> Option<&str> {
        self.inner.protocol.as_deref()
    }

    /// The process id of a stdio server.
    pub fn pid(&self) -> Option<u32> {
        self.inner.pid
    }

    /// What went wrong in the last listing of its tools, if anything.
    pub fn notes(&self) -> Vec<String> {
        self.inner.notes.lock().clone()
    }

    /// The version of its tools, changing each time they (or the state) change; the
    /// receiver does not keep the server alive (its channel closes when the last handle
    /// goes).
    pub fn versions(&self) -> watch::Receiver<u64> {
        self.inner.version.subscribe()
    }

    /// Waits until the tools (or the state) change after version `seen`; the new version.
    pub async fn changed_since(&self, seen: u64) -> u64 {
        let mut versions = self.inner.version.subscribe();
        let version = match versions.wait_for(|v| *v != seen).await {
            Ok(version) => *version,
            Err(_) => seen,
        };
        version
    }

    /// Ends the session: the server is told (its input closes; a child gets time to
    /// exit, then is killed) and reaped. Its tools go away.
    pub async fn shutdown(&self) {
        *self.inner.state.lock() = State::Detached;
        self.inner.clear_tools();
        // A subscription is a request the server keeps open: end it first, so the server
        // can stop as soon as its input closes.
        let listening = self.inner.listening.lock().take();
        if let Some((stop, task)) = listening {
            let _ = stop.send(());
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, task).await;
        }
        let cancel = self.inner.cancel.lock().take();
        if let Some(cancel) = cancel {
            cancel.cancel();
        }
        let session = self.inner.session.lock().take();
        if let Some(session) = session {
            if tokio::time::timeout(SHUTDOWN_GRACE * 2, session).await.is_err() {
                tracing::warn!(server = %self.name(), "the MCP server did not stop in time");
            }
        }
        tracing::info!(server = %self.name(), "MCP server detached");
    }

    /// A stdio server's command line, or an HTTP server's URL (for people).
    pub fn endpoint(&self) -> String {
        match &self.inner.spec.transport {
            Transport::Stdio { command, args, .. } => {
                std::iter::once(command.as_str()).chain(args.iter().map(String::as_str)).collect::<Vec<_>>().join(" ")
            }
            Transport::Http { url, .. } => url.clone(),
        }
    }
}

impl Inner {
    /// The session ended without being detached: the server is gone.
    fn ended(&self, how: &str) {
        let mut state = self.state.lock();
        if *state != State::Ready {
            return;
        }
        let what = match self.pid {
            Some(pid) => format!("the process (pid {pid}) exited or closed its output ({how})"),
            None => format!("the connection closed ({how})"),
        };
        tracing::warn!(server = %self.spec.name, "MCP server stopped: {what}; its tools are gone");
        *state = State::Stopped(what);
        drop(state);
        self.clear_tools();
    }

    fn clear_tools(&self) {
        *self.tools.lock() = Arc::from(Vec::new());
        self.version.send_modify(|v| *v += 1);
    }
}

/// A `subscriptions/listen` subscription to the server's tool list changes, if it
/// grants one.
async fn subscribe_to_changes(server: &str, peer: &Peer<RoleClient>) -> Option<Subscription> {
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    match peer.listen(filter).await {
        Ok(subscription) => Some(subscription),
        Err(error) => {
            tracing::debug!(server, %error, "no subscription to tool list changes; relying on plain notifications");
            None
        }
    }
}

/// Wakes the re-list on each tool list change the subscription brings, until the
/// session ends or `stop` (then the subscription is cancelled).
async fn relist_on_notice(
    server: String,
    mut subscription: Subscription,
    relist: Arc<Notify>,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut stop => {
                if let Err(error) = subscription.cancel().await {
                    tracing::debug!(server, %error, "cannot cancel the subscription");
                }
                return;
            }
            notification = subscription.next() => match notification {
                Ok(Some(ServerNotification::ToolListChangedNotification(_))) => {
                    tracing::debug!(server, "the server's tools changed (subscription)");
                    relist.notify_one();
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return,
            },
        }
    }
}

/// Lists the tools again each time the server says they changed.
async fn relist_on_change(server: Weak<Inner>, relist: Arc<Notify>) {
    loop {
        relist.notified().await;
        let Some(inner) = server.upgrade() else { return };
        if *inner.state.lock() != State::Ready {
            return;
        }
        // A server that never answers must not pin the connection (its drop stops the child).
        let listed = tokio::time::timeout(super::CONNECT_TIMEOUT, list_all(&inner.peer, &inner.spec)).await;
        match listed.unwrap_or_else(|_| Err(format!("no answer within {:?}", super::CONNECT_TIMEOUT))) {
            Ok((tools, notes)) => {
                let changed = *inner.tools.lock().as_ref() != *tools.as_slice();
                *inner.notes.lock() = notes;
                if changed {
                    tracing::info!(server = %inner.spec.name, tools = tools.len(), "MCP tools re-listed");
                    *inner.tools.lock() = tools.into();
                    inner.version.send_modify(|v| *v += 1);
                }
            }
            // Detached or stopped meanwhile (a listing cut short by that): said elsewhere, if at all.
            Err(_) if *inner.state.lock() != State::Ready => return,
            Err(error) => tracing::warn!(server = %inner.spec.name, %error, "cannot list the MCP server's tools again"),
        }
    }
}

impl ToolSource for McpServer {
    fn name(&self) -> &str {
        &self.inner.spec.name
    }

    fn tools(&self) -> Arc<[SourceTool]> {
        self.inner.tools.lock().clone()
    }

    fn version(&self) -> u64 {
        *self.inner.version.borrow()
    }

    fn trusted(&self) -> bool {
        self.inner.spec.trusted
    }

    fn call(&self, tool: &str, arguments: Value, _timeout: Duration) -> CallFuture {
        // The caller's timeout drops this future, which cancels the request.
        let inner = self.inner.clone();
        let tool = tool.to_string();
        Box::pin(async move {
            let server = &inner.spec.name;
            let state = inner.state.lock().clone();
            if state != State::Ready {
                return ToolOutput::ErrorText(format!(
                    "`{server}.{tool}` cannot run: the MCP server `{server}` is {state}"
                ));
            }
            let arguments = match arguments {
                Value::Object(arguments) => arguments,
                Value::Null => serde_json::Map::new(),
                other => {
                    let kind = if other.is_array() { "an array" } else { "not an object" };
                    return ToolOutput::ErrorText(format!(
                        "`{server}.{tool}` takes an object of arguments, not {kind}"
                    ));
                }
            };
            let mut request = CallToolRequestParams::new(tool.clone()).with_arguments(arguments);
            // The call's trace goes on in the server (`_meta.traceparent`, SEP-414).
            let trace = trellis_builtins::traced::outgoing();
            if !trace.is_empty() {
                let mut meta = rmcp::model::RequestMetaObject::new();
                for (field, value) in trace {
                    match field.as_str() {
                        "traceparent" => meta.set_traceparent(value),
                        "tracestate" => meta.set_tracestate(value),
                        _ => {}
                    }
                }
                request.meta = Some(meta);
            }
            // The server may ask the caller's person something before it answers.
            let person = trellis_builtins::sources::elicit::person();
            let _present = person.clone().map(|person| inner.people.enter(person));
            let mut called = super::rounds::call(server, &inner.peer, &inner.people, request.clone()).await;
            // A tool that runs only as a task gets the call again as one.
            if super::tasks::needs_task(&called) {
                called = super::tasks::call(server, &inner.peer, request, person).await;
            }
            match called {
                Ok(result) => outcome::from_result(server, &tool, result),
                Err(error) => outcome::from_error(server, &tool, error),
            }
        })
    }
}
