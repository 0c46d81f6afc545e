//! Ends Streamable HTTP sessions that went quiet.
//!
//! rmcp's [`LocalSessionManager`] ends a session after five minutes without a message
//! (its `keep_alive`), and a session that waits for notifications on a quiet space sends
//! none: a shorter `keep_alive` would end the very sessions that listen. So
//! [`IdleSessions`] wraps it and tells the two apart by what a listener holds, an open
//! stream: a session with no stream open (no listening `GET`, no request under way) that
//! has sent nothing for the idle time is closed, and its subscriptions go back to the
//! budget with it. A session with a stream open is left to rmcp's `keep_alive`, which
//! catches connections that died without a word. A client whose session was closed is
//! answered 404 and, as the protocol asks of it, starts a new one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt as _};
use parking_lot::Mutex;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::common::server_side_http::{ServerSseMessage, SessionId};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{EventStore, RestoreOutcome, SessionManager};

/// How long a session with no stream open may stay silent before it is closed.
pub const SESSION_IDLE: Duration = Duration::from_secs(60);

/// The sweeper looks this many times per idle time, so a session ends at most a quarter
/// of the idle time late.
const SWEEPS_PER_IDLE: u32 = 4;

/// rmcp's session manager, whose sessions end once idle with no stream open.
pub struct IdleSessions {
    inner: LocalSessionManager,
    idle: Duration,
    /// Milliseconds are counted from here, so activity fits in an atomic.
    epoch: Instant,
    activity: Mutex<HashMap<SessionId, Arc<Activity>>>,
}

/// What a session did lately.
#[derive(Default)]
struct Activity {
    /// When it last sent something, or last closed a stream (ms since the epoch).
    last: AtomicU64,
    /// Streams open on it: a listening `GET` and requests whose answer is under way.
    streams: AtomicUsize,
}

/// Holds a stream open in its session's count for as long as the stream lives.
struct Open {
    activity: Arc<Activity>,
    epoch: Instant,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.activity.last.store(millis(self.epoch), Ordering::Relaxed);
        self.activity.streams.fetch_sub(1, Ordering::AcqRel);
    }
}

fn millis(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl IdleSessions {
    /// Sessions of a [`LocalSessionManager`] with its defaults, closed after `idle` with
    /// no stream open. Starts the sweeper on the current tokio runtime; it stops when
    /// the manager is dropped.
    pub fn start(idle: Duration) -> Arc<Self> {
        let sessions = Arc::new(IdleSessions {
            inner: LocalSessionManager::default(),
            idle,
            epoch: Instant::now(),
            activity: Mutex::new(HashMap::new()),
        });
        tokio::spawn(sweep(Arc::downgrade(&sessions), idle / SWEEPS_PER_IDLE));
        sessions
    }

    /// Marks `id` as active now; its record, if the session is known.
    fn touch(&self, id: &SessionId) -> Option<Arc<Activity>> {
        let activity = self.activity.lock().get(id).cloned()?;
        activity.last.store(millis(self.epoch), Ordering::Relaxed);
        Some(activity)
    }

    /// Counts a stream as open on `id` until the returned guard drops: taken before the
    /// stream is asked for, so a sweep cannot close the session under a request going in.
    fn open(&self, id: &SessionId) -> Option<Open> {
        let activity = self.touch(id)?;
        activity.streams.fetch_add(1, Ordering::AcqRel);
        Some(Open { activity, epoch: self.epoch })
    }

    /// Closes every session idle for the idle time with no stream open, and forgets
    /// those rmcp ended on its own.
    async fn close_idle(&self) {
        let now = millis(self.epoch);
        let idle = u64::try_from(self.idle.as_millis()).unwrap_or(u64::MAX);
        let known: Vec<(SessionId, Arc<Activity>)> =
            self.activity.lock().iter().map(|(id, activity)| (id.clone(), activity.clone())).collect();
        for (id, activity) in known {
            let gone = !self.inner.has_session(&id).await.unwrap_or(false);
            // Looked at after the await: a request that came meanwhile keeps its session.
            let quiet = activity.streams.load(Ordering::Acquire) == 0
                && now.saturating_sub(activity.last.load(Ordering::Relaxed)) >= idle;
            if quiet && !gone {
                tracing::debug!(session = %id, "closing an MCP session idle with no stream open");
                if let Err(error) = self.inner.close_session(&id).await {
                    tracing::warn!(session = %id, %error, "could not close an idle MCP session");
                }
            }
            if quiet || gone {
                self.activity.lock().remove(&id);
            }
        }
    }
}

/// `stream`, with `open` dropped when it is.
fn kept<S: Stream<Item = ServerSseMessage>>(open: Option<Open>, stream: S) -> impl Stream<Item = ServerSseMessage> {
    stream.map(move |message| {
        let _open = &open;
        message
    })
}

async fn sweep(sessions: Weak<IdleSessions>, every: Duration) {
    let mut ticks = tokio::time::interval(every.max(Duration::from_millis(100)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(sessions) = sessions.upgrade() else { return };
        sessions.close_idle().await;
    }
}

type Inner = LocalSessionManager;
type InnerError = <Inner as SessionManager>::Error;

impl SessionManager for IdleSessions {
    type Error = InnerError;
    type Transport = <Inner as SessionManager>::Transport;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.inner.create_session().await?;
        let activity = Activity { last: AtomicU64::new(millis(self.epoch)), streams: AtomicUsize::new(0) };
        self.activity.lock().insert(id.clone(), Arc::new(activity));
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.touch(id);
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.activity.lock().remove(id);
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let open = self.open(id);
        Ok(kept(open, self.inner.create_stream(id, message).await?))
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        self.touch(id);
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let open = self.open(id);
        Ok(kept(open, self.inner.create_standalone_stream(id).await?))
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let open = self.open(id);
        Ok(kept(open, self.inner.resume(id, last_event_id).await?))
    }

    async fn restore_session(&self, id: SessionId) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        self.inner.restore_session(id).await
    }

    fn event_store(&self) -> Option<Arc<dyn EventStore>> {
        self.inner.event_store()
    }
}
