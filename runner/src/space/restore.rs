//! Going back to what storage holds after a write failed.
//!
//! A commit is applied in memory before storage writes it, so a write that fails (a full
//! disk) leaves memory ahead of the file: readers would see a change its sender is told
//! failed, and the next write, which holds whole documents, would make it durable. Storage
//! therefore refuses everything after a failed write (see [`Storage::submit`]) until the
//! space has put every document it holds back to its stored value. Undoing the failed
//! commits one by one is not enough: every commit after them read what they wrote. What
//! storage holds is the state after the last commit it wrote, and commits are written in
//! order, so it is a state the space really was in.
//!
//! [`Storage::submit`]: crate::storage::Storage::submit

use std::sync::atomic::Ordering;

use super::{DocKey, Space, Version};
use crate::link::DocId;
use crate::storage::StorageError;
use crate::value::{Path, Value};

/// What waiting for durability found: the caller's result, and the documents put back
/// to their stored value on the way (their readers and writers must run again).
#[derive(Debug)]
#[must_use]
pub(crate) struct Outcome {
    /// Whether the caller's commit is durable.
    pub result: Result<(), StorageError>,
    /// The documents restored, by key and id.
    pub restored: Vec<(DocKey, DocId)>,
    /// Whether the caller's failed write was undone: the space went back to what storage
    /// holds (not so when the writer is gone, or a document could not be read back).
    pub undone: bool,
}

impl Default for Outcome {
    /// Durable, nothing restored.
    fn default() -> Self {
        Outcome { result: Ok(()), restored: Vec::new(), undone: false }
    }
}

impl Space {
    /// If storage refuses writes since one failed: waits until it has answered everything
    /// submitted, puts every document whose stored version differs from memory's back to
    /// the stored value, and lets storage write again. Under the commit lock, so no commit
    /// comes between. A restored document gets a version above both, written whole, so a
    /// transaction that read it before fails validation and runs again on the restored
    /// value. If storage cannot give a document back, the space refuses commits from then
    /// on (as for a document it could not load) and storage stays refusing.
    pub(crate) fn restore(&self) -> Result<Vec<(DocKey, DocId)>, StorageError> {
        let _guard = self.commit_lock.lock();
        if !self.storage.refusing() {
            return Ok(Vec::new()); // restored by another caller, or nothing failed
        }
        // Its answer does not matter (refused): once it comes, so have all before it.
        let _ = self.barrier().wait();
        // Taken out of the map first: no shard of it stays locked while storage reads.
        let kept: Vec<_> = self.docs.iter().map(|kept| (kept.key().clone(), kept.value().clone())).collect();
        let mut restored = Vec::new();
        for (id, entry) in kept {
            let stored = match self.storage.load_doc(&id) {
                Ok(stored) => stored,
                Err(error) => {
                    tracing::error!(doc = %id, %error, "a document could not be read back after a failed write; the space refuses changes now");
                    let _ = self.unreadable.set((id.to_string(), error.to_string()));
                    return Err(error);
                }
            };
            let mut state = entry.state.write();
            let (value, version, exists) = match stored {
                Some(doc) => (doc.value, Version(doc.version), true),
                None => (Value::Null, Version::default(), false),
            };
            if version == state.version && exists == state.exists {
                continue;
            }
            let newer = Version(state.version.0.max(version.0) + 1);
            state.value = value;
            state.exists = exists;
            state.version = newer;
            state.recent.record(newer, std::iter::once(Path::root()));
            entry.committed.store(newer.0, Ordering::Release);
            restored.push((entry.key(), id));
        }
        if !restored.is_empty() {
            // Counted as a commit: a transaction begun before it validates what it read.
            self.commits.fetch_add(1, Ordering::AcqRel);
        }
        tracing::warn!(documents = restored.len(), "the space went back to what was last saved after a failed write");
        self.storage.resume();
        Ok(restored)
    }
}
