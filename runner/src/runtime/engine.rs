//! The engine: events and dirty computations, run one at a time under the engine lock
//! by whichever thread asks for it.

use std::panic::{catch_unwind, AssertUnwindSafe};

use futures::channel::oneshot;

use super::{panic_message, Event, ReplyReceiver, Runtime, Sent};
use crate::error::{Error, Result};
use crate::link::Link;
use crate::read::Read;
use crate::scheduler::{Next, Ready};
use crate::space::Committed;
use crate::tx::Tx;

impl Runtime {
    /// Sends an event to a stream and waits until its handler's transaction committed,
    /// the computations it affected re-ran, and the commit is durable.
    ///
    /// A stream whose charm is not running starts the charm first; a stream with no
    /// handler and no charm is an error, never a silent drop.
    pub async fn send(&self, stream: &Link, event: serde_json::Value) -> Result<Sent> {
        if EngineThread::is_current() {
            return Err(Error::Reentrant(stream.clone()));
        }
        let rx = self.enqueue(stream, event, true)?;
        self.pump();
        let (sent, committed) = rx
            .ok_or_else(|| Error::NoHandler(stream.clone()))?
            .await
            .map_err(|_| Error::NoHandler(stream.clone()))??;
        // The computations the handler triggered committed after it: wait for them too.
        self.0.space.durable_after(committed).await?;
        Ok(sent)
    }

    /// Queues an event without waiting for it (it still starts the charm if needed).
    pub fn send_and_forget(&self, stream: &Link, event: serde_json::Value) -> Result<()> {
        self.enqueue(stream, event, false)?;
        self.pump();
        Ok(())
    }

    fn enqueue(&self, stream: &Link, event: serde_json::Value, want_reply: bool) -> Result<Option<ReplyReceiver>> {
        crate::depth::check_depth_of(&event, format_args!("the event for {stream}"))?;
        let (at, _) = self.0.space.resolve(stream)?;
        let handler = match self.handler(&at) {
            Some(h) => h,
            None => {
                self.start_charm_for(&at)?;
                self.handler(&at).ok_or_else(|| Error::NoHandler(at.clone()))?
            }
        };
        let (reply, rx) = if want_reply {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        self.0.events.lock().push_back(Event { stream: at, handler, event, reply });
        Ok(rx)
    }

    /// Runs queued work (dirty computations first, then events) on this thread until
    /// nothing is left. If another thread is already running work, it picks ours up.
    pub(crate) fn pump(&self) {
        loop {
            let Some(guard) = self.0.engine.try_lock() else { return };
            let running = EngineThread::enter();
            while self.step() {}
            drop(running);
            drop(guard);
            if !self.has_queued_work() {
                self.0.idle.notify_waiters();
                return;
            }
        }
    }

    pub(super) fn has_queued_work(&self) -> bool {
        self.0.graph.lock().has_dirty() || !self.0.events.lock().is_empty()
    }

    /// Runs one piece of work; false when there was none.
    fn step(&self) -> bool {
        if self.run_next_computation() {
            return true;
        }
        let Some(event) = self.0.events.lock().pop_front() else { return false };
        let result = self.run_handler(&event);
        // Let the computations the handler affected settle before answering, so the
        // sender observes derived values consistent with its change.
        while self.run_next_computation() {}
        match (event.reply, result) {
            (Some(reply), result) => {
                let _ = reply.send(result);
            }
            (None, Err(error)) => self.report(error),
            (None, Ok(_)) => {}
        }
        true
    }

    /// Runs the next dirty computation (or reports a runaway one); false when none is
    /// dirty.
    fn run_next_computation(&self) -> bool {
        let next = self.0.graph.lock().next();
        match next {
            Some(Next::Run(ready)) => self.run_computation(ready),
            Some(Next::Runaway { name, runs }) => {
                let error = Error::Cycle { name: name.to_string(), runs };
                tracing::error!(%error, "stopped a runaway computation");
                self.report(error);
            }
            None => return false,
        }
        true
    }

    fn run_handler(&self, event: &Event) -> Result<(Sent, Committed)> {
        let span = tracing::debug_span!("handler", stream = %event.stream);
        let _enter = span.enter();
        self.with_retries(|| {
            let tx = Tx::new(&self.0.space);
            let outcome = catch_unwind(AssertUnwindSafe(|| (event.handler.run)(&tx, event.event.clone())));
            match outcome {
                Ok(Ok(())) => {}
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
            }
            let commit = self.commit(tx)?;
            Ok((Sent { changes: commit.changes }, commit.committed))
        })
    }

    fn run_computation(&self, ready: Ready) {
        let span = tracing::trace_span!("computation", name = %ready.name);
        let _enter = span.enter();
        let result = self.with_retries(|| {
            let tx = Tx::new(&self.0.space);
            let outcome = catch_unwind(AssertUnwindSafe(|| (ready.run)(&tx)));
            let deps = tx.reads();
            let written = match outcome {
                Ok(Ok(value)) => tx.write(&ready.output, value),
                Ok(Err(e)) => Err(Error::ComputationFailed { name: ready.name.to_string(), message: e.to_string() }),
                Err(panic) => {
                    Err(Error::ComputationFailed { name: ready.name.to_string(), message: panic_message(&panic) })
                }
            };
            self.0.graph.lock().ran(ready.id, deps);
            written?;
            // Nobody waits for a computation's commit; storage logs a failed write, and
            // the next awaited commit (ordered after this one) reports it.
            self.commit(tx).map(drop)
        });
        if let Err(error) = result {
            self.report(error);
        }
    }

    /// Runs queued work on this thread; returns once nothing is queued (unless another
    /// thread is running work, in which case use [`Runtime::idle`]).
    pub fn settle(&self) {
        self.pump();
    }
}

thread_local! {
    static IN_ENGINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the current thread as running the engine (handlers and computations) while it
/// lives, so that a handler waiting on `send` fails instead of waiting for itself.
struct EngineThread;

impl EngineThread {
    fn enter() -> Self {
        IN_ENGINE.with(|flag| flag.set(true));
        EngineThread
    }

    fn is_current() -> bool {
        IN_ENGINE.with(std::cell::Cell::get)
    }
}

impl Drop for EngineThread {
    fn drop(&mut self) {
        IN_ENGINE.with(|flag| flag.set(false));
    }
}
