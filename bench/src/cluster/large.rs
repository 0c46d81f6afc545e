//! Opening a large space from PostgreSQL, against the same space in SQLite.
//!
//! The `spaces` suite's builder writes the SQLite space (one counter charm made by the
//! runtime, its documents copied under every id); its documents are then copied as they
//! are into a space in PostgreSQL through `PostgresStorage` (so the rows are what the
//! storage writes). A sample opens the space (for PostgreSQL: connections, the lease) and
//! answers `charm get` of one charm; SQLite and PostgreSQL samples alternate, so a slower
//! stretch of the machine slows both. The target: PostgreSQL within twice SQLite's median.

use std::path::Path;
use std::time::Duration;

use trellis_runner::storage::{parse_document, Storage as _, StoredDoc};
use trellis_runner::Runtime;

use super::database::Database;
use super::owners::{open_space, open_storage};
use crate::harness::{self, Budget, RunConfig, Stats};
use crate::spaces;

/// Documents per submitted transaction while copying.
const COPY_BATCH: usize = 5000;

const OPEN: Budget = Budget { warmup: 1, min_samples: 5, max_samples: 30, max_time: Duration::from_secs(6) };

/// (SQLite, PostgreSQL) times to open a space of `charms` charms and get one charm.
pub(super) fn open_and_get(config: &RunConfig, db: &Database, space: &str, charms: usize) -> (Stats, Stats) {
    let dir = tempfile::tempdir().expect("cluster: a temporary directory");
    let (small, big) = (dir.path().join("small.sqlite"), dir.path().join("big.sqlite"));
    let (_, ids) = spaces::write_spaces(&small, &big, charms);
    let one = ids[charms / 2].clone();
    copy(&big, db, space);

    let get = |rt: &Runtime| {
        let got = rt.charms().get(&one).expect("cluster: charm get");
        assert_eq!(got["label"], "Count: 0", "cluster: the charm as written");
    };
    let budget = config.budget(OPEN);
    let (mut on_sqlite, mut on_postgres) = (Vec::new(), Vec::new());
    let sample = |sqlite: bool| {
        let (rt, took) = harness::time(|| {
            let rt = if sqlite { spaces::open_runtime(&big) } else { open_space(db, space, "node-open") };
            get(&rt);
            rt
        });
        // Closing (and giving the lease back) is not part of the figure.
        drop(rt);
        took
    };
    for _ in 0..budget.warmup {
        sample(true);
        sample(false);
    }
    let started = std::time::Instant::now();
    while on_sqlite.len() < budget.max_samples.max(1)
        && (on_sqlite.len() < budget.min_samples.max(1) || started.elapsed() < budget.max_time)
    {
        on_sqlite.push(sample(true));
        on_postgres.push(sample(false));
    }
    let sqlite = Stats::median_of(&mut on_sqlite);
    let target = Duration::from_nanos(2 * sqlite.median_ns as u64);
    (sqlite, Stats::median_of(&mut on_postgres).with_target(target))
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
    let storage = open_storage(db, space, "node-copy");
    let mut docs = docs.into_iter().peekable();
    let mut tickets = Vec::new();
    while docs.peek().is_some() {
        tickets.push(storage.submit(docs.by_ref().take(COPY_BATCH).collect()));
    }
    for ticket in tickets {
        ticket.wait().expect("cluster: the copy is durable");
    }
}
