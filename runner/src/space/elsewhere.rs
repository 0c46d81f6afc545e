//! Writes made elsewhere: whole documents another node made durable in a space this one
//! follows (see `Runtime::apply_stored`), taken in place of this space's copies.

use std::sync::atomic::Ordering;

use super::{DocKey, Space, Version};
use crate::link::DocId;
use crate::storage::StoredDoc;
use crate::value::Path;

impl Space {
    /// Takes whole documents made durable elsewhere, each only when it is newer than this
    /// space's copy: versions only grow, so an older one is a change a later load or
    /// change already passed. A document not loaded yet is kept as given too: a load that
    /// read storage just before the change landed would otherwise keep the older value
    /// for good (a loaded document is never read again). Under the commit lock, and
    /// counted as one commit, so that a transaction that read a taken document validates
    /// it. `changed` hears the key of each document taken; returns their ids.
    pub(crate) fn take_stored(&self, docs: Vec<StoredDoc>, changed: &mut dyn FnMut(DocKey)) -> Vec<DocId> {
        let _guard = self.commit_lock.lock();
        let mut taken = Vec::new();
        for StoredDoc { id, version, value } in docs {
            let (id, version) = (DocId::from(id), Version(version));
            let mut made = false;
            let entry = self
                .docs
                .entry(id.clone())
                .or_insert_with(|| {
                    made = true;
                    self.new_entry(value.clone(), version)
                })
                .clone();
            if !made {
                let mut state = entry.state.write();
                if state.version >= version {
                    continue;
                }
                state.value = value;
                state.version = version;
                state.exists = true;
                state.recent.record(version, std::iter::once(Path::root()));
                entry.committed.store(version.0, Ordering::Release);
            }
            changed(entry.key());
            taken.push(id);
        }
        if !taken.is_empty() {
            self.commits.fetch_add(1, Ordering::AcqRel);
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use crate::link::DocId;
    use crate::prelude::*;
    use crate::storage::{Durable, Storage, StorageError, StoredDoc};
    use crate::Error;

    /// A copy of a space another node holds: documents as the holder last stored them,
    /// and no write taken.
    struct Followed(Vec<StoredDoc>);

    impl Storage for Followed {
        fn load_doc(&self, id: &str) -> Result<Option<StoredDoc>, StorageError> {
            Ok(self.0.iter().find(|doc| doc.id == id).cloned())
        }

        fn doc_ids(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
            Ok(self.0.iter().map(|doc| doc.id.clone()).filter(|id| id.starts_with(prefix)).collect())
        }

        fn submit(&self, _writes: Vec<StoredDoc>) -> Durable {
            Durable::ready(self.read_only().map_or(Ok(()), Err))
        }

        fn read_only(&self) -> Option<StorageError> {
            Some(StorageError::Following { space: "team".to_owned() })
        }
    }

    fn doc(id: &str, version: u64, n: i64) -> StoredDoc {
        StoredDoc { id: id.to_owned(), version, value: Value::from(serde_json::json!({ "n": n })) }
    }

    fn n(rt: &Runtime, id: &str) -> Value {
        rt.read(&Link::new(id, Path::root()).child("n")).expect("read")
    }

    #[test]
    fn a_newer_document_replaces_the_copy_and_its_observers_hear_of_it() {
        let rt = Runtime::with_storage(Box::new(Followed(vec![doc("a", 3, 3)]))).expect("open");
        assert_eq!(n(&rt, "a"), Value::from(3));
        let heard = Arc::new(AtomicUsize::new(0));
        let counting = Arc::clone(&heard);
        let _watching = rt.observe(&Link::new("a", Path::root()).child("n"), move |_| {
            counting.fetch_add(1, Ordering::SeqCst);
            true
        });
        assert_eq!(rt.apply_stored(vec![doc("a", 5, 5)]), vec![DocId::from("a")]);
        assert_eq!(n(&rt, "a"), Value::from(5));
        assert_eq!(heard.load(Ordering::SeqCst), 1);
        // A change the copy already passed (read late from the log) is not taken.
        assert!(rt.apply_stored(vec![doc("a", 4, 4), doc("a", 5, 99)]).is_empty());
        assert_eq!(n(&rt, "a"), Value::from(5));
        assert_eq!(heard.load(Ordering::SeqCst), 1, "nothing taken, nobody told");
    }

    #[test]
    fn a_document_taken_before_its_first_read_is_not_loaded_over() {
        // Storage still gives version 1, as a load that read it just before the change
        // landed would.
        let rt = Runtime::with_storage(Box::new(Followed(vec![doc("b", 1, 1)]))).expect("open");
        rt.apply_stored(vec![doc("b", 2, 2)]);
        assert_eq!(n(&rt, "b"), Value::from(2));
    }

    #[test]
    fn what_reads_a_taken_document_runs_again() {
        let rt = Runtime::in_memory();
        let id = rt.space().new_doc_id("copy");
        let source = Link::new(id.clone(), Path::root()).child("n");
        let double = rt
            .computed("double", move |tx| Ok(tx.read(&source)?.to_json().as_i64().unwrap_or(0) * 2))
            .expect("computation");
        rt.apply_stored(vec![doc(&id, 1, 21)]);
        assert_eq!(double.get(&rt).expect("read"), 42);
    }

    #[test]
    fn a_copy_refuses_a_write_and_keeps_what_it_holds() {
        let rt = Runtime::with_storage(Box::new(Followed(vec![doc("c", 1, 1)]))).expect("open");
        let written = rt.transact(|tx| tx.write(&Link::new("c", Path::root()).child("n"), Value::from(9)));
        assert!(
            matches!(&written, Err(Error::Storage(StorageError::Following { space })) if space == "team"),
            "{written:?}"
        );
        assert_eq!(n(&rt, "c"), Value::from(1), "nothing of the write is seen");
        // A transaction that only reads commits.
        assert_eq!(rt.transact(|tx| tx.read(&Link::new("c", Path::root()).child("n"))).expect("read"), 1.into());
        assert!(rt.space().check_writable().is_err_and(|why| why.contains("only follows the space team")));
        // The holder's change still comes in whole.
        rt.apply_stored(vec![doc("c", 2, 2)]);
        assert_eq!(n(&rt, "c"), Value::from(2));
    }
}
