//! Changes as server-sent events. The runtime calls an observer after each commit that
//! writes what it watches; the observer only signals this connection's stream, which
//! reads the new state and sends what differs from what it sent last. Changes that queue
//! up meanwhile make one event, and a client that left stops its observers at the next
//! change (their channel is closed).

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, KeepAliveStream, Sse};
use futures::stream::{self, Stream, StreamExt};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use trellis_runner::{DocId, Link, Path, Read as _, Runtime};

use super::routes::charms::{data, CharmData};
use super::routes::chat::{state, ChatState};
use super::Server;

/// Signals `changed` after every commit that writes document `doc`, while it is open.
fn watch(rt: &Runtime, doc: DocId, changed: &UnboundedSender<()>) {
    let changed = changed.clone();
    rt.observe(&Link::new(doc, Path::root()), move |_| changed.send(()).is_ok());
}

/// A document no async work ever writes: waiting for it to settle waits only for the
/// engine to finish what is queued.
const NO_TASKS: &str = "trellis-serve-no-tasks";

/// How long a stream waits for the engine to finish queued work before it reads anyway.
const QUIET: Duration = Duration::from_secs(5);

/// Waits for the next change (true), or false when no observer can send any more; then
/// for the computations that change queued, so a handler's write is never sent without
/// the derived values that follow it (observers run after each commit, and a handler and
/// the computations it makes dirty commit apart).
async fn next_change(rt: &Runtime, changes: &mut UnboundedReceiver<()>) -> bool {
    let alive = changes.recv().await.is_some();
    // A timeout here only means the engine stayed busy: the stream reads what is there.
    let _ = rt.settled(&Link::new(NO_TASKS, Path::root()), QUIET).await;
    while changes.try_recv().is_ok() {}
    alive
}

fn event(name: &str, data: &impl serde::Serialize) -> Option<Event> {
    Event::default().event(name).json_data(data).ok()
}

type Events = Sse<KeepAliveStream<stream::BoxStream<'static, Result<Event, Infallible>>>>;

fn sse(events: impl Stream<Item = Vec<Event>> + Send + 'static) -> Events {
    Sse::new(events.flat_map(|batch| stream::iter(batch.into_iter().map(Ok))).boxed()).keep_alive(KeepAlive::default())
}

/// `charm` events: the data of charm `id` now, then after each change.
pub fn charm(server: Server, id: DocId) -> Events {
    let (changed, changes) = unbounded_channel();
    watch(server.runtime(), id.clone(), &changed);
    let start = (server, id, changes, None::<CharmData>, true);
    sse(stream::unfold(start, |(server, id, mut changes, last, first)| async move {
        if !first && !next_change(server.runtime(), &mut changes).await {
            return None;
        }
        let now = data(server.runtime(), &id).ok();
        let batch = match &now {
            Some(now) if last.as_ref() != Some(now) => event("charm", now).into_iter().collect(),
            _ => Vec::new(),
        };
        Some((batch, (server, id, changes, now.or(last), false)))
    }))
}

/// What a chat stream sent last, and what it watches.
struct ChatWatch {
    server: Server,
    changed: UnboundedSender<()>,
    changes: UnboundedReceiver<()>,
    watched: HashSet<DocId>,
    chat: Option<ChatState>,
    partial: Option<String>,
    charms: HashMap<String, CharmData>,
}

impl ChatWatch {
    /// The events for what changed since the last batch; starts watching charms that
    /// were attached meanwhile.
    fn batch(&mut self) -> Vec<Event> {
        let mut batch = Vec::new();
        let now = state(&self.server);
        for attached in now.attachments.iter().filter_map(|a| a.id.as_deref()) {
            let id = DocId::from(attached);
            if self.watched.insert(id.clone()) {
                watch(self.server.runtime(), id, &self.changed);
            }
            let Ok(data) = data(self.server.runtime(), &DocId::from(attached)) else { continue };
            if self.charms.get(attached) != Some(&data) {
                batch.extend(event("charm", &data));
                self.charms.insert(attached.to_string(), data);
            }
        }
        if self.chat.as_ref() != Some(&now) {
            batch.extend(event("chat", &now));
            self.chat = Some(now);
        }
        let partial = self.server.chat().dialog().partial();
        if self.partial.as_ref() != Some(&partial) {
            batch.extend(event("partial", &super::api::Partial { text: partial.clone() }));
            self.partial = Some(partial);
        }
        batch
    }
}

/// `chat`, `partial` and `charm` events: the conversation now, then after each change.
pub fn chat(server: Server) -> Events {
    let (changed, changes) = unbounded_channel();
    let rt = server.runtime().clone();
    let result = rt.charms().result(server.chat().chatbot().charm());
    watch(&rt, result.doc.clone(), &changed);
    // The streamed reply lives in a document of its own, where `partial` leads.
    let mut watched = HashSet::from([result.doc.clone()]);
    if let Ok((live, _)) = rt.resolve(&result.child(trellis_patterns::chatbot::ChatbotField::Partial.key())) {
        if watched.insert(live.doc.clone()) {
            watch(&rt, live.doc, &changed);
        }
    }
    let start = ChatWatch { server, changed, changes, watched, chat: None, partial: None, charms: HashMap::new() };
    sse(stream::unfold((start, true), |(mut watch, first)| async move {
        if !first && !next_change(&watch.server.runtime().clone(), &mut watch.changes).await {
            return None;
        }
        let batch = watch.batch();
        Some((batch, (watch, false)))
    }))
}
