//! The engine: events and dirty computations, run one at a time under the engine lock
//! by whichever thread asks for it.
//!
//! It speaks in three verbs. **Pump** runs queued work until none is left
//! ([`Runtime::pump`]). **Run** runs one piece of it inside a transaction: a handler
//! (here), one computation, or a chunk of dirty ones (the `computations` module).
//! **Commit** commits a transaction: [`Runtime::commit`] itself (the `commit` module),
//! with what it marks dirty and what it lists said by [`Marking`](super::Marking) and
//! [`Listing`], and the commits that first run the computations a change makes dirty
//! (`commit_writer`, `commit_outside`, `run_and_commit` with `commit_runs`, in the
//! `computations` module).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{fence, Ordering};

use futures::channel::oneshot;

use super::preview::{Mode, Previewed};
use super::{panic_message, Event, Listing, ReplyReceiver, Runtime, Sent};
use crate::error::{Error, Result};
use crate::link::Link;
use crate::read::Read;
use crate::space::Committed;
use crate::value::Value;
use parking_lot::MutexGuard;

impl Runtime {
    /// Sends an event to a stream and waits until its handler's transaction committed,
    /// the computations it affected re-ran, and the commit is durable.
    ///
    /// A stream whose charm is not running starts the charm first; a stream with no
    /// handler and no charm is an error, never a silent drop.
    pub async fn send(&self, stream: &Link, event: serde_json::Value) -> Result<Sent> {
        self.send_with(stream, event, None, Mode::Commit).await
    }

    /// [`Runtime::send`] whose handler runs at most once for `receipt`: its transaction
    /// writes `{"returned": ...}` at `receipt` beside its own writes, and commits both or
    /// neither. When `receipt` holds a value already, the handler does not run, and the
    /// answer is what it returned then ([`Sent::replayed`]). Reading the receipt is part
    /// of the same transaction, so two senders of one receipt cannot both run it.
    ///
    /// A caller that may stop anywhere (a process killed mid-call) sends again with the
    /// same receipt after it starts again, and the handler's effect is applied once.
    ///
    /// ```
    /// use trellis_runner::{Link, Pattern, Read, Runtime};
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let rt = Runtime::in_memory();
    /// rt.register_pattern(Pattern::new("counter", |b, _: serde_json::Value| {
    ///     let count = b.state("count", 0i64)?;
    ///     b.handler("add", move |tx, n: i64| count.update(tx, |c| c + n).map(|_| ()))?;
    ///     Ok(())
    /// }));
    /// let id = rt.charms().create("counter", serde_json::json!({})).unwrap();
    /// let add = rt.charms().result(&id).child("add");
    /// let receipt = Link::new("receipts", trellis_runner::Path::new(["call-1"]));
    /// assert!(!rt.send_once(&add, serde_json::json!(2), &receipt).await.unwrap().replayed);
    /// assert!(rt.send_once(&add, serde_json::json!(2), &receipt).await.unwrap().replayed);
    /// assert_eq!(rt.read(&rt.charms().result(&id).child("count")).unwrap().to_json(), 2);
    /// # });
    /// ```
    pub async fn send_once(&self, stream: &Link, event: serde_json::Value, receipt: &Link) -> Result<Sent> {
        self.send_with(stream, event, Some(receipt.clone()), Mode::Commit).await
    }

    pub(super) async fn send_with(
        &self,
        stream: &Link,
        event: serde_json::Value,
        receipt: Option<Link>,
        mode: Mode,
    ) -> Result<Sent> {
        if EngineThread::is_current() {
            return Err(Error::Reentrant(stream.clone()));
        }
        let rx = self.enqueue(stream, event, Some(mode), receipt)?;
        self.pump(None);
        let (sent, committed) = rx
            .ok_or_else(|| Error::NoHandler(stream.clone()))?
            .await
            .map_err(|_| Error::NoHandler(stream.clone()))??;
        // The computations the handler triggered committed after it: wait for them too.
        self.durable_after(committed).await?;
        Ok(sent)
    }

    /// Queues an event without waiting for it (it still starts the charm if needed).
    pub fn send_and_forget(&self, stream: &Link, event: serde_json::Value) -> Result<()> {
        self.enqueue(stream, event, None, None)?;
        self.pump(None);
        Ok(())
    }

    /// Queues `event` for `stream`'s handler; with a `reply` mode, the receiver of its
    /// answer.
    fn enqueue(
        &self,
        stream: &Link,
        event: serde_json::Value,
        reply: Option<Mode>,
        receipt: Option<Link>,
    ) -> Result<Option<ReplyReceiver>> {
        crate::depth::check_depth_of(&event, format_args!("the event for {stream}"))?;
        let (at, _) = self.0.space.resolve(stream)?;
        let run = match self.handler_run(&at) {
            Some(run) => run,
            None => {
                self.start_charm_for(&at)?;
                self.handler_run(&at).ok_or_else(|| Error::NoHandler(at.clone()))?
            }
        };
        let (reply, rx, mode) = match reply {
            Some(mode) => {
                let (tx, rx) = oneshot::channel();
                (Some(tx), Some(rx), mode)
            }
            None => (None, None, Mode::Commit),
        };
        let mut events = self.0.events.lock();
        events.push_back(Event { stream: at, run, event, reply, receipt, mode, writer: self.1.clone() });
        self.0.queued_events.store(events.len(), Ordering::Release);
        Ok(rx)
    }

    /// Runs queued work (dirty computations first, then events) on this thread until
    /// nothing is left, starting with the engine this thread `held` already, if any. If
    /// another thread is already running work, it picks ours up.
    ///
    /// Work queued by a thread that finds the engine busy is never left behind: that
    /// thread queued it (marked computations, pushed an event) before it looked at the
    /// engine lock, and the engine's thread looks for work after unlocking, with a
    /// sequentially consistent fence on both sides between the two. The queuing side
    /// needs its fence only when the engine is busy, so a thread that runs its own
    /// work takes one fence, not the graph's and the queue's locks.
    pub(crate) fn pump(&self, mut held: Option<MutexGuard<'_, ()>>) {
        loop {
            let Some(guard) = held.take().or_else(|| self.0.engine.try_lock()).or_else(|| {
                fence(Ordering::SeqCst);
                self.0.engine.try_lock()
            }) else {
                return;
            };
            let running = EngineThread::enter();
            while self.run_next() {}
            drop(running);
            drop(guard);
            fence(Ordering::SeqCst);
            if !self.has_dirty() && self.0.queued_events.load(Ordering::Acquire) == 0 {
                // Read after the work is done and the engine unlocked: a waiter that
                // counted itself later checks for work after that, and finds none.
                if self.0.waiting.load(Ordering::SeqCst) > 0 {
                    self.0.idle.notify_waiters();
                }
                return;
            }
        }
    }

    pub(super) fn has_queued_work(&self) -> bool {
        self.0.graph.lock().has_dirty() || !self.0.events.lock().is_empty()
    }

    /// Runs one piece of work; false when there was none.
    fn run_next(&self) -> bool {
        if self.run_computations() {
            return true;
        }
        // Asked without the lock first: the engine looks for events after every change,
        // and nearly always there is none (one queued meanwhile is found by `pump`'s last
        // look, which takes the lock).
        if self.0.queued_events.load(Ordering::Acquire) == 0 {
            return false;
        }
        let next = {
            let mut events = self.0.events.lock();
            let next = events.pop_front();
            self.0.queued_events.store(events.len(), Ordering::Release);
            next
        };
        let Some(event) = next else { return false };
        let result = self.run_handler(&event);
        // Let the computations the handler affected settle before answering, so the
        // sender observes derived values consistent with its change.
        self.run_computations();
        match (event.reply, result) {
            (Some(reply), result) => {
                let _ = reply.send(result);
            }
            (None, Err(error)) => self.report(error),
            (None, Ok(_)) => {}
        }
        true
    }

    fn run_handler(&self, event: &Event) -> Result<(Sent, Committed)> {
        let span = tracing::debug_span!("handler", stream = %event.stream);
        let _enter = span.enter();
        self.with_retries(|| {
            let tx = self.tx();
            if let Some(receipt) = &event.receipt {
                let kept = tx.read(receipt)?;
                if kept != Value::Null {
                    let returned = kept.child("returned").filter(|r| **r != Value::Null).map(Value::to_json);
                    let commit = self.commit_writer(tx, Listing::Nothing)?;
                    let sent = Sent { changes: Vec::new(), returned, replayed: true, previewed: Previewed::default() };
                    return Ok((sent, commit.committed));
                }
            }
            let outcome = catch_unwind(AssertUnwindSafe(|| (event.run)(&tx, event.event.clone())));
            let returned = match outcome {
                Ok(Ok(returned)) => returned,
                Ok(Err(e)) => {
                    return Err(match e {
                        Error::BadEvent { .. } => e,
                        other => Error::HandlerFailed { stream: event.stream.clone(), message: other.to_string() },
                    });
                }
                Err(panic) => {
                    let message = panic_message(&panic);
                    tracing::error!(%message, "handler panicked; rolled back");
                    return Err(Error::HandlerPanicked { stream: event.stream.clone(), message });
                }
            };
            if let Some(previewed) = self.previewed(&tx, &event.mode, &event.stream)? {
                // Rolled back: an empty commit stands for it, to wait on as for any send.
                drop(tx);
                let commit = self.commit_writer(self.tx(), Listing::Nothing)?;
                return Ok((Sent { changes: Vec::new(), returned, replayed: false, previewed }, commit.committed));
            }
            if let Some(writer) = &event.writer {
                self.record(&tx, writer)?;
            }
            if let Some(receipt) = &event.receipt {
                let kept = serde_json::json!({ "returned": returned });
                tx.write(receipt, Value::from(kept))?;
            }
            let commit = self.commit_writer(tx, Listing::Changes)?;
            Ok((
                Sent { changes: commit.changes, returned, replayed: false, previewed: Previewed::default() },
                commit.committed,
            ))
        })
    }

    /// Runs queued work on this thread; returns once nothing is queued (unless another
    /// thread is running work, in which case use [`Runtime::idle`]).
    pub fn settle(&self) {
        self.pump(None);
    }
}

thread_local! {
    static IN_ENGINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the current thread as running the engine (handlers and computations) while it
/// lives, so that a handler waiting on `send` fails instead of waiting for itself. Then
/// the thread is as it was (a writer's computations run on a thread running the engine
/// already, or on one that is not).
pub(super) struct EngineThread {
    before: bool,
}

impl EngineThread {
    pub(super) fn enter() -> Self {
        EngineThread { before: IN_ENGINE.with(|flag| flag.replace(true)) }
    }

    fn is_current() -> bool {
        IN_ENGINE.with(std::cell::Cell::get)
    }
}

impl Drop for EngineThread {
    fn drop(&mut self) {
        IN_ENGINE.with(|flag| flag.set(self.before));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use crate::prelude::*;
    use crate::{Link, Path};

    /// Handlers run one at a time, whichever thread sends their events: a handler never
    /// sees another's uncommitted work half way.
    #[test]
    fn two_handlers_never_run_at_once() {
        let rt = Runtime::in_memory();
        let n = rt.new_cell("n", 0i64).expect("cell");
        let inside = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let overlaps = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let streams: Vec<Link> = (0..2)
            .map(|_| {
                let stream = Link::new(rt.space().new_doc_id("slow"), Path::root());
                let (inside, overlaps) = (inside.clone(), overlaps.clone());
                let run: crate::runtime::HandlerFn = Arc::new(move |tx, _| {
                    if inside.swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    // Long enough for the other thread's event to arrive meanwhile.
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    let result = n.update(tx, |v| v + 1);
                    inside.store(false, Ordering::SeqCst);
                    result.map(|()| None)
                });
                rt.set_handler(
                    stream.clone(),
                    crate::runtime::Handler { owner: "test".into(), schema: None, result_schema: None, run },
                );
                stream
            })
            .collect();
        std::thread::scope(|scope| {
            for stream in &streams {
                let rt = rt.clone();
                scope.spawn(move || {
                    for _ in 0..25 {
                        futures::executor::block_on(rt.send(stream, serde_json::json!({}))).expect("sent");
                    }
                });
            }
        });
        assert_eq!(overlaps.load(Ordering::SeqCst), 0, "a handler ran while another was running");
        assert_eq!(n.get(&rt).expect("read"), 50, "every event ran once");
    }
}
