//! The `storage` suite: small durable commits per second to SQLite, Trellis against the
//! naive durable store (issue target: at least 20,000 durable commits per second).
//!
//! Every scenario × system starts on a fresh SQLite file in its own temporary directory.
//! One sample times a batch of [`COMMITS`] commits and reports the batch time divided by
//! the number of commits, so the median is the time per commit and `1e9 / median` is
//! commits per second (the table prints both). A batch is run once first as warm-up.
//! Every commit is durable when it is counted: Trellis's `transact` and `send` return only
//! once the commit is in SQLite, and the peer commits its SQLite transaction itself.
//! After measuring, each system's file is opened again and the last value written must be
//! there.
//!
//! * `commit-1thread`: one thread, commits back to back, each writing a new number.
//!   * `trellis`: `rt.transact(|tx| cell.set(tx, n))` on [`Runtime::open`].
//!   * `rusqlite`: one connection with the pragmas Trellis's storage uses (WAL,
//!     `synchronous=NORMAL`, 5 s busy timeout) and the same table; each commit is one
//!     `BEGIN IMMEDIATE`; `INSERT … ON CONFLICT DO UPDATE` of the number as JSON text;
//!     `COMMIT` — what a naive durable store does.
//! * `commit-8threads`: [`THREADS`] threads, each committing to its own cell (row), started
//!   together; the time is the wall time of the whole batch divided by all its commits.
//!   * `trellis`: the threads share one runtime; its writer groups whatever commits are
//!     queued into one SQLite transaction (group commit).
//!   * `rusqlite`: the threads share one connection behind a mutex; each commit is one
//!     SQLite transaction as above. This is the stronger of the two naive designs: with
//!     one connection per thread, SQLite's file lock serialises the writers anyway and a
//!     writer that finds it taken sleeps in the busy handler (milliseconds), which makes
//!     that variant far slower, so comparing against it would flatter Trellis.
//! * `handler-send`: a charm round trip. A tiny counter pattern (state `count`, handler
//!   `increment`) is registered and instantiated, and each commit is
//!   `rt.send(&increment, {"amount": 1}).await` in a current-thread tokio runtime: look up
//!   the handler, run it in a transaction, commit, wait until durable. Trellis only: no
//!   peer has charms, so the ratio is `null` (`-` in the table) rather than a comparison
//!   with a different scenario; compare its commits/s with `commit-1thread` by eye.

use std::path::Path;
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use rusqlite::{params, Connection, TransactionBehavior};
use serde_json::json;
// Trellis's own table and upsert, so that the peer writes exactly what Trellis writes.
use trellis_runner::storage::{CREATE_TABLE, UPSERT};
use trellis_runner::{Cell, Link, Pattern, Runtime};

use crate::harness::{self, Budget, Measurement, RunConfig, Stats, Suite};

/// The suite entry for `main.rs`.
pub const SUITE: Suite =
    Suite { name: "storage", description: "durable SQLite commits (target >= 20k/s): Trellis vs raw rusqlite", run };

/// Commits per sample (all threads together in `commit-8threads`).
const COMMITS: usize = 1000;

/// Commits per sample with `--quick`.
const QUICK_COMMITS: usize = 40;

/// Threads of `commit-8threads`.
const THREADS: usize = 8;

/// Budget for one scenario on one system: a sample is a batch of [`COMMITS`] commits
/// (a few to a few tens of milliseconds).
const BUDGET: Budget = Budget { warmup: 1, min_samples: 7, max_samples: 41, max_time: Duration::from_millis(3000) };

/// What the median is the time of (the table shows commits per second).
const UNIT: &str = "commit";

/// The busy timeout Trellis's storage sets (runner/src/storage/sqlite.rs).
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The scenarios, in table order.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scenario {
    Commit1Thread,
    Commit8Threads,
    HandlerSend,
}

/// Every scenario, in table order.
const SCENARIOS: [Scenario; 3] = [Scenario::Commit1Thread, Scenario::Commit8Threads, Scenario::HandlerSend];

impl Scenario {
    /// Name in the output.
    fn name(self) -> &'static str {
        match self {
            Self::Commit1Thread => "commit-1thread",
            Self::Commit8Threads => "commit-8threads",
            Self::HandlerSend => "handler-send",
        }
    }

    /// Threads committing concurrently.
    fn threads(self) -> usize {
        match self {
            Self::Commit8Threads => THREADS,
            Self::Commit1Thread | Self::HandlerSend => 1,
        }
    }
}

/// The systems measured.
#[derive(Clone, Copy, Debug, PartialEq)]
enum System {
    Trellis,
    Rusqlite,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            Self::Trellis => "trellis",
            Self::Rusqlite => "rusqlite",
        }
    }

    /// Does this system take part in `scenario`?
    fn covers(self, scenario: Scenario) -> bool {
        self == Self::Trellis || scenario != Scenario::HandlerSend
    }
}

/// Runs every scenario on every system that covers it.
fn run(config: &RunConfig) -> Vec<Measurement> {
    let mut out = Vec::new();
    for scenario in SCENARIOS {
        for system in [System::Trellis, System::Rusqlite] {
            if !system.covers(scenario) {
                continue;
            }
            let measurement = harness::run_guarded(config, SUITE.name, scenario.name(), system.name(), || {
                measure(config, scenario, system)
            });
            out.push(measurement.per(UNIT));
        }
    }
    out
}

/// Measures one scenario on one system, on a fresh database file.
fn measure(config: &RunConfig, scenario: Scenario, system: System) -> Stats {
    let dir = tempfile::tempdir().expect("storage: create a temporary directory");
    let path = dir.path().join(format!("{}.db", system.name()));
    let commits = if config.quick { QUICK_COMMITS } else { COMMITS };
    match (scenario, system) {
        (Scenario::HandlerSend, System::Trellis) => trellis_handler_send(config, &path, commits),
        (Scenario::HandlerSend, System::Rusqlite) => panic!("rusqlite has no handlers"),
        (_, System::Trellis) => trellis_commits(config, &path, scenario, commits),
        (_, System::Rusqlite) => rusqlite_commits(config, &path, scenario, commits),
    }
}

/// Runs `batch` (which performs `commits` commits and returns their wall time) per the
/// budget; each sample is the time per commit.
fn per_commit(config: &RunConfig, commits: usize, mut batch: impl FnMut() -> Duration) -> Stats {
    let commits = u32::try_from(commits).expect("storage: commits per batch fit in u32");
    harness::measure(config.budget(BUDGET), || batch() / commits)
}

/// Splits the `commits` of one batch over `threads` threads (the first ones take the
/// remainder).
fn shares(commits: usize, threads: usize) -> Vec<usize> {
    (0..threads).map(|i| commits / threads + usize::from(i < commits % threads)).collect()
}

/// Runs `work(i, share)` on `shares.len()` threads started together, and returns the wall
/// time from their common start until the last one finished. With one share it runs on
/// the calling thread.
fn timed_threads<S: Send>(states: &mut [S], shares: &[usize], work: impl Fn(&mut S, usize) + Sync) -> Duration {
    if let ([state], [share]) = (&mut *states, shares) {
        return harness::time(|| work(state, *share)).1;
    }
    let start = Barrier::new(states.len() + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = states
            .iter_mut()
            .zip(shares)
            .map(|(state, &share)| {
                let (start, work) = (&start, &work);
                scope.spawn(move || {
                    start.wait();
                    work(state, share);
                })
            })
            .collect();
        start.wait();
        let started = Instant::now();
        for handle in handles {
            if let Err(panic) = handle.join() {
                std::panic::resume_unwind(panic);
            }
        }
        started.elapsed()
    })
}

// ---------------------------------------------------------------------------------------
// Trellis

/// One committing thread's cell and the last value it wrote.
struct Writer {
    cell: Cell<i64>,
    last: i64,
}

fn trellis_commits(config: &RunConfig, path: &Path, scenario: Scenario, commits: usize) -> Stats {
    let rt = Runtime::open(path).expect("trellis: open the SQLite runtime");
    let mut writers: Vec<Writer> = (0..scenario.threads())
        .map(|_| Writer { cell: rt.new_cell("bench", 0i64).expect("trellis: create a cell"), last: 0 })
        .collect();
    let shares = shares(commits, writers.len());
    let stats = per_commit(config, commits, || {
        timed_threads(&mut writers, &shares, |writer, share| {
            for _ in 0..share {
                let n = writer.last + 1;
                rt.transact(|tx| writer.cell.set(tx, n)).expect("trellis: durable commit");
                writer.last = n;
            }
        })
    });

    for (i, writer) in writers.iter().enumerate() {
        let value = writer.cell.get(&rt).expect("trellis: read a cell");
        assert_eq!(value, writer.last, "trellis: cell {i} in memory");
    }
    drop(rt);
    let links: Vec<(Link, i64)> = writers.iter().map(|w| (w.cell.link().clone(), w.last)).collect();
    check_reopened(path, &links);
    stats
}

/// Opens the file again and checks every cell holds its last written value.
fn check_reopened(path: &Path, expected: &[(Link, i64)]) {
    let rt = Runtime::open(path).expect("trellis: reopen the SQLite runtime");
    for (link, last) in expected {
        let value = Cell::<i64>::from_link(link.clone()).get(&rt).expect("trellis: read a reopened cell");
        assert_eq!(value, *last, "trellis: {link} after reopening the file");
    }
}

/// A counter charm: `count` state and an `increment` handler taking `{"amount": n}`.
fn counter_pattern() -> Pattern {
    Pattern::new("bench-counter", |b, _arg: serde_json::Value| {
        let count = b.state("count", 0i64)?;
        b.handler("increment", move |tx, event: serde_json::Value| {
            let amount = event.get("amount").and_then(serde_json::Value::as_i64).unwrap_or(1);
            count.update(tx, |n| n + amount)?;
            Ok(())
        })?;
        Ok(())
    })
    .description("benchmark counter")
}

fn trellis_handler_send(config: &RunConfig, path: &Path, commits: usize) -> Stats {
    let rt = Runtime::open(path).expect("trellis: open the SQLite runtime");
    rt.register_pattern(counter_pattern());
    let id = rt.charms().create("bench-counter", json!({})).expect("trellis: create the counter charm");
    let increment = rt.charms().result(&id).child("increment");
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio: build a current-thread runtime");
    let mut sent = 0i64;
    let stats = per_commit(config, commits, || {
        let elapsed = tokio.block_on(async {
            let started = Instant::now();
            for _ in 0..commits {
                rt.send(&increment, json!({ "amount": 1 })).await.expect("trellis: durable send");
            }
            started.elapsed()
        });
        sent += i64::try_from(commits).expect("commits fit in i64");
        elapsed
    });

    let count = |rt: &Runtime| rt.charms().get(&id).expect("trellis: read the counter")["count"].as_i64();
    assert_eq!(count(&rt), Some(sent), "trellis: counter in memory");
    drop(rt);
    let reopened = Runtime::open(path).expect("trellis: reopen the SQLite runtime");
    assert_eq!(count(&reopened), Some(sent), "trellis: counter after reopening the file");
    stats
}

// ---------------------------------------------------------------------------------------
// rusqlite

/// Opens a connection set up like Trellis's writer connection: busy timeout, WAL,
/// `synchronous=NORMAL`, and the `documents` table.
fn open_peer(path: &Path) -> Connection {
    let conn = Connection::open(path).expect("rusqlite: open");
    conn.busy_timeout(BUSY_TIMEOUT).expect("rusqlite: busy timeout");
    let mode: String =
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0)).expect("rusqlite: journal_mode");
    assert!(mode.eq_ignore_ascii_case("wal"), "rusqlite: journal_mode is {mode}, not WAL");
    conn.pragma_update(None, "synchronous", "NORMAL").expect("rusqlite: synchronous");
    conn.execute_batch(CREATE_TABLE).expect("rusqlite: create the table");
    conn
}

/// One durable commit: upserts document `id` at `version` with `value` as JSON text, in
/// its own SQLite transaction.
fn peer_commit(conn: &mut Connection, id: &str, version: i64, value: i64) {
    let text = serde_json::Value::from(value).to_string();
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).expect("rusqlite: begin");
    tx.prepare_cached(UPSERT)
        .and_then(|mut upsert| upsert.execute(params![id, version, text]))
        .expect("rusqlite: upsert");
    tx.commit().expect("rusqlite: commit");
}

/// One committing thread's row and the last value it wrote.
struct Row {
    id: String,
    last: i64,
}

fn rusqlite_commits(config: &RunConfig, path: &Path, scenario: Scenario, commits: usize) -> Stats {
    let conn = Mutex::new(open_peer(path));
    let mut rows: Vec<Row> = (0..scenario.threads()).map(|i| Row { id: format!("bench:{i}"), last: 0 }).collect();
    let shares = shares(commits, rows.len());
    let stats = per_commit(config, commits, || {
        timed_threads(&mut rows, &shares, |row, share| {
            for _ in 0..share {
                let n = row.last + 1;
                let mut conn = conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                peer_commit(&mut conn, &row.id, n, n);
                drop(conn);
                row.last = n;
            }
        })
    });
    drop(conn);
    check_peer_file(path, &rows);
    stats
}

/// Opens the peer's file again and checks every row holds its last written value.
fn check_peer_file(path: &Path, rows: &[Row]) {
    let conn = Connection::open(path).expect("rusqlite: reopen");
    for row in rows {
        let text: String = conn
            .query_row("SELECT value FROM documents WHERE id = ?1", [&row.id], |r| r.get(0))
            .expect("rusqlite: read a row back");
        assert_eq!(text, row.last.to_string(), "rusqlite: row {} after reopening", row.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quick() -> RunConfig {
        RunConfig { quick: true, ..RunConfig::default() }
    }

    #[test]
    fn shares_add_up() {
        assert_eq!(shares(1000, 8), vec![125; 8]);
        assert_eq!(shares(10, 4), vec![3, 3, 2, 2]);
        assert_eq!(shares(7, 1), vec![7]);
    }

    /// Every scenario on every system, with tiny budgets: the durability checks pass and
    /// every measurement reports commits per second.
    #[test]
    fn every_scenario_passes_its_checks() {
        let ms = run(&quick());
        assert_eq!(ms.len(), 5);
        for m in &ms {
            let ns = m.median_ns.as_ref().unwrap_or_else(|e| panic!("{}/{}: {e}", m.scenario, m.system));
            assert!(*ns > 0.0, "{}/{}", m.scenario, m.system);
            assert_eq!(m.rate_unit, Some(UNIT));
        }
        let handler: Vec<&str> =
            ms.iter().filter(|m| m.scenario == "handler-send").map(|m| m.system.as_str()).collect();
        assert_eq!(handler, ["trellis"]);
    }
}
