//! [`Database`]: a node's connections to one PostgreSQL database, shared by every space it
//! holds there.
//!
//! A node holding many spaces keeps a bounded number of connections however many it
//! holds: [`MAX_WRITERS`](crate::MAX_WRITERS) for the spaces' writers (each takes one for
//! a group), [`READERS`](crate::READERS) for the documents they load, and one for the
//! renewal of all their leases. Every connection lives on a thread of this crate or is
//! used only there, because the synchronous client runs a Tokio runtime of its own, which
//! may not be driven from a thread inside another (a server opens spaces from its
//! workers).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use trellis_runner::storage::group::{Counters, GroupCommit, Refusal};
use trellis_runner::storage::StorageError;

use crate::connect::Connector;
use crate::lease::{self, Leases};
use crate::reader::Reader;
use crate::storage::Shared;
use crate::writer::{self, Statements, Writer, WriterPool, WRITER_THREAD};
use crate::{FollowerStorage, Holder, OpenOptions, PostgresStorage, SpaceUrl};

/// This node's connections to one database, for opening its spaces; cheap to clone.
///
/// ```no_run
/// use trellis_postgres::{Holder, OpenOptions, SpaceUrl};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let url = SpaceUrl::parse("postgres://trellis@db/trellis?space=team-a")?;
/// let database = OpenOptions::new().database(&url)?;
/// let node = Holder::new("node-1:4242").at("http://10.0.0.5:8080");
/// let a = database.open("team-a", node.clone())?;
/// let b = database.open("team-b", node)?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Database {
    inner: Arc<Inner>,
}

struct Inner {
    /// A space's URL in this database, from which the others are made.
    url: SpaceUrl,
    options: OpenOptions,
    writers: Arc<WriterPool>,
    reader: Reader,
    leases: Leases,
}

impl Database {
    pub(crate) fn new(url: &SpaceUrl, options: OpenOptions) -> Result<Database, StorageError> {
        let connector = Connector::new(url, options.connect_timeout, options.statement_timeout).for_database(url);
        let inner = Inner {
            url: url.clone(),
            writers: Arc::new(WriterPool::new(connector.clone(), Statements::prepare)),
            reader: Reader::start(connector.clone())?,
            leases: Leases::start(connector, options.lease)?,
            options,
        };
        Ok(Database { inner: Arc::new(inner) })
    }

    /// Opens the space `space` of this database for `holder`: creates Trellis's tables if
    /// missing, takes the space's lease ([`StorageError::Owned`] if another node holds
    /// it) and starts the space's writer.
    pub fn open(&self, space: &str, holder: Holder) -> Result<PostgresStorage, StorageError> {
        let target = self.space_url(space)?;
        // On a thread of its own: the caller may be a Tokio worker (a server opening a
        // space for a request), where the client's own runtime may not block.
        std::thread::scope(|scope| {
            let opening = std::thread::Builder::new()
                .name("trellis-postgres-open".into())
                .spawn_scoped(scope, || self.open_here(target, holder))
                .map_err(|source| StorageError::Io {
                    path: space.to_owned(),
                    action: "start the thread that opens the space",
                    source,
                })?;
            opening.join().unwrap_or_else(|_| Err(StorageError::WriterGone))
        })
    }

    /// The space `space` of this database as its holder last made it durable, to read and
    /// to follow, never to write: another node holds it (see [`FollowerStorage`]). Takes
    /// no lease and checks nothing: a missing space reads as an empty one.
    pub fn follow(&self, space: &str) -> Result<FollowerStorage, StorageError> {
        Ok(FollowerStorage::new(self.space_url(space)?, self.clone()))
    }

    fn space_url(&self, space: &str) -> Result<SpaceUrl, StorageError> {
        self.inner.url.with_space(space).map_err(|error| StorageError::Database {
            target: self.inner.url.database_shown().to_owned(),
            message: error.to_string(),
            hint: "",
        })
    }

    fn open_here(&self, target: SpaceUrl, holder: Holder) -> Result<PostgresStorage, StorageError> {
        let inner = &self.inner;
        let connector = Connector::new(&target, inner.options.connect_timeout, inner.options.statement_timeout);
        let space = target.space().to_owned();
        let taken_at = Instant::now();
        // The writers' connections are made with Trellis's tables in place.
        let epoch = inner
            .writers
            .with(|conn| lease::acquire(&mut conn.client, &connector, &space, &holder, inner.options.lease))?;
        let shared = Arc::new(Shared {
            space,
            epoch,
            lost: AtomicBool::new(false),
            refusal: Refusal::default(),
            counters: Counters::default(),
            logged: AtomicU64::new(0),
        });
        // From here on the lease is ours, kept until it is released.
        inner.leases.hold(Arc::clone(&shared), taken_at);
        let started = inner
            .writers
            .with(|conn| writer::last_seq(&mut conn.client, &connector, &shared.space))
            .map(|last_seq| {
                shared.logged.store(last_seq.unsigned_abs(), Ordering::Release);
                Writer::new(connector, Arc::clone(&inner.writers), Arc::clone(&shared), last_seq)
            })
            .and_then(|writer| GroupCommit::start(WRITER_THREAD, writer));
        match started {
            Ok(group) => Ok(PostgresStorage { target, holder, group, database: self.clone(), shared }),
            Err(error) => {
                inner.leases.release(&shared);
                Err(error)
            }
        }
    }

    pub(crate) fn reader(&self) -> &Reader {
        &self.inner.reader
    }

    pub(crate) fn leases(&self) -> &Leases {
        &self.inner.leases
    }
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Database").field(&self.inner.url.database_shown()).finish()
    }
}
