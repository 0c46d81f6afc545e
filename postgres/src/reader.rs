//! The reader threads: documents loaded on request, for every space a node holds in one
//! database, through [`READERS`] connections of their own.
//!
//! The space loads a document from whatever thread first reads it, often a Tokio worker,
//! and the synchronous PostgreSQL client runs a Tokio runtime of its own, which panics
//! when driven from inside another. So the clients live on these threads, and a read is a
//! request sent here and a reply waited for. Connections of their own keep reads from
//! waiting behind the writers' groups; more than one keeps a space's first read from
//! waiting behind another space's whole load.

use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use postgres::{Client, Statement};
use trellis_runner::storage::{parse_document, StorageError, StoredDoc};

use crate::connect::Connector;

const READER_THREAD: &str = "trellis-pg-reader";

/// How many reader threads (and connections) a node keeps per database.
pub const READERS: usize = 2;

const SELECT_ONE: &str = "SELECT version, value FROM trellis_documents WHERE space = $1 AND id = $2";

/// The ids in `[$2, $3)` (no upper end when `$3` is null), in byte order: exactly those
/// starting with the prefix `$2` when `$3` is [`prefix_end`] of it. A range of the
/// primary key; `LIKE` would need `%` and `_` in ids escaped.
const SELECT_IDS: &str = r#"SELECT id FROM trellis_documents
    WHERE space = $1 AND id >= ($2 COLLATE "C") AND ($3::text IS NULL OR id < ($3 COLLATE "C"))
    ORDER BY id COLLATE "C""#;

const SELECT_ALL: &str = r#"SELECT id, version, value FROM trellis_documents WHERE space = $1 ORDER BY id COLLATE "C""#;

/// A stored row: id, version, JSON text.
pub(crate) type StoredRow = (String, u64, String);

type Reply<T> = mpsc::SyncSender<Result<T, StorageError>>;

/// One read for a reader thread, of the space it names.
struct Asked {
    space: String,
    request: Request,
}

enum Request {
    Doc(String, Reply<Option<(u64, String)>>),
    Ids(String, Reply<Vec<String>>),
    All(Reply<Vec<StoredRow>>),
}

/// The handle through which other threads read.
pub(crate) struct Reader {
    /// `None` only while dropping.
    requests: Option<mpsc::Sender<Asked>>,
    threads: Vec<JoinHandle<()>>,
    connector: Connector,
}

impl Reader {
    /// Starts the reader threads; each connects at its first read.
    pub(crate) fn start(connector: Connector) -> Result<Reader, StorageError> {
        let (requests, incoming) = mpsc::channel::<Asked>();
        let incoming = Arc::new(Mutex::new(incoming));
        let mut reader = Reader { requests: Some(requests), threads: Vec::with_capacity(READERS), connector };
        for _ in 0..READERS {
            let incoming = Arc::clone(&incoming);
            let mut serving = Serving { conn: None, connector: reader.connector.clone() };
            let thread = std::thread::Builder::new()
                .name(READER_THREAD.to_owned())
                .spawn(move || {
                    // The lock is held only while waiting for the next request.
                    let next = || incoming.lock().unwrap_or_else(PoisonError::into_inner).recv();
                    while let Ok(asked) = next() {
                        serving.answer(&asked.space, asked.request);
                    }
                })
                .map_err(|source| StorageError::Io {
                    path: READER_THREAD.to_owned(),
                    action: "start the storage reader thread",
                    source,
                })?;
            reader.threads.push(thread);
        }
        Ok(reader)
    }

    /// The version and JSON text of document `id`, if stored.
    pub(crate) fn doc(&self, space: &str, id: &str) -> Result<Option<(u64, String)>, StorageError> {
        if id.contains('\0') {
            return Ok(None); // PostgreSQL text cannot hold one, so no stored id has one
        }
        self.ask(space, |reply| Request::Doc(id.to_owned(), reply))
    }

    /// Document `id` of `space` as stored, if it is.
    pub(crate) fn stored(&self, space: &str, id: &str) -> Result<Option<StoredDoc>, StorageError> {
        let Some((version, text)) = self.doc(space, id)? else { return Ok(None) };
        Ok(Some(StoredDoc { id: id.to_owned(), version, value: parse_document(id, &text)? }))
    }

    /// The ids starting with `prefix`, in byte order.
    pub(crate) fn ids(&self, space: &str, prefix: &str) -> Result<Vec<String>, StorageError> {
        if prefix.contains('\0') {
            return Ok(Vec::new());
        }
        self.ask(space, |reply| Request::Ids(prefix.to_owned(), reply))
    }

    /// Every stored row of the space, in id order.
    pub(crate) fn all(&self, space: &str) -> Result<Vec<StoredRow>, StorageError> {
        self.ask(space, Request::All)
    }

    fn ask<T>(&self, space: &str, request: impl FnOnce(Reply<T>) -> Request) -> Result<T, StorageError> {
        let (reply, answer) = mpsc::sync_channel(1);
        let gone = || {
            self.connector
                .fault("the storage reader thread stopped".to_owned(), "this is a bug in Trellis; open the space again")
        };
        let asked = Asked { space: space.to_owned(), request: request(reply) };
        self.requests.as_ref().ok_or_else(gone)?.send(asked).map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())?
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        drop(self.requests.take());
        for thread in self.threads.drain(..) {
            if thread.join().is_err() {
                tracing::error!("a PostgreSQL reader thread panicked");
            }
        }
    }
}

/// The reader thread's state.
struct Serving {
    /// `None` until the first request, and after the connection broke until the next.
    conn: Option<Conn>,
    connector: Connector,
}

struct Conn {
    client: Client,
    one: Statement,
    ids: Statement,
    all: Statement,
}

impl Conn {
    fn prepare(mut client: Client) -> Result<Conn, postgres::Error> {
        let one = client.prepare(SELECT_ONE)?;
        let ids = client.prepare(SELECT_IDS)?;
        let all = client.prepare(SELECT_ALL)?;
        Ok(Conn { client, one, ids, all })
    }
}

impl Serving {
    fn answer(&mut self, space: &str, request: Request) {
        // The asker may have gone away (a panic on its side); nothing to tell it then.
        match request {
            Request::Doc(id, reply) => {
                let _ = reply.send(self.read(space, |conn, space| {
                    let row = conn.client.query_opt(&conn.one, &[&space, &id])?;
                    row.map(|row| Ok((version(&row, 0, &id)?, row.try_get(1)?))).transpose()
                }));
            }
            Request::Ids(prefix, reply) => {
                let _ = reply.send(self.read(space, |conn, space| {
                    let end = prefix_end(&prefix);
                    let rows = conn.client.query(&conn.ids, &[&space, &prefix, &end])?;
                    rows.iter().map(|row| Ok(row.try_get(0)?)).collect()
                }));
            }
            Request::All(reply) => {
                let _ = reply.send(self.read(space, |conn, space| {
                    let rows = conn.client.query(&conn.all, &[&space])?;
                    rows.iter()
                        .map(|row| {
                            let id: String = row.try_get(0)?;
                            let version = version(row, 1, &id)?;
                            Ok((id, version, row.try_get(2)?))
                        })
                        .collect()
                }));
            }
        }
    }

    /// Runs `read` on the connection, reconnecting first if it broke.
    fn read<T>(
        &mut self,
        space: &str,
        read: impl FnOnce(&mut Conn, &str) -> Result<T, ReadError>,
    ) -> Result<T, StorageError> {
        let connector = &self.connector;
        let conn = match &mut self.conn {
            Some(conn) if !conn.client.is_closed() => conn,
            _ => {
                self.conn = None;
                let client = connector.connect()?;
                self.conn.insert(
                    Conn::prepare(client)
                        .map_err(|error| connector.error("prepare the reader's statements", &error))?,
                )
            }
        };
        read(conn, space).map_err(|error| match error {
            ReadError::Db(error) => connector.error("read the space", &error),
            ReadError::Version { id, version } => connector.fault(
                format!("document {id} has version {version} in the database, below zero"),
                "the trellis_documents row was changed by hand; put back a version of 1 or more",
            ),
        })
    }
}

/// What a read can meet.
enum ReadError {
    Db(postgres::Error),
    /// A stored version below zero, which Trellis never writes.
    Version {
        id: String,
        version: i64,
    },
}

impl From<postgres::Error> for ReadError {
    fn from(error: postgres::Error) -> Self {
        ReadError::Db(error)
    }
}

/// The version in column `at` of `row`, the row of document `id`.
fn version(row: &postgres::Row, at: usize, id: &str) -> Result<u64, ReadError> {
    let version: i64 = row.try_get(at)?;
    u64::try_from(version).map_err(|_| ReadError::Version { id: id.to_owned(), version })
}

/// The least string after every string starting with `prefix`, in byte order (which is
/// code point order for UTF-8): the prefix with its last character raised by one, after
/// dropping trailing characters that cannot be raised. `None` when every string from
/// `prefix` on starts with it (an empty prefix, or one of only `char::MAX`).
pub(crate) fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        // The next scalar value: after the surrogates (not characters) comes U+E000.
        let next = match last {
            '\u{D7FF}' => Some('\u{E000}'),
            c => char::from_u32(u32::from(c) + 1),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_end_of_a_prefix_bounds_exactly_the_strings_that_start_with_it() {
        assert_eq!(prefix_end(""), None);
        assert_eq!(prefix_end("a").as_deref(), Some("b"));
        assert_eq!(prefix_end("charm-").as_deref(), Some("charm."));
        assert_eq!(prefix_end("a\u{D7FF}").as_deref(), Some("a\u{E000}"));
        assert_eq!(prefix_end("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(prefix_end("\u{10FFFF}\u{10FFFF}"), None);
        assert_eq!(prefix_end("é").as_deref(), Some("ê"));
        let strings = ["a", "a\u{10FFFF}", "a\u{10FFFF}z", "b", "ab", "a\u{7F}", "a\u{80}", "\u{10FFFF}", "ê"];
        for prefix in ["a", "a\u{10FFFF}", "a\u{7F}", "\u{10FFFF}", "é"] {
            let end = prefix_end(prefix);
            for s in strings {
                let in_range = s >= prefix && end.as_deref().is_none_or(|end| s < end);
                assert_eq!(in_range, s.starts_with(prefix), "{s:?} against prefix {prefix:?}");
            }
        }
    }
}
