//! Replacing a file whole: the trust file and a bundle's `signature.json` are written this
//! way, so that a crash leaves the old file or the new one, and a symbolic link standing
//! where either goes is replaced, never written through.

use std::io::Write;
use std::path::Path;

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
