//! The space file: what may be opened as one (a regular file with one name, holding a
//! space or nothing yet), and the lock that keeps a second process from writing it.
//!
//! A file with other names (hard links) is refused because SQLite names its journal after
//! the path it was given, and a lock beside one name does not guard another: two
//! processes could each hold a lock and write the one file. The checks come before the
//! lock is taken, so a refused path leaves no lock file behind.

use std::path::{Path, PathBuf};

use rusqlite::Connection;

use super::StorageError;

/// Refuses a path that cannot hold a space file: a directory, a device, another special
/// file, a file with other names (hard links). A missing file is fine: SQLite creates it.
pub(super) fn check_usable(path: &Path) -> Result<(), StorageError> {
    let found = match std::fs::metadata(path) {
        Ok(meta) if meta.is_file() => return check_one_name(path, &meta),
        Ok(meta) if meta.is_dir() => "a directory",
        Ok(_) => "a device or other special file",
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(StorageError::Io { path: path.display().to_string(), action: "look at the space file", source })
        }
    };
    Err(StorageError::NotAFile { path: path.display().to_string(), found })
}

#[cfg(unix)]
fn check_one_name(path: &Path, meta: &std::fs::Metadata) -> Result<(), StorageError> {
    use std::os::unix::fs::MetadataExt;
    match meta.nlink() {
        0 | 1 => Ok(()),
        links => Err(StorageError::HardLinked { path: path.display().to_string(), links }),
    }
}

#[cfg(not(unix))]
fn check_one_name(_path: &Path, _meta: &std::fs::Metadata) -> Result<(), StorageError> {
    Ok(())
}

/// Takes the space's lock file, or says which file is in use. The lock file sits beside
/// the file `path` leads to: a space reached through a symbolic link takes the same lock
/// as through its own name (two processes writing one space would lose each other's
/// commits).
pub(super) fn lock_space(path: &Path) -> Result<std::fs::File, StorageError> {
    let lock_path = PathBuf::from(format!("{}.lock", resolved(path).display()));
    let io = |action, source| StorageError::Io { path: lock_path.display().to_string(), action, source };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| io("open the lock file", e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(StorageError::InUse { path: path.display().to_string() }),
        Err(std::fs::TryLockError::Error(e)) => Err(io("lock the space", e)),
    }
}

/// `path` with the symbolic links on the way resolved; a file not there yet is resolved
/// through its directory (`path` itself when neither can be).
fn resolved(path: &Path) -> PathBuf {
    std::fs::canonicalize(path)
        .or_else(|_| {
            let name = path.file_name().ok_or(std::io::ErrorKind::NotFound)?;
            let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
            std::fs::canonicalize(dir).map(|dir| dir.join(name))
        })
        .unwrap_or_else(|_| path.to_path_buf())
}

/// Refuses a database that holds tables and not the space's: another program's data,
/// which a space would otherwise be made in, beside it. Asked before anything is written
/// (switching to WAL writes to the file). Whether the space's table is there already (a
/// file with no table at all is a space nothing was saved in yet).
pub(super) fn check_is_space(conn: &Connection, path: &Path) -> Result<bool, StorageError> {
    let sqlite = |source| StorageError::Sqlite { path: path.display().to_string(), source };
    let mut query =
        conn.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").map_err(sqlite)?;
    let tables = query.query_map([], |row| row.get::<_, String>(0)).map_err(sqlite)?;
    let tables = tables.collect::<rusqlite::Result<Vec<String>>>().map_err(sqlite)?;
    let has_documents = tables.iter().any(|table| table == "documents");
    if tables.is_empty() || has_documents {
        return Ok(has_documents);
    }
    Err(StorageError::NotASpace { path: path.display().to_string(), tables: tables.join(", ") })
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::super::{SqliteStorage, StorageError};

    #[test]
    fn storage_a_path_that_is_no_file_is_refused_without_a_lock_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let sub = dir.path().join("a-directory");
        std::fs::create_dir(&sub).expect("create directory");
        let err = SqliteStorage::open(&sub).expect_err("a directory is not a space");
        assert!(matches!(err, StorageError::NotAFile { found: "a directory", .. }), "{err}");
        assert!(err.to_string().contains("give the path of a file"), "{err}");
        assert!(!dir.path().join("a-directory.lock").exists(), "no stray lock file");

        #[cfg(unix)]
        {
            // Where the lock would go (`/dev/null.lock`) cannot be checked in a test
            // without writing to /dev; the refusal comes before any file is created.
            let err = SqliteStorage::open("/dev/null").expect_err("a device is not a space");
            assert!(matches!(err, StorageError::NotAFile { found: "a device or other special file", .. }), "{err}");
        }
    }

    #[test]
    fn storage_a_file_that_is_no_database_gets_the_damaged_hint_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("notes.txt");
        std::fs::write(&path, "these are my notes, not a database; ".repeat(100)).expect("write file");
        let err = SqliteStorage::open(&path).expect_err("not a database");
        let text = err.to_string();
        assert!(text.contains("not a Trellis space or is damaged"), "{text}");
        assert!(!text.contains("writable"), "{text}");
    }

    #[test]
    fn storage_another_programs_database_is_refused_and_left_as_it_was() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("other.sqlite");
        let other = Connection::open(&path).expect("open");
        other.execute_batch("CREATE TABLE users(id, name); INSERT INTO users VALUES (1, 'bob');").expect("fill");
        drop(other);
        let before = std::fs::read(&path).expect("read");
        let err = SqliteStorage::open(&path).expect_err("not a space");
        assert!(matches!(&err, StorageError::NotASpace { tables, .. } if tables == "users"), "{err}");
        assert!(err.to_string().contains("not a Trellis space; nothing was changed"), "{err}");
        assert_eq!(std::fs::read(&path).expect("read"), before, "the file is as it was");
        assert!(!dir.path().join("other.sqlite-wal").exists(), "no WAL was started");
        assert!(!dir.path().join("other.sqlite.lock").exists(), "no stray lock file");
    }

    #[test]
    fn storage_a_space_is_open_in_one_place_at_a_time() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("space.sqlite");
        let first = SqliteStorage::open(&path).expect("first open");
        let err = SqliteStorage::open(&path).expect_err("second open is refused");
        assert!(err.to_string().contains("in use"), "{err}");
        drop(first);
        SqliteStorage::open(&path).expect("open again once the first is closed");
    }

    #[cfg(unix)]
    #[test]
    fn storage_a_space_reached_through_a_symbolic_link_is_the_same_space_in_use() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("space.sqlite");
        let first = SqliteStorage::open(&path).expect("first open");
        let link = dir.path().join("link.sqlite");
        std::os::unix::fs::symlink(&path, &link).expect("symlink");
        let err = SqliteStorage::open(&link).expect_err("the same space under another name is refused");
        assert!(err.to_string().contains("in use"), "{err}");
        drop(first);
        drop(SqliteStorage::open(&link).expect("open through the link once the first is closed"));
        // A link to a space not created yet resolves through its directory.
        let other = dir.path().join("sub");
        std::fs::create_dir(&other).expect("dir");
        std::os::unix::fs::symlink(&other, dir.path().join("alias")).expect("symlink");
        let fresh = SqliteStorage::open(other.join("new.sqlite")).expect("new space");
        let err = SqliteStorage::open(dir.path().join("alias").join("new.sqlite")).expect_err("one space, two names");
        assert!(err.to_string().contains("in use"), "{err}");
        drop(fresh);
    }

    #[test]
    fn storage_a_space_file_with_another_name_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("space.sqlite");
        drop(SqliteStorage::open(&path).expect("a space"));
        let second = dir.path().join("second.sqlite");
        std::fs::hard_link(&path, &second).expect("hard link");
        for name in [&path, &second] {
            let err = SqliteStorage::open(name).expect_err("a file with two names is refused").to_string();
            assert!(err.contains("has 2 names (hard links)") && err.contains("-samefile"), "{err}");
        }
        std::fs::remove_file(&second).expect("remove the other name");
        drop(SqliteStorage::open(&path).expect("one name again: it opens"));
    }
}
