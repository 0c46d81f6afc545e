//! Spaces held by "nodes" in this process: three [`Owner`]s, each a [`Holder`] with its
//! own connections to the database (a `trellis_postgres::Database`) and its own storages
//! and runtimes, as three `trellis serve` processes would hold them (without their HTTP),
//! and the raw-PostgreSQL peers of the same work.
//!
//! * throughput: the spaces are spread over the holders round robin, each gets a counter
//!   charm, and [`SENDERS`] Tokio tasks per space send `increment` back to back through
//!   `Runtime::send` (handler, commit, durable in PostgreSQL), on a two-thread Tokio
//!   runtime. A sample is a window of wall time divided by the sends that completed in it.
//!   Afterwards each counter must equal its acknowledged sends, in memory and after
//!   opening the space again under another holder (what was acknowledged is in the
//!   database).
//! * owner latency: one sender, one space, sends back to back (nothing else running).
//! * raw PostgreSQL: [`RAW_CLIENTS`] connections each doing its own row's
//!   read-then-update transaction (`SELECT ... FOR UPDATE`, `UPDATE`, `COMMIT`) back to
//!   back (the 4,700 to 5,100 per second at 4 to 8 clients), and one connection
//!   doing it alone for the latency.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres::fallible_iterator::FallibleIterator as _;
use serde_json::json;
use trellis_postgres::{Holder, OpenOptions, PostgresStorage, SpaceUrl};
use trellis_runner::{DocId, Link, Runtime};

use super::database::Database;
use crate::harness::{self, Budget, RunConfig, Stats};
use crate::tools::counter_pattern;

/// The in-process nodes' names.
pub(super) const HOLDERS: [&str; 3] = ["node-1", "node-2", "node-3"];

/// Tasks sending to each space at once in the throughput scenario.
pub(super) const SENDERS: usize = 4;

/// Connections of the raw-PostgreSQL throughput peer.
pub(super) const RAW_CLIENTS: usize = 8;

/// A window's length (the sample of the throughput scenarios).
const WINDOW: Duration = Duration::from_millis(500);
const QUICK_WINDOW: Duration = Duration::from_millis(200);

/// Windows: two of warm-up, then up to 12 (6 s).
const WINDOWS: Budget = Budget { warmup: 2, min_samples: 6, max_samples: 12, max_time: Duration::from_secs(6) };

/// One commit after another.
const LATENCY: Budget = Budget { warmup: 50, min_samples: 200, max_samples: 3000, max_time: Duration::from_secs(3) };

/// A node in this process: its name and its connections to the database, through which
/// it opens every space it holds, as `trellis serve --database` does (a writer pool,
/// readers and one lease thread, shared by its spaces). The one place the suite opens
/// spaces in PostgreSQL.
pub(super) struct Owner {
    name: String,
    database: trellis_postgres::Database,
}

impl Owner {
    /// Node `name`'s connections to `db` (none is made before a space is opened).
    pub(super) fn new(db: &Database, name: &str) -> Owner {
        let url = SpaceUrl::parse(&db.space_url("nodes")).expect("cluster: the database's URL");
        let database = OpenOptions::new().database(&url).expect("cluster: a node's connections to the database");
        Owner { name: name.to_owned(), database }
    }

    /// Opens space `space` for this node: takes its lease, starts its writer.
    pub(super) fn storage(&self, space: &str) -> PostgresStorage {
        self.database
            .open(space, Holder::new(&self.name))
            .unwrap_or_else(|e| panic!("cluster: open space {space} for {}: {e}", self.name))
    }

    /// [`Owner::storage`] under a runtime that knows the counter pattern.
    pub(super) fn open(&self, space: &str) -> Runtime {
        let rt = Runtime::with_storage(Box::new(self.storage(space)))
            .unwrap_or_else(|e| panic!("cluster: a runtime on space {space}: {e}"));
        rt.register_pattern(counter_pattern());
        rt
    }
}

/// A space held here, with a counter charm.
struct Owned {
    name: String,
    rt: Runtime,
    id: DocId,
    increment: Link,
}

impl Owned {
    fn open(owner: &Owner, name: String) -> Owned {
        let rt = owner.open(&name);
        let id = rt.charms().create("counter", json!({})).expect("cluster: create a counter charm");
        let increment = rt.charms().result(&id).child("increment");
        Owned { name, rt, id, increment }
    }

    fn count(rt: &Runtime, id: &str) -> i64 {
        rt.charms().get(id).expect("cluster: read the counter")["count"].as_i64().expect("cluster: a count")
    }
}

/// What the throughput scenario measured: time per commit (per window), and each
/// commit's latency under that load.
pub(super) struct Throughput {
    pub(super) per_commit: Stats,
    pub(super) latency: Stats,
}

/// Commits per second over `spaces` spaces spread over [`HOLDERS`], [`SENDERS`] at a
/// time on each.
pub(super) fn throughput(config: &RunConfig, db: &Database, prefix: &str, spaces: usize) -> Throughput {
    let owners: Vec<Owner> = HOLDERS.iter().map(|name| Owner::new(db, name)).collect();
    let owned: Vec<Owned> =
        (0..spaces).map(|i| Owned::open(&owners[i % owners.len()], format!("{prefix}-c{i}"))).collect();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("cluster: a Tokio runtime");
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = owned
        .iter()
        .enumerate()
        .flat_map(|(space, owned)| std::iter::repeat_n((space, owned.rt.clone(), owned.increment.clone()), SENDERS))
        .map(|(space, rt, increment)| {
            let (stop, done) = (Arc::clone(&stop), Arc::clone(&done));
            tokio.spawn(async move {
                let (mut sent, mut latencies) = (0i64, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    rt.send(&increment, json!({"amount": 1})).await.expect("cluster: a durable send");
                    latencies.push(started.elapsed());
                    sent += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                (space, sent, latencies)
            })
        })
        .collect();

    let per_commit = windows(config, &done);
    stop.store(true, Ordering::Relaxed);
    let mut sent = vec![0i64; owned.len()];
    let mut latencies = Vec::new();
    for task in tasks {
        match tokio.block_on(task) {
            Ok((space, n, mut l)) => {
                sent[space] += n;
                latencies.append(&mut l);
            }
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    drop(tokio);
    for (owned, sent) in owned.iter().zip(&sent) {
        assert_eq!(Owned::count(&owned.rt, &owned.id), *sent, "cluster: {}'s counter in memory", owned.name);
    }
    // Dropping a runtime gives its lease back; another holder then finds every
    // acknowledged send in the database.
    let reopen: Vec<(String, DocId)> = owned.into_iter().map(|o| (o.name, o.id)).collect();
    drop(owners);
    let check = Owner::new(db, "node-check");
    for ((name, id), sent) in reopen.iter().zip(&sent) {
        let rt = check.open(name);
        assert_eq!(Owned::count(&rt, id), *sent, "cluster: {name}'s counter opened again from PostgreSQL");
    }
    Throughput { per_commit, latency: Stats::of(&mut latencies) }
}

/// Samples `done` (a count of commits others make) over windows: the time per commit of
/// each window.
fn windows(config: &RunConfig, done: &AtomicU64) -> Stats {
    let window = if config.quick { QUICK_WINDOW } else { WINDOW };
    harness::measure(config.budget(WINDOWS), || {
        let (before, started) = (done.load(Ordering::Relaxed), Instant::now());
        std::thread::sleep(window);
        let (commits, took) = (done.load(Ordering::Relaxed) - before, started.elapsed());
        assert!(commits > 0, "cluster: no commit completed in {took:?}");
        took / u32::try_from(commits).unwrap_or(u32::MAX)
    })
}

/// Latency of one send at a time on a space held here (`Runtime::send` to durable).
pub(super) fn owner_latency(config: &RunConfig, db: &Database, prefix: &str) -> Stats {
    let owned = Owned::open(&Owner::new(db, HOLDERS[0]), format!("{prefix}-latency"));
    let tokio = crate::tools::tokio();
    let mut sent = 0;
    let mut samples = harness::durations(config.budget(LATENCY), || {
        let (result, took) = harness::time(|| tokio.block_on(owned.rt.send(&owned.increment, json!({"amount": 1}))));
        result.expect("cluster: a durable send");
        sent += 1;
        took
    });
    assert_eq!(Owned::count(&owned.rt, &owned.id), sent, "cluster: the counter in memory");
    Stats::of(&mut samples)
}

/// The raw peer's table: a row per client.
const RAW_TABLE: &str = "CREATE TABLE IF NOT EXISTS bench_raw (id integer PRIMARY KEY, n bigint NOT NULL)";

/// One read-then-update transaction on row `id`; returns the new value.
fn raw_commit(client: &mut postgres::Client, statements: &(postgres::Statement, postgres::Statement), id: i32) -> i64 {
    let mut tx = client.transaction().expect("raw: begin");
    let n: i64 = tx.query_one(&statements.0, &[&id]).and_then(|row| row.try_get(0)).expect("raw: read");
    tx.execute(&statements.1, &[&id, &(n + 1)]).expect("raw: update");
    tx.commit().expect("raw: commit");
    n + 1
}

/// A connection with row `id` at 0 and the two statements prepared.
fn raw_client(db: &Database, id: i32) -> (postgres::Client, (postgres::Statement, postgres::Statement)) {
    let mut client = db.connect();
    client.batch_execute(RAW_TABLE).expect("raw: create the table");
    client
        .execute("INSERT INTO bench_raw VALUES ($1, 0) ON CONFLICT (id) DO UPDATE SET n = 0", &[&id])
        .expect("raw: the row");
    let read = client.prepare("SELECT n FROM bench_raw WHERE id = $1 FOR UPDATE").expect("raw: prepare");
    let update = client.prepare("UPDATE bench_raw SET n = $2 WHERE id = $1").expect("raw: prepare");
    (client, (read, update))
}

/// The raw peer of [`throughput`]: [`RAW_CLIENTS`] connections, each its own row.
pub(super) fn raw_throughput(config: &RunConfig, db: &Database) -> Stats {
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let clients: Vec<_> = (0..RAW_CLIENTS).map(|i| raw_client(db, i as i32)).collect();
    std::thread::scope(|scope| {
        let threads: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(i, (mut client, statements))| {
                let (stop, done) = (&stop, &done);
                scope.spawn(move || {
                    let mut last = 0;
                    while !stop.load(Ordering::Relaxed) {
                        last = raw_commit(&mut client, &statements, i as i32);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    let stored: i64 = client
                        .query_one("SELECT n FROM bench_raw WHERE id = $1", &[&(i as i32)])
                        .and_then(|row| row.try_get(0))
                        .expect("raw: read back");
                    assert_eq!(stored, last, "raw: row {i}");
                })
            })
            .collect();
        let stats = harness::guarded(|| windows(config, &done));
        stop.store(true, Ordering::Relaxed);
        for thread in threads {
            if let Err(panic) = thread.join() {
                std::panic::resume_unwind(panic);
            }
        }
        stats.unwrap_or_else(|e| panic!("{e}"))
    })
}

/// The raw peer of the propagation scenario: `pg_notify` on one connection at `rate` a
/// second, `total` times, heard by another connection that `LISTEN`s; from sending the
/// statement (it commits) to the listener reading it.
pub(super) fn raw_notify(db: &Database, rate: u32, total: usize) -> Stats {
    let mut listener = db.connect();
    listener.batch_execute("LISTEN bench_raw").expect("raw: listen");
    let mut sender = db.connect();
    let notify = sender.prepare("SELECT pg_notify('bench_raw', $1)").expect("raw: prepare");
    std::thread::scope(|scope| {
        let heard = scope.spawn(move || {
            let mut heard = vec![None; total];
            let mut notifications = listener.notifications();
            let mut left = total;
            let mut iter = notifications.timeout_iter(Duration::from_secs(10));
            while let Some(notification) = iter.next().expect("raw: a notification") {
                let i: usize = notification.payload().parse().expect("raw: a number");
                heard[i] = Some(Instant::now());
                left -= 1;
                if left == 0 {
                    break;
                }
            }
            heard
        });
        let t0 = Instant::now();
        let mut sent = Vec::with_capacity(total);
        for i in 0..total {
            let due = t0 + Duration::from_secs(1) * u32::try_from(i).unwrap_or(u32::MAX) / rate;
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            sent.push(Instant::now());
            sender.execute(&notify, &[&i.to_string()]).expect("raw: notify");
        }
        let heard = heard.join().unwrap_or_else(|e| std::panic::resume_unwind(e));
        let mut samples: Vec<Duration> = heard
            .iter()
            .zip(&sent)
            .map(|(heard, sent)| heard.expect("raw: every notification heard").saturating_duration_since(*sent))
            .collect();
        Stats::of(&mut samples)
    })
}

/// The raw peer of [`owner_latency`]: one connection's read-then-update transactions.
pub(super) fn raw_latency(config: &RunConfig, db: &Database) -> Stats {
    let id = RAW_CLIENTS as i32;
    let (mut client, statements) = raw_client(db, id);
    let mut samples =
        harness::durations(config.budget(LATENCY), || harness::time(|| raw_commit(&mut client, &statements, id)).1);
    Stats::of(&mut samples)
}
