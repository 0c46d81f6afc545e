//! Storage that keeps nothing beyond the process: for tests and scratch spaces.

use super::{Durable, Storage, StorageError, StoredDoc};

/// In-memory storage: every submit is "durable" at once, nothing survives the process.
#[derive(Debug, Default)]
pub struct MemoryStorage;

impl Storage for MemoryStorage {
    fn load_doc(&self, _id: &str) -> Result<Option<StoredDoc>, StorageError> {
        Ok(None)
    }

    fn doc_ids(&self, _prefix: &str) -> Result<Vec<String>, StorageError> {
        Ok(Vec::new())
    }

    fn submit(&self, _writes: Vec<StoredDoc>) -> Durable {
        Durable::ready(Ok(()))
    }

    fn keeps_writes(&self) -> bool {
        false
    }
}
