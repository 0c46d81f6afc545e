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
//! The renewal thread extends the lease every third of its duration. When the row has
//! another epoch, or renewing kept failing for a whole lease, the lease is lost for good:
//! the storage refuses every later write ([`StorageError::LeaseLost`]).

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

/// The background thread keeping this node's lease.
pub(crate) struct Renewal {
    /// Dropped to stop the thread, which then gives the lease back.
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// Name of the renewal thread.
const RENEWAL_THREAD: &str = "trellis-pg-lease";

impl Renewal {
    /// Starts renewing the lease taken through `client` when the clock read `taken_at`.
    pub(crate) fn start(
        mut client: Client,
        connector: Connector,
        shared: Arc<Shared>,
        lease: Duration,
        taken_at: Instant,
    ) -> Result<Renewal, StorageError> {
        let every = lease / 3;
        // A renewal stuck behind a lock must not outlast its period: past the lease the
        // node has to know it may have lost it.
        connector.limit(&mut client, every)?;
        let (stop, stopped) = mpsc::channel();
        let keeper = Keeper { client: Some(client), connector, shared, lease, every, renewed_until: taken_at + lease };
        let thread =
            std::thread::Builder::new().name(RENEWAL_THREAD.to_owned()).spawn(move || keeper.run(&stopped)).map_err(
                |source| StorageError::Io { path: RENEWAL_THREAD.to_owned(), action: "start the lease thread", source },
            )?;
        Ok(Renewal { stop: Some(stop), thread: Some(thread) })
    }

    /// Stops renewing and gives the lease back (unless it was lost).
    pub(crate) fn finish(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the lease thread panicked; the lease stays until it expires");
            }
        }
    }
}

impl Drop for Renewal {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The renewal thread's state.
struct Keeper {
    /// `None` after the connection broke, until the next renewal reconnects.
    client: Option<Client>,
    connector: Connector,
    shared: Arc<Shared>,
    lease: Duration,
    every: Duration,
    /// Until when the lease surely runs, by this node's clock: a lease's length after the
    /// last successful renewal was sent.
    renewed_until: Instant,
}

impl Keeper {
    fn run(mut self, stop: &mpsc::Receiver<()>) {
        let mut next = Instant::now() + self.every;
        // Until told to stop (or the storage is gone): a message or a closed channel.
        while let Err(RecvTimeoutError::Timeout) = stop.recv_timeout(next.saturating_duration_since(Instant::now())) {
            next = Instant::now() + self.every;
            if !self.shared.lost() {
                self.renew();
            }
        }
        if !self.shared.lost() {
            self.release();
        }
    }

    fn renew(&mut self) {
        let sent = Instant::now();
        match self.execute(RENEW, "renew the space's lease") {
            Ok(1) => self.renewed_until = sent + self.lease,
            Ok(_) => self.shared.lose("another node took the lease"),
            Err(error) if Instant::now() >= self.renewed_until => {
                self.shared.lose(&format!("renewing the lease failed for longer than the lease ({error})"));
            }
            Err(error) => tracing::warn!(space = %self.shared.space, %error, "could not renew the lease; trying again"),
        }
    }

    fn release(&mut self) {
        if let Err(error) = self.execute(RELEASE, "give the space's lease back") {
            tracing::warn!(space = %self.shared.space, %error, "could not give the lease back; the next node waits until it expires");
        }
    }

    /// Runs [`RENEW`] or [`RELEASE`], reconnecting first if the connection broke; returns
    /// the rows it changed.
    fn execute(&mut self, statement: &str, action: &str) -> Result<u64, StorageError> {
        let client = match &mut self.client {
            Some(client) if !client.is_closed() => client,
            _ => {
                self.client = None;
                self.client.insert(self.connector.connect_with_timeout(self.every)?)
            }
        };
        let (space, epoch) = (&self.shared.space, &self.shared.epoch);
        let result = if statement == RENEW {
            client.execute(statement, &[space, epoch, &millis(self.lease)])
        } else {
            client.execute(statement, &[space, epoch])
        };
        result.map_err(|error| self.connector.error(action, &error))
    }
}

/// A duration in whole milliseconds, as the statements take it.
fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
