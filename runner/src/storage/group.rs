//! Group commit, shared by the storages that write from a thread of their own (SQLite's
//! and PostgreSQL's): what is queued, how a group is taken, what happens when it fails.
//!
//! [`GroupCommit::submit`] only queues a transaction and hands back its [`Durable`]
//! ticket. The writer thread blocks for the first queued transaction, takes everything
//! else already queued (up to [`MAX_GROUP`]) and gives the whole group to the backend's
//! [`GroupWriter::write`] at once: one durable commit pays for many transactions. Then it
//! resolves the group's tickets, in submission order. Between groups it watches the queue
//! for [`SPIN`] before it sleeps: a committer that waited for its last ticket usually
//! queues the next within microseconds, and waking a sleeping thread costs more.
//!
//! A failed group is retried one transaction at a time, in order, so those before the bad
//! one are still written. From the first that fails, every later transaction is refused
//! ([`StorageError::Refused`]) until [`Refusal::clear`]: each carries whole documents,
//! which hold the failed one's changes if it touched them. A backend that has lost the
//! right to write ([`GroupWriter::lost`], a PostgreSQL lease) fails everything, for good.
//!
//! Closing the queue ([`GroupCommit::finish`], or dropping it) lets the writer finish
//! what is queued and exit; the caller waits for it, so a clean shutdown loses nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Instant;

use parking_lot::Mutex;

use super::{Durable, DurableSender, StorageError, StoredDoc, SPIN};

/// The most transactions a writer puts into one durable commit.
pub const MAX_GROUP: usize = 1024;

/// What a backend does with a group; the driver does the rest.
pub trait GroupWriter: Send + 'static {
    /// One transaction's writes, encoded for the backend.
    type Rows: Send + 'static;

    /// Where the storage is, for the log.
    fn target(&self) -> &str;

    /// Encodes one transaction; an error fails only that transaction.
    fn encode(&self, writes: Vec<StoredDoc>) -> Result<Self::Rows, StorageError>;

    /// Writes the given transactions, in order, in one durable commit.
    fn write(&mut self, txns: &[&Self::Rows]) -> Result<(), StorageError>;

    /// Why writes are refused, if they are; shared with the storage.
    fn refusal(&self) -> &Refusal;

    /// What the writer has done; shared with the storage.
    fn counters(&self) -> &Counters;

    /// The error every write gets once the backend may write no more, for good.
    fn lost(&self) -> Option<StorageError> {
        None
    }
}

/// Counters describing a storage's work so far.
#[derive(Debug, Default)]
pub struct Counters {
    /// Submitted transactions written and durable.
    pub durable: AtomicU64,
    /// Submitted transactions whose ticket was resolved with an error.
    pub failed: AtomicU64,
    /// Durable commits made (with group commit, usually far fewer than `durable`).
    pub commits: AtomicU64,
    /// Documents read from storage.
    pub read: AtomicU64,
}

impl Counters {
    /// Adds one to `counter`.
    pub fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Why a writer refuses writes, since one failed; cleared by the storage's `resume`.
#[derive(Debug, Default)]
pub struct Refusal(Mutex<Option<String>>);

impl Refusal {
    /// The reason writes are refused, if they are.
    pub fn reason(&self) -> Option<String> {
        self.0.lock().clone()
    }

    /// Writes go through again.
    pub fn clear(&self) {
        *self.0.lock() = None;
    }

    fn refuse(&self, target: &str, error: &StorageError) -> String {
        let reason = error.to_string();
        tracing::error!(storage = target, %error, "a write failed; the space refuses writes until it is back to what was saved");
        *self.0.lock() = Some(reason.clone());
        reason
    }
}

/// One submitted transaction waiting for the writer.
struct Job {
    writes: Vec<StoredDoc>,
    done: DurableSender,
}

/// The queue of a writer thread doing group commit.
#[derive(Debug)]
pub struct GroupCommit {
    /// `None` once finished.
    queue: Option<mpsc::Sender<Job>>,
    /// `None` once finished.
    thread: Option<JoinHandle<()>>,
    /// Where the storage is, for the log.
    target: String,
}

impl GroupCommit {
    /// Starts `writer` on a thread named `name`.
    pub fn start<W: GroupWriter>(name: &str, writer: W) -> Result<GroupCommit, StorageError> {
        let (queue, jobs) = mpsc::channel();
        let target = writer.target().to_owned();
        let thread =
            std::thread::Builder::new().name(name.to_owned()).spawn(move || run(writer, &jobs)).map_err(|source| {
                StorageError::Io { path: target.clone(), action: "start the storage writer thread", source }
            })?;
        Ok(GroupCommit { queue: Some(queue), thread: Some(thread), target })
    }

    /// Queues one transaction's writes; the ticket resolves once they are durable.
    pub fn submit(&self, writes: Vec<StoredDoc>) -> Durable {
        let Some(queue) = &self.queue else {
            return Durable::ready(Err(StorageError::WriterGone));
        };
        let (done, durable) = Durable::pending();
        match queue.send(Job { writes, done }) {
            Ok(()) => durable,
            // The writer thread is gone (it can only stop by panicking while we live).
            Err(_) => Durable::ready(Err(StorageError::WriterGone)),
        }
    }

    /// Closes the queue and waits until everything queued is written; `false` if the
    /// writer thread panicked, so that what was queued then may not be saved.
    pub fn finish(&mut self) -> bool {
        drop(self.queue.take());
        self.thread.take().is_none_or(|thread| thread.join().is_ok())
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        if !self.finish() {
            tracing::error!(
                storage = %self.target,
                "the storage writer thread panicked; transactions queued at that point may not be saved"
            );
        }
    }
}

/// Writes queued transactions until the queue is closed and empty.
fn run<W: GroupWriter>(mut writer: W, jobs: &mpsc::Receiver<Job>) {
    let mut group = Vec::with_capacity(MAX_GROUP);
    // `recv` fails only once every sender is gone *and* the queue is empty, so all work
    // queued before the storage was dropped is still written.
    while let Some(first) = next_job(jobs) {
        group.push(first);
        while group.len() < MAX_GROUP {
            match jobs.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        write_group(&mut writer, group.drain(..));
    }
}

/// The next queued job, `None` once the queue is closed and empty; watches the queue for
/// [`SPIN`] before it sleeps.
fn next_job(jobs: &mpsc::Receiver<Job>) -> Option<Job> {
    let start = Instant::now();
    loop {
        match jobs.try_recv() {
            Ok(job) => return Some(job),
            Err(mpsc::TryRecvError::Empty) if start.elapsed() < SPIN => std::hint::spin_loop(),
            Err(mpsc::TryRecvError::Empty) => return jobs.recv().ok(),
            Err(mpsc::TryRecvError::Disconnected) => return None,
        }
    }
}

/// Whether the writer writes: what a group meets before it starts.
enum Gate {
    Open,
    /// An earlier write failed, for this reason.
    Refused(String),
    /// The backend may write no more.
    Lost,
}

/// Makes one group of transactions durable and resolves their tickets in order.
fn write_group<W: GroupWriter>(writer: &mut W, group: impl Iterator<Item = Job>) {
    let encoded: Vec<(DurableSender, Result<W::Rows, StorageError>)> =
        group.map(|job| (job.done, writer.encode(job.writes))).collect();

    // Checked once a group: whatever is submitted after a resume comes in a later one.
    let mut gate = match writer.refusal().reason() {
        _ if writer.lost().is_some() => Gate::Lost,
        Some(reason) => Gate::Refused(reason),
        None => Gate::Open,
    };
    let group_result = match gate {
        Gate::Open if encoded.iter().any(|(_, rows)| rows.is_err()) => Err(None),
        Gate::Open => {
            let txns: Vec<&W::Rows> = encoded.iter().filter_map(|(_, rows)| rows.as_ref().ok()).collect();
            writer.write(&txns).map_err(Some)
        }
        Gate::Refused(_) | Gate::Lost => Ok(()),
    };
    if let Err(Some(error)) = &group_result {
        if writer.lost().is_some() {
            gate = Gate::Lost;
        } else {
            tracing::warn!(
                storage = writer.target(),
                %error,
                transactions = encoded.len(),
                "group commit failed; retrying its transactions one by one"
            );
        }
    }

    for (done, rows) in encoded {
        let result = match (&gate, rows) {
            (Gate::Lost, _) => Err(writer.lost().unwrap_or(StorageError::WriterGone)),
            (Gate::Refused(reason), _) => Err(StorageError::Refused { reason: reason.clone() }),
            (Gate::Open, Err(error)) => Err(error),
            (Gate::Open, Ok(_)) if group_result.is_ok() => Ok(()),
            // Writes of whole documents whose versions grow: writing one again is safe.
            (Gate::Open, Ok(rows)) => writer.write(&[&rows]),
        };
        let outcome = if result.is_ok() { "durable" } else { "failed" };
        metrics::counter!("trellis_commits_total", "outcome" => outcome).increment(1);
        match &result {
            Ok(()) => Counters::count(&writer.counters().durable),
            Err(error) => {
                if let Gate::Open = gate {
                    gate = match writer.lost() {
                        Some(_) => Gate::Lost,
                        None => Gate::Refused(writer.refusal().refuse(writer.target(), error)),
                    };
                }
                Counters::count(&writer.counters().failed);
            }
        }
        // The submitter may have dropped its ticket; nothing to tell it then.
        let _ = done.send(result);
    }
}
