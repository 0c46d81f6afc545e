//! How other `trellis` commands reach a running `trellis serve`: a space is open in one
//! process at a time, so while the server holds it, it writes `<space>.serve` (readable by
//! its owner only) with its address and a bearer token good for this process's life; a
//! command that finds the space in use reads it and talks to the server instead.
//!
//! A server that was killed leaves the file behind; a command then finds nobody at the
//! address (or is refused the token) and reports the space in use, as before.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// What the hand-off file holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Handoff {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// A bearer token the server accepts while it runs.
    pub token: String,
}

/// The hand-off file of the space at `space`.
pub fn path(space: &Path) -> PathBuf {
    let mut name = space.as_os_str().to_owned();
    name.push(".serve");
    PathBuf::from(name)
}

/// A written hand-off file, removed by [`Written::remove`].
pub struct Written(PathBuf);

impl Written {
    /// Removes the file (the server is stopping).
    pub fn remove(self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Handoff {
    /// Writes the file beside `space`, readable and writable by its owner only.
    pub fn write(&self, space: &Path) -> anyhow::Result<Written> {
        let at = path(space);
        let json = serde_json::to_vec(self)?;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&at).with_context(|| format!("cannot write {}", at.display()))?;
        // A file left by an earlier server keeps its mode: make it the owner's only.
        #[cfg(unix)]
        std::fs::set_permissions(&at, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .with_context(|| format!("cannot restrict {}", at.display()))?;
        std::io::Write::write_all(&mut file, &json).with_context(|| format!("cannot write {}", at.display()))?;
        Ok(Written(at))
    }

    /// The hand-off file beside `space`, if there is a readable one.
    pub fn read(space: &Path) -> Option<Handoff> {
        // A hand-off file is small; anything else is not one (and is not read whole).
        let mut bytes = Vec::new();
        let file = std::fs::File::open(path(space)).ok()?;
        std::io::Read::read_to_end(&mut std::io::Read::take(file, 4096), &mut bytes).ok()?;
        (bytes.len() < 4096).then(|| serde_json::from_slice(&bytes).ok()).flatten()
    }
}
