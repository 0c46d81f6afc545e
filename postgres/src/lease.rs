//! One owner per space: the lease row, taken at open, renewed in the background, given
//! back at close.
//!
//! Only the lease's holder writes a space (DESIGN.md §10): several writers would break "a
//! loaded document is the latest" and make every node compute the same derived values. A
//! lease is taken when the space has none or its holder let it expire, judged by the
//! database's clock alone (the nodes' clocks may disagree); each taking raises the
//! space's epoch. The epoch is the fence: every batch the writer commits first reads the
//! lease row `FOR SHARE` and writes only under its own epoch, and the share lock keeps
//! another node from taking the lease until that batch has committed. So a holder that
//! was paused past its lease (a stopped process, a frozen VM) and wakes up writes nothing
//! once another node took over, even before it learns it lost the lease.
//!
//! One renewal thread per node and database ([`Leases`]) extends each lease the node holds
//! there every third of its duration, on a connection of its own: a renewal must not wait
//! behind a long read or a big group. When the row has another epoch, or renewing kept
//! failing for a whole lease, the lease is lost for good: the storage refuses every later
//! write ([`StorageError::LeaseLost`]).

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use postgres::Client;
use trellis_runner::storage::StorageError;

use crate::connect::Connector;
use crate::storage::Shared;
use crate::Holder;

/// Takes the lease when nobody holds it or its holder's time is up; returns the new epoch,
/// nothing when another holder's lease still runs.
const ACQUIRE: &str = "INSERT INTO trellis_leases AS l (space, epoch, holder, addr, expires_at)
    VALUES ($1, 1, $2, $3, now() + $4::bigint * interval '1 millisecond')
    ON CONFLICT (space) DO UPDATE
        SET epoch = l.epoch + 1, holder = EXCLUDED.holder, addr = EXCLUDED.addr, expires_at = EXCLUDED.expires_at
        WHERE l.expires_at <= now()
    RETURNING epoch";

/// Who holds the lease, and for how many milliseconds more.
const HOLDER: &str = "SELECT holder, addr,
        greatest(0, ceil(extract(epoch FROM expires_at - now()) * 1000))::bigint
    FROM trellis_leases WHERE space = $1";

const RENEW: &str = "UPDATE trellis_leases SET expires_at = now() + $3::bigint * interval '1 millisecond'
    WHERE space = $1 AND epoch = $2";

/// Ends the lease now, so the next node need not wait for it to expire.
const RELEASE: &str = "UPDATE trellis_leases SET expires_at = now() WHERE space = $1 AND epoch = $2";

/// How often opening tries again when the lease it was refused has just expired.
const ACQUIRE_ATTEMPTS: usize = 3;

/// Takes the space's lease for `holder`, for `lease`; returns its epoch.
pub(crate) fn acquire(
    client: &mut Client,
    connector: &Connector,
    space: &str,
    holder: &Holder,
    lease: Duration,
) -> Result<i64, StorageError> {
    let error = |error: postgres::Error| connector.error("take the space's lease", &error);
    let millis = millis(lease);
    for _ in 0..ACQUIRE_ATTEMPTS {
        if let Some(row) = client.query_opt(ACQUIRE, &[&space, &holder.name, &holder.addr, &millis]).map_err(error)? {
            let epoch: i64 = row.try_get(0).map_err(error)?;
            if epoch < 1 {
                let message = format!("the lease of space {space} has epoch {epoch}, below the first (1)");
                return Err(connector.fault(message, DAMAGED_LEASE));
            }
            metrics::counter!("trellis_lease_changes_total", "change" => "taken").increment(1);
            return Ok(epoch);
        }
        let Some(row) = client.query_opt(HOLDER, &[&space]).map_err(error)? else {
            continue; // released and removed in between: try again
        };
        let expires_in: i64 = row.try_get(2).map_err(error)?;
        if expires_in > 0 {
            return Err(StorageError::Owned {
                space: space.to_owned(),
                holder: row.try_get(0).map_err(error)?,
                addr: row.try_get(1).map_err(error)?,
                expires_in_ms: expires_in.unsigned_abs(),
            });
        }
        // Expired between the two statements: take it.
    }
    Err(connector.fault(
        format!("the lease of space {space} kept changing hands while this node tried to take it"),
        "several nodes are opening the space at once; try again",
    ))
}

/// What to do about a lease row no Trellis wrote.
const DAMAGED_LEASE: &str = "the trellis_leases row was changed by hand; delete it when no node uses the space";

/// The background thread keeping this node's leases in one database.
pub(crate) struct Leases {
    /// `None` only while dropping; closing it stops the thread, which then gives back
    /// every lease it still holds.
    commands: Option<mpsc::Sender<Command>>,
    thread: Option<JoinHandle<()>>,
}

/// What the renewal thread is asked.
enum Command {
    /// Keep this lease, taken when the clock read the instant.
    Hold(Arc<Shared>, Instant),
    /// Give this lease back (unless it was lost), then say so.
    Release(Arc<Shared>, mpsc::SyncSender<()>),
}

/// Name of the renewal thread.
const RENEWAL_THREAD: &str = "trellis-pg-lease";

impl Leases {
    /// Starts the renewal thread for leases of `lease`; it connects at its first renewal.
    pub(crate) fn start(connector: Connector, lease: Duration) -> Result<Leases, StorageError> {
        let (commands, incoming) = mpsc::channel();
        let keeper = Keeper { client: None, connector, lease, every: lease / 3, held: Vec::new() };
        let thread =
            std::thread::Builder::new().name(RENEWAL_THREAD.to_owned()).spawn(move || keeper.run(&incoming)).map_err(
                |source| StorageError::Io { path: RENEWAL_THREAD.to_owned(), action: "start the lease thread", source },
            )?;
        Ok(Leases { commands: Some(commands), thread: Some(thread) })
    }

    /// Keeps renewing the lease of `shared`, taken when the clock read `taken_at`.
    pub(crate) fn hold(&self, shared: Arc<Shared>, taken_at: Instant) {
        self.send(Command::Hold(shared, taken_at));
    }

    /// Stops renewing the lease of `shared` and gives it back (unless it was lost), so
    /// another node may take the space at once; returns once that is done.
    pub(crate) fn release(&self, shared: &Arc<Shared>) {
        let (done, released) = mpsc::sync_channel(1);
        if self.send(Command::Release(Arc::clone(shared), done)) {
            // An error: the thread is gone; the lease then runs out by itself.
            let _ = released.recv();
        }
    }

    fn send(&self, command: Command) -> bool {
        let sent = self.commands.as_ref().is_some_and(|commands| commands.send(command).is_ok());
        if !sent {
            tracing::error!("the lease thread is gone; this node's leases run out without renewal");
        }
        sent
    }
}

impl Drop for Leases {
    fn drop(&mut self) {
        drop(self.commands.take());
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the lease thread panicked; the leases stay until they expire");
            }
        }
    }
}

/// The renewal thread's state.
struct Keeper {
    /// `None` until the first renewal, and after the connection broke until the next.
    client: Option<Client>,
    connector: Connector,
    lease: Duration,
    every: Duration,
    held: Vec<Held>,
}

/// One lease the thread keeps.
struct Held {
    shared: Arc<Shared>,
    /// Until when the lease surely runs, by this node's clock: a lease's length after the
    /// last successful renewal was sent.
    renewed_until: Instant,
    next: Instant,
}

/// How long the thread waits for a command while it holds no lease.
const IDLE: Duration = Duration::from_secs(3600);

impl Keeper {
    fn run(mut self, commands: &mpsc::Receiver<Command>) {
        loop {
            let now = Instant::now();
            let wait = self.held.iter().map(|held| held.next.saturating_duration_since(now)).min().unwrap_or(IDLE);
            match commands.recv_timeout(wait) {
                Ok(Command::Hold(shared, taken_at)) => {
                    self.held.push(Held { shared, renewed_until: taken_at + self.lease, next: taken_at + self.every });
                }
                Ok(Command::Release(shared, done)) => {
                    self.held.retain(|held| !Arc::ptr_eq(&held.shared, &shared));
                    self.release(&shared);
                    // The asker may have gone; nothing to tell it then.
                    let _ = done.send(());
                }
                Err(RecvTimeoutError::Timeout) => self.renew_due(),
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        for held in std::mem::take(&mut self.held) {
            self.release(&held.shared);
        }
    }

    /// Renews each lease whose time has come; forgets those lost.
    /// Renews each lease whose time has come; forgets those lost. Without a connection the
    /// pass stops at the first (each would wait for its own connection attempt), and the
    /// leases whose time ran out meanwhile are lost.
    fn renew_due(&mut self) {
        for at in 0..self.held.len() {
            if self.held[at].next <= Instant::now() && !self.renew(at) {
                let now = Instant::now();
                for held in self.held.iter().filter(|held| held.renewed_until <= now) {
                    held.shared.lose("renewing the lease failed for longer than the lease (no connection)");
                }
                break;
            }
        }
        self.held.retain(|held| !held.shared.lost());
    }

    /// Renews the lease at `at`; `false` when there is no connection to renew it on.
    fn renew(&mut self, at: usize) -> bool {
        let sent = Instant::now();
        let shared = Arc::clone(&self.held[at].shared);
        let (space, epoch, millis) = (&shared.space, &shared.epoch, millis(self.lease));
        let held = &mut self.held[at];
        held.next = sent + self.every;
        let renewed_until = held.renewed_until;
        match self.execute("renew the space's lease", |client| client.execute(RENEW, &[space, epoch, &millis])) {
            Ok(1) => self.held[at].renewed_until = sent + self.lease,
            Ok(_) => shared.lose("another node took the lease"),
            Err(error) if Instant::now() >= renewed_until => {
                shared.lose(&format!("renewing the lease failed for longer than the lease ({error})"));
            }
            Err(error) => {
                // A group holding the lease row (or a lost connection): try again soon.
                self.held[at].next = Instant::now() + self.every / 4;
                tracing::warn!(space = %shared.space, %error, "could not renew the lease; trying again");
            }
        }
        self.client.is_some()
    }

    fn release(&mut self, shared: &Shared) {
        if shared.lost() {
            return;
        }
        metrics::counter!("trellis_lease_changes_total", "change" => "released").increment(1);
        let (space, epoch) = (&shared.space, &shared.epoch);
        if let Err(error) =
            self.execute("give the space's lease back", |client| client.execute(RELEASE, &[space, epoch]))
        {
            tracing::warn!(space = %shared.space, %error, "could not give the lease back; the next node waits until it expires");
        }
    }

    /// Runs `statement` on the connection, reconnecting first if it broke; returns the
    /// rows it changed.
    fn execute(
        &mut self,
        action: &str,
        statement: impl FnOnce(&mut Client) -> Result<u64, postgres::Error>,
    ) -> Result<u64, StorageError> {
        let client = match &mut self.client {
            Some(client) if !client.is_closed() => client,
            _ => {
                self.client = None;
                // A renewal stuck behind a lock must not outlast its period: past the
                // lease the node has to know it may have lost it. A space's group holds
                // its lease row only for its commit: the others' renewals wait a quarter
                // of a period at most.
                let mut client = self.connector.connect_with_timeout(self.every)?;
                let wait = (self.every / 4).as_millis().max(1);
                client
                    .batch_execute(&format!("SET lock_timeout = {wait}"))
                    .map_err(|error| self.connector.error("set the lock timeout", &error))?;
                self.client.insert(client)
            }
        };
        statement(client).map_err(|error| self.connector.error(action, &error))
    }
}

/// A duration in whole milliseconds, as the statements take it.
fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
