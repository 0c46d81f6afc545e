//! Opening a large space from PostgreSQL, against the same space in SQLite.
//!
//! The `spaces` suite's builder writes the SQLite space (one counter charm made by the
//! runtime, its documents copied under every id); its documents are then copied as they
//! are into a space in PostgreSQL through `PostgresStorage` (so the rows are what the
//! storage writes). A sample opens the space and answers `charm get` of one charm: from
//! SQLite; from PostgreSQL through a new node's connections (connecting, the lease); and
//! through those of a node already running. The three take turns, so a slower stretch of
//! the machine slows all alike. The target: PostgreSQL within twice SQLite's median.

use std::path::Path;
use std::time::Duration;

use trellis_runner::storage::{parse_document, Storage as _, StoredDoc};

use super::database::Database;
use super::owners::Owner;
use crate::harness::{self, Budget, RunConfig, Stats};
use crate::spaces;

/// Documents per submitted transaction while copying.
const COPY_BATCH: usize = 5000;

const OPEN: Budget = Budget { warmup: 1, min_samples: 5, max_samples: 30, max_time: Duration::from_secs(6) };

/// What [`open_and_get`] measured.
pub(super) struct Opened {
    pub(super) sqlite: Stats,
    /// Through a new node's connections (connecting included), as a process that opens
    /// one space (`trellis --space URL ...`) does.
    pub(super) cold: Stats,
    /// Through the connections of a node that is already running (`trellis serve
    /// --database` opening a space on its first request).
    pub(super) warm: Stats,
}

/// Times to open a space of `charms` charms and get one charm: SQLite, and PostgreSQL
/// through a new node and through a running one, in turn.
pub(super) fn open_and_get(config: &RunConfig, db: &Database, space: &str, charms: usize) -> Opened {
    let dir = tempfile::tempdir().expect("cluster: a temporary directory");
    let (small, big) = (dir.path().join("small.sqlite"), dir.path().join("big.sqlite"));
    let (_, ids) = spaces::write_spaces(&small, &big, charms);
    let one = ids[charms / 2].clone();
    copy(&big, db, space);

    let running = Owner::new(db, "node-running");
    let sample = |kind: usize| {
        let (rt, took) = harness::time(|| {
            let rt = match kind {
                0 => spaces::open_runtime(&big),
                1 => Owner::new(db, "node-new").open(space),
                _ => running.open(space),
            };
            let got = rt.charms().get(&one).expect("cluster: charm get");
            assert_eq!(got["label"], "Count: 0", "cluster: the charm as written");
            rt
        });
        // Closing (and giving the lease back) is not part of the figure.
        drop(rt);
        took
    };
    let budget = config.budget(OPEN);
    for _ in 0..budget.warmup {
        for kind in 0..3 {
            sample(kind);
        }
    }
    let mut samples = [Vec::new(), Vec::new(), Vec::new()];
    let started = std::time::Instant::now();
    while samples[0].len() < budget.max_samples.max(1)
        && (samples[0].len() < budget.min_samples.max(1) || started.elapsed() < budget.max_time)
    {
        for (kind, samples) in samples.iter_mut().enumerate() {
            samples.push(sample(kind));
        }
    }
    let [mut sqlite, mut cold, mut warm] = samples;
    let sqlite = Stats::median_of(&mut sqlite);
    let target = Duration::from_nanos(2 * sqlite.median_ns as u64);
    Opened {
        sqlite,
        cold: Stats::median_of(&mut cold).with_target(target),
        warm: Stats::median_of(&mut warm).with_target(target),
    }
}

/// Copies every document of the SQLite space at `from` into space `space` of `db`.
fn copy(from: &Path, db: &Database, space: &str) {
    let source = rusqlite::Connection::open(from).expect("cluster: read the SQLite space");
    let mut stmt = source.prepare("SELECT id, version, value FROM documents").expect("cluster: query");
    let docs: Vec<StoredDoc> = stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?)))
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .expect("cluster: the SQLite space's documents")
        .into_iter()
        .map(|(id, version, text)| {
            let value = parse_document(&id, &text).expect("cluster: a stored document");
            StoredDoc { id, version: version.unsigned_abs(), value }
        })
        .collect();
    let storage = Owner::new(db, "node-copy").storage(space);
    let mut docs = docs.into_iter().peekable();
    let mut tickets = Vec::new();
    while docs.peek().is_some() {
        tickets.push(storage.submit(docs.by_ref().take(COPY_BATCH).collect()));
    }
    for ticket in tickets {
        ticket.wait().expect("cluster: the copy is durable");
    }
}
