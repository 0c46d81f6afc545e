//! Where a space's documents live between processes.
//!
//! The space loads a document from its [`Storage`] the first time it is read (opening a
//! space reads nothing), keeps it in memory from then on, and hands each committed
//! transaction to storage in commit order. Storage makes the writes durable, possibly batching
//! several transactions into one durable write (group commit), and resolves each
//! transaction's [`Durable`] ticket once its writes can no longer be lost.

#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
mod decode;
mod file;
pub mod group;
mod memory;
mod snapshot;
mod sqlite;

pub use decode::parse_document;
pub use memory::MemoryStorage;
pub use snapshot::SqliteSnapshot;
pub use sqlite::{SqliteStorage, CREATE_TABLE, UPSERT};

use futures::channel::oneshot;

/// One document as storage sees it: id, version and JSON value.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredDoc {
    /// The document's id inside its space.
    pub id: String,
    /// The version this write creates; versions of one document only grow.
    pub version: u64,
    /// The document's whole value after the write.
    pub value: crate::value::Value,
}

/// Errors from a storage backend.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The SQLite file could not be opened, read or written.
    #[error("SQLite storage at {path}: {source}{}", sqlite::hint(source))]
    Sqlite {
        /// The database file.
        path: String,
        /// What SQLite said.
        #[source]
        source: rusqlite::Error,
    },
    /// A stored document is not valid JSON.
    #[error("document {id} in storage is not valid JSON: {source}; {DAMAGED}")]
    Corrupt {
        /// The document id.
        id: String,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// A stored document nests deeper than storage loads (see [`crate::depth`]); the
    /// runtime never writes one.
    #[error(
        "document {id} in storage is nested {depth} levels deep, more than the {limit} Trellis can load; {DAMAGED}"
    )]
    TooDeep {
        /// The document id.
        id: String,
        /// How deeply its text nests.
        depth: usize,
        /// The most that loads.
        limit: usize,
    },
    /// The path given for a space is not a file a space can live in.
    #[error(
        "cannot keep a space at {path}: it is {found}, not a file; give the path of a file (it is created if missing)"
    )]
    NotAFile {
        /// The path given.
        path: String,
        /// What is there instead: "a directory", "a device or other special file".
        found: &'static str,
    },
    /// A file-system or operating-system step the storage needs failed (creating the
    /// storage directory, starting the writer thread).
    #[error("storage at {path}: could not {action}: {source}")]
    Io {
        /// The file or directory concerned.
        path: String,
        /// What the storage was trying to do, e.g. "create the storage directory".
        action: &'static str,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The file is a database of another program: Trellis does not write into it.
    #[error(
        "{path} is an SQLite database of another program (its tables: {tables}), not a Trellis space; nothing was changed; give the path of a new file or of a space"
    )]
    NotASpace {
        /// The database file.
        path: String,
        /// The tables found there, comma-separated.
        tables: String,
    },
    /// The space file has more than one name (hard links). SQLite names its journal after
    /// the path a database is opened by, and a lock file beside one name does not guard
    /// the others: two processes could write the file at once, each with its own journal.
    #[error(
        "{path} has {links} names (hard links), and a space written under two names can be corrupted; remove the other names (`find / -samefile {path}` lists them), or use a copy of the file"
    )]
    HardLinked {
        /// The space file.
        path: String,
        /// How many names it has.
        links: u64,
    },
    /// Another process (or another runtime in this one) has the space open.
    #[error(
        "the space {path} is in use by another trellis process; close it (a running chat or server, say) and try again"
    )]
    InUse {
        /// The space's file.
        path: String,
    },
    /// A document could not be read from storage when it was first needed; the space
    /// refuses every commit after that, so nothing is written on top of a value it could
    /// not see.
    #[error("document {id} could not be read from the space file ({reason}); the space refuses changes until it is reopened; check the file and restart")]
    Unreadable {
        /// The document id.
        id: String,
        /// Why it could not be read.
        reason: String,
    },
    /// A write submitted after one that failed, refused unwritten: every write holds
    /// whole documents, so writing it would make the failed one's changes durable.
    #[error("not saved: an earlier write to the space failed ({reason}), and nothing after it is written until the space is back to what was last saved")]
    Refused {
        /// Why the earlier write failed.
        reason: String,
    },
    /// The background writer stopped, so writes can no longer be made durable.
    #[error("the storage writer stopped; committed data after this point was not saved")]
    WriterGone,
    /// A database server that holds spaces (PostgreSQL) could not be reached, refused the
    /// login, or failed a statement.
    #[error("database {target}: {message}{}", hint_suffix(hint))]
    Database {
        /// Where the space lives, as the user gave it but never with its password.
        target: String,
        /// What the database (or the connection to it) said.
        message: String,
        /// What to do about it, when that is known; empty otherwise.
        hint: &'static str,
    },
    /// Another node holds the lease of a space kept in a shared database: only the lease's
    /// holder writes the space, so this node may not open it for writing now.
    #[error(
        "the space {space} is held by node {holder}{} for {expires_in_ms} ms more; send the request to that node, or wait until its lease expires and open the space again",
        addr.as_ref().map(|addr| format!(" (at {addr})")).unwrap_or_default()
    )]
    Owned {
        /// The space.
        space: String,
        /// The node holding the lease.
        holder: String,
        /// Where that node takes requests for the space, if it said.
        addr: Option<String>,
        /// How long its lease runs if it is not renewed, by the database's clock.
        expires_in_ms: u64,
    },
    /// This node's lease of a space ran out or was taken (another node's epoch is newer):
    /// the write was refused, and so is every later one through this storage, for good.
    #[error(
        "this node lost the lease of the space {space} (epoch {epoch}): another node took over the space; this node stopped writing it; its later writes were refused; send the requests to the space's new holder, or open the space again to take the lease back once it is free"
    )]
    LeaseLost {
        /// The space.
        space: String,
        /// The epoch this node held; the space's current holder has a higher one.
        epoch: u64,
    },
    /// This node only follows a space another node holds (it keeps a copy to read and to
    /// watch): a change to it goes to the holder.
    #[error(
        "this node only follows the space {space}, which another node holds: it changes nothing here; send the change to the node holding the space"
    )]
    Following {
        /// The space.
        space: String,
    },
}

/// `hint` after a separator, or nothing when there is no hint.
fn hint_suffix(hint: &str) -> String {
    if hint.is_empty() {
        String::new()
    } else {
        format!("; {hint}")
    }
}

impl StorageError {
    /// Whether the space file, or the lock file beside it, cannot be written: this user
    /// may not, or the disk is full (a [`SqliteSnapshot`] may still read it).
    pub fn is_unwritable(&self) -> bool {
        use rusqlite::ErrorCode;
        use std::io::ErrorKind;
        match self {
            StorageError::Sqlite { source, .. } => {
                matches!(
                    source.sqlite_error_code(),
                    Some(ErrorCode::ReadOnly | ErrorCode::PermissionDenied | ErrorCode::DiskFull)
                )
            }
            StorageError::Io { source, .. } => {
                matches!(
                    source.kind(),
                    ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem | ErrorKind::StorageFull
                )
            }
            _ => false,
        }
    }
}

/// What to do about a space file that is not a space or is damaged.
const DAMAGED: &str =
    "the file is not a Trellis space or is damaged; move it away (keep it if the data matters) and a new space is created in its place";

/// A durable home for a space's documents.
pub trait Storage: Send + Sync + 'static {
    /// Reads one stored document (its latest version), `None` if it was never stored.
    /// The space calls it the first time the document is read, and never again for it.
    fn load_doc(&self, id: &str) -> Result<Option<StoredDoc>, StorageError>;

    /// The ids of the stored documents whose id starts with `prefix`, sorted, without
    /// reading the documents.
    fn doc_ids(&self, prefix: &str) -> Result<Vec<String>, StorageError>;

    /// Reads every stored document (latest version of each), in id order.
    fn load(&self) -> Result<Vec<StoredDoc>, StorageError> {
        let mut docs = Vec::new();
        for id in self.doc_ids("")? {
            docs.extend(self.load_doc(&id)?);
        }
        Ok(docs)
    }

    /// Queues the writes of one committed transaction. Transactions become durable in
    /// the order they were submitted; the returned ticket resolves when these writes are.
    ///
    /// Once one fails, storage refuses every transaction submitted after it
    /// ([`StorageError::Refused`]) without writing it, until [`Storage::resume`]: a write
    /// holds whole documents, so a later one would carry the failed one's changes to disk.
    fn submit(&self, writes: Vec<StoredDoc>) -> Durable;

    /// Whether storage refuses writes since one failed (see [`Storage::submit`]).
    fn refusing(&self) -> bool {
        false
    }

    /// Writes again what is submitted from now on. The space calls it once everything
    /// submitted before has been answered and its documents are back to what storage holds.
    fn resume(&self) {}

    /// Whether writes go anywhere. The space skips preparing writes for storage that
    /// keeps nothing (in-memory spaces), which is most of a commit's cost there.
    fn keeps_writes(&self) -> bool {
        true
    }

    /// Whether this storage will never write again: a space shared through a database
    /// whose lease this node lost. The server drops such a space and looks it up again.
    fn lost(&self) -> bool {
        false
    }

    /// Why this storage takes no write at all, if it takes none: a copy of a space another
    /// node holds, kept up to date with [`Runtime::apply_stored`]. The space refuses every
    /// commit with it before changing anything, since a change made here would be
    /// overwritten, or would hide the holder's.
    ///
    /// [`Runtime::apply_stored`]: crate::Runtime::apply_stored
    fn read_only(&self) -> Option<StorageError> {
        None
    }

    /// How far the log of what this storage made durable goes, when it keeps one that
    /// other nodes read (a database's change log): a node following the space has seen
    /// every change made durable so far once it has read the log that far.
    fn log_position(&self) -> Option<u64> {
        None
    }
}

/// Resolves once a submitted transaction is durable (or storage failed).
#[derive(Debug)]
pub struct Durable(DurableInner);

#[derive(Debug)]
enum DurableInner {
    /// The error boxed: a ticket travels in every commit's result, and nearly always
    /// says `Ok`, so it is kept small (an error inline is most of a commit's result).
    Ready(Option<Result<(), Box<StorageError>>>),
    Waiting(oneshot::Receiver<Result<(), StorageError>>),
}

/// The writer's side of a [`Durable`] ticket.
pub type DurableSender = oneshot::Sender<Result<(), StorageError>>;

impl Durable {
    /// A ticket that is already resolved.
    pub fn ready(result: Result<(), StorageError>) -> Self {
        Durable(DurableInner::Ready(Some(result.map_err(Box::new))))
    }

    /// A ticket and the sender that resolves it.
    pub fn pending() -> (DurableSender, Self) {
        let (tx, rx) = oneshot::channel();
        (tx, Durable(DurableInner::Waiting(rx)))
    }

    /// Blocks the current thread until the writes are durable (also inside an executor).
    pub fn wait(self) -> Result<(), StorageError> {
        crate::park::block_on(self)
    }

    /// Watches for the writer's answer on this CPU for up to `limit` before anyone blocks
    /// on it: a writer that is already at work answers within microseconds, and putting a
    /// thread to sleep and waking it again costs more than that. For a thread about to
    /// block on the ticket anyway; not for async tasks.
    pub fn spin(&mut self, limit: std::time::Duration) {
        let DurableInner::Waiting(rx) = &mut self.0 else { return };
        let start = std::time::Instant::now();
        while start.elapsed() < limit {
            match rx.try_recv() {
                Ok(Some(result)) => {
                    self.0 = DurableInner::Ready(Some(result.map_err(Box::new)));
                    return;
                }
                Ok(None) => std::hint::spin_loop(),
                Err(_) => {
                    self.0 = DurableInner::Ready(Some(Err(Box::new(StorageError::WriterGone))));
                    return;
                }
            }
        }
    }
}

/// How long a thread that waits for durability, and the writer that waits for work, spin
/// before they sleep (see [`Durable::spin`]).
pub const SPIN: std::time::Duration = std::time::Duration::from_micros(50);

impl std::future::Future for Durable {
    type Output = Result<(), StorageError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        match &mut self.0 {
            DurableInner::Ready(result) => {
                std::task::Poll::Ready(result.take().map_or(Err(StorageError::WriterGone), |r| r.map_err(|e| *e)))
            }
            DurableInner::Waiting(rx) => {
                std::pin::Pin::new(rx).poll(cx).map(|r| r.unwrap_or(Err(StorageError::WriterGone)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spinning_ticket_takes_the_answer_that_comes_and_keeps_waiting_for_one_that_does_not() {
        let (done, mut durable) = Durable::pending();
        durable.spin(std::time::Duration::from_micros(200));
        assert!(matches!(durable.0, DurableInner::Waiting(_)), "no answer yet: still waiting");
        done.send(Ok(())).expect("the ticket is there");
        durable.spin(SPIN);
        assert!(matches!(durable.0, DurableInner::Ready(Some(Ok(())))));
        assert!(durable.wait().is_ok());

        let (done, mut gone) = Durable::pending();
        drop(done);
        gone.spin(SPIN);
        assert!(matches!(gone.wait(), Err(StorageError::WriterGone)), "a writer that went away is said");
    }
}
