//! What a writer's wait for durability does when storage failed: the space went back to
//! what storage holds (see the space's `restore`), and the computations that read or
//! write a restored document, and the observers of one, hear of it as of any change.

use super::Runtime;
use crate::error::{Error, Result};
use crate::space::{Committed, Outcome};
use crate::value::Path;

impl Runtime {
    /// Waits until `committed` and everything before it are durable (see `send`).
    pub(super) async fn durable_after(&self, committed: Committed) -> Result<()> {
        let outcome = self.0.space.durable_after(committed).await;
        self.settle_restored(outcome)
    }

    /// [`Runtime::durable_after`] for a thread that may block (see `transact`).
    #[inline]
    pub(super) fn wait_durable_after(&self, committed: Committed) -> Result<()> {
        let outcome = self.0.space.wait_durable_after(committed);
        if outcome.restored.is_empty() && outcome.result.is_ok() {
            return Ok(());
        }
        self.settle_restored(outcome)
    }

    /// Marks what reads or writes each restored document dirty, tells its observers, runs
    /// what is dirty, and turns a failed write into the caller's error.
    #[inline(never)]
    fn settle_restored(&self, outcome: Outcome) -> Result<()> {
        let Outcome { result, restored, undone } = outcome;
        if !restored.is_empty() {
            let mut graph = self.0.graph.lock();
            for (key, _) in &restored {
                graph.restored(*key);
            }
            drop(graph);
            let whole = vec![Path::root()];
            let changes: Vec<_> = restored.into_iter().map(|(_, id)| (id, whole.clone())).collect();
            self.notify_observers(&changes);
            self.pump(None);
        }
        result.map_err(|error| if undone { Error::NotSaved(error) } else { Error::Storage(error) })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use parking_lot::Mutex;

    use crate::prelude::*;
    use crate::storage::{Durable, Storage, StorageError, StoredDoc};
    use crate::Error;

    /// Storage in memory that keeps what it is given, can be told to fail the next write
    /// (a disk that filled up), and refuses what comes after a failed write until resumed,
    /// as [`Storage::submit`] asks.
    #[derive(Clone, Default)]
    struct Disk {
        stored: Arc<Mutex<HashMap<String, StoredDoc>>>,
        fail_next: Arc<AtomicBool>,
        refusing: Arc<AtomicBool>,
        /// The writer is gone: nothing is written, and nothing refused or restored.
        gone: Arc<AtomicBool>,
    }

    impl Disk {
        fn stored(&self, cell: &Link) -> Option<Value> {
            let stored = self.stored.lock();
            stored.get(&*cell.doc).and_then(|doc| doc.value.at(cell.path.segments()).cloned())
        }
    }

    impl Storage for Disk {
        fn load_doc(&self, id: &str) -> Result<Option<StoredDoc>, StorageError> {
            Ok(self.stored.lock().get(id).cloned())
        }

        fn doc_ids(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
            Ok(self.stored.lock().keys().filter(|id| id.starts_with(prefix)).cloned().collect())
        }

        fn submit(&self, writes: Vec<StoredDoc>) -> Durable {
            if self.gone.load(Ordering::SeqCst) {
                return Durable::ready(Err(StorageError::WriterGone));
            }
            if self.refusing.load(Ordering::SeqCst) {
                return Durable::ready(Err(StorageError::Refused { reason: "the disk is full".into() }));
            }
            if !writes.is_empty() && self.fail_next.swap(false, Ordering::SeqCst) {
                self.refusing.store(true, Ordering::SeqCst);
                let full = std::io::Error::from(std::io::ErrorKind::StorageFull);
                return Durable::ready(Err(StorageError::Io { path: "disk".into(), action: "write", source: full }));
            }
            let mut stored = self.stored.lock();
            for doc in writes {
                stored.insert(doc.id.clone(), doc);
            }
            Durable::ready(Ok(()))
        }

        fn refusing(&self) -> bool {
            self.refusing.load(Ordering::SeqCst)
        }

        fn resume(&self) {
            self.refusing.store(false, Ordering::SeqCst);
        }
    }

    fn int(value: Option<Value>) -> Option<i64> {
        value.and_then(|v| v.to_json().as_i64())
    }

    #[test]
    fn a_change_storage_failed_is_undone_seen_by_nobody_and_never_saved_later() {
        let disk = Disk::default();
        let rt = Runtime::with_storage(Box::new(disk.clone())).expect("open");
        let n = rt.new_cell("n", 1i64).expect("cell");
        let double = rt.computed("double", move |tx| Ok(n.get(tx)? * 2)).expect("computed");
        rt.transact(|tx| n.set(tx, 2)).expect("saved");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let heard = seen.clone();
        let _watch = rt.observe(n.link(), move |rt| {
            heard.lock().push(int(rt.read(n.link()).ok()));
            true
        });

        disk.fail_next.store(true, Ordering::SeqCst);
        let error = rt.transact(|tx| n.set(tx, 3)).expect_err("the disk refused it");
        assert!(matches!(error, Error::NotSaved(_)), "{error}");
        assert!(error.to_string().contains("it was undone"), "{error}");
        assert_eq!(int(rt.read(n.link()).ok()), Some(2), "nobody reads what was refused");
        assert_eq!(int(rt.read(double.link()).ok()), Some(4));
        assert_eq!(*seen.lock(), [Some(3), Some(2)], "an observer hears of the undoing");

        // The next change builds on what was saved, and saves nothing of what was refused.
        rt.transact(|tx| n.update(tx, |v| v + 10)).expect("room again");
        assert_eq!(int(disk.stored(n.link())), Some(12));
        assert_eq!(int(rt.read(double.link()).ok()), Some(24));
        assert_eq!(int(disk.stored(double.link())), Some(24));
    }

    #[test]
    fn a_derived_write_that_failed_refuses_the_next_change_and_is_computed_again() {
        let disk = Disk::default();
        let fail_next = disk.fail_next.clone();
        let rt = Runtime::with_storage(Box::new(disk.clone())).expect("open");
        let n = rt.new_cell("n", 5i64).expect("cell");
        // The disk fails when this derived value is first written (for n = 5), in a settle
        // nobody waits for; once.
        let armed = AtomicBool::new(true);
        let double = rt
            .computed("double", move |tx| {
                let n = n.get(tx)?;
                if n == 5 && armed.swap(false, Ordering::SeqCst) {
                    fail_next.store(true, Ordering::SeqCst);
                }
                Ok(n * 2)
            })
            .expect("computed");
        assert!(disk.refusing(), "the derived write failed");
        let error = rt.transact(|tx| n.set(tx, 6)).expect_err("refused after the failed write");
        assert!(error.to_string().contains("not saved: an earlier write to the space failed"), "{error}");
        assert_eq!(int(rt.read(n.link()).ok()), Some(5));
        assert_eq!(int(rt.read(double.link()).ok()), Some(10), "computed again once restored");
        rt.transact(|tx| n.set(tx, 7)).expect("saved");
        assert_eq!(int(disk.stored(n.link())), Some(7));
        assert_eq!(int(disk.stored(double.link())), Some(14));
    }

    #[test]
    fn a_document_created_by_a_change_that_failed_is_gone_again() {
        let disk = Disk::default();
        let rt = Runtime::with_storage(Box::new(disk.clone())).expect("open");
        let fresh = Link::new(rt.space().new_doc_id("fresh"), crate::value::Path::root());
        disk.fail_next.store(true, Ordering::SeqCst);
        rt.transact(|tx| tx.write(&fresh, Value::from(1))).expect_err("refused");
        assert!(!rt.space().contains(&fresh.doc), "the refused document does not exist");
        assert!(rt.space().doc_ids("fresh").is_empty());
        rt.transact(|tx| tx.write(&fresh, Value::from(2))).expect("saved");
        assert!(rt.space().contains(&fresh.doc));
        assert_eq!(int(disk.stored(&fresh)), Some(2));
    }

    #[test]
    fn a_writer_gone_is_not_told_as_a_change_undone() {
        let disk = Disk::default();
        let rt = Runtime::with_storage(Box::new(disk.clone())).expect("open");
        let n = rt.new_cell("n", 1i64).expect("cell");
        disk.gone.store(true, Ordering::SeqCst);
        let error = rt.transact(|tx| n.set(tx, 2)).expect_err("nothing is written");
        assert!(matches!(error, Error::Storage(StorageError::WriterGone)), "{error}");
        assert!(!error.to_string().contains("undone"), "{error}");
    }
}
