//! The runtime: one space, its scheduler, handlers, patterns, builtins and charms.
//!
//! Work (handler events and dirty computations) runs on whichever thread asks for it,
//! one item at a time under the engine lock: handlers never run concurrently with each
//! other or with computations, so every computation sees a settled state. Transactions
//! from outside the engine (`transact`) run concurrently and are validated at commit.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use futures::channel::oneshot;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::builtin::BuiltinRegistry;
use crate::charm::CharmState;
use crate::error::{BoxError, Error, Result};
use crate::link::{DocId, Link};
use crate::pattern::PatternRegistry;
use crate::scheduler::{ComputationId, ComputeFn, Graph};
use crate::space::{Commit, Space};
use crate::storage::{Durable, SqliteStorage, Storage, StorageError};
use crate::tx::{Read, Tx};
use crate::value::{Path, Value};

/// How many times a transaction is retried after a conflict before giving up.
pub const MAX_ATTEMPTS: u32 = 16;

/// How many unobserved errors the runtime keeps for [`Runtime::take_errors`].
const ERROR_LOG: usize = 256;

/// The body of a handler: gets the transaction and the event as JSON.
pub type HandlerFn = Arc<dyn Fn(&Tx, serde_json::Value) -> Result<(), BoxError> + Send + Sync>;

/// A live handler for one stream.
#[derive(Clone)]
pub struct Handler {
    /// The charm whose handler this is.
    pub owner: DocId,
    /// The event schema, if the handler has one.
    pub schema: Option<serde_json::Value>,
    /// The code.
    pub run: HandlerFn,
}

/// What a successful [`Runtime::send`] reports.
#[derive(Debug)]
pub struct Sent {
    /// The paths the handler's transaction wrote, per document.
    pub changes: Vec<(DocId, Vec<Path>)>,
}

type Reply = oneshot::Sender<Result<(Sent, (u64, Durable))>>;
type ReplyReceiver = oneshot::Receiver<Result<(Sent, (u64, Durable))>>;

struct Event {
    stream: Link,
    handler: Handler,
    event: serde_json::Value,
    reply: Option<Reply>,
}

type Observer = Arc<dyn Fn(&Runtime) -> bool + Send + Sync>;

pub(crate) struct Inner {
    pub space: Space,
    graph: Mutex<Graph>,
    events: Mutex<VecDeque<Event>>,
    engine: Mutex<()>,
    handlers: DashMap<Link, Handler>,
    observers: DashMap<DocId, Vec<(Path, Observer)>>,
    pub patterns: PatternRegistry,
    pub builtins: BuiltinRegistry,
    pub charms: CharmState,
    tasks: AtomicUsize,
    task_docs: DashMap<DocId, usize>,
    idle: Notify,
    errors: Mutex<VecDeque<Error>>,
}

/// A Trellis runtime. Cheap to clone; clones share everything.
///
/// ```
/// use trellis_runner::prelude::*;
///
/// let rt = Runtime::in_memory();
/// let count = rt.new_cell("count", 1i64)?;
/// let double = rt.computed("double", {
///     let count = count.clone();
///     move |tx| Ok(count.get(tx)? * 2)
/// })?;
/// rt.transact(|tx| count.set(tx, 21))?;
/// assert_eq!(double.get(&rt)?, 42);
/// # Ok::<(), trellis_runner::Error>(())
/// ```
#[derive(Clone)]
pub struct Runtime(pub(crate) Arc<Inner>);

impl Runtime {
    /// A runtime whose space lives only in memory.
    pub fn in_memory() -> Self {
        Self::with_space(Space::in_memory())
    }

    /// A runtime on a durable SQLite space at `path` (created if missing).
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Self, StorageError> {
        Self::with_storage(Box::new(SqliteStorage::open(path)?))
    }

    /// A runtime on any storage backend.
    pub fn with_storage(storage: Box<dyn Storage>) -> Result<Self, StorageError> {
        Ok(Self::with_space(Space::with_storage(storage)?))
    }

    fn with_space(space: Space) -> Self {
        Runtime(Arc::new(Inner {
            space,
            graph: Mutex::new(Graph::default()),
            events: Mutex::new(VecDeque::new()),
            engine: Mutex::new(()),
            handlers: DashMap::new(),
            observers: DashMap::new(),
            patterns: PatternRegistry::default(),
            builtins: BuiltinRegistry::default(),
            charms: CharmState::default(),
            tasks: AtomicUsize::new(0),
            task_docs: DashMap::new(),
            idle: Notify::new(),
            errors: Mutex::new(VecDeque::new()),
        }))
    }

    /// The space.
    pub fn space(&self) -> &Space {
        &self.0.space
    }

    /// Runs `f` in a transaction and commits it, retrying on conflict; returns once the
    /// commit is durable and, unless another thread is running the engine at that moment
    /// (then use [`Runtime::idle`]), the computations it affected have re-run.
    ///
    /// Do not call it, `send`, `idle` or `settled` from inside a handler or computation:
    /// write through the handler's own transaction (or use [`Tx::after_commit`]) instead.
    pub fn transact<R>(&self, f: impl Fn(&Tx) -> Result<R>) -> Result<R> {
        let (value, (seq, durable)) = self.transact_inner(&f)?;
        self.pump();
        futures::executor::block_on(self.0.space.durable_after(seq, durable))?;
        Ok(value)
    }

    fn transact_inner<R>(&self, f: &impl Fn(&Tx) -> Result<R>) -> Result<(R, (u64, Durable))> {
        self.with_retries(|| {
            let tx = Tx::new(&self.0.space);
            let value = f(&tx)?;
            let commit = self.commit(tx)?;
            Ok((value, (commit.seq, commit.durable)))
        })
    }

    /// Runs `attempt` (which builds and commits one transaction) until it does not
    /// conflict. Retries back off; the last attempt runs with the space's commit lock
    /// held, so a transaction that keeps losing to others still gets through.
    pub(crate) fn with_retries<T>(&self, mut attempt: impl FnMut() -> Result<T>) -> Result<T> {
        let mut last = None;
        for n in 0..MAX_ATTEMPTS {
            backoff(n);
            let result = if n + 1 == MAX_ATTEMPTS { self.0.space.exclusive(&mut attempt) } else { attempt() };
            match result {
                Err(Error::Conflict { doc }) => last = Some(doc),
                other => return other,
            }
        }
        Err(Error::TooManyConflicts { attempts: MAX_ATTEMPTS, doc: last.unwrap_or_else(|| "?".into()) })
    }

    /// Commits a transaction and tells the scheduler and observers what changed.
    pub(crate) fn commit(&self, tx: Tx<'_>) -> Result<Commit> {
        let (docs, after_commit) = tx.into_parts();
        let commit = self.0.space.commit(docs)?;
        if !commit.changes.is_empty() {
            let mut graph = self.0.graph.lock();
            for (doc, paths) in &commit.changes {
                graph.changed(doc, paths);
            }
            drop(graph);
            self.notify_observers(&commit.changes);
        }
        for hook in after_commit {
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| hook(self))) {
                self.report(Error::HookPanicked(panic_message(&panic)));
            }
        }
        Ok(commit)
    }

    /// Registers a computation that writes what `run` returns to `output`, and re-runs
    /// whenever something it read changes. It first runs at the next settle.
    pub fn add_computation(&self, name: &str, output: Link, owner: Option<DocId>, run: ComputeFn) -> ComputationId {
        self.0.graph.lock().add(name, output, owner, run)
    }

    /// Removes a computation.
    pub fn remove_computation(&self, id: ComputationId) {
        self.0.graph.lock().remove(id);
    }

    pub(crate) fn computations_of(&self, owner: &DocId) -> Vec<ComputationId> {
        self.0.graph.lock().owned_by(owner)
    }

    /// Registers the live handler of `stream`.
    pub fn set_handler(&self, stream: Link, handler: Handler) {
        self.0.handlers.insert(stream, handler);
    }

    /// Removes every handler owned by `owner`.
    pub(crate) fn remove_handlers_of(&self, owner: &DocId) {
        self.0.handlers.retain(|_, h| &h.owner != owner);
    }

    /// The live handler of a stream, if its charm is running.
    pub fn handler(&self, stream: &Link) -> Option<Handler> {
        self.0.handlers.get(stream).map(|h| h.clone())
    }

    /// Sends an event to a stream and waits until its handler's transaction committed,
    /// the computations it affected re-ran, and the commit is durable.
    ///
    /// A stream whose charm is not running starts the charm first; a stream with no
    /// handler and no charm is an error, never a silent drop.
    pub async fn send(&self, stream: &Link, event: serde_json::Value) -> Result<Sent> {
        if EngineThread::is_current() {
            return Err(Error::Reentrant(stream.clone()));
        }
        let rx = self.enqueue(stream, event, true)?;
        self.pump();
        let (sent, (seq, durable)) = rx
            .ok_or_else(|| Error::NoHandler(stream.clone()))?
            .await
            .map_err(|_| Error::NoHandler(stream.clone()))??;
        // The computations the handler triggered committed after it: wait for them too.
        self.0.space.durable_after(seq, durable).await?;
        Ok(sent)
    }

    /// Queues an event without waiting for it (it still starts the charm if needed).
    pub fn send_and_forget(&self, stream: &Link, event: serde_json::Value) -> Result<()> {
        self.enqueue(stream, event, false)?;
        self.pump();
        Ok(())
    }

    fn enqueue(&self, stream: &Link, event: serde_json::Value, want_reply: bool) -> Result<Option<ReplyReceiver>> {
        let (at, _) = crate::tx::resolve(&self.0.space, stream, true, true)?;
        let handler = match self.handler(&at) {
            Some(h) => h,
            None => {
                self.start_charm_for(&at)?;
                self.handler(&at).ok_or_else(|| Error::NoHandler(at.clone()))?
            }
        };
        let (reply, rx) = if want_reply {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        self.0.events.lock().push_back(Event { stream: at, handler, event, reply });
        Ok(rx)
    }

    /// Runs queued work (dirty computations first, then events) on this thread until
    /// nothing is left. If another thread is already running work, it picks ours up.
    pub fn pump(&self) {
        loop {
            let Some(guard) = self.0.engine.try_lock() else { return };
            let running = EngineThread::enter();
            while self.step() {}
            drop(running);
            drop(guard);
            if !self.has_queued_work() {
                self.0.idle.notify_waiters();
                return;
            }
        }
    }

    fn has_queued_work(&self) -> bool {
        self.0.graph.lock().has_dirty() || !self.0.events.lock().is_empty()
    }

    /// Runs one piece of work; false when there was none.
    fn step(&self) -> bool {
        let next = self.0.graph.lock().next();
        match next {
            Some(Ok(ready)) => {
                self.run_computation(ready);
                return true;
            }
            Some(Err((name, runs))) => {
                let error = Error::Cycle { name: name.to_string(), runs };
                tracing::error!(%error, "stopped a runaway computation");
                self.report(error);
                return true;
            }
            None => {}
        }
        let Some(event) = self.0.events.lock().pop_front() else { return false };
        let result = self.run_handler(&event);
        // Let the computations the handler affected settle before answering, so the
        // sender observes derived values consistent with its change.
        loop {
            let next = self.0.graph.lock().next();
            match next {
                Some(Ok(ready)) => self.run_computation(ready),
                Some(Err((name, runs))) => self.report(Error::Cycle { name: name.to_string(), runs }),
                None => break,
            }
        }
        match (event.reply, result) {
            (Some(reply), result) => {
                let _ = reply.send(result);
            }
            (None, Err(error)) => self.report(error),
            (None, Ok(_)) => {}
        }
        true
    }

    fn run_handler(&self, event: &Event) -> Result<(Sent, (u64, Durable))> {
        let span = tracing::debug_span!("handler", stream = %event.stream);
        let _enter = span.enter();
        self.with_retries(|| {
            let tx = Tx::new(&self.0.space);
            let outcome = catch_unwind(AssertUnwindSafe(|| (event.handler.run)(&tx, event.event.clone())));
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    let message = e.to_string();
                    return Err(match e.downcast::<Error>() {
                        Ok(inner) if matches!(*inner, Error::BadEvent { .. }) => *inner,
                        _ => Error::HandlerFailed { stream: event.stream.clone(), message },
                    });
                }
                Err(panic) => {
                    let message = panic_message(&panic);
                    tracing::error!(%message, "handler panicked; rolled back");
                    return Err(Error::HandlerPanicked { stream: event.stream.clone(), message });
                }
            }
            let commit = self.commit(tx)?;
            Ok((Sent { changes: commit.changes }, (commit.seq, commit.durable)))
        })
    }

    fn run_computation(&self, ready: crate::scheduler::Ready) {
        let span = tracing::trace_span!("computation", name = %ready.name);
        let _enter = span.enter();
        let result = self.with_retries(|| {
            let tx = Tx::new(&self.0.space);
            let outcome = catch_unwind(AssertUnwindSafe(|| (ready.run)(&tx)));
            let deps = tx.reads();
            let written = match outcome {
                Ok(Ok(value)) => tx.write(&ready.output, value),
                Ok(Err(e)) => Err(Error::ComputationFailed { name: ready.name.to_string(), message: e.to_string() }),
                Err(panic) => {
                    Err(Error::ComputationFailed { name: ready.name.to_string(), message: panic_message(&panic) })
                }
            };
            self.0.graph.lock().ran(ready.id, deps);
            written?;
            // Nobody waits for a computation's commit; storage logs a failed write, and
            // the next awaited commit (ordered after this one) reports it.
            self.commit(tx).map(drop)
        });
        if let Err(error) = result {
            self.report(error);
        }
    }

    /// Records an error nobody is waiting for; see [`Runtime::take_errors`].
    pub fn report(&self, error: Error) {
        tracing::warn!(%error, "runtime error");
        let mut log = self.0.errors.lock();
        if log.len() == ERROR_LOG {
            log.pop_front();
        }
        log.push_back(error);
    }

    /// Takes the errors that happened where no caller could receive them (failed or
    /// cyclic computations, failed fire-and-forget events).
    pub fn take_errors(&self) -> Vec<Error> {
        self.0.errors.lock().drain(..).collect()
    }

    /// Runs queued work on this thread; returns once nothing is queued (unless another
    /// thread is running work, in which case use [`Runtime::idle`]).
    pub fn settle(&self) {
        self.pump();
    }

    /// Resolves once no work is queued or running and no tracked async task is running.
    pub async fn idle(&self) {
        loop {
            // Pump before listening: pumping notifies waiters itself, which would wake
            // this loop at once and spin it without ever yielding.
            self.pump();
            let notified = self.0.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // `is_locked`, not `try_lock`: briefly taking the engine lock here could make a
            // concurrent `pump` give up on work it just queued.
            if !self.has_queued_work() && !self.0.engine.is_locked() && self.0.tasks.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Resolves once the document of `link` has no async work pending and the engine has
    /// no queued work: the cell's value is final for now. Fails after `timeout`.
    pub async fn settled(&self, link: &Link, timeout: Duration) -> Result<()> {
        let wait = async {
            loop {
                self.pump();
                let notified = self.0.idle.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let busy = self.0.task_docs.get(&link.doc).is_some_and(|n| *n > 0);
                // Work taken off the queue is still running while the engine is locked.
                if !busy && !self.has_queued_work() && !self.0.engine.is_locked() {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.map_err(|_| Error::Timeout(timeout, format!("{link} to settle")))
    }

    /// Spawns async work (e.g. a builtin's request) on tokio, tracked so that
    /// [`Runtime::idle`] and [`Runtime::settled`] wait for it. `doc` names the document
    /// the work will write to.
    pub fn spawn_tracked<F>(&self, doc: DocId, future: F) -> tokio::task::JoinHandle<()>
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.0.tasks.fetch_add(1, Ordering::SeqCst);
        *self.0.task_docs.entry(doc.clone()).or_insert(0) += 1;
        let rt = self.clone();
        let guard = TaskGuard { rt, doc };
        tokio::spawn(async move {
            let _guard = guard;
            future.await;
        })
    }

    /// Calls `observer` after every commit that writes a path overlapping `link`, until
    /// it returns false.
    pub fn observe(&self, link: &Link, observer: impl Fn(&Runtime) -> bool + Send + Sync + 'static) {
        self.0.observers.entry(link.doc.clone()).or_default().push((link.path.clone(), Arc::new(observer)));
    }

    fn notify_observers(&self, changes: &[(DocId, Vec<Path>)]) {
        for (doc, paths) in changes {
            let hit: Vec<Observer> = match self.0.observers.get(doc) {
                Some(list) => {
                    list.iter().filter(|(p, _)| paths.iter().any(|w| w.overlaps(p))).map(|(_, o)| o.clone()).collect()
                }
                None => continue,
            };
            // An observer that panics is dropped like one that asked to stop.
            let dead: Vec<Observer> =
                hit.into_iter().filter(|o| !catch_unwind(AssertUnwindSafe(|| o(self))).unwrap_or(false)).collect();
            if !dead.is_empty() {
                if let Some(mut list) = self.0.observers.get_mut(doc) {
                    list.retain(|(_, o)| !dead.iter().any(|d| Arc::ptr_eq(d, o)));
                }
            }
        }
    }
}

/// A runtime handle that does not keep the runtime alive: for closures the runtime
/// itself stores (handlers, computations), which would otherwise form a cycle.
#[derive(Clone)]
pub struct WeakRuntime(std::sync::Weak<Inner>);

impl WeakRuntime {
    /// The runtime, if it still exists.
    pub fn upgrade(&self) -> Option<Runtime> {
        self.0.upgrade().map(Runtime)
    }
}

impl Runtime {
    /// A handle that does not keep the runtime alive.
    pub fn downgrade(&self) -> WeakRuntime {
        WeakRuntime(Arc::downgrade(&self.0))
    }
}

impl Read for Runtime {
    fn read_raw(&self, doc: &DocId, path: &Path) -> Value {
        self.0.space.read_raw(doc, path)
    }

    fn note_read(&self, _link: &Link) {}
}

thread_local! {
    static IN_ENGINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the current thread as running the engine (handlers and computations) while it
/// lives, so that a handler waiting on `send` fails instead of waiting for itself.
struct EngineThread;

impl EngineThread {
    fn enter() -> Self {
        IN_ENGINE.with(|flag| flag.set(true));
        EngineThread
    }

    fn is_current() -> bool {
        IN_ENGINE.with(std::cell::Cell::get)
    }
}

impl Drop for EngineThread {
    fn drop(&mut self) {
        IN_ENGINE.with(|flag| flag.set(false));
    }
}

struct TaskGuard {
    rt: Runtime,
    doc: DocId,
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.rt.0.task_docs.remove_if_mut(&self.doc, |_, n| {
            *n = n.saturating_sub(1);
            *n == 0
        });
        self.rt.0.tasks.fetch_sub(1, Ordering::SeqCst);
        self.rt.0.idle.notify_waiters();
    }
}

/// Waits before retrying a conflicted transaction: randomised and growing, so that
/// transactions that keep colliding spread out instead of colliding again in lockstep.
pub(crate) fn backoff(attempt: u32) {
    if attempt == 0 {
        return;
    }
    if attempt < 3 {
        std::thread::yield_now();
        return;
    }
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let ceiling = 1u64 << attempt.min(14); // up to ~16 ms
    std::thread::sleep(Duration::from_micros(u64::from(nanos) % ceiling));
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").field("space", &self.0.space).finish()
    }
}
