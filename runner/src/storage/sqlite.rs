//! Durable storage in one SQLite file, written by a background thread with group commit.
//!
//! # Design
//!
//! * One table, `documents(id TEXT PRIMARY KEY, version INTEGER NOT NULL, value TEXT NOT
//!   NULL)`, holding the latest version of every document as JSON text.
//! * [`SqliteStorage::submit`] never touches SQLite: it queues the transaction's writes and
//!   returns a [`Durable`] ticket at once. A dedicated thread (`trellis-sqlite-writer`)
//!   owns the write connection and writes each group of queued transactions in **one**
//!   SQLite transaction, as [`group`](super::group) describes: order, retries one by one
//!   after a failed group, and refusal until [`Storage::resume`] after a failed write.
//!   One committer gets about 4x the commits/s from the writer's and the waiter's spin.
//! * A version that does not fit in SQLite's signed 64-bit integer fails only its own
//!   transaction.
//! * [`Storage::load_doc`] and [`Storage::doc_ids`] read through a separate read
//!   connection; in WAL mode readers never block the writer and see only committed data.
//!   Opening reads no document: the space loads each one when it is first read.
//! * Dropping the storage waits until the writer has written everything queued.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, TransactionBehavior};

use super::file::{check_is_space, check_usable, lock_space};
use super::group::{Counters, GroupCommit, GroupWriter, Refusal};
use super::{decode, Durable, Storage, StorageError, StoredDoc, DAMAGED};

/// How long a connection waits for a lock held by another connection before giving up.
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Name of the background writer thread.
const WRITER_THREAD: &str = "trellis-sqlite-writer";

/// The SQL that creates [`SqliteStorage`]'s one table, `documents`, if it does not exist.
///
/// Public so that tools outside the runner (the benchmark's plain-SQLite peer) use exactly
/// the same table rather than a copy that could drift.
pub const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS documents (
    id TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    value TEXT NOT NULL
)";

/// The statement with which [`SqliteStorage`] writes one document: insert or replace the
/// row of `?1` (id) with `?2` (version) and `?3` (the value as JSON text).
///
/// Public for the same reason as [`CREATE_TABLE`].
pub const UPSERT: &str = "INSERT INTO documents (id, version, value) VALUES (?1, ?2, ?3)
    ON CONFLICT(id) DO UPDATE SET version = excluded.version, value = excluded.value";

const SELECT_ONE: &str = "SELECT version, value FROM documents WHERE id = ?1";

/// Ids from `?1` on, in order: the caller stops at the first id without its prefix (a
/// range scan of the primary key; `LIKE` and `GLOB` would need the prefix escaped).
const SELECT_IDS_FROM: &str = "SELECT id FROM documents WHERE id >= ?1 ORDER BY id";

/// Storage in a single SQLite file (WAL mode), with a background writer doing group commit.
///
/// Cheap to share: [`Storage::submit`] only queues work, and reads use their own read
/// connection. Dropping the storage waits until every queued transaction is written.
pub struct SqliteStorage {
    path: PathBuf,
    /// Declared before the lock, so the writer finishes before the file is unlocked.
    group: GroupCommit,
    reader: Mutex<Connection>,
    counters: Arc<Counters>,
    /// Why the writer refuses writes, since one failed (see [`Storage::submit`]).
    refusal: Arc<Refusal>,
    /// An exclusive lock on `<file>.lock` while this storage is open: two processes
    /// writing whole documents to one file would silently lose each other's updates.
    _lock: std::fs::File,
}

/// Counters describing the writer's work so far; see [`SqliteStorage::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SqliteStats {
    /// Submitted transactions that were written and are now durable.
    pub transactions_durable: u64,
    /// Submitted transactions whose ticket was resolved with an error.
    pub transactions_failed: u64,
    /// SQLite transactions the writer committed; with group commit this is usually far
    /// fewer than `transactions_durable`.
    pub sqlite_commits: u64,
    /// Documents read from the file (by [`Storage::load_doc`]): a space opened on a big
    /// file reads only what is used.
    pub documents_read: u64,
}

/// A document ready to be bound to the upsert statement.
struct Row {
    id: String,
    /// SQLite integers are signed 64-bit; [`encode`] rejects versions that do not fit.
    version: i64,
    value: String,
}

impl SqliteStorage {
    /// Opens (creating if needed) the SQLite file at `path`, and starts the writer thread.
    ///
    /// Creates missing parent directories, switches the database to WAL mode and creates
    /// the `documents` table if it does not exist. `path` must name a file; an in-memory
    /// database (`:memory:`) is not supported, use [`MemoryStorage`](super::MemoryStorage).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StorageError> {
        let path = path.as_ref().to_path_buf();
        let shown = path.display().to_string();
        let sqlite = |source| StorageError::Sqlite { path: shown.clone(), source };

        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StorageError::Io {
                path: dir.display().to_string(),
                action: "create the storage directory",
                source,
            })?;
        }

        // Before the lock: a path that cannot hold the space must not leave a lock file
        // (opening a connection writes nothing).
        check_usable(&path)?;
        let writer_conn = Connection::open(&path).map_err(sqlite)?;
        check_is_space(&writer_conn, &path)?;
        let lock = lock_space(&path)?;
        let writer_conn = set_up_writer(writer_conn, &path).map_err(sqlite)?;
        let reader = open_reader(&path).map_err(sqlite)?;

        let counters = Arc::new(Counters::default());
        let refusal = Arc::new(Refusal::default());
        let writer =
            Writer { conn: writer_conn, path: shown, counters: Arc::clone(&counters), refusal: Arc::clone(&refusal) };
        let group = GroupCommit::start(WRITER_THREAD, writer)?;

        Ok(SqliteStorage { path, group, reader: Mutex::new(reader), counters, refusal, _lock: lock })
    }

    /// The database file this storage writes to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the writer has done so far (for tests, metrics and diagnostics).
    pub fn stats(&self) -> SqliteStats {
        SqliteStats {
            transactions_durable: self.counters.durable.load(Ordering::Relaxed),
            transactions_failed: self.counters.failed.load(Ordering::Relaxed),
            sqlite_commits: self.counters.commits.load(Ordering::Relaxed),
            documents_read: self.counters.read.load(Ordering::Relaxed),
        }
    }

    fn sqlite_error(&self, source: rusqlite::Error) -> StorageError {
        StorageError::Sqlite { path: self.path.display().to_string(), source }
    }
}

impl Storage for SqliteStorage {
    fn load_doc(&self, id: &str) -> Result<Option<StoredDoc>, StorageError> {
        let doc = read_doc(&self.reader.lock(), id).map_err(|e| self.sqlite_error(e))?;
        let Some((version, text)) = doc else { return Ok(None) };
        Counters::count(&self.counters.read);
        let value = decode::parse_document(id, &text)?;
        Ok(Some(StoredDoc { id: id.to_owned(), version, value }))
    }

    fn doc_ids(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        read_ids(&self.reader.lock(), prefix).map_err(|e| self.sqlite_error(e))
    }

    fn submit(&self, writes: Vec<StoredDoc>) -> Durable {
        self.group.submit(writes)
    }

    fn refusing(&self) -> bool {
        self.refusal.reason().is_some()
    }

    fn resume(&self) {
        self.refusal.clear();
    }
}

impl fmt::Debug for SqliteStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStorage").field("path", &self.path).field("stats", &self.stats()).finish_non_exhaustive()
    }
}

/// The version and JSON text of document `id`, if stored.
pub(super) fn read_doc(conn: &Connection, id: &str) -> rusqlite::Result<Option<(u64, String)>> {
    let mut stmt = conn.prepare_cached(SELECT_ONE)?;
    stmt.query_row([id], |row| {
        let version: i64 = row.get(0)?;
        let version = u64::try_from(version).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(0, version))?;
        Ok((version, row.get::<_, String>(1)?))
    })
    .optional()
}

/// The ids of the stored documents starting with `prefix`, in order.
pub(super) fn read_ids(conn: &Connection, prefix: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(SELECT_IDS_FROM)?;
    let mut rows = stmt.query([prefix])?;
    let mut ids = Vec::new();
    while let Some(row) = rows.next()? {
        let id: String = row.get(0)?;
        if !id.starts_with(prefix) {
            break;
        }
        ids.push(id);
    }
    Ok(ids)
}

/// What to do about a SQLite error, for its message: only where the advice fits.
pub(super) fn hint(error: &rusqlite::Error) -> String {
    use rusqlite::ErrorCode;
    match error.sqlite_error_code() {
        Some(
            ErrorCode::PermissionDenied
            | ErrorCode::ReadOnly
            | ErrorCode::DatabaseBusy
            | ErrorCode::DatabaseLocked
            | ErrorCode::CannotOpen,
        ) => "; check that the file is writable and not used by another program".to_owned(),
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => format!("; {DAMAGED}"),
        Some(ErrorCode::DiskFull | ErrorCode::SystemIoFailure) => {
            "; check the disk (free space, permissions)".to_owned()
        }
        _ => String::new(),
    }
}

/// Sets up the connection the writer thread owns for durable group commit and creates
/// the schema.
fn set_up_writer(conn: Connection, path: &Path) -> rusqlite::Result<Connection> {
    conn.busy_timeout(BUSY_TIMEOUT)?;

    // WAL: a commit appends the transaction's pages to the `-wal` file; readers keep
    // reading the last committed state and never block the writer.
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(
            path = %path.display(),
            journal_mode = %mode,
            "SQLite refused WAL mode; storage stays durable but readers may block the writer"
        );
    }

    // synchronous=NORMAL is crash-safe for a process kill (`kill -9`, panic, abort, OOM
    // kill): in WAL mode a transaction is committed once its pages and commit record have
    // been written to the WAL file, and that has happened when COMMIT returns. The bytes
    // then sit in the operating system's page cache, which belongs to the kernel, not to
    // our process, so they survive the process dying and the next open replays the WAL.
    // NORMAL only skips the fsync at each commit (the WAL is fsynced at checkpoints), so
    // only an OS crash or power loss can lose the most recent commits; the database is
    // never corrupted either way. FULL would fsync every commit, which group commit makes
    // affordable, but is not needed for the guarantee we give (see tests/kill9.rs).
    conn.pragma_update(None, "synchronous", "NORMAL")?;

    conn.execute_batch(CREATE_TABLE)?;
    Ok(conn)
}

/// Opens the connection [`Storage::load`] reads through. The file and table exist by now.
fn open_reader(path: &Path) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Read-write so it can take part in WAL recovery and shared memory; but never writes.
    conn.pragma_update(None, "query_only", true)?;
    Ok(conn)
}

/// The state owned by the background writer thread.
struct Writer {
    conn: Connection,
    path: String,
    counters: Arc<Counters>,
    refusal: Arc<Refusal>,
}

impl GroupWriter for Writer {
    type Rows = Vec<Row>;

    fn target(&self) -> &str {
        &self.path
    }

    fn encode(&self, writes: Vec<StoredDoc>) -> Result<Vec<Row>, StorageError> {
        encode(writes, &self.path)
    }

    fn write(&mut self, txns: &[&Vec<Row>]) -> Result<(), StorageError> {
        self.write_rows(txns).map_err(|source| StorageError::Sqlite { path: self.path.clone(), source })
    }

    fn refusal(&self) -> &Refusal {
        &self.refusal
    }

    fn counters(&self) -> &Counters {
        &self.counters
    }
}

impl Writer {
    /// Writes the given transactions, in order, in one SQLite transaction.
    fn write_rows(&mut self, txns: &[&Vec<Row>]) -> rusqlite::Result<()> {
        if txns.iter().all(|rows| rows.is_empty()) {
            return Ok(());
        }
        // IMMEDIATE takes the write lock up front, so the transaction cannot fail half way
        // because another connection started writing first.
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let mut upsert = tx.prepare_cached(UPSERT)?;
            for row in txns.iter().flat_map(|rows| rows.iter()) {
                upsert.execute(params![row.id, row.version, row.value])?;
            }
        }
        // On error the transaction is dropped, which rolls it back.
        tx.commit()?;
        Counters::count(&self.counters.commits);
        Ok(())
    }
}

/// Turns one transaction's documents into rows, serializing each value to JSON text.
fn encode(writes: Vec<StoredDoc>, path: &str) -> Result<Vec<Row>, StorageError> {
    writes
        .into_iter()
        .map(|doc| {
            let Ok(version) = i64::try_from(doc.version) else {
                let message = format!(
                    "version {} of document {} is larger than SQLite can store ({})",
                    doc.version,
                    doc.id,
                    i64::MAX
                );
                return Err(StorageError::Sqlite {
                    path: path.to_owned(),
                    source: rusqlite::Error::ToSqlConversionFailure(message.into()),
                });
            };
            match serde_json::to_string(&doc.value) {
                Ok(value) => Ok(Row { id: doc.id, version, value }),
                Err(source) => Err(StorageError::Corrupt { id: doc.id, source }),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::conformance::{self, doc, Backend, Counts};
    use super::*;
    use serde_json::json;

    fn temp_db() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("nested").join("dir").join("space.sqlite");
        (dir, path)
    }

    /// A space file in a directory of its own, for the tests every backend passes.
    struct Sqlite {
        _dir: tempfile::TempDir,
        path: PathBuf,
    }

    impl Sqlite {
        fn new() -> Self {
            let (_dir, path) = temp_db();
            Sqlite { _dir, path }
        }
    }

    impl Backend for Sqlite {
        type Storage = SqliteStorage;

        fn open(&self) -> SqliteStorage {
            SqliteStorage::open(&self.path).expect("open")
        }

        fn counts(&self, storage: &SqliteStorage) -> Counts {
            let stats = storage.stats();
            Counts {
                durable: stats.transactions_durable,
                failed: stats.transactions_failed,
                commits: stats.sqlite_commits,
            }
        }
    }

    #[test]
    fn storage_round_trip() {
        conformance::round_trip(&Sqlite::new());
    }

    #[test]
    fn storage_overwrite_keeps_latest_version() {
        conformance::overwrite_keeps_latest_version(&Sqlite::new());
    }

    #[test]
    fn storage_concurrent_submitters_all_durable() {
        conformance::concurrent_submitters_all_durable(&Sqlite::new());
    }

    #[test]
    fn storage_reopen_sees_data_and_drop_flushes_queue() {
        conformance::reopen_sees_data_and_drop_flushes_queue(&Sqlite::new());
    }

    #[test]
    fn storage_group_commit_batches() {
        conformance::group_commit_batches(&Sqlite::new());
    }

    #[test]
    fn after_a_failed_transaction_nothing_is_written_until_resumed() {
        conformance::failed_transaction_refuses_until_resumed(&Sqlite::new());
    }

    #[test]
    fn storage_empty_transaction_resolves() {
        conformance::empty_transaction_resolves(&Sqlite::new());
    }

    #[test]
    fn storage_doc_ids_by_prefix_in_byte_order() {
        conformance::doc_ids_by_prefix_in_byte_order(&Sqlite::new());
    }

    #[test]
    fn storage_creates_directories_and_writes_in_wal_mode() {
        let (_dir, path) = temp_db();
        let storage = SqliteStorage::open(&path).expect("open");
        storage.submit(vec![doc("a", 1, json!(1))]).wait().expect("durable");
        assert!(path.exists());
        let journal_mode: String =
            storage.reader.lock().query_row("PRAGMA journal_mode", [], |row| row.get(0)).expect("journal mode");
        assert_eq!(journal_mode, "wal");
    }

    #[test]
    fn storage_corrupt_json_row_is_reported() {
        let (_dir, path) = temp_db();
        let storage = SqliteStorage::open(&path).expect("open");
        storage.submit(vec![doc("good", 1, json!(true))]).wait().expect("durable");
        {
            let other = Connection::open(&path).expect("second connection");
            other
                .execute("INSERT INTO documents (id, version, value) VALUES ('bad', 3, '{not json')", [])
                .expect("insert corrupt row");
        }
        match storage.load() {
            Err(StorageError::Corrupt { id, .. }) => assert_eq!(id, "bad"),
            other => panic!("expected Corrupt for document bad, got {other:?}"),
        }
    }

    #[test]
    fn storage_open_fails_helpfully_when_directory_cannot_be_created() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"x").expect("write file");
        let err =
            SqliteStorage::open(file.join("sub").join("db.sqlite")).expect_err("a file is in the way of the directory");
        assert!(matches!(err, StorageError::Io { .. }), "{err:?}");
        assert!(err.to_string().contains("create the storage directory"), "{err}");
    }

    #[test]
    fn storage_is_send_and_sync() {
        fn assert_storage<T: Storage>() {}
        assert_storage::<SqliteStorage>();
    }

    #[test]
    fn storage_hints_fit_the_error() {
        let failure = |code| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None);
        assert!(hint(&failure(rusqlite::ffi::SQLITE_READONLY)).contains("writable"));
        assert!(hint(&failure(rusqlite::ffi::SQLITE_BUSY)).contains("another program"));
        assert!(hint(&failure(rusqlite::ffi::SQLITE_CORRUPT)).contains("damaged"));
        assert!(hint(&failure(rusqlite::ffi::SQLITE_NOTADB)).contains("damaged"));
        assert!(hint(&failure(rusqlite::ffi::SQLITE_FULL)).contains("disk"));
        assert_eq!(hint(&rusqlite::Error::InvalidQuery), "");
    }
}
