//! Helpers shared by the tests that run the `trellis` binary.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A temporary space file that disappears with the value.
pub struct Space {
    _dir: tempfile::TempDir,
    /// The SQLite file (not created until `trellis` first opens it).
    pub path: PathBuf,
}

/// A fresh temporary space.
pub fn space() -> Space {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("space.sqlite");
    Space { _dir: dir, path }
}

/// The `trellis` binary with `--space` set and no provider keys in its environment.
pub fn trellis(space: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_trellis"));
    command.arg("--space").arg(space).env_remove("OPENAI_API_KEY").env_remove("ANTHROPIC_API_KEY");
    command
}
