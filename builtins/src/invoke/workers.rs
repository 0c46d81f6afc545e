//! Threads that run synchronous handlers for tool calls, so a call's timeout can fire
//! while a handler runs (or hangs) without ever blocking the dialog.
//!
//! Tokio's blocking pool would do, but each hand-off wakes a parked thread, and on an idle
//! machine a wake-up costs more than the handler (tens of µs against a few). So a worker
//! that finishes a job stays awake for [`SPIN`] looking for the next one before it parks,
//! and the caller polls for the result for up to [`SPIN`] before it sleeps: a tool call in
//! a burst (the calls of one answer, one call per round) crosses threads without a wake-up.
//! The price is at most [`SPIN`] of one core after a call, yielding to other threads.
//!
//! A job is never queued behind a busy worker: when no worker is idle, submitting starts
//! one, so a hung handler only ever holds its own thread. Idle workers exit after
//! [`KEEP_ALIVE`].

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tokio::sync::oneshot;

/// How long a worker looks for the next job, and a caller for its result, before sleeping.
pub(super) const SPIN: Duration = Duration::from_micros(500);

/// How long an idle worker waits for work before its thread exits.
const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// A job, given the pool so it can say its worker is idle before it answers.
type Job = Box<dyn FnOnce(&Pool) + Send>;

#[derive(Default)]
struct Pool {
    jobs: Mutex<VecDeque<Job>>,
    ready: Condvar,
    /// Jobs in `jobs`, readable without the lock while spinning.
    queued: AtomicUsize,
    /// Idle workers minus queued jobs: at or below zero, a new job needs a new worker.
    available: AtomicIsize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(Pool::default)
}

/// Runs `job` on a worker thread, inside the caller's tokio runtime (if any); [`result`]
/// waits for what it returns.
///
/// The runtime matters because whoever commits runs the engine's queue: a handler run
/// here may run another caller's queued handler, such as a dialog's `add_message`, whose
/// request starts as a tokio task.
pub(super) fn run<T: Send + 'static>(job: impl FnOnce() -> T + Send + 'static) -> oneshot::Receiver<T> {
    let (tx, rx) = oneshot::channel();
    let shared = pool();
    let runtime = tokio::runtime::Handle::try_current().ok();
    {
        let mut jobs = shared.jobs.lock();
        jobs.push_back(Box::new(move |pool: &Pool| {
            let entered = runtime.as_ref().map(tokio::runtime::Handle::enter);
            let value = job();
            drop(entered);
            // Idle before answering: the caller's next job, submitted as soon as this
            // answer arrives, must find this worker rather than start another.
            pool.idle();
            // The caller may have timed out and gone: then nobody wants the result.
            let _ = tx.send(value);
        }));
        shared.queued.store(jobs.len(), Ordering::Release);
    }
    if shared.available.fetch_sub(1, Ordering::AcqRel) > 0 {
        shared.ready.notify_one();
    } else if let Err(error) = std::thread::Builder::new().name("trellis-handler".into()).spawn(|| work(pool())) {
        // Without a new thread the job waits for a busy worker: slower, never lost.
        tracing::warn!(%error, "could not start a handler thread");
    }
    rx
}

/// Waits for a job's result (`None` if the job panicked): polls for [`SPIN`], then sleeps.
///
/// Between polls it lets the runtime's other tasks run, and other threads: on a busy
/// machine the worker may be waiting for this very core, and polling without yielding
/// it would only keep the worker from running.
pub(super) async fn result<T>(mut rx: oneshot::Receiver<T>) -> Option<T> {
    let started = Instant::now();
    while started.elapsed() < SPIN {
        match rx.try_recv() {
            Ok(value) => return Some(value),
            Err(oneshot::error::TryRecvError::Empty) => {
                std::thread::yield_now();
                tokio::task::yield_now().await;
            }
            Err(oneshot::error::TryRecvError::Closed) => return None,
        }
    }
    rx.await.ok()
}

impl Pool {
    /// One more worker can take a job.
    fn idle(&self) {
        self.available.fetch_add(1, Ordering::AcqRel);
    }
}

fn work(pool: &Pool) {
    pool.idle();
    while let Some(job) = next_job(pool) {
        // A panicking job drops its sender, which tells the caller; the worker lives on,
        // idle again.
        if catch_unwind(AssertUnwindSafe(|| job(pool))).is_err() {
            pool.idle();
        }
    }
}

/// The next job: looked for while spinning, then waited for; `None` when the worker has
/// been idle for [`KEEP_ALIVE`] and should exit (it is then no longer counted).
fn next_job(pool: &Pool) -> Option<Job> {
    let started = Instant::now();
    let mut spins = 0u32;
    while started.elapsed() < SPIN {
        if pool.queued.load(Ordering::Acquire) > 0 {
            if let Some(job) = take(&mut pool.jobs.lock(), pool) {
                return Some(job);
            }
        }
        spins += 1;
        if spins.is_multiple_of(64) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    let mut jobs = pool.jobs.lock();
    let deadline = Instant::now() + KEEP_ALIVE;
    loop {
        if let Some(job) = take(&mut jobs, pool) {
            return Some(job);
        }
        if pool.ready.wait_until(&mut jobs, deadline).timed_out() && jobs.is_empty() {
            // Decided under the lock: a job submitted after this finds one worker fewer
            // and starts its own.
            pool.available.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
    }
}

fn take(jobs: &mut VecDeque<Job>, pool: &Pool) -> Option<Job> {
    let job = jobs.pop_front();
    pool.queued.store(jobs.len(), Ordering::Release);
    job
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;

    /// A job whose worker is stuck never waits behind it: the next job gets a thread.
    #[tokio::test]
    async fn a_job_runs_inside_the_callers_tokio_runtime() {
        let inside = run(|| tokio::runtime::Handle::try_current().is_ok());
        assert_eq!(result(inside).await, Some(true), "a handler may start tokio tasks (a dialog's request)");
    }

    #[tokio::test]
    async fn a_hung_job_does_not_hold_up_the_next() {
        let (release, stuck) = mpsc::channel::<()>();
        let hung = run(move || stuck.recv_timeout(Duration::from_secs(30)).is_ok());
        let next = run(|| 7);
        let answer = tokio::time::timeout(Duration::from_secs(10), result(next)).await;
        assert_eq!(answer.expect("the second job ran while the first hung").expect("it answered"), 7);
        release.send(()).expect("the hung job still waits");
        assert!(result(hung).await.expect("it answered"), "the hung job finished once released");
    }

    #[tokio::test]
    async fn a_panicking_job_closes_its_channel_and_the_worker_goes_on() {
        let failed = result(run(|| -> u8 { panic!("handler bug") })).await;
        assert!(failed.is_none(), "the caller learns the job died");
        assert_eq!(result(run(|| 1 + 1)).await.expect("the next job runs"), 2);
    }
}
