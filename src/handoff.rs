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
    /// Writes the file beside `space`, readable and writable by its owner only. It is
    /// made anew and renamed into place, so a file or link left there (by an earlier
    /// server, or planted to have the token written elsewhere) is replaced, not followed.
    pub fn write(&self, space: &Path) -> anyhow::Result<Written> {
        let at = path(space);
        let json = serde_json::to_vec(self)?;
        trellis_runner::dirs::replace(&at, &json, true).with_context(|| format!("cannot write {}", at.display()))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_link_planted_in_its_place_is_replaced_not_followed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let space = dir.path().join("space.sqlite");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep me").expect("victim");
        std::os::unix::fs::symlink(&victim, path(&space)).expect("planted link");
        let handoff = Handoff { url: "http://127.0.0.1:1".into(), token: "secret".into() };
        handoff.write(&space).expect("written");
        assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "keep me", "the link's target is untouched");
        let written = std::fs::symlink_metadata(path(&space)).expect("hand-off file");
        assert!(written.file_type().is_file(), "a file of its own in the link's place");
        assert_eq!(written.permissions().mode() & 0o777, 0o600);
        assert_eq!(Handoff::read(&space).map(|h| h.token).as_deref(), Some("secret"));
    }
}
