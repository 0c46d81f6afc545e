//! What this user decided about plugins, kept outside every space: the keys they trust to
//! sign bundles, and for each bundle they installed (by content hash) the permissions
//! they granted and whether they accepted it unsigned.
//!
//! A space file is input like any other: one made elsewhere can carry any plugin record.
//! So a record in a space only says which bundles it holds; whether one loads, and with
//! what permissions, is decided here, in a file of the user's own:
//!
//! ```json
//! {
//!   "trusted_keys": {"<64 hex digits>": {"label": "alice"}},
//!   "approved": {"<content hash, 64 hex digits>": {"name": "text-tools", "granted": ["clock"], "unsigned": false}}
//! }
//! ```
//!
//! ```
//! use trellis_plugins::trust::{Approval, TrustFile};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let file = TrustFile::at(dir.path().join("plugins.json"));
//! let mut trust = file.load().unwrap();
//! assert!(trust.trusted_keys().is_empty(), "a file that is not there trusts nothing");
//! trust.approve([7; 32], Approval { name: "text-tools".into(), granted: vec![], unsigned: true });
//! file.save(&trust).unwrap();
//! assert!(file.load().unwrap().approval(&[7; 32]).is_some_and(|a| a.unsigned));
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::manifest::Permission;
use crate::signing::{encode_hex, PublicKey};

/// The largest trust file read: far more keys and bundles than anyone installs.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// What the user decided about one bundle when they installed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// The plugin's name, for people reading the file.
    pub name: String,
    /// The permissions granted.
    #[serde(default)]
    pub granted: Vec<Permission>,
    /// Whether it was accepted without a signature.
    #[serde(default)]
    pub unsigned: bool,
}

/// A trusted key's entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct KeyEntry {
    #[serde(default)]
    label: String,
}

/// The user's decisions about plugins, as read from (and written to) a [`TrustFile`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decisions {
    #[serde(default)]
    trusted_keys: BTreeMap<String, KeyEntry>,
    #[serde(default)]
    approved: BTreeMap<String, Approval>,
}

impl Decisions {
    /// The keys trusted to sign bundles (entries that are not keys are ignored).
    pub fn trusted_keys(&self) -> Vec<PublicKey> {
        self.trusted_keys.keys().filter_map(|k| PublicKey::parse(k).ok()).collect()
    }

    /// Trusts `key`, with a label for people.
    pub fn trust(&mut self, key: &PublicKey, label: &str) {
        self.trusted_keys.insert(key.to_hex(), KeyEntry { label: label.to_string() });
    }

    /// Stops trusting `key`; false if it was not trusted.
    pub fn untrust(&mut self, key: &PublicKey) -> bool {
        self.trusted_keys.remove(&key.to_hex()).is_some()
    }

    /// What the user decided about the bundle of content hash `hash`, if they installed it.
    pub fn approval(&self, hash: &[u8; 32]) -> Option<&Approval> {
        self.approved.get(&encode_hex(hash))
    }

    /// Forgets the decision about the bundle of content hash `hash`; false if there was none.
    pub fn forget(&mut self, hash: &[u8; 32]) -> bool {
        self.approved.remove(&encode_hex(hash)).is_some()
    }

    /// Records the user's decision about the bundle of content hash `hash`.
    pub fn approve(&mut self, hash: [u8; 32], approval: Approval) {
        self.approved.insert(encode_hex(&hash), approval);
    }
}

/// Why the trust file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// Reading or writing failed.
    #[error("cannot {0} the plugin trust file {1}: {2}")]
    Io(&'static str, PathBuf, std::io::Error),
    /// The file is not a trust file.
    #[error(
        "the plugin trust file {0} is damaged ({1}); fix it or move it away (then trust keys and install plugins again)"
    )]
    Damaged(PathBuf, String),
    /// No place for the file.
    #[error("cannot find a configuration directory (neither XDG_CONFIG_HOME nor HOME is set)")]
    NoConfigDir,
}

/// The file holding a user's [`Decisions`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustFile {
    path: PathBuf,
}

impl TrustFile {
    /// The trust file at `path`.
    pub fn at(path: impl Into<PathBuf>) -> TrustFile {
        TrustFile { path: path.into() }
    }

    /// The user's trust file: `trellis/plugins.json` in `$XDG_CONFIG_HOME`, or else in
    /// `~/.config`.
    pub fn of_user() -> Result<TrustFile, TrustError> {
        let config = trellis_runner::dirs::config_dir().ok_or(TrustError::NoConfigDir)?;
        Ok(TrustFile::at(config.join("plugins.json")))
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The decisions in the file; none when there is no file yet.
    pub fn load(&self) -> Result<Decisions, TrustError> {
        let io = |e| TrustError::Io("read", self.path.clone(), e);
        let file = match std::fs::File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Decisions::default()),
            Err(e) => return Err(io(e)),
        };
        if file.metadata().map_err(io)?.len() > MAX_FILE_BYTES {
            return Err(TrustError::Damaged(self.path.clone(), format!("larger than {MAX_FILE_BYTES} bytes")));
        }
        serde_json::from_reader(std::io::BufReader::new(file))
            .map_err(|e| TrustError::Damaged(self.path.clone(), e.to_string()))
    }

    /// Writes `trust` whole: to a new file beside it, readable by the user only, then
    /// renamed over the old one, so a crash leaves one or the other.
    pub fn save(&self, trust: &Decisions) -> Result<(), TrustError> {
        let io = |e| TrustError::Io("write", self.path.clone(), e);
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let text = serde_json::to_string_pretty(trust).map_err(|e| io(std::io::Error::other(e)))?;
        trellis_runner::dirs::replace(&self.path, format!("{text}\n").as_bytes(), true).map_err(io)
    }

    /// Loads the decisions, lets `change` edit them, and saves them; what `change` returned.
    /// Holds a lock on `PATH.lock` meanwhile, so two programs updating at once do not lose
    /// each other's change.
    pub fn update<T>(&self, change: impl FnOnce(&mut Decisions) -> T) -> Result<T, TrustError> {
        let io = |e| TrustError::Io("lock", self.path.clone(), e);
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let lock = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.path.with_extension("json.lock"))
            .map_err(io)?;
        lock.lock().map_err(io)?;
        let mut trust = self.load()?;
        let out = change(&mut trust);
        self.save(&trust)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_or_huge_file_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = TrustFile::at(dir.path().join("plugins.json"));
        std::fs::write(file.path(), "{not json").unwrap();
        let error = file.load().unwrap_err().to_string();
        assert!(error.contains("plugins.json") && error.contains("damaged"), "{error}");
        std::fs::write(file.path(), vec![b' '; MAX_FILE_BYTES as usize + 1]).unwrap();
        assert!(file.load().unwrap_err().to_string().contains("larger than"));
    }

    #[cfg(unix)]
    #[test]
    fn the_file_is_the_users_alone() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = TrustFile::at(dir.path().join("deep/plugins.json"));
        file.update(|trust| trust.approve([1; 32], Approval { name: "p".into(), granted: vec![], unsigned: false }))
            .unwrap();
        let mode = std::fs::metadata(file.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(file.load().unwrap().approval(&[1; 32]).unwrap().name, "p");
    }

    #[test]
    fn updates_at_once_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let file = TrustFile::at(dir.path().join("plugins.json"));
        std::thread::scope(|s| {
            for n in 0..8u8 {
                let file = file.clone();
                s.spawn(move || {
                    let approval = Approval { name: format!("p{n}"), granted: vec![], unsigned: false };
                    file.update(|trust| trust.approve([n; 32], approval)).unwrap();
                });
            }
        });
        let trust = file.load().unwrap();
        assert!((0..8u8).all(|n| trust.approval(&[n; 32]).is_some()), "{trust:?}");
    }
}
