//! Following a space another node owns: its changes as they become durable.
//!
//! The owner appends one row per durable batch to `trellis_changes` (a sequence number
//! and the ids it wrote) and sends a `NOTIFY` with `space:seq`. A follower keeps the last
//! sequence number it saw and, on each wake-up, reads the log past it and the current
//! rows of the documents listed there: whole documents, which a space applies as it does
//! any write. `NOTIFY` is only a wake-up: it is not sent again to a connection that was
//! not listening (after a reconnect), and a poll every [`POLL`] catches whatever a lost
//! wake-up would have missed. The log is the truth.
//!
//! The feed runs on a thread of its own with its own connection (the synchronous client
//! may not run inside a Tokio runtime); changes come out of a channel.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, Statement};
use trellis_runner::storage::{parse_document, StorageError, StoredDoc};

use crate::connect::{Connector, CONNECT_TIMEOUT};
use crate::storage::DEFAULT_STATEMENT_TIMEOUT;
use crate::writer::last_seq;
use crate::SpaceUrl;

/// How often a follower reads the log when no wake-up came.
pub const POLL: Duration = Duration::from_secs(1);

/// The channel the owner's `NOTIFY` goes to.
const CHANNEL: &str = "trellis_changes";

/// How often a waiting feed looks whether it should stop.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// The most log rows one catch-up reads; more are read right after.
const BATCH: i64 = 1000;

/// Changes not yet taken from the feed before the feed thread waits for the taker.
const BACKLOG: usize = 256;

/// The log past `$2` (at most `$3` rows) and the documents it lists, as they are now, in
/// one statement: one snapshot, one round trip. Log rows come with `seq` and `ids` (a
/// JSON array, as the owner wrote it), documents with `id`, `version` and `value`.
const READ_CHANGES: &str = r#"
WITH logged AS (
    SELECT seq, ids FROM trellis_changes WHERE space = $1 AND seq > $2 ORDER BY seq LIMIT $3
), wanted AS (
    SELECT DISTINCT json_array_elements_text(ids::json) COLLATE "C" AS id FROM logged
)
SELECT seq, ids, NULL::text AS id, NULL::bigint AS version, NULL::text AS value FROM logged
UNION ALL
SELECT NULL, NULL, d.id, d.version, d.value FROM trellis_documents d JOIN wanted w ON d.id = w.id WHERE d.space = $1"#;

const FEED_THREAD: &str = "trellis-pg-feed";

/// One durable batch of a followed space.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// The batch's place in the space's change log; consecutive while one owner writes.
    pub seq: u64,
    /// The documents the batch wrote, as they are now (a later batch may have written
    /// them again; their versions say so).
    pub docs: Vec<StoredDoc>,
}

/// The changes of a space another node owns, as they become durable.
///
/// ```no_run
/// use trellis_postgres::{ChangeFeed, SpaceUrl};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let url = SpaceUrl::parse("postgres://trellis@db/trellis?space=team-a")?;
/// // From now on: changes durable after this returns are all seen.
/// let feed = ChangeFeed::follow(&url, None)?;
/// for change in &feed {
///     let change = change?;
///     println!("change {} wrote {} documents", change.seq, change.docs.len());
/// }
/// # Ok(()) }
/// ```
pub struct ChangeFeed {
    /// `None` only while dropping.
    changes: Option<mpsc::Receiver<Result<Change, StorageError>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    target: SpaceUrl,
    /// See [`ChangeFeed::began`].
    began: u64,
    read: LastRead,
}

/// When a [`ChangeFeed`] last read the log to its end (or, before that, started), seen
/// from any thread: a feed that cannot read the log (the database is unreachable) keeps
/// trying, and what follows it is only as fresh as this says.
#[derive(Debug, Clone)]
pub struct LastRead {
    since: Instant,
    /// Milliseconds from `since` to the last read.
    at_ms: Arc<AtomicU64>,
}

impl LastRead {
    /// How long ago the feed last read the log to its end.
    pub fn elapsed(&self) -> Duration {
        self.since.elapsed().saturating_sub(Duration::from_millis(self.at_ms.load(Ordering::Acquire)))
    }

    fn now(&self) {
        let at = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.at_ms.store(at, Ordering::Release);
    }
}

impl ChangeFeed {
    /// Follows the space at `target`: every change after sequence number `after`, or,
    /// with `None`, every change made durable after this returns. It listens before it
    /// returns, so nothing committed after it is missed.
    pub fn follow(target: &SpaceUrl, after: Option<u64>) -> Result<ChangeFeed, StorageError> {
        let connector = Connector::new(target, CONNECT_TIMEOUT, DEFAULT_STATEMENT_TIMEOUT);
        let stop = Arc::new(AtomicBool::new(false));
        let (out, changes) = mpsc::sync_channel(BACKLOG);
        let (started, start) = mpsc::sync_channel(1);
        let mut follower = Follower {
            connector,
            space: target.space().to_owned(),
            conn: None,
            last: after.map(|seq| i64::try_from(seq).unwrap_or(i64::MAX)),
            stop: Arc::clone(&stop),
            out,
            read: LastRead { since: Instant::now(), at_ms: Arc::default() },
        };
        let read = follower.read.clone();
        let thread = std::thread::Builder::new()
            .name(FEED_THREAD.to_owned())
            .spawn(move || {
                let ready = follower.connect().map(|()| follower.last.unwrap_or(0).unsigned_abs());
                let ok = ready.is_ok();
                if started.send(ready).is_ok() && ok {
                    follower.run();
                }
            })
            .map_err(|source| StorageError::Io {
                path: FEED_THREAD.to_owned(),
                action: "start the change feed thread",
                source,
            })?;
        let mut feed =
            ChangeFeed { changes: Some(changes), stop, thread: Some(thread), target: target.clone(), began: 0, read };
        match start.recv() {
            Ok(Ok(began)) => {
                feed.began = began;
                Ok(feed)
            }
            Ok(Err(error)) => Err(error),
            Err(_) => Err(feed.gone()),
        }
    }

    /// The sequence number after which the feed delivers changes: the log's end when it
    /// started (with `None`), or the `after` it was given.
    pub fn began(&self) -> u64 {
        self.began
    }

    /// When the feed last read the log to its end, for another thread to ask.
    pub fn last_read(&self) -> LastRead {
        self.read.clone()
    }

    /// The next change, waiting as long as it takes. An error says the feed could not
    /// read the log (the server is down, say); it keeps trying, and the next call goes on.
    pub fn recv(&self) -> Result<Change, StorageError> {
        match self.changes.as_ref().map(mpsc::Receiver::recv) {
            Some(Ok(change)) => change,
            _ => Err(self.gone()),
        }
    }

    /// The next change if one comes within `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Option<Change>, StorageError> {
        match self.changes.as_ref().map(|changes| changes.recv_timeout(timeout)) {
            Some(Ok(change)) => change.map(Some),
            Some(Err(mpsc::RecvTimeoutError::Timeout)) => Ok(None),
            _ => Err(self.gone()),
        }
    }

    fn gone(&self) -> StorageError {
        StorageError::Database {
            target: self.target.to_string(),
            message: "the change feed's thread stopped".to_owned(),
            hint: "this is a bug in Trellis; follow the space again",
        }
    }
}

/// Changes one after another, blocking for each ([`ChangeFeed::recv`]).
impl Iterator for &ChangeFeed {
    type Item = Result<Change, StorageError>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.recv())
    }
}

impl Drop for ChangeFeed {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        // A feed thread waiting for room in the channel wakes up to a closed one.
        drop(self.changes.take());
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!(url = %self.target, "the change feed thread panicked");
            }
        }
    }
}

impl std::fmt::Debug for ChangeFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangeFeed").field("target", &self.target).finish_non_exhaustive()
    }
}

/// The feed thread's state.
struct Follower {
    connector: Connector,
    space: String,
    /// `None` after the connection broke, until the next catch-up reconnects.
    conn: Option<Conn>,
    /// The last sequence number delivered; `None` until the log's end is read at start.
    last: Option<i64>,
    stop: Arc<AtomicBool>,
    out: mpsc::SyncSender<Result<Change, StorageError>>,
    read: LastRead,
}

struct Conn {
    client: Client,
    read_changes: Statement,
}

impl Follower {
    /// Connects and listens (before the log is read, so no wake-up falls in between).
    fn connect(&mut self) -> Result<(), StorageError> {
        let connector = &self.connector;
        let mut client = connector.connect()?;
        client
            .batch_execute(&format!("LISTEN {CHANNEL}"))
            .map_err(|error| connector.error("listen for changes", &error))?;
        let prepare = |client: &mut Client, statement| {
            client.prepare(statement).map_err(|error| connector.error("prepare the feed's statements", &error))
        };
        let read_changes = prepare(&mut client, READ_CHANGES)?;
        if self.last.is_none() {
            self.last = Some(last_seq(&mut client, &self.connector, &self.space)?);
        }
        self.conn = Some(Conn { client, read_changes });
        Ok(())
    }

    fn run(mut self) {
        while !self.stop.load(Ordering::Acquire) {
            let more = match self.catch_up() {
                Ok((changes, more)) => {
                    for change in changes {
                        if self.out.send(Ok(change)).is_err() {
                            return; // the feed is gone
                        }
                    }
                    if !more {
                        self.read.now();
                    }
                    more
                }
                Err(error) => {
                    if self.conn.as_ref().is_some_and(|conn| conn.client.is_closed()) {
                        self.conn = None;
                    }
                    if self.out.send(Err(error)).is_err() {
                        return;
                    }
                    false
                }
            };
            if !more {
                self.wait();
            }
        }
    }

    /// The changes past the last one delivered, and whether the log has more.
    fn catch_up(&mut self) -> Result<(Vec<Change>, bool), StorageError> {
        if self.conn.is_none() {
            self.connect()?;
        }
        let (Some(conn), Some(last)) = (&mut self.conn, self.last) else {
            return Ok((Vec::new(), false));
        };
        let connector = &self.connector;
        let error = |error| connector.error("read the space's change log", &error);
        let mut logged = Vec::new();
        let mut docs = HashMap::new();
        for row in conn.client.query(&conn.read_changes, &[&self.space, &last, &BATCH]).map_err(error)? {
            if let Some(seq) = row.try_get::<_, Option<i64>>(0).map_err(error)? {
                let ids: String = row.try_get(1).map_err(error)?;
                let ids: Vec<String> = serde_json::from_str(&ids).map_err(|_| {
                    connector.fault(
                        format!(
                            "change {seq} of space {} lists its ids as {ids:?}, not as a JSON array of strings",
                            self.space
                        ),
                        "the trellis_changes row was changed by hand",
                    )
                })?;
                logged.push((seq, ids));
                continue;
            }
            let id: String = row.try_get(2).map_err(error)?;
            let version: i64 = row.try_get(3).map_err(error)?;
            let Ok(version) = u64::try_from(version) else {
                return Err(connector.fault(
                    format!("document {id} has version {version} in the database, below zero"),
                    "the trellis_documents row was changed by hand; put back a version of 1 or more",
                ));
            };
            let value = parse_document(&id, &row.try_get::<_, String>(4).map_err(error)?)?;
            docs.insert(id.clone(), StoredDoc { id, version, value });
        }
        // A union keeps no order: the log's rows are put back in it.
        logged.sort_unstable_by_key(|(seq, _)| *seq);
        if logged.is_empty() {
            return Ok((Vec::new(), false));
        }

        let more = logged.len() as i64 == BATCH;
        self.last = logged.last().map(|(seq, _)| *seq).or(self.last);
        let changes: Vec<Change> = logged
            .into_iter()
            .map(|(seq, ids)| Change {
                seq: seq.unsigned_abs(),
                docs: ids.iter().filter_map(|id| docs.get(id).cloned()).collect(),
            })
            .collect();
        Ok((changes, more))
    }

    /// Waits for a wake-up about this space past the last change, for [`POLL`] at most,
    /// or until the feed is dropped.
    fn wait(&mut self) {
        let deadline = Instant::now() + POLL;
        loop {
            let now = Instant::now();
            if now >= deadline || self.stop.load(Ordering::Acquire) {
                return;
            }
            let slice = STOP_CHECK.min(deadline - now);
            let Some(conn) = &mut self.conn else {
                std::thread::sleep(slice);
                continue;
            };
            let woken = conn.client.notifications().timeout_iter(slice).next();
            match woken {
                Ok(Some(notification)) if concerns(&notification, &self.space, self.last) => return,
                Ok(_) if conn.client.is_closed() => return, // the catch-up reconnects
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(space = %self.space, %error, "the change feed lost its connection; reconnecting");
                    return;
                }
            }
        }
    }
}

/// Whether a notification announces a change of `space` after `last`.
fn concerns(notification: &postgres::Notification, space: &str, last: Option<i64>) -> bool {
    notification.channel() == CHANNEL
        && notification.payload().rsplit_once(':').is_some_and(|(of, seq)| {
            of == space && seq.parse::<i64>().is_ok_and(|seq| last.is_none_or(|last| seq > last))
        })
}
