//! Changes as server-sent events. The runtime calls an observer after each commit that
//! writes what it watches; the observer only notes what changed for this connection's
//! stream, which reads the new state and sends what differs from what it sent last (for
//! the chat, only that: see `super::delta`). Changes that pile up meanwhile make one event
//! (a client that stops reading holds one note per thing watched, not one per commit, and
//! `trellis_http` closes its connection once a write waits too long), and a client that
//! leaves takes its observers with it. A stream ends when the token that opened it is
//! revoked.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, KeepAliveStream, Sse};
use futures::stream::{self, Stream, StreamExt};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;
use trellis_runner::{DocId, Link, Observation, Path, Read as _, Runtime};

use super::auth::Credential;
use super::delta::{digest, SentChat, SentText};
use super::routes::charms::data;
use super::routes::chat::state;
use super::Server;

/// What changed since a stream last looked, each thing once, and the signal that wakes it.
struct Noted<W> {
    changed: Mutex<Vec<W>>,
    wake: Notify,
}

/// The changes a stream waits for, and its observers: the stream going (its client left)
/// stops them.
struct Changes<W> {
    noted: Arc<Noted<W>>,
    observations: Vec<Observation>,
}

impl<W: Clone + PartialEq + Send + Sync + 'static> Changes<W> {
    fn new() -> Self {
        Changes {
            noted: Arc::new(Noted { changed: Mutex::new(Vec::new()), wake: Notify::new() }),
            observations: Vec::new(),
        }
    }

    /// Notes `what` after every commit that writes document `doc`, while the stream lives.
    fn watch(&mut self, rt: &Runtime, doc: DocId, what: W) {
        let noted = self.noted.clone();
        let observation = rt.observe(&Link::new(doc, Path::root()), move |_| {
            let mut changed = noted.changed.lock();
            if !changed.contains(&what) {
                changed.push(what.clone());
            }
            drop(changed);
            noted.wake.notify_one();
            true
        });
        self.observations.push(observation);
    }

    /// Waits for the next changes: what changed (each once). Then waits for the
    /// computations those changes queued, so a handler's write is never sent without the
    /// derived values that follow it (observers run after each commit, and a handler and
    /// the computations it makes dirty commit apart).
    async fn next(&self, rt: &Runtime) -> Vec<W> {
        self.noted.wake.notified().await;
        // A timeout here only means the engine stayed busy: the stream reads what is there.
        let _ = rt.settled(&Link::new(NO_TASKS, Path::root()), QUIET).await;
        std::mem::take(&mut *self.noted.changed.lock())
    }
}

/// A document no async work ever writes: waiting for it to settle waits only for the
/// engine to finish what is queued.
const NO_TASKS: &str = "trellis-serve-no-tasks";

/// How long a stream waits for the engine to finish queued work before it reads anyway.
const QUIET: Duration = Duration::from_secs(5);

fn event(name: &str, data: &impl serde::Serialize) -> Option<Event> {
    Event::default().event(name).json_data(data).ok()
}

type Events = Sse<KeepAliveStream<stream::BoxStream<'static, Result<Event, Infallible>>>>;

/// The events of `batches`, until `credential` is revoked.
fn sse(server: Server, credential: Credential, batches: impl Stream<Item = Vec<Event>> + Send + 'static) -> Events {
    let events = batches.flat_map(|batch| stream::iter(batch.into_iter().map(Ok)));
    Sse::new(events.take_until(credential.revoked(server)).boxed()).keep_alive(KeepAlive::default())
}

/// `charm` events: the data of charm `id` now, then after each change.
pub fn charm(server: Server, credential: Credential, id: DocId) -> Events {
    let mut changes = Changes::new();
    changes.watch(server.runtime(), id.clone(), ());
    let start = (server.clone(), id, changes, None::<u64>, true);
    sse(
        server,
        credential,
        stream::unfold(start, |(server, id, changes, last, first)| async move {
            if !first {
                changes.next(server.runtime()).await;
            }
            let now = data(server.runtime(), &id).ok();
            let digest = now.as_ref().map(digest);
            let batch = match &now {
                Some(now) if last != digest => event("charm", now).into_iter().collect(),
                _ => Vec::new(),
            };
            Some((batch, (server, id, changes, digest.or(last), false)))
        }),
    )
}

/// What changed, for a chat stream.
#[derive(Debug, Clone, PartialEq)]
enum Changed {
    /// The chatbot's document: the conversation, attachments, waiting calls, tools.
    Chat,
    /// The streamed reply's document.
    Partial,
    /// An attached charm.
    Charm(DocId),
}

/// What a chat stream sent, as digests, and what it watches.
struct ChatWatch {
    server: Server,
    changes: Changes<Changed>,
    watched: HashSet<DocId>,
    chat: Option<SentChat>,
    partial: SentText,
    charms: HashMap<DocId, u64>,
}

impl ChatWatch {
    /// The events for what changed: a streamed delta reads only the reply, a charm's
    /// change only that charm; the conversation's change reads its state (all of it the
    /// first time, what changed after), and starts watching charms attached meanwhile.
    fn batch(&mut self, changed: &[Changed]) -> Vec<Event> {
        let mut batch = Vec::new();
        let mut charms: Vec<DocId> =
            changed.iter().filter_map(|c| if let Changed::Charm(id) = c { Some(id.clone()) } else { None }).collect();
        let now = changed.contains(&Changed::Chat).then(|| state(&self.server));
        for attached in now.iter().flat_map(|s| &s.attachments).filter_map(|a| a.id.as_deref()) {
            let id = DocId::from(attached);
            if self.watched.insert(id.clone()) {
                self.changes.watch(self.server.runtime(), id.clone(), Changed::Charm(id.clone()));
                charms.push(id);
            }
        }
        for id in charms {
            let Ok(data) = data(self.server.runtime(), &id) else { continue };
            let digest = digest(&data);
            if self.charms.get(&id) != Some(&digest) {
                batch.extend(event("charm", &data));
                self.charms.insert(id, digest);
            }
        }
        match (now, &mut self.chat) {
            (Some(now), Some(sent)) => batch.extend(sent.change(now).and_then(|change| event("change", &change))),
            (Some(now), None) => {
                self.chat = Some(SentChat::new(&now));
                batch.extend(event("chat", &now));
            }
            (None, _) => {}
        }
        if changed.contains(&Changed::Partial) {
            batch
                .extend(self.partial.change(&self.server.chat().dialog().partial()).and_then(|p| event("partial", &p)));
        }
        batch
    }
}

/// `chat`, `change`, `partial` and `charm` events: the conversation now, then after each
/// change.
pub fn chat(server: Server, credential: Credential) -> Events {
    let mut changes = Changes::new();
    let rt = server.runtime().clone();
    let result = rt.charms().result(server.chat().chatbot().charm());
    changes.watch(&rt, result.doc.clone(), Changed::Chat);
    // The streamed reply lives in a document of its own, where `partial` leads.
    let mut watched = HashSet::from([result.doc.clone()]);
    if let Ok((live, _)) = rt.resolve(&result.child(trellis_patterns::chatbot::ChatbotField::Partial.key())) {
        if watched.insert(live.doc.clone()) {
            changes.watch(&rt, live.doc, Changed::Partial);
        }
    }
    let start = ChatWatch {
        server: server.clone(),
        changes,
        watched,
        chat: None,
        partial: SentText::default(),
        charms: HashMap::new(),
    };
    sse(
        server,
        credential,
        stream::unfold((start, true), |(mut watch, first)| async move {
            let changed = if first {
                vec![Changed::Chat, Changed::Partial]
            } else {
                let rt = watch.server.runtime().clone();
                watch.changes.next(&rt).await
            };
            let batch = watch.batch(&changed);
            Some((batch, (watch, false)))
        }),
    )
}
