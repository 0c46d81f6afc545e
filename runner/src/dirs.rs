//! The user's directories, as the XDG base directory specification names them: where
//! Trellis keeps the default space and looks for the user's own files (the MCP servers
//! file, the plugin trust file, the MCP sign-ins). An unset or empty variable falls back
//! to `$HOME`.
//!
//! [`replace`] writes such a file whole (the trust file, the sign-ins, a bundle's
//! `signature.json`, a server's hand-off file), so that a crash leaves the old file or the
//! new one, and a symbolic link standing where it goes is replaced, never written through.

use std::io::Write;
use std::path::{Path, PathBuf};

/// `$XDG_CONFIG_HOME/trellis`, else `~/.config/trellis`; `None` when neither is set.
pub fn config_dir() -> Option<PathBuf> {
    base("XDG_CONFIG_HOME", ".config")
}

/// `$XDG_DATA_HOME/trellis`, else `~/.local/share/trellis`; `None` when neither is set.
pub fn data_dir() -> Option<PathBuf> {
    base("XDG_DATA_HOME", ".local/share")
}

fn base(variable: &str, under_home: &str) -> Option<PathBuf> {
    let dir = std::env::var_os(variable).filter(|dir| !dir.is_empty()).map(PathBuf::from).or_else(|| {
        std::env::var_os("HOME").filter(|home| !home.is_empty()).map(|home| PathBuf::from(home).join(under_home))
    })?;
    Some(dir.join("trellis"))
}

/// Writes `bytes` to a new file beside `path` (readable by the user only when `private`),
/// syncs it, and renames it over `path`. The new file's name is this process's own, and it
/// is created, never opened: a link planted under that name (in a bundle someone else
/// made) is removed, not followed.
pub fn replace(path: &Path, bytes: &[u8], private: bool) -> std::io::Result<()> {
    let name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let fresh = path.with_file_name(format!(".{name}.{}.new", std::process::id()));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    if private {
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let file = match options.open(&fresh) {
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
            // Left by a process that had this id before, or planted.
            std::fs::remove_file(&fresh)?;
            options.open(&fresh)
        }
        opened => opened,
    };
    let written = file
        .and_then(|mut file| file.write_all(bytes).and_then(|()| file.sync_all()))
        .and_then(|()| std::fs::rename(&fresh, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&fresh);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::replace;

    #[cfg(unix)]
    #[test]
    fn a_link_at_the_path_or_at_the_new_files_name_is_replaced_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (target, victim) = (dir.path().join("signature.json"), dir.path().join("victim"));
        std::os::unix::fs::symlink(&victim, &target).expect("link");
        let planted = dir.path().join(format!(".signature.json.{}.new", std::process::id()));
        std::os::unix::fs::symlink(&victim, &planted).expect("link");
        replace(&target, b"{}\n", false).expect("replaced");
        assert!(!victim.exists(), "nothing was written where the links pointed");
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "{}\n");
        assert!(!target.is_symlink() && !planted.exists());
    }
}
