//! A space file read as it stood when opened, for a command that only shows what is there
//! while another process has the space open, or when the file is not writable.

use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use rusqlite::{Connection, OpenFlags};

use super::file::{check_is_space, check_usable};
use super::sqlite::{read_doc, read_ids, BUSY_TIMEOUT};
use super::{decode, Durable, Storage, StorageError, StoredDoc};

/// A space file read without its lock, as one SQLite read transaction: every document it
/// loads is as the file held it at [`SqliteSnapshot::open`], whatever the process that has
/// the space open commits meanwhile.
///
/// Nothing is written to the file. What a runtime on it commits (the values a charm derives
/// when it is shown) stays in that runtime's memory and is gone when it ends: a snapshot
/// is for looking, never for changes someone expects to find again.
pub struct SqliteSnapshot {
    path: PathBuf,
    /// `None` for a file with no `documents` table yet: a space nothing was saved in.
    conn: Option<Mutex<Connection>>,
}

impl SqliteSnapshot {
    /// Opens the space file at `path` read-only and takes its snapshot.
    ///
    /// SQLite needs the `-shm` file beside a space in WAL mode to read it: when it is
    /// missing and cannot be made (a directory that is not writable), and no `-wal` file
    /// says a writer is at work, the file is read as it is on disk (SQLite's `immutable`).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StorageError> {
        let path = path.as_ref().to_path_buf();
        check_usable(&path)?;
        if let Err(source) = std::fs::metadata(&path) {
            return Err(StorageError::Io { path: path.display().to_string(), action: "read the space", source });
        }
        let sqlite = |source| StorageError::Sqlite { path: path.display().to_string(), source };
        let conn = match open_pinned(&path, false) {
            Ok(conn) => conn,
            Err(error) if cannot_share(&error) && !wal_of(&path).exists() => {
                open_pinned(&path, true).map_err(sqlite)?
            }
            Err(error) => return Err(sqlite(error)),
        };
        let has_table = check_is_space(&conn, &path)?;
        Ok(SqliteSnapshot { path, conn: has_table.then(|| Mutex::new(conn)) })
    }

    fn sqlite_error(&self, source: rusqlite::Error) -> StorageError {
        StorageError::Sqlite { path: self.path.display().to_string(), source }
    }
}

/// A read-only connection to `path` inside a read transaction that has read the file once,
/// so that every later read sees the file as it stood then. `immutable`: read the file as
/// it is on disk, without the shared-memory file.
fn open_pinned(path: &Path, immutable: bool) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
    let conn = if immutable {
        let uri = url_path(path);
        Connection::open_with_flags(format!("file:{uri}?immutable=1"), flags)?
    } else {
        Connection::open_with_flags(path, flags)?
    };
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.execute_batch("BEGIN")?;
    // The first read starts the snapshot.
    conn.query_row("SELECT count(*) FROM sqlite_master", [], |row| row.get::<_, i64>(0))?;
    Ok(conn)
}

/// Whether `error` is SQLite failing to share the file with its writers (the `-shm` file
/// cannot be made or opened), which an immutable read does not need.
fn cannot_share(error: &rusqlite::Error) -> bool {
    use rusqlite::ErrorCode;
    matches!(error.sqlite_error_code(), Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly | ErrorCode::PermissionDenied))
}

/// The WAL file SQLite keeps beside `path` while the space is written.
fn wal_of(path: &Path) -> PathBuf {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    PathBuf::from(wal)
}

/// `path` as the path of a `file:` URI: the characters URIs reserve percent-encoded.
fn url_path(path: &Path) -> String {
    let mut uri = String::new();
    for byte in path.as_os_str().as_encoded_bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => uri.push(char::from(*byte)),
            other => uri.push_str(&format!("%{other:02X}")),
        }
    }
    uri
}

impl Storage for SqliteSnapshot {
    fn load_doc(&self, id: &str) -> Result<Option<StoredDoc>, StorageError> {
        let Some(conn) = &self.conn else { return Ok(None) };
        let doc = read_doc(&conn.lock(), id).map_err(|e| self.sqlite_error(e))?;
        let Some((version, text)) = doc else { return Ok(None) };
        let value = decode::parse_document(id, &text)?;
        Ok(Some(StoredDoc { id: id.to_owned(), version, value }))
    }

    fn doc_ids(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        let Some(conn) = &self.conn else { return Ok(Vec::new()) };
        read_ids(&conn.lock(), prefix).map_err(|e| self.sqlite_error(e))
    }

    /// Keeps nothing (see [`SqliteSnapshot`]).
    fn submit(&self, _writes: Vec<StoredDoc>) -> Durable {
        Durable::ready(Ok(()))
    }
}

impl std::fmt::Debug for SqliteSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteSnapshot").field("path", &self.path).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prelude::*;

    #[test]
    fn a_snapshot_reads_a_space_another_runtime_has_open_as_it_stood_and_writes_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("space.sqlite");
        let writer = Runtime::open(&path).expect("open");
        let n = writer.new_cell("n", 1i64).expect("cell");
        let snapshot =
            Runtime::with_storage(Box::new(SqliteSnapshot::open(&path).expect("snapshot"))).expect("runtime");
        writer.transact(|tx| n.set(tx, 2)).expect("a commit after the snapshot");
        assert_eq!(snapshot.read_as::<i64>(n.link()).expect("read"), 1, "as the file stood when opened");
        snapshot.transact(|tx| n.set(tx, 10)).expect("kept in memory");
        drop(snapshot);
        assert_eq!(writer.read_as::<i64>(n.link()).expect("read"), 2);
        drop(writer);
        let reopened = Runtime::open(&path).expect("reopen");
        assert_eq!(reopened.read_as::<i64>(n.link()).expect("read"), 2, "the snapshot wrote nothing");
    }

    #[test]
    fn a_missing_file_is_no_snapshot_and_an_empty_one_is_an_empty_space() {
        let dir = tempfile::tempdir().expect("temp dir");
        let missing = SqliteSnapshot::open(dir.path().join("nothing.sqlite")).expect_err("no file");
        assert!(missing.to_string().contains("could not read the space"), "{missing}");
        let directory = SqliteSnapshot::open(dir.path()).expect_err("a directory");
        assert!(directory.to_string().contains("it is a directory, not a file"), "{directory}");
        let empty = dir.path().join("empty.sqlite");
        std::fs::write(&empty, b"").expect("empty file");
        let snapshot = SqliteSnapshot::open(&empty).expect("an empty file holds an empty space");
        assert!(snapshot.doc_ids("").expect("ids").is_empty());
        assert_eq!(std::fs::metadata(&empty).expect("meta").len(), 0, "nothing written");
    }

    #[test]
    fn a_path_with_reserved_characters_is_encoded_for_its_uri() {
        assert_eq!(url_path(std::path::Path::new("/a b/c?d#e%.sqlite")), "/a%20b/c%3Fd%23e%25.sqlite");
    }
}
