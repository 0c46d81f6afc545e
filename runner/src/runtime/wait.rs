//! Waiting for the runtime: until it is idle, until one location has settled, and the
//! tracked async tasks of builtins that both wait for.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Runtime;
use crate::error::{Error, Result};
use crate::link::{DocId, Link};

impl Runtime {
    /// Resolves once no work is queued or running and no tracked async task is running.
    pub async fn idle(&self) {
        self.wait_until(|| self.0.tasks.load(Ordering::SeqCst) == 0).await;
    }

    /// Resolves once the document of `link` has no async work pending and the engine has
    /// no queued work: the cell's value is final for now. Fails after `timeout`.
    pub async fn settled(&self, link: &Link, timeout: Duration) -> Result<()> {
        let wait = self.wait_until(|| self.0.task_docs.get(&link.doc).is_none_or(|n| *n == 0));
        tokio::time::timeout(timeout, wait).await.map_err(|_| Error::Timeout(timeout, format!("{link} to settle")))
    }

    /// Runs queued work, then waits until the engine is quiet and `tasks_done` holds,
    /// checking again whenever the engine or a tracked task finishes.
    async fn wait_until(&self, tasks_done: impl Fn() -> bool) {
        let _waiting = Waiting::count(self);
        loop {
            // Pump before listening: pumping notifies waiters itself, which would wake
            // this loop at once and spin it without ever yielding.
            self.pump(None);
            let notified = self.0.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // `is_locked`, not `try_lock`: briefly taking the engine lock here could make a
            // concurrent `pump` give up on work it just queued. Work taken off the queue is
            // still running while the engine is locked.
            if !self.has_queued_work() && !self.0.engine.is_locked() && tasks_done() {
                return;
            }
            notified.await;
        }
    }

    /// Spawns async work (e.g. a builtin's request) on tokio, tracked so that
    /// [`Runtime::idle`] and [`Runtime::settled`] wait for it. `doc` names the document
    /// the work will write to.
    pub fn spawn_tracked<F>(&self, doc: DocId, future: F) -> tokio::task::JoinHandle<()>
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.0.tasks.fetch_add(1, Ordering::SeqCst);
        *self.0.task_docs.entry(doc.clone()).or_insert(0) += 1;
        let rt = self.clone();
        let guard = TaskGuard { rt, doc };
        tokio::spawn(async move {
            let _guard = guard;
            future.await;
        })
    }
}

/// Counts a caller of [`Runtime::wait_until`] among the waiters as long as it waits
/// (dropped when it returns or is cancelled).
struct Waiting<'r>(&'r Runtime);

impl<'r> Waiting<'r> {
    fn count(rt: &'r Runtime) -> Self {
        rt.0.waiting.fetch_add(1, Ordering::SeqCst);
        Waiting(rt)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0 .0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

struct TaskGuard {
    rt: Runtime,
    doc: DocId,
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.rt.0.task_docs.remove_if_mut(&self.doc, |_, n| {
            *n = n.saturating_sub(1);
            *n == 0
        });
        self.rt.0.tasks.fetch_sub(1, Ordering::SeqCst);
        self.rt.0.idle.notify_waiters();
    }
}
