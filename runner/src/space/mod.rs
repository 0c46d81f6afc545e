//! A space: the documents of one user or workspace, in memory, backed by [`Storage`].
//!
//! Documents live in a `DashMap`, loaded from storage the first time each is read
//! (opening a space of any size reads nothing); once loaded a document stays, so the
//! map's copy is always the latest and storage is never asked again. A commit
//! (`commit`) validates a transaction's reads against the versions it saw, applies its
//! writes atomically under the space's commit lock, and hands them to storage in commit
//! order. Conflicts are detected per path: two transactions that touch different fields
//! of one document both commit.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use parking_lot::{ReentrantMutex, RwLock};
use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;

use crate::error::Error;
use crate::link::{DocId, Link};
use crate::read::{plain_at, Read};
use crate::storage::{Durable, MemoryStorage, Storage, StorageError};
use crate::value::{Path, Value};

mod commit;
mod elsewhere;
mod found;
mod recent;
mod restore;
mod watch;

pub(crate) use commit::Committing;
pub use commit::{Commit, Committed};
use found::Found;
use recent::Recent;
pub(crate) use restore::Outcome;
use watch::committed_read;
pub(crate) use watch::{take_read, watching};

/// Names a document by the number the space gave its entry: the space keeps every entry
/// it made for as long as it lives, so one document has one key; and the numbers count up
/// from 0, so the scheduler keeps what it knows of each document (its readers) in a list
/// indexed by it, where documents made one after the other sit side by side, rather than
/// hashing anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct DocKey(pub usize);

/// A document's version: how many commits wrote it (0: it does not exist yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Version(pub u64);

impl Version {
    /// No version a document has: what a kept copy of one that may be out of date says.
    pub(crate) const UNKNOWN: Version = Version(u64::MAX);
}

/// A commit's place in the space's order of commits with writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Seq(pub u64);

/// One document in memory. The space's map and every transaction that touched the
/// document share it, so a commit applies its writes without looking the document up again.
pub(crate) struct DocEntry {
    /// Its number in the space (see [`DocKey`]).
    number: usize,
    state: RwLock<DocState>,
    /// The state's version, readable without the lock under the space's commit lock:
    /// only a commit changes it, and commits hold that lock (validation checks every
    /// document a transaction touched against it).
    committed: AtomicU64,
}

struct DocState {
    value: Value,
    /// 0 for a document that does not exist (yet): remembered once storage said so, so
    /// that reading a missing document does not ask storage every time.
    version: Version,
    /// The paths its latest commits wrote.
    recent: Recent,
    /// Whether the document exists: written by a commit, or found in storage. (Not its
    /// version alone: one restored to being absent keeps a version above storage's, so
    /// that every transaction that saw it before is validated; see `restore`.)
    exists: bool,
}

impl DocEntry {
    fn new(number: usize, value: Value, version: Version) -> Arc<Self> {
        let committed = AtomicU64::new(version.0);
        let exists = version > Version::default();
        let state = RwLock::new(DocState { value, version, recent: Recent::default(), exists });
        Arc::new(DocEntry { number, state, committed })
    }

    /// The key naming this entry's document.
    pub(crate) fn key(&self) -> DocKey {
        DocKey(self.number)
    }

    /// The version last committed, read without the lock: exact under the commit lock, a
    /// hint outside it (a transaction that works on an older value fails validation).
    pub(crate) fn version(&self) -> Version {
        Version(self.committed.load(Ordering::Acquire))
    }

    /// Asks what a first touch and a commit read of this entry into the cache: the
    /// version (a first touch compares it) and the state (a commit writes it).
    pub(crate) fn prefetch(&self) {
        crate::prefetch::prefetch(&self.committed);
        crate::prefetch::prefetch(&self.state);
    }

    /// The current value and version.
    pub(crate) fn snapshot(&self) -> (Value, Version) {
        let state = self.state.read();
        (state.value.clone(), state.version)
    }
}

/// A document a transaction touched: its entry, its snapshot and what it wrote there.
pub(crate) struct DocWrites {
    /// The document.
    pub id: DocId,
    /// Its entry in the space.
    pub entry: Arc<DocEntry>,
    /// Its entry's key, kept beside it: the scheduler asks for it at every computation
    /// run, and the entry itself is often out of cache.
    pub key: DocKey,
    /// The version of the snapshot this transaction works on.
    pub read_version: Version,
    /// The snapshot with this transaction's writes applied.
    pub local: Value,
    /// Writes in order, to replay onto a newer version at commit.
    pub ops: SmallVec<[(Path, Value); 1]>,
    /// Whether the transaction holding this touched it (a settle keeps its documents for
    /// the next settle, untouched until a computation reads or writes them again).
    pub touched: bool,
}

impl DocWrites {
    /// Takes the document as last committed (a commit moved it since it was read).
    #[inline(never)]
    pub(crate) fn read_again(&mut self) {
        (self.local, self.read_version) = self.entry.snapshot();
    }
}

/// A named store of versioned JSON documents.
pub struct Space {
    docs: DashMap<DocId, Arc<DocEntry>, FxBuildHasher>,
    /// Serialises commits; reentrant so that a transaction running under
    /// [`Space::exclusive`] can commit.
    commit_lock: ReentrantMutex<()>,
    storage: Box<dyn Storage>,
    next_id: AtomicU64,
    id_prefix: String,
    /// How many commits with writes this space has made (the sequence of the latest).
    commits: AtomicU64,
    /// Whether storage keeps what is written. If not (memory), documents have nothing to
    /// load and commits nothing to wait for.
    keeps_writes: bool,
    /// Whether storage takes no write at all (see [`Storage::read_only`]): commits that
    /// write are refused before they change anything.
    read_only: bool,
    /// The first document storage failed to give: from then on commits are refused,
    /// since a transaction may have worked on the missing value as if it were empty.
    unreadable: std::sync::OnceLock<(String, String)>,
    /// The entries found lately, by the id's text they were asked by.
    found: Found,
    /// How many entries the space made (the number of the next: see [`DocKey`]).
    entries_made: AtomicUsize,
}

impl Space {
    /// A space that lives only in memory.
    pub fn in_memory() -> Self {
        Self::with_storage(Box::new(MemoryStorage))
            .unwrap_or_else(|_| unreachable!("memory storage cannot fail to load"))
    }

    /// A space backed by `storage`. Nothing is read yet: each document is loaded when
    /// first read.
    pub fn with_storage(storage: Box<dyn Storage>) -> Result<Self, StorageError> {
        // Ids only need to be unique within this space: a per-process random prefix
        // (time + pid) plus a counter is enough and keeps ids short and sortable.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let id_prefix = format!("{:x}{:x}", nanos % (1 << 48), std::process::id() % 0xfff);
        Ok(Space {
            docs: DashMap::with_hasher(FxBuildHasher),
            commit_lock: ReentrantMutex::new(()),
            keeps_writes: storage.keeps_writes(),
            read_only: storage.read_only().is_some(),
            storage,
            next_id: AtomicU64::new(0),
            id_prefix,
            commits: AtomicU64::new(0),
            unreadable: std::sync::OnceLock::new(),
            found: Found::default(),
            entries_made: AtomicUsize::new(0),
        })
    }

    /// The entry of document `id`, loaded from storage if this is its first read (a
    /// missing one is remembered as version 0). If storage fails, the failure is recorded
    /// (commits stop: see [`Space::unreadable`]) and an empty entry outside the space
    /// stands in for the document.
    pub(crate) fn entry(&self, id: &DocId) -> Arc<DocEntry> {
        if let Some(entry) = self.found.get(id) {
            #[cfg(debug_assertions)]
            self.check_found(id, &entry);
            return entry;
        }
        let (entry, kept) = self.find_or_load(id);
        if kept {
            self.found.put(id, &entry);
        }
        entry
    }

    /// Panics unless `entry`, what [`Found`] answered for `id`, is the space's own entry
    /// of `id` (debug builds check every answer of that cache).
    #[cfg(debug_assertions)]
    fn check_found(&self, id: &DocId, entry: &Arc<DocEntry>) {
        let own = self.docs.get(&**id).is_some_and(|own| Arc::ptr_eq(&own, entry));
        assert!(own, "the entries found lately answered for {id} an entry that is not the space's");
    }

    /// [`Space::entry`] from the map (or storage); false if it is the stand-in for a
    /// document storage failed to give.
    fn find_or_load(&self, id: &str) -> (Arc<DocEntry>, bool) {
        if let Some(entry) = self.docs.get(id) {
            return (entry.clone(), true);
        }
        let loaded = if self.keeps_writes {
            match self.storage.load_doc(id) {
                Ok(Some(stored)) => self.new_entry(stored.value, Version(stored.version)),
                Ok(None) => self.new_entry(Value::Null, Version::default()),
                Err(error) => {
                    tracing::error!(doc = id, %error, "a document could not be loaded; the space refuses changes now");
                    let _ = self.unreadable.set((id.to_owned(), error.to_string()));
                    return (self.new_entry(Value::Null, Version::default()), false);
                }
            }
        } else {
            self.new_entry(Value::Null, Version::default())
        };
        // Another thread may have loaded (or a commit created) it meanwhile: theirs wins,
        // being at least as new as what storage had.
        (self.docs.entry(DocId::from(id)).or_insert(loaded).clone(), true)
    }

    /// A new entry, with the next number.
    fn new_entry(&self, value: Value, version: Version) -> Arc<DocEntry> {
        DocEntry::new(self.entries_made.fetch_add(1, Ordering::Relaxed), value, version)
    }

    /// The first document storage failed to give, if any: from then on the space refuses
    /// commits, and what was read in its place is empty, so whatever was shown from the
    /// space may be incomplete.
    pub fn damage(&self) -> Option<StorageError> {
        self.unreadable.get().map(|(id, reason)| StorageError::Unreadable { id: id.clone(), reason: reason.clone() })
    }

    /// Whether the space can save changes now; why not, when it cannot: a document could
    /// not be read, storage refuses writes since one failed, or this node lost the lease
    /// of a space shared through a database. For a server's readiness probe.
    pub fn check_writable(&self) -> Result<(), String> {
        if let Some(damage) = self.damage() {
            return Err(damage.to_string());
        }
        if let Some(why) = self.storage.read_only() {
            return Err(why.to_string());
        }
        if self.storage.lost() {
            return Err("another node took the space over; this node writes it no more".to_owned());
        }
        if self.storage.refusing() {
            return Err("a write to the space failed; writes wait until the space is back to what was saved".to_owned());
        }
        Ok(())
    }

    /// Whether this node lost the space for good: it is shared through a database, and
    /// another node took its lease over (see [`Storage::lost`]).
    pub fn storage_lost(&self) -> bool {
        self.storage.lost()
    }

    /// How far the log of what storage made durable goes, when storage keeps one other
    /// nodes read (see [`Storage::log_position`]).
    pub fn log_position(&self) -> Option<u64> {
        self.storage.log_position()
    }

    /// A fresh document id, unique in this space, starting with `kind`.
    pub fn new_doc_id(&self, kind: &str) -> DocId {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        DocId::from(format!("{kind}-{}{n:x}", self.id_prefix))
    }

    /// The current value and version of a document (`Null`, version 0 when absent).
    pub fn snapshot(&self, doc: &str) -> (Value, Version) {
        committed_read();
        self.entry_to_read(doc).map_or((Value::Null, Version::default()), |entry| entry.snapshot())
    }

    /// Whether the document exists.
    pub fn contains(&self, doc: &str) -> bool {
        committed_read();
        self.entry_to_read(doc).is_some_and(|entry| entry.state.read().exists)
    }

    /// [`Space::entry`] for a read outside a transaction: in memory, a document never
    /// written gets no entry (asking about unknown ids must not grow the space).
    fn entry_to_read(&self, id: &str) -> Option<Arc<DocEntry>> {
        match self.docs.get(id) {
            Some(entry) => Some(entry.clone()),
            None if self.keeps_writes => Some(self.find_or_load(id).0),
            None => None,
        }
    }

    /// Whether `entry` is the space's own entry of `id` (not the stand-in given when
    /// storage failed to load it), so that it may be kept for later transactions.
    pub(crate) fn holds(&self, id: &str, entry: &Arc<DocEntry>) -> bool {
        self.docs.get(id).is_some_and(|kept| Arc::ptr_eq(&kept, entry))
    }

    /// Ids of all documents whose id starts with `prefix`, without loading them: those
    /// in storage and those created since it was opened.
    pub fn doc_ids(&self, prefix: &str) -> Vec<DocId> {
        committed_read();
        let stored = self.storage.doc_ids(prefix).unwrap_or_else(|error| {
            // Listing is advisory (the caller reads what it finds); a failing file shows
            // again, and stops commits, when a document is read.
            tracing::error!(%error, "could not list the space's documents");
            Vec::new()
        });
        let mut ids: Vec<DocId> = stored.into_iter().map(DocId::from).collect();
        ids.extend(
            self.docs.iter().filter(|e| e.key().starts_with(prefix) && e.state.read().exists).map(|e| e.key().clone()),
        );
        ids.sort();
        ids.dedup();
        ids
    }

    /// A ticket that resolves once everything committed so far is durable.
    pub fn barrier(&self) -> Durable {
        self.storage.submit(Vec::new())
    }

    /// Waits until the caller's commit (`committed`) and everything committed up to now
    /// are durable: when nothing committed after it, its own ticket is enough and no extra
    /// round trip to storage is made.
    ///
    /// If a write failed, the space first goes back to what storage holds ([`Space::restore`]),
    /// so that what the caller is told failed is seen by nobody. The caller's commit failing
    /// is its error; a later one's (a derived value's, recomputed from what was restored) is
    /// not. Returns the documents restored, for the runtime to re-run what reads them.
    pub(crate) async fn durable_after(&self, committed: Committed) -> Outcome {
        if !self.keeps_writes {
            // Storage that keeps nothing has nothing to wait for and never fails.
            return Outcome::default();
        }
        let mut outcome = Outcome { result: committed.durable.await, restored: Vec::new(), undone: false };
        let later = outcome.result.is_ok() && self.commits.load(Ordering::Acquire) != committed.seq.0;
        let after = if later { self.barrier().await } else { Ok(()) };
        if outcome.result.is_err() || after.is_err() {
            match self.restore() {
                Ok(restored) => {
                    // Undone here, or by the caller that restored first; not when the
                    // writer is gone (then nothing is written, and nothing restored).
                    outcome.undone = !matches!(outcome.result, Err(StorageError::WriterGone));
                    outcome.restored = restored;
                }
                Err(error) => outcome.result = outcome.result.and(Err(error)),
            }
            if matches!(after, Err(StorageError::WriterGone)) {
                // Not a later write that failed: nothing is made durable any more.
                outcome.result = outcome.result.and(after);
            }
        }
        outcome
    }

    /// [`Space::durable_after`] for a thread that may block: in memory there is nothing
    /// to wait for (answered inline), and a ticket resolved while this thread spins
    /// briefly (the writer's answer often comes soon) is taken without an executor.
    #[inline]
    pub(crate) fn wait_durable_after(&self, committed: Committed) -> Outcome {
        if !self.keeps_writes {
            return Outcome::default(); // as `durable_after` says, without making its future
        }
        self.wait_stored_after(committed)
    }

    fn wait_stored_after(&self, mut committed: Committed) -> Outcome {
        use std::future::Future;
        committed.durable.spin(crate::storage::SPIN);
        let mut waiting = std::pin::pin!(self.durable_after(committed));
        match waiting.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
            std::task::Poll::Ready(outcome) => outcome,
            std::task::Poll::Pending => crate::park::block_on(waiting),
        }
    }

    /// How many commits with writes this space has made.
    pub(crate) fn commit_count(&self) -> u64 {
        self.commits.load(Ordering::Acquire)
    }

    /// Runs `f` while no other thread can commit to this space.
    pub(crate) fn exclusive<R>(&self, f: impl FnOnce() -> R) -> R {
        let _guard = self.commit_lock.lock();
        f()
    }
}

impl Read for Space {
    /// The value at `link`, found in one look at its document when no link lies on the
    /// way (the common case); otherwise links are followed as every read follows them.
    fn read(&self, link: &Link) -> Result<Value, Error> {
        committed_read();
        let direct = |entry: &DocEntry| plain_at(&entry.state.read().value, &link.path).cloned();
        if let Some(Some(value)) = self.found.with(&link.doc, |entry| {
            #[cfg(debug_assertions)]
            self.check_found(&link.doc, entry);
            direct(entry)
        }) {
            return Ok(value);
        }
        let found = match self.docs.get(&*link.doc) {
            Some(entry) => {
                self.found.put(&link.doc, &entry);
                direct(&entry)
            }
            None => match self.entry_to_read(&link.doc) {
                Some(entry) => direct(&entry),
                None => Some(Value::Null),
            },
        };
        match found {
            Some(value) => Ok(value),
            None => self.resolve(link).map(|(_, value)| value),
        }
    }

    fn read_raw(&self, doc: &DocId, path: &Path) -> Value {
        committed_read();
        let at = |entry: &DocEntry| entry.state.read().value.at(path.segments()).cloned().unwrap_or(Value::Null);
        match self.docs.get(&**doc) {
            Some(entry) => at(&entry),
            None => self.entry_to_read(doc).map_or(Value::Null, |entry| at(&entry)),
        }
    }

    fn note_read(&self, _link: &Link) {}
}

impl std::fmt::Debug for Space {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Space").field("documents", &self.docs.len()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_the_space_follows_links_on_the_way_and_at_the_end() {
        let rt = crate::Runtime::in_memory();
        let target = rt.new_cell("target", serde_json::json!({"inner": {"n": 7}})).expect("cell");
        let holder = Link::new(rt.space().new_doc_id("holder"), Path::root());
        rt.transact(|tx| {
            tx.write(&holder.child("via"), target.link().child("inner").to_value())?;
            tx.write(&holder.child("plain"), Value::from(3))
        })
        .expect("commit");
        assert_eq!(rt.read(&holder.child("plain")).expect("read"), Value::from(3));
        assert_eq!(rt.read(&holder.child("via")).expect("read").to_json(), serde_json::json!({"n": 7}));
        assert_eq!(rt.read(&holder.child("via").child("n")).expect("read"), Value::from(7), "a link on the way");
        assert_eq!(rt.read(&holder.child("missing").child("n")).expect("read"), Value::Null);
    }
}
