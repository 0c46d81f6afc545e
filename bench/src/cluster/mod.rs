//! The `cluster` suite: spaces in PostgreSQL shared by several nodes (issue 37). Each
//! figure is printed beside the target, and the database disk's fsync time
//! beside them all (a durable commit cannot be faster than one `fdatasync`).
//!
//! | row | how it is measured | target |
//! |---|---|---|
//! | `commits, N spaces, 3 in-process holders` | [`owners::throughput`]: three nodes in this process, each its own connections, 64 spaces, 4 senders each, `Runtime::send` to durable; peer: 8 raw read-then-update clients | ≥ 5,000/s |
//! | `fdatasync 8kB` | `pg_test_fsync -s 1`, its fdatasync line ([`database`]) | - |
//! | `latency under that load` | the same sends, each | - |
//! | `owner commit, 1 sender, in-process` | [`owners::owner_latency`]; peer: one raw client | p50 ≤ 2 ms, p99 ≤ 10 ms |
//! | `owner commit, HTTP to the holder` | [`served::owner_and_forwarded`]: `trellis serve` A holds the space | - |
//! | `forwarded commit, HTTP via another node` | the same through node B | ≤ owner's p50 + 1 ms |
//! | `propagation @1000/s, events via another node` | [`served::propagation`]: from the send to A until an event stream through B (from its copy of the space) shows it; peer: raw `NOTIFY` to `LISTEN` | p50 ≤ 5 ms, p99 ≤ 25 ms |
//! | `propagation @1000/s, events on the holder` | the same stream on A | - |
//! | `failover, kill -9 to a commit elsewhere` | [`served::failover`]: the holder killed, B asked until it accepts | ≤ lease + 1 s |
//! | `open+get, 100k charms, SQLite` / `PostgreSQL, new node` / `running node` | [`large::open_and_get`], the `spaces` suite's space; in PostgreSQL through a node's connections made for it, or already open | PostgreSQL ≤ 2x SQLite |
//!
//! The suite runs on a throwaway PostgreSQL cluster it starts and removes
//! ([`database`]), or on the database `TRELLIS_BENCH_DATABASE` names; without
//! PostgreSQL's programs it says so and measures nothing. `--quick` opens 8 spaces, a
//! space of 2,000 charms, and takes few samples.

mod database;
mod http;
mod large;
mod owners;
mod served;

use std::time::Duration;

use database::{Database, Unavailable};

use crate::harness::{self, Measurement, RunConfig, Stats, Suite};

/// The suite entry for `main.rs`.
pub const SUITE: Suite = Suite {
    name: "cluster",
    description: "spaces in PostgreSQL across nodes: commits/s, latency, forwarding, propagation, failover",
    run,
};

/// Spaces of the throughput scenario.
const SPACES: usize = 64;
const QUICK_SPACES: usize = 8;

/// Charms of the large space.
const CHARMS: usize = 100_000;
const QUICK_CHARMS: usize = 2_000;

/// The throughput target, as the time of one commit.
const PER_COMMIT: Duration = Duration::from_micros(200);

/// The rows measured through `trellis serve` processes.
const OWNER_HTTP: &str = "owner commit, HTTP to the holder";
const FORWARDED: &str = "forwarded commit, HTTP via another node";
const PROPAGATION_B: &str = "propagation @1000/s, events via another node";
const PROPAGATION_A: &str = "propagation @1000/s, events on the holder";

/// Every space this run makes is named `PREFIX-...`, so that runs against one database
/// never meet.
fn prefix() -> String {
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    format!("bench{}-{stamp}", std::process::id())
}

fn run(config: &RunConfig) -> Vec<Measurement> {
    let db = match Database::get() {
        Ok(db) => db,
        Err(Unavailable::Skip(why)) => {
            eprintln!("  cluster: skipped: {why}");
            return Vec::new();
        }
        Err(Unavailable::Failed(why)) => {
            return vec![harness::measurement(config, SUITE.name, "PostgreSQL", "trellis", Err(why))];
        }
    };
    eprintln!("  cluster: on {}", db.describe());
    let prefix = prefix();
    let row = |scenario: &str, system: &str, outcome: Result<Stats, String>| {
        harness::measurement(config, SUITE.name, scenario, system, outcome)
    };

    let fsync = db.fdatasync().map(|took| Stats { median_ns: took.as_nanos() as f64, samples: 1, ..Stats::default() });
    let fsync = row("fdatasync 8kB (the database's disk)", "pg_test_fsync", fsync).per("sync");
    let mut out = Vec::new();

    let spaces = if config.quick { QUICK_SPACES } else { SPACES };
    let commits = format!("commits, {spaces} spaces, {} in-process holders", owners::HOLDERS.len());
    let throughput = harness::guarded(|| owners::throughput(config, &db, &prefix, spaces));
    let (per_commit, under_load) = match throughput {
        Ok(t) => (Ok(t.per_commit.with_target(PER_COMMIT)), Ok(t.latency)),
        Err(e) => (Err(e.clone()), Err(e)),
    };
    out.push(row(&commits, "trellis", per_commit).per("commit"));
    out.push(
        harness::run_guarded(config, SUITE.name, &commits, "raw-postgres", || owners::raw_throughput(config, &db))
            .per("commit"),
    );
    // Under the commits: what none of them can beat.
    out.push(fsync);
    let in_flight = format!("latency under that load ({} sends in flight)", spaces * owners::SENDERS);
    out.push(row(&in_flight, "trellis", under_load));

    let owner = "owner commit, 1 sender, in-process";
    out.push(harness::run_guarded(config, SUITE.name, owner, "trellis", || {
        owners::owner_latency(config, &db, &prefix)
            .with_target(Duration::from_millis(2))
            .with_tail_target(Duration::from_millis(10))
    }));
    out.push(harness::run_guarded(config, SUITE.name, owner, "raw-postgres", || owners::raw_latency(config, &db)));

    out.extend(served_rows(config, &db, &prefix));

    let charms = if config.quick { QUICK_CHARMS } else { CHARMS };
    let size = format!("{}k", charms / 1000);
    let opened = harness::guarded(|| large::open_and_get(config, &db, &format!("{prefix}-large"), charms));
    let (sqlite, cold, warm) = match opened {
        Ok(o) => (Ok(o.sqlite), Ok(o.cold), Ok(o.warm)),
        Err(e) => (Err(e.clone()), Err(e.clone()), Err(e)),
    };
    out.push(row(&format!("open+get, {size} charms, SQLite"), "trellis", sqlite));
    out.push(row(&format!("open+get, {size} charms, PostgreSQL, new node"), "trellis", cold));
    out.push(row(&format!("open+get, {size} charms, PostgreSQL, running node"), "trellis", warm));
    out
}

/// The rows measured through `trellis serve` processes: nodes A and B share the database;
/// A holds the spaces, B forwards to it.
fn served_rows(config: &RunConfig, db: &Database, prefix: &str) -> Vec<Measurement> {
    let row = |scenario: &str, system: &str, outcome: Result<Stats, String>| {
        harness::measurement(config, SUITE.name, scenario, system, outcome)
    };
    let setup = harness::guarded(|| {
        let binary = served::binary().unwrap_or_else(|e| panic!("{e}"));
        let dir = tempfile::tempdir().expect("cluster: a temporary directory");
        let a = served::Node::start(&binary, db, &dir.path().join("a"));
        let b = served::Node::start(&binary, db, &dir.path().join("b"));
        (binary, dir, a, b)
    });
    let failover = format!("failover, kill -9 to a commit elsewhere (lease {} s)", served::LEASE.as_secs_f64());
    let (binary, dir, a, b) = match setup {
        Ok(setup) => setup,
        Err(e) => {
            return [OWNER_HTTP, FORWARDED, PROPAGATION_B, PROPAGATION_A, &failover]
                .iter()
                .map(|scenario| row(scenario, "trellis", Err(e.clone())))
                .collect();
        }
    };
    let space = |name: &str| {
        let space = served::Space::make(&binary, db, dir.path(), &format!("{prefix}-{name}"));
        served::hold(&space, &a, &b);
        space
    };
    let both = |outcome: Result<(Stats, Stats), String>| match outcome {
        Ok((first, second)) => (Ok(first), Ok(second)),
        Err(e) => (Err(e.clone()), Err(e)),
    };

    let mut out = Vec::new();
    let (owner, forwarded) = both(harness::guarded(|| served::owner_and_forwarded(config, &space("forward"), &a, &b)));
    out.push(row(OWNER_HTTP, "trellis", owner));
    out.push(row(FORWARDED, "trellis", forwarded));

    let (via_b, on_a) = both(harness::guarded(|| served::propagation(config, &space("propagate"), &a, &b)));
    out.push(row(PROPAGATION_B, "trellis", via_b));
    let total = if config.quick { 500 } else { 3000 };
    out.push(harness::run_guarded(config, SUITE.name, PROPAGATION_B, "raw-postgres", || {
        owners::raw_notify(db, 1000, total)
    }));
    out.push(row(PROPAGATION_A, "trellis", on_a));

    drop(a);
    out.push(harness::run_guarded(config, SUITE.name, &failover, "trellis", || {
        served::failover(config, &binary, db, dir.path(), prefix, &b)
    }));
    out
}
