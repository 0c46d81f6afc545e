//! Lazy loading: opening a space reads no document; each is read from the file the first
//! time it is used, once. Counted on a real SQLite space through a storage that forwards
//! to it and counts the documents it hands out.

use std::path::Path as FsPath;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::{json, Value as Json};
use trellis_runner::prelude::*;
use trellis_runner::storage::{Durable, SqliteStorage, Storage, StorageError, StoredDoc, UPSERT};
use trellis_runner::DocId;

/// SQLite storage that counts the documents read from it.
struct Counted {
    inner: SqliteStorage,
    loads: Arc<AtomicU64>,
}

impl Storage for Counted {
    fn load_doc(&self, id: &str) -> Result<Option<StoredDoc>, StorageError> {
        self.loads.fetch_add(1, Ordering::SeqCst);
        self.inner.load_doc(id)
    }

    fn doc_ids(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        self.inner.doc_ids(prefix)
    }

    fn submit(&self, writes: Vec<StoredDoc>) -> Durable {
        self.inner.submit(writes)
    }

    fn refusing(&self) -> bool {
        self.inner.refusing()
    }

    fn resume(&self) {
        self.inner.resume()
    }
}

fn counter() -> Pattern {
    /// Add to the count.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Add {
        amount: i64,
    }
    Pattern::new("counter", |b, _: Json| {
        b.name("Counter")?;
        let count = b.state("count", 0i64)?;
        b.lift("label", count, |n: i64| format!("Count: {n}"))?;
        b.handler("add", move |tx, e: Add| count.update(tx, |n| n + e.amount))?;
        Ok(())
    })
}

/// A space at `path` with `n` counters; returns their ids.
fn write_space(path: &FsPath, n: usize) -> Vec<String> {
    let rt = Runtime::open(path).unwrap();
    rt.register_pattern(counter());
    (0..n).map(|_| rt.charms().create("counter", json!({})).unwrap().to_string()).collect()
}

/// The runtime on `path`, and how many documents it has read so far.
fn reopen(path: &FsPath) -> (Runtime, Arc<AtomicU64>) {
    let loads = Arc::new(AtomicU64::new(0));
    let storage = Counted { inner: SqliteStorage::open(path).unwrap(), loads: loads.clone() };
    let rt = Runtime::with_storage(Box::new(storage)).unwrap();
    rt.register_pattern(counter());
    (rt, loads)
}

#[tokio::test]
async fn opening_a_space_reads_nothing_and_using_a_charm_reads_only_its_documents() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("space.sqlite");
    let ids = write_space(&path, 40);

    let (rt, loads) = reopen(&path);
    assert_eq!(loads.load(Ordering::SeqCst), 0, "opening reads no document");
    let listed = rt.space().doc_ids("charm-");
    assert_eq!(listed.len(), 40, "stored documents are listed: {listed:?}");
    assert_eq!(loads.load(Ordering::SeqCst), 0, "listing ids reads no document");

    // `charm get`: the record (in the `charms` document) and the charm's own document.
    let one = &ids[7];
    assert_eq!(rt.charms().get(one).unwrap()["label"], "Count: 0");
    assert_eq!(loads.load(Ordering::SeqCst), 2, "the charms document and the charm's");

    // An event starts the charm from its record and updates it; its derived value follows.
    let add = rt.charms().result(&DocId::from(one.as_str())).child("add");
    rt.send(&add, json!({"amount": 5})).await.unwrap();
    assert_eq!(rt.charms().get(one).unwrap()["label"], "Count: 5");
    let after_use = loads.load(Ordering::SeqCst);
    assert!(after_use <= 4, "using one charm of 40 read {after_use} documents");

    // A document read once stays loaded: reading again asks storage nothing.
    rt.charms().get(one).unwrap();
    assert_eq!(loads.load(Ordering::SeqCst), after_use);
    // Another charm costs its own document only.
    assert_eq!(rt.charms().get(&ids[30]).unwrap()["label"], "Count: 0");
    assert_eq!(loads.load(Ordering::SeqCst), after_use + 1);
    drop(rt);

    // What the lazily loaded space wrote is there on the next open, untouched charms too.
    let (rt, _) = reopen(&path);
    assert_eq!(rt.charms().get(one).unwrap()["count"], 5);
    assert_eq!(rt.charms().get(&ids[0]).unwrap()["count"], 0);
    assert_eq!(rt.charms().list().len(), 40);
}

#[test]
fn a_missing_document_is_asked_for_once_and_a_new_one_is_listed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("space.sqlite");
    write_space(&path, 1);
    let (rt, loads) = reopen(&path);
    let nowhere = Link::new("nowhere", trellis_runner::Path::root());
    assert_eq!(rt.read(&nowhere).unwrap(), Value::Null);
    assert_eq!(rt.read(&nowhere).unwrap(), Value::Null);
    assert_eq!(loads.load(Ordering::SeqCst), 1, "a missing document is remembered as missing");
    assert!(!rt.space().contains("nowhere"));

    rt.transact(|tx| tx.write(&nowhere, Value::from(3i64))).unwrap();
    assert!(rt.space().contains("nowhere"));
    assert!(rt.space().doc_ids("now").iter().any(|id| &**id == "nowhere"));
}

#[test]
fn a_document_that_cannot_be_read_stops_commits_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("space.sqlite");
    let ids = write_space(&path, 2);
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(UPSERT, rusqlite::params![ids[0], 9, "{not json"]).unwrap();
    drop(conn);

    let (rt, _) = reopen(&path);
    // The other charm reads, and so does the space, until the broken document is needed.
    assert_eq!(rt.charms().get(&ids[1]).unwrap()["count"], 0);
    rt.transact(|tx| tx.write(&Link::new("fine", trellis_runner::Path::root()), Value::from(1i64))).unwrap();
    assert_eq!(rt.read(&rt.charms().result(&DocId::from(ids[0].as_str()))).unwrap(), Value::Null);
    let err = rt.transact(|tx| tx.write(&Link::new("fine", trellis_runner::Path::root()), Value::from(2i64)));
    let text = err.unwrap_err().to_string();
    assert!(text.contains(&format!("document {} could not be read", ids[0])), "{text}");
    assert!(text.contains("not valid JSON"), "{text}");
}
