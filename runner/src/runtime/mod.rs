//! The runtime: one space, its scheduler, handlers, patterns, builtins and charms.
//!
//! Work (handler events and dirty computations) runs on whichever thread asks for it,
//! one item at a time under the engine lock: handlers never run concurrently with each
//! other or with computations, so every computation sees a settled state. Transactions
//! from outside the engine (`transact`) run concurrently and are validated at commit.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_utils::atomic::AtomicCell;
use dashmap::DashMap;
use futures::channel::oneshot;
use parking_lot::Mutex;
use rustc_hash::FxBuildHasher;
use tokio::sync::Notify;

mod build;
mod commit;
mod computations;
mod durable;
mod engine;
mod extensions;
mod observers;
mod preview;
mod provenance;
mod undo;
mod wait;

pub use commit::MAX_ATTEMPTS;
use commit::{Listing, Marking};
pub use observers::Observation;
use observers::Observer;
pub use preview::{Changed, Previewed, ReadAt};
pub use provenance::{now_ms, this_process, Writer, Written, MAX_WRITTEN_PATHS, PROVENANCE_PREFIX};
pub use undo::{Entry, Journal, Later, Undoing, Undone, MAX_JOURNAL_EFFECTS, MAX_JOURNAL_ENTRIES};

use crate::builtin::BuiltinRegistry;
use crate::charm::CharmState;
use crate::error::{Error, Result};
use crate::link::{DocId, Link};
use crate::pattern::PatternRegistry;
use crate::read::Read;
use crate::scheduler::{ComputationId, ComputeFn, Graph};
use crate::space::{Committed, Space};
use crate::storage::{SqliteSnapshot, SqliteStorage, Storage, StorageError};
use crate::tx::{Spare, Tx};
use crate::value::{Path, Value};

/// How many unobserved errors the runtime keeps for [`Runtime::take_errors`].
const ERROR_LOG: usize = 256;

/// The body of a handler: gets the transaction and the event as JSON, and returns what
/// the handler answers as JSON (`None` for a handler that returns nothing).
pub type HandlerFn = Arc<dyn Fn(&Tx, serde_json::Value) -> Result<Option<serde_json::Value>> + Send + Sync>;

/// A live handler for one stream.
#[derive(Clone)]
pub struct Handler {
    /// The charm whose handler this is.
    pub owner: DocId,
    /// The event schema, if the handler has one.
    pub schema: Option<serde_json::Value>,
    /// The schema of what the handler returns, if it returns something.
    pub result_schema: Option<serde_json::Value>,
    /// The code.
    pub run: HandlerFn,
}

/// What a successful [`Runtime::send`] reports.
#[derive(Debug)]
pub struct Sent {
    /// The paths the handler's transaction wrote, per document.
    pub changes: Vec<(DocId, Vec<Path>)>,
    /// What the handler returned, as JSON (`None` for a handler that returns nothing).
    pub returned: Option<serde_json::Value>,
    /// Whether the handler did not run because its receipt was there already (see
    /// [`Runtime::send_once`]); `returned` is then what it returned that time.
    pub replayed: bool,
    /// For [`Runtime::preview`]: each path the handler would write, before and after
    /// (nothing was written), and what it read.
    pub previewed: Previewed,
}

/// A handler's answer: what it changed, and its commit to wait for durability on.
type Reply = oneshot::Sender<Result<(Sent, Committed)>>;
type ReplyReceiver = oneshot::Receiver<Result<(Sent, Committed)>>;

struct Event {
    stream: Link,
    /// The handler's code only: its schema (JSON, copied in full by a clone) is not needed
    /// to run it.
    run: HandlerFn,
    event: serde_json::Value,
    reply: Option<Reply>,
    /// Where the handler's transaction records that it ran (see [`Runtime::send_once`]).
    receipt: Option<Link>,
    /// Commit, preview, or commit only what was previewed.
    mode: preview::Mode,
    /// Who sent it (see [`Runtime::acting_as`]).
    writer: Option<Arc<Writer>>,
}

pub(crate) struct Inner {
    pub space: Space,
    graph: Mutex<Graph>,
    /// How many computations are dirty, read without the graph's lock (see
    /// `Graph::dirty_counter`).
    dirty: Arc<AtomicUsize>,
    events: Mutex<VecDeque<Event>>,
    /// How many events are queued: changed under the events' lock, read without it as a
    /// hint (see `run_next`).
    queued_events: AtomicUsize,
    engine: Mutex<()>,
    handlers: DashMap<Link, Handler, FxBuildHasher>,
    /// Looked up after every commit: a fast hash (keys are ids this space made).
    observers: DashMap<DocId, Vec<(Path, Observer)>, FxBuildHasher>,
    /// Whether any observer was ever registered: until then commits skip the lookups.
    observed: AtomicBool,
    pub patterns: PatternRegistry,
    pub builtins: BuiltinRegistry,
    pub charms: CharmState,
    tasks: AtomicUsize,
    task_docs: DashMap<DocId, usize, FxBuildHasher>,
    idle: Notify,
    /// How many callers wait on `idle` (see `wait_until`): the engine tells nobody when
    /// nobody waits, since it goes idle after every change.
    waiting: AtomicUsize,
    errors: Mutex<VecDeque<Error>>,
    /// Transaction attempts that conflicted (see [`Stats::conflict_retries`]).
    conflict_retries: AtomicU64,
    /// The lists of the last committed transaction, for the next (see [`Spare`]): taken
    /// and given back in one atomic swap each, where a lock would take two.
    spare: AtomicCell<Option<Spare>>,
    /// The lists and documents of the last settle's (or writer's) transaction (see
    /// [`Spare`]).
    engine_spare: AtomicCell<Option<Spare>>,
    /// What crates above keep per runtime ([`Runtime::extension`]).
    extensions: Box<extensions::Extensions>,
}

// A transaction's lists are one pointer, so the cells holding them swap without a lock.
const _: () = assert!(AtomicCell::<Option<Spare>>::is_lock_free());

/// Counters describing the runtime's work so far; see [`Runtime::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// How many transaction attempts (of `transact`, handlers, computations, charm setup)
    /// conflicted with a concurrent commit; each is run again, up to [`MAX_ATTEMPTS`].
    pub conflict_retries: u64,
    /// How many observers are registered now ([`Runtime::observe`]): in a server whose
    /// clients come and go, a count that only grows is a leak.
    pub observers: usize,
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
pub struct Runtime(pub(crate) Arc<Inner>, pub(crate) Option<Arc<Writer>>);

impl Runtime {
    /// A runtime whose space lives only in memory.
    pub fn in_memory() -> Self {
        Self::with_space(Space::in_memory())
    }

    /// A runtime on a durable SQLite space at `path` (created if missing).
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Self, StorageError> {
        Self::with_storage(Box::new(SqliteStorage::open(path)?))
    }

    /// A runtime on the SQLite space at `path` as it stands now, read without its lock
    /// (another process may have it open): for showing what is there. What this runtime
    /// commits stays in its memory and is never saved ([`SqliteSnapshot`]).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), trellis_runner::storage::StorageError> {
    /// let rt = trellis_runner::Runtime::open_snapshot("space.sqlite")?;
    /// let charms = rt.charms().list();
    /// # Ok(()) }
    /// ```
    pub fn open_snapshot(path: impl AsRef<std::path::Path>) -> Result<Self, StorageError> {
        Self::with_storage(Box::new(SqliteSnapshot::open(path)?))
    }

    /// A runtime on any storage backend.
    pub fn with_storage(storage: Box<dyn Storage>) -> Result<Self, StorageError> {
        Ok(Self::with_space(Space::with_storage(storage)?))
    }

    fn with_space(space: Space) -> Self {
        let graph = Graph::default();
        Runtime(
            Arc::new(Inner {
                space,
                dirty: graph.dirty_counter(),
                graph: Mutex::new(graph),
                events: Mutex::new(VecDeque::new()),
                queued_events: AtomicUsize::new(0),
                engine: Mutex::new(()),
                handlers: DashMap::default(),
                observers: DashMap::default(),
                observed: AtomicBool::new(false),
                patterns: PatternRegistry::default(),
                builtins: BuiltinRegistry::default(),
                charms: CharmState::default(),
                tasks: AtomicUsize::new(0),
                task_docs: DashMap::default(),
                idle: Notify::new(),
                waiting: AtomicUsize::new(0),
                errors: Mutex::new(VecDeque::new()),
                conflict_retries: AtomicU64::new(0),
                spare: AtomicCell::new(None),
                engine_spare: AtomicCell::new(None),
                extensions: Box::default(),
            }),
            None,
        )
    }

    /// The space.
    pub fn space(&self) -> &Space {
        &self.0.space
    }

    /// What the runtime has done so far (for tests, metrics and diagnostics).
    pub fn stats(&self) -> Stats {
        Stats {
            conflict_retries: self.0.conflict_retries.load(Ordering::Relaxed),
            observers: self.0.observers.iter().map(|list| list.len()).sum(),
        }
    }

    /// Registers a computation that writes what `run` returns to `output`, and re-runs
    /// whenever something it read changes. It first runs at the next settle.
    pub fn add_computation(&self, name: &str, output: Link, owner: Option<DocId>, run: ComputeFn) -> ComputationId {
        let entry = self.0.space.entry(&output.doc);
        // A stand-in for a document storage failed to give is not kept.
        let kept = self.0.space.holds(&output.doc, &entry).then_some(entry.clone());
        self.0.graph.lock().add(name, output, entry.key(), kept, owner, run)
    }

    /// Removes a computation.
    pub fn remove_computation(&self, id: ComputationId) {
        self.0.graph.lock().remove(id);
        // The documents the transactions kept may be those of the computations going (a
        // charm stopping): let go of them, and of the values they still hold.
        self.0.engine_spare.take();
        self.0.spare.take();
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

    /// The code of the live handler of a stream, if its charm is running.
    fn handler_run(&self, stream: &Link) -> Option<HandlerFn> {
        self.0.handlers.get(stream).map(|h| h.run.clone())
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
}

/// A runtime handle that does not keep the runtime alive: for closures the runtime
/// itself stores (handlers, computations), which would otherwise form a cycle.
#[derive(Clone)]
pub struct WeakRuntime(std::sync::Weak<Inner>);

impl WeakRuntime {
    /// The runtime, if it still exists.
    pub fn upgrade(&self) -> Option<Runtime> {
        self.0.upgrade().map(|inner| Runtime(inner, None))
    }
}

impl Runtime {
    /// A handle that does not keep the runtime alive.
    pub fn downgrade(&self) -> WeakRuntime {
        WeakRuntime(Arc::downgrade(&self.0))
    }
}

impl Read for Runtime {
    fn read(&self, link: &Link) -> Result<Value> {
        self.0.space.read(link)
    }

    fn read_raw(&self, doc: &DocId, path: &Path) -> Value {
        self.0.space.read_raw(doc, path)
    }

    fn note_read(&self, _link: &Link) {}
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
