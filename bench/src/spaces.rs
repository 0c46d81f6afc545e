//! The `spaces` suite: a large space (issue targets in brackets).
//!
//! The benchmark writes a SQLite space of 100,000 counter charms itself: one charm is
//! made by the runtime, and its documents are copied under 100,000 ids (and their records
//! into the `charms` document), so the file is exactly what the runtime would write.
//!
//! * `open-100k`: open the space (documents load when first read, so this reads none).
//! * `open+get-100k`: open it and answer `charm get` of one charm (≤ 200 ms, ≤ 200 MiB
//!   added at the peak; the peak is printed beside the time).
//! * `tool-call-1` / `tool-call-100k`: one tool call (validate, handler, commit, durable,
//!   result) on a charm of a one-charm space and of the big space (≤ 2x the one-charm
//!   figure), the two measured in interleaved rounds; the warm-up's first call starts the
//!   charm from its record.
//!
//! Trellis only: no peer has charms, so each scenario states its target.

use std::path::Path;
use std::time::Duration;

use rusqlite::params;
use serde_json::json;
use trellis_builtins::catalog::Catalog;
use trellis_runner::storage::{CREATE_TABLE, UPSERT};
use trellis_runner::{DocId, Runtime};

use crate::harness::{self, Budget, Measurement, RunConfig, Stats, Suite};
use crate::memory;
use crate::tools::{counter_pattern, tokio};

/// The suite entry for `main.rs`.
pub const SUITE: Suite = Suite {
    name: "spaces",
    description: "a space of 100,000 charms: open, first charm get (with memory), a tool call",
    run,
};

/// Charms in the big space.
const CHARMS: usize = 100_000;

/// Opening is slow enough that a few samples say enough.
const OPEN_BUDGET: Budget =
    Budget { warmup: 1, min_samples: 5, max_samples: 30, max_time: Duration::from_millis(3000) };
const CALL_BUDGET: Budget =
    Budget { warmup: 20, min_samples: 50, max_samples: 3000, max_time: Duration::from_millis(2000) };

/// In how many interleaved rounds the two tool-call rows are measured (see [`tool_calls`]).
const CALL_ROUNDS: usize = 4;

fn run(config: &RunConfig) -> Vec<Measurement> {
    let dir = tempfile::tempdir().expect("spaces: a temporary directory");
    let small = dir.path().join("small.sqlite");
    let big = dir.path().join("big.sqlite");
    let (small_id, big_ids) = write_spaces(&small, &big, CHARMS);
    let one = big_ids[CHARMS / 2].clone();

    let guarded = |name: &str, f: &dyn Fn() -> Stats| harness::run_guarded(config, SUITE.name, name, "trellis", f);
    let mut out = vec![
        guarded("open-100k", &|| open(config, &big)),
        guarded("open+get-100k", &|| open_and_get(config, &big, &one)),
    ];
    let calls = harness::guarded(|| tool_calls(config, (&small, &small_id), (&big, &big_ids[CHARMS / 3])));
    let (small_call, big_call) = match calls {
        Ok((small, big)) => {
            let target = Duration::from_nanos(2 * small.median_ns as u64);
            (Ok(small), Ok(big.with_target(target)))
        }
        Err(error) => (Err(error.clone()), Err(error)),
    };
    out.push(harness::measurement(config, SUITE.name, "tool-call-1", "trellis", small_call));
    out.push(harness::measurement(config, SUITE.name, "tool-call-100k", "trellis", big_call));
    out
}

/// Writes a one-charm space at `small` with the runtime, and a space of `charms` charms at
/// `big` by copying that charm's documents; returns the small charm's id and the big
/// space's ids. (The `cluster` suite copies the big space into PostgreSQL.)
pub(crate) fn write_spaces(small: &Path, big: &Path, charms: usize) -> (String, Vec<String>) {
    let template = {
        let rt = Runtime::open(small).expect("spaces: open the small space");
        rt.register_pattern(counter_pattern());
        rt.charms().create("counter", json!({})).expect("spaces: create the template charm").to_string()
    };
    let source = rusqlite::Connection::open(small).expect("spaces: read the small space");
    let mut stmt = source.prepare("SELECT id, version, value FROM documents").expect("spaces: query");
    let rows: Vec<(String, i64, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .and_then(Iterator::collect)
        .expect("spaces: the small space's documents");

    let mut target = rusqlite::Connection::open(big).expect("spaces: create the big space");
    target.execute_batch(CREATE_TABLE).expect("spaces: create the table");
    let tx = target.transaction().expect("spaces: begin");
    let ids: Vec<String> = (0..charms).map(|n| format!("charm-big{n:06}")).collect();
    {
        let mut upsert = tx.prepare(UPSERT).expect("spaces: prepare");
        for (id, version, value) in &rows {
            if id == "charms" {
                let records: serde_json::Value = serde_json::from_str(value).expect("spaces: the charms document");
                let record = &records[&template];
                let all: serde_json::Map<String, serde_json::Value> =
                    ids.iter().map(|id| (id.clone(), record.clone())).collect();
                let text = serde_json::Value::Object(all).to_string();
                upsert.execute(params![id, version, text]).expect("spaces: write the records");
            } else if id.contains(&template) {
                // The charm's documents (its own and any named after it), under each new id.
                for new in &ids {
                    let copy = (id.replace(&template, new), value.replace(&template, new));
                    upsert.execute(params![copy.0, version, copy.1]).expect("spaces: write a charm");
                }
            } else {
                upsert.execute(params![id, version, value]).expect("spaces: copy a document");
            }
        }
    }
    tx.commit().expect("spaces: commit the big space");
    (template, ids)
}

/// The runtime of the SQLite space at `path`, with the counter pattern.
pub(crate) fn open_runtime(path: &Path) -> Runtime {
    let rt = Runtime::open(path).expect("spaces: open the space");
    rt.register_pattern(counter_pattern());
    rt
}

fn open(config: &RunConfig, path: &Path) -> Stats {
    harness::measure(config.budget(OPEN_BUDGET), || {
        let (rt, took) = harness::time(|| open_runtime(path));
        drop(rt);
        took
    })
}

fn open_and_get(config: &RunConfig, path: &Path, id: &str) -> Stats {
    let (stats, peak) = memory::peak_during(|| {
        harness::measure(config.budget(OPEN_BUDGET), || {
            let ((rt, got), took) = harness::time(|| {
                let rt = open_runtime(path);
                let got = rt.charms().get(id).expect("spaces: charm get");
                (rt, got)
            });
            assert_eq!(got["label"], "Count: 0", "spaces: the charm as written");
            drop(rt);
            took
        })
    });
    let stats = stats.with_target(Duration::from_millis(200));
    match peak {
        Some(bytes) => stats.with_peak(bytes),
        None => stats,
    }
}

/// The tool calls on the one-charm space and on the big one, measured in [`CALL_ROUNDS`]
/// interleaved rounds: the target is their ratio, and a durable commit's time drifts with
/// the disk, so both rows sample the same stretches of time.
fn tool_calls(config: &RunConfig, small: (&Path, &str), big: (&Path, &str)) -> (Stats, Stats) {
    let (small, big) = (Caller::open(small.0, small.1), Caller::open(big.0, big.1));
    let rounds = if config.quick || harness::fixed_samples() { 1 } else { CALL_ROUNDS };
    let budget = RunConfig { rounds, ..*config }.budget(CALL_BUDGET);
    let (mut on_small, mut on_big) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        on_small.extend(harness::durations(budget, || small.call()));
        on_big.extend(harness::durations(budget, || big.call()));
    }
    (Stats::median_of(&mut on_small), Stats::median_of(&mut on_big))
}

/// A counter charm's `increment`, called as a model's tool call.
struct Caller {
    rt: Runtime,
    catalog: Catalog,
    tokio: tokio::runtime::Runtime,
}

impl Caller {
    fn open(path: &Path, id: &str) -> Caller {
        let rt = open_runtime(path);
        let link = rt.charms().result(&DocId::from(id));
        let catalog = Catalog::build(&rt, &json!({"c": {"charm": link.to_json()}}));
        Caller { rt, catalog, tokio: tokio() }
    }

    /// One call (validate, handler, commit, durable, result), timed.
    fn call(&self) -> Duration {
        let timeout = Duration::from_secs(5);
        let (invocation, took) = harness::time(|| {
            self.tokio.block_on(self.catalog.invoke(&self.rt, "Counter_increment", json!({"amount": 1}), timeout))
        });
        assert!(!invocation.is_error(), "spaces: the call failed: {:?}", invocation.output);
        took
    }
}
