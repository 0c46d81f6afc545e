//! [`FollowerStorage`]: the copy a node keeps of a space another node holds, to read it
//! and watch it without asking the holder (DESIGN.md §10, followers).
//!
//! It reads documents as the holder last made them durable, through the node's readers,
//! and writes nothing: the space refuses every change (see `Storage::read_only`). What
//! the holder changes later comes in through a [`ChangeFeed`](crate::ChangeFeed) started
//! before the copy, whose whole documents the runtime takes
//! (`trellis_runner::Runtime::apply_stored`).

use trellis_runner::storage::{Durable, Storage, StorageError, StoredDoc};

use crate::{Database, SpaceUrl};

/// A space another node holds, read from the database and never written.
///
/// ```no_run
/// use trellis_postgres::{ChangeFeed, OpenOptions, SpaceUrl};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let url = SpaceUrl::parse("postgres://trellis@db/trellis?space=team-a")?;
/// // The feed first: a change made durable after it starts is not missed.
/// let feed = ChangeFeed::follow(&url, None)?;
/// let storage = OpenOptions::new().database(&url)?.follow("team-a")?;
/// let copy = trellis_runner::Runtime::with_storage(Box::new(storage))?;
/// while let Ok(change) = feed.recv() {
///     copy.apply_stored(change.docs);
/// }
/// # Ok(()) }
/// ```
pub struct FollowerStorage {
    target: SpaceUrl,
    database: Database,
}

impl FollowerStorage {
    pub(crate) fn new(target: SpaceUrl, database: Database) -> FollowerStorage {
        FollowerStorage { target, database }
    }

    /// The space's URL (shown without its password).
    pub fn target(&self) -> &SpaceUrl {
        &self.target
    }
}

impl Storage for FollowerStorage {
    fn load_doc(&self, id: &str) -> Result<Option<StoredDoc>, StorageError> {
        self.database.reader().stored(self.target.space(), id)
    }

    fn doc_ids(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        self.database.reader().ids(self.target.space(), prefix)
    }

    fn submit(&self, writes: Vec<StoredDoc>) -> Durable {
        // The space refuses a change before it gets here; a barrier (no writes) is kept.
        match (writes.is_empty(), self.read_only()) {
            (false, Some(refused)) => Durable::ready(Err(refused)),
            _ => Durable::ready(Ok(())),
        }
    }

    fn read_only(&self) -> Option<StorageError> {
        Some(StorageError::Following { space: self.target.space().to_owned() })
    }
}

impl std::fmt::Debug for FollowerStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FollowerStorage").field("target", &self.target).finish_non_exhaustive()
    }
}
