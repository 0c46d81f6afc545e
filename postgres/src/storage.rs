//! [`PostgresStorage`]: a space in a PostgreSQL database, written by the node holding
//! its lease, through the connections the node keeps to that [`Database`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use trellis_runner::storage::group::{Counters, GroupCommit, Refusal};
use trellis_runner::storage::{parse_document, Durable, Storage, StorageError, StoredDoc};

use crate::connect::CONNECT_TIMEOUT;
use crate::{Database, Holder, SpaceUrl};

/// How long a lease runs unless renewed, by default.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// How long a statement may run before the server cancels it, by default.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

/// The shortest lease accepted: renewing a third of it must fit a round trip.
pub const MIN_LEASE: Duration = Duration::from_millis(300);

/// How a space is opened: lease and timeouts.
///
/// ```no_run
/// use std::time::Duration;
/// use trellis_postgres::{Holder, OpenOptions, SpaceUrl};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let url = SpaceUrl::parse("postgres://trellis@db/trellis?space=team-a")?;
/// let storage = OpenOptions::new().lease(Duration::from_secs(5)).open(&url, Holder::new("node-1:4242"))?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct OpenOptions {
    pub(crate) lease: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) statement_timeout: Duration,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            lease: DEFAULT_LEASE,
            connect_timeout: CONNECT_TIMEOUT,
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
        }
    }
}

impl OpenOptions {
    /// The defaults: a lease of [`DEFAULT_LEASE`], connections given up after 5 s,
    /// statements after [`DEFAULT_STATEMENT_TIMEOUT`].
    pub fn new() -> OpenOptions {
        OpenOptions::default()
    }

    /// How long the lease runs without renewal (at least [`MIN_LEASE`]): how long other
    /// nodes wait to take the space over when this node dies without closing it. It is
    /// renewed every third of that.
    pub fn lease(mut self, lease: Duration) -> OpenOptions {
        self.lease = lease.max(MIN_LEASE);
        self
    }

    /// How long a connection attempt may take, unless the URL says (`connect_timeout`).
    pub fn connect_timeout(mut self, timeout: Duration) -> OpenOptions {
        self.connect_timeout = timeout;
        self
    }

    /// How long the server lets one statement run before cancelling it.
    pub fn statement_timeout(mut self, timeout: Duration) -> OpenOptions {
        self.statement_timeout = timeout;
        self
    }

    /// This node's connections to the database `url` is in, with these options, for
    /// opening many of its spaces; nothing connects until a space is opened.
    pub fn database(&self, url: &SpaceUrl) -> Result<Database, StorageError> {
        Database::new(url, self.clone())
    }

    /// Opens the space at `target` for `holder`, through connections of its own (a
    /// node holding several spaces of one database opens them through one
    /// [`Database`]): creates Trellis's tables if missing, takes the space's lease
    /// ([`StorageError::Owned`] if another node holds it) and starts its writer.
    pub fn open(&self, target: &SpaceUrl, holder: Holder) -> Result<PostgresStorage, StorageError> {
        self.database(target)?.open(target.space(), holder)
    }
}

/// A space kept in PostgreSQL, written by this node while it holds the space's lease.
///
/// [`Storage::submit`] queues; a writer thread commits in groups. Dropping it writes what
/// is queued, then gives the lease back so another node can take the space at once.
///
/// ```no_run
/// use trellis_postgres::{Holder, PostgresStorage, SpaceUrl};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let url = SpaceUrl::parse("postgres://trellis:secret@db:5432/trellis?space=team-a")?;
/// let storage = PostgresStorage::open(&url, Holder::new("node-1:4242").at("http://10.0.0.5:8080"))?;
/// let runtime = trellis_runner::Runtime::with_storage(Box::new(storage))?;
/// # Ok(()) }
/// ```
pub struct PostgresStorage {
    pub(crate) target: SpaceUrl,
    pub(crate) holder: Holder,
    pub(crate) group: GroupCommit,
    pub(crate) database: Database,
    pub(crate) shared: Arc<Shared>,
}

/// Counters describing the storage's work so far; see [`PostgresStorage::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PostgresStats {
    /// Submitted transactions that were written and are now durable.
    pub transactions_durable: u64,
    /// Submitted transactions whose ticket was resolved with an error.
    pub transactions_failed: u64,
    /// PostgreSQL transactions the writer committed (one change-log row each); with group
    /// commit, usually far fewer than `transactions_durable`.
    pub commits: u64,
    /// Documents read from the database by [`Storage::load_doc`].
    pub documents_read: u64,
}

impl PostgresStorage {
    /// Opens the space at `target` for `holder` with the default [`OpenOptions`].
    pub fn open(target: &SpaceUrl, holder: Holder) -> Result<PostgresStorage, StorageError> {
        OpenOptions::new().open(target, holder)
    }

    /// The space's URL (shown without its password).
    pub fn target(&self) -> &SpaceUrl {
        &self.target
    }

    /// Who holds the lease: this node.
    pub fn holder(&self) -> &Holder {
        &self.holder
    }

    /// The lease's epoch: raised every time a node takes the space's lease.
    pub fn epoch(&self) -> u64 {
        self.shared.epoch.unsigned_abs()
    }

    /// Whether this node lost the lease; it then writes nothing more through this storage.
    pub fn lease_lost(&self) -> bool {
        self.shared.lost()
    }

    /// What the storage has done so far (for tests, metrics and diagnostics).
    pub fn stats(&self) -> PostgresStats {
        let counters = &self.shared.counters;
        PostgresStats {
            transactions_durable: counters.durable.load(Ordering::Relaxed),
            transactions_failed: counters.failed.load(Ordering::Relaxed),
            commits: counters.commits.load(Ordering::Relaxed),
            documents_read: counters.read.load(Ordering::Relaxed),
        }
    }
}

impl Storage for PostgresStorage {
    fn load_doc(&self, id: &str) -> Result<Option<StoredDoc>, StorageError> {
        let stored = self.database.reader().stored(&self.shared.space, id)?;
        if stored.is_some() {
            Counters::count(&self.shared.counters.read);
        }
        Ok(stored)
    }

    fn doc_ids(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        self.database.reader().ids(&self.shared.space, prefix)
    }

    /// One query for the whole space rather than one per document.
    fn load(&self) -> Result<Vec<StoredDoc>, StorageError> {
        let rows = self.database.reader().all(&self.shared.space)?;
        self.shared.counters.read.fetch_add(rows.len() as u64, Ordering::Relaxed);
        rows.into_iter()
            .map(|(id, version, text)| {
                let value = parse_document(&id, &text)?;
                Ok(StoredDoc { id, version, value })
            })
            .collect()
    }

    fn submit(&self, writes: Vec<StoredDoc>) -> Durable {
        if self.shared.lost() {
            return Durable::ready(Err(self.shared.lease_lost()));
        }
        self.group.submit(writes)
    }

    fn lost(&self) -> bool {
        self.shared.lost()
    }

    fn refusing(&self) -> bool {
        self.shared.lost() || self.shared.refusal.reason().is_some()
    }

    /// Writes again after a failed write; not after the lease was lost, which is for good.
    fn resume(&self) {
        self.shared.refusal.clear();
    }

    /// The last change this node logged: once a follower has read the log that far, it
    /// has every change made durable so far.
    fn log_position(&self) -> Option<u64> {
        Some(self.shared.logged.load(Ordering::Acquire))
    }
}

impl Drop for PostgresStorage {
    fn drop(&mut self) {
        // The writer finishes what is queued before the lease is given back, so no other
        // node writes before this one is done.
        if !self.group.finish() {
            tracing::error!(
                url = %self.target,
                "the PostgreSQL writer thread panicked; transactions queued at that point may not be saved"
            );
        }
        self.database.leases().release(&self.shared);
    }
}

impl std::fmt::Debug for PostgresStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStorage")
            .field("target", &self.target)
            .field("holder", &self.holder)
            .field("epoch", &self.epoch())
            .field("lease_lost", &self.lease_lost())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// What the storage's threads share.
pub(crate) struct Shared {
    pub(crate) space: String,
    /// This node's epoch, as the database stores it (at least 1).
    pub(crate) epoch: i64,
    pub(crate) lost: AtomicBool,
    /// Why the writer refuses writes, since one failed.
    pub(crate) refusal: Refusal,
    pub(crate) counters: Counters,
    /// The last sequence number of the space's change log this node wrote or found there
    /// when it took the lease.
    pub(crate) logged: AtomicU64,
}

impl Shared {
    pub(crate) fn lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Marks the lease lost, for good.
    pub(crate) fn lose(&self, why: &str) {
        if !self.lost.swap(true, Ordering::AcqRel) {
            metrics::counter!("trellis_lease_changes_total", "change" => "lost").increment(1);
            tracing::error!(space = %self.space, epoch = self.epoch, why, "lost the space's lease; this node writes it no more");
        }
    }

    /// The error for a write after the lease was lost.
    pub(crate) fn lease_lost(&self) -> StorageError {
        StorageError::LeaseLost { space: self.space.clone(), epoch: self.epoch.unsigned_abs() }
    }
}
