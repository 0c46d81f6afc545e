//! The tests every [`Storage`] backend must pass, written once and run by each backend's
//! own tests (SQLite's here, PostgreSQL's in `trellis-postgres`), so the backends cannot
//! drift apart in what the space relies on: order, durability, group commit, refusal after
//! a failure, id listing.
//!
//! Built for this crate's tests and, with the `conformance` feature, for other crates'.
//! Each function panics with what went wrong, as a test does.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;

use super::{Durable, Storage, StorageError, StoredDoc};

/// A storage backend under test, opening one space.
pub trait Backend {
    /// The backend's storage.
    type Storage: Storage;

    /// Opens the backend's space: the same space each time it is called, so that data
    /// written through one storage is there for the next. The tests drop a storage before
    /// they open the space again.
    fn open(&self) -> Self::Storage;

    /// What the storage has done so far.
    fn counts(&self, storage: &Self::Storage) -> Counts;
}

/// What a storage has done so far, as every backend counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Submitted transactions that are durable.
    pub durable: u64,
    /// Submitted transactions whose ticket was resolved with an error.
    pub failed: u64,
    /// Database transactions committed; with group commit, fewer than `durable`.
    pub commits: u64,
}

/// A document to write.
pub fn doc(id: &str, version: u64, value: serde_json::Value) -> StoredDoc {
    StoredDoc { id: id.to_owned(), version, value: value.into() }
}

fn by_id(docs: Vec<StoredDoc>) -> HashMap<String, StoredDoc> {
    docs.into_iter().map(|d| (d.id.clone(), d)).collect()
}

/// Written documents load back equal, one by one and all together.
pub fn round_trip(backend: &impl Backend) {
    let storage = backend.open();
    assert!(storage.load().expect("load empty").is_empty());
    assert_eq!(storage.load_doc("a").expect("load missing"), None);

    let a = doc("a", 1, json!({"x": 1, "list": [1, 2, {"deep": null}]}));
    let b = doc("b", 7, json!("text with 'quotes' and \"more\" and ünïcode"));
    storage.submit(vec![a.clone(), b.clone()]).wait().expect("durable");

    let docs = by_id(storage.load().expect("load"));
    assert_eq!(docs.len(), 2);
    assert_eq!(docs["a"], a);
    assert_eq!(docs["b"], b);
    assert_eq!(storage.load_doc("b").expect("load b"), Some(b));
}

/// Later versions of a document replace earlier ones, in submission order, also when
/// hundreds are queued without waiting.
pub fn overwrite_keeps_latest_version(backend: &impl Backend) {
    let storage = backend.open();
    storage.submit(vec![doc("d", 1, json!({"n": 1}))]).wait().expect("durable");
    storage.submit(vec![doc("d", 2, json!({"n": 2}))]).wait().expect("durable");
    let tickets: Vec<Durable> = (3..=500).map(|n| storage.submit(vec![doc("d", n, json!({"n": n}))])).collect();
    for ticket in tickets {
        ticket.wait().expect("durable");
    }
    assert_eq!(storage.load().expect("load"), vec![doc("d", 500, json!({"n": 500}))]);
}

/// Threads submitting at once all become durable, each thread's writes in its order.
pub fn concurrent_submitters_all_durable<B: Backend>(backend: &B) {
    const THREADS: u64 = 8;
    const PER_THREAD: u64 = 150;
    let storage = Arc::new(backend.open());

    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let storage = Arc::clone(&storage);
            std::thread::spawn(move || {
                let mut tickets = Vec::new();
                for i in 1..=PER_THREAD {
                    // A document of its own per submit, plus one per thread that every
                    // submit of the thread overwrites (checks per-thread ordering).
                    let writes =
                        vec![doc(&format!("t{t}-{i}"), 1, json!({"t": t, "i": i})), doc(&format!("t{t}"), i, json!(i))];
                    let ticket = storage.submit(writes);
                    if i % 3 == 0 {
                        ticket.wait().expect("durable");
                    } else {
                        tickets.push(ticket);
                    }
                }
                for ticket in tickets {
                    ticket.wait().expect("durable");
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("submitter thread");
    }

    let docs = by_id(storage.load().expect("load"));
    assert_eq!(docs.len() as u64, THREADS * PER_THREAD + THREADS);
    for t in 0..THREADS {
        assert_eq!(docs[&format!("t{t}")].version, PER_THREAD);
        for i in 1..=PER_THREAD {
            assert_eq!(docs[&format!("t{t}-{i}")].value.to_json(), json!({"t": t, "i": i}));
        }
    }
    let counts = backend.counts(&storage);
    assert_eq!((counts.durable, counts.failed), (THREADS * PER_THREAD, 0), "{counts:?}");
}

/// What was written is there when the space is opened again, and dropping the storage
/// writes everything still queued.
pub fn reopen_sees_data_and_drop_flushes_queue(backend: &impl Backend) {
    {
        let storage = backend.open();
        storage.submit(vec![doc("kept", 1, json!([1, 2, 3]))]).wait().expect("durable");
        // Queued but never waited for: a clean drop must still write them.
        for n in 1..=300 {
            drop(storage.submit(vec![doc(&format!("q{n}"), n, json!(n))]));
        }
    }
    let storage = backend.open();
    let docs = by_id(storage.load().expect("load"));
    assert_eq!(docs.len(), 301);
    assert_eq!(docs["kept"], doc("kept", 1, json!([1, 2, 3])));
    assert_eq!(docs["q300"], doc("q300", 300, json!(300)));
}

/// Many transactions queued at once are written in fewer database transactions.
pub fn group_commit_batches(backend: &impl Backend) {
    const SUBMITS: u64 = 1000;
    let storage = backend.open();
    let tickets: Vec<Durable> =
        (1..=SUBMITS).map(|n| storage.submit(vec![doc(&format!("g{n}"), n, json!({"n": n}))])).collect();
    for ticket in tickets {
        ticket.wait().expect("durable");
    }
    let counts = backend.counts(&storage);
    assert_eq!(counts.durable, SUBMITS);
    assert!(counts.commits < SUBMITS, "expected group commit to batch {SUBMITS} submits, got {counts:?}");
    assert!(counts.commits >= 1, "{counts:?}");
    assert_eq!(storage.load().expect("load").len() as u64, SUBMITS);
}

/// A transaction that cannot be written fails alone (those before it are written), and
/// everything after it is refused unwritten until [`Storage::resume`].
pub fn failed_transaction_refuses_until_resumed(backend: &impl Backend) {
    let storage = backend.open();
    // No backend stores a version above i64::MAX: that transaction fails.
    let before = storage.submit(vec![doc("before", 1, json!(1))]);
    let bad = storage.submit(vec![doc("ok-part", 1, json!(0)), doc("bad", u64::MAX, json!(2))]);
    // Submitted before anyone heard of the failure: it may carry the failed changes.
    let after = storage.submit(vec![doc("after", 1, json!(3))]);
    before.wait().expect("before is durable");
    let too_large = u64::MAX.to_string();
    match bad.wait() {
        Err(StorageError::Refused { .. } | StorageError::WriterGone) | Ok(()) => {
            panic!("expected the bad transaction's own error")
        }
        Err(error) => assert!(error.to_string().contains(&too_large), "the error names the version: {error}"),
    }
    match after.wait() {
        Err(StorageError::Refused { reason }) => assert!(reason.contains(&too_large), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(storage.refusing());
    assert!(matches!(storage.submit(Vec::new()).wait(), Err(StorageError::Refused { .. })));
    storage.resume();
    assert!(!storage.refusing());
    storage.submit(vec![doc("later", 1, json!(4))]).wait().expect("written again once resumed");

    let mut ids: Vec<String> = storage.load().expect("load").into_iter().map(|d| d.id).collect();
    ids.sort_unstable();
    // The failed transaction left nothing behind, not even its valid first write.
    assert_eq!(ids, ["before", "later"]);
    let counts = backend.counts(&storage);
    assert_eq!((counts.failed, counts.durable), (3, 2), "{counts:?}");
}

/// A transaction without writes (a barrier) resolves and writes nothing.
pub fn empty_transaction_resolves(backend: &impl Backend) {
    let storage = backend.open();
    storage.submit(Vec::new()).wait().expect("empty is durable");
    assert!(storage.load().expect("load").is_empty());
}

/// Ids are listed by prefix in byte order (the order of Rust's `str`), whatever they
/// contain: characters that are wildcards in SQL patterns, non-ASCII, the last code point.
pub fn doc_ids_by_prefix_in_byte_order(backend: &impl Backend) {
    let storage = backend.open();
    let ids = [
        "a",
        "a%",
        "a%b",
        "a_",
        "a_b",
        "aX",
        "ab",
        "abc",
        "B",
        "b",
        "é",
        "éa",
        "e",
        "z",
        "\u{10FFFF}",
        "\u{10FFFF}a",
        "\u{FFFF}",
        "charm-1",
        "charm-10",
        "charm-2",
        "charm_1",
        "charm%1",
    ];
    let writes = ids.iter().map(|id| doc(id, 1, json!(id))).collect();
    storage.submit(writes).wait().expect("durable");

    let mut sorted: Vec<String> = ids.iter().map(|id| (*id).to_owned()).collect();
    sorted.sort();
    assert_eq!(storage.doc_ids("").expect("all ids"), sorted);
    let with = |prefix: &str| -> Vec<String> { sorted.iter().filter(|id| id.starts_with(prefix)).cloned().collect() };
    for prefix in ["a", "a%", "a_", "ab", "charm-", "charm_", "charm%", "é", "e", "\u{10FFFF}", "\u{FFFF}", "zz", "B"]
    {
        assert_eq!(storage.doc_ids(prefix).expect("ids"), with(prefix), "prefix {prefix:?}");
    }
    let loaded: Vec<String> = storage.load().expect("load").into_iter().map(|d| d.id).collect();
    assert_eq!(loaded, sorted, "load gives documents in id order");
}
