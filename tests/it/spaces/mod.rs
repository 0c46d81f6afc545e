//! Runtimes to run one test on: in memory, and on a temporary SQLite space, where commits
//! go through the storage writer and durability waits are real.

use trellis::prelude::*;

/// A runtime under test, with what it runs on (and the temporary directory that must
/// outlive it).
pub struct Subject {
    /// "memory" or "sqlite", for assertion messages.
    pub kind: &'static str,
    /// The runtime.
    pub rt: Runtime,
    _dir: Option<tempfile::TempDir>,
}

/// An in-memory runtime and one on a fresh temporary SQLite space.
pub fn both() -> [Subject; 2] {
    let dir = tempfile::tempdir().expect("temporary directory");
    let rt = Runtime::open(dir.path().join("space.sqlite")).expect("open a temporary SQLite space");
    [Subject { kind: "memory", rt: Runtime::in_memory(), _dir: None }, Subject { kind: "sqlite", rt, _dir: Some(dir) }]
}
