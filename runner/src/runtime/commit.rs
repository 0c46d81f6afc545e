//! Transactions, from the one handed out to its commit. `transact` runs one and commits
//! it, retrying on conflict with backoff (the last attempt holds the space's commit lock);
//! `commit` applies it and tells the scheduler and the observers what changed, then runs
//! the transaction's after-commit hooks; `tx` and `engine_tx` hand out a transaction in
//! the lists the last commit left. Every write reaches the space through here, so what a
//! commit sets off is decided in one place.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{panic_message, Runtime};
use crate::error::{Error, Result};
use crate::link::DocId;
use crate::space::Commit;
use crate::storage::StoredDoc;
use crate::tx::{Spare, Tx};
use crate::value::{Path, Value};

/// How many times a transaction is retried after a conflict before giving up.
pub const MAX_ATTEMPTS: u32 = 16;

impl Runtime {
    /// Runs `f` in a transaction and commits it, retrying on conflict; returns once the
    /// commit is durable and, unless another thread is running the engine at that moment
    /// (then use [`Runtime::idle`]), the computations it affected have re-run.
    ///
    /// Do not call it, `send`, `idle` or `settled` from inside a handler or computation:
    /// write through the handler's own transaction (or use [`Tx::after_commit`]) instead.
    pub fn transact<R>(&self, f: impl Fn(&Tx) -> Result<R>) -> Result<R> {
        self.transact_owned(|tx| f(&tx).map(|value| (tx, value)))
    }

    /// [`Runtime::transact`] with a transaction `f` takes and gives back (a [`Builder`]
    /// holds one while a pattern builds).
    ///
    /// [`Builder`]: crate::builder::Builder
    pub(crate) fn transact_owned<'a, R>(&'a self, f: impl Fn(Tx<'a>) -> Result<(Tx<'a>, R)>) -> Result<R> {
        let mut result = self.with_retries(|| {
            let (tx, value) = f(self.tx())?;
            let (commit, engine) = self.commit_outside(tx)?;
            Ok((value, commit.committed, engine))
        });
        // Settled with the engine the commit took, if it took it.
        self.pump(result.as_mut().ok().and_then(|(_, _, engine)| engine.take()));
        let (value, committed, _) = result?;
        self.wait_durable_after(committed)?;
        Ok(value)
    }

    /// Runs `attempt` (which builds and commits one transaction) until it does not
    /// conflict. Retries back off; the last attempt runs with the space's commit lock
    /// held, so a transaction that keeps losing to others still gets through.
    pub(crate) fn with_retries<T>(&self, mut attempt: impl FnMut() -> Result<T>) -> Result<T> {
        let mut last = None;
        for n in 0..MAX_ATTEMPTS {
            if n > 0 {
                backoff(n);
            }
            let result = if n + 1 == MAX_ATTEMPTS { self.0.space.exclusive(&mut attempt) } else { attempt() };
            match result {
                Err(Error::Conflict { doc }) => {
                    self.0.conflict_retries.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("trellis_conflicts_total").increment(1);
                    last = Some(doc);
                }
                other => return other,
            }
        }
        Err(Error::TooManyConflicts { attempts: MAX_ATTEMPTS, doc: last.unwrap_or_else(|| "?".into()) })
    }

    /// Commits a transaction and tells the scheduler and observers what changed; the
    /// commit lists its changes. (Tests commit transactions they made by hand.)
    #[cfg(test)]
    pub(crate) fn commit_by_hand(&self, tx: Tx<'_>) -> Result<Commit> {
        self.commit(tx, Marking::Readers, Listing::Changes)
    }

    /// Commits a transaction: its changes mark the computations that read them dirty or
    /// not (`mark`), and the commit lists them or not (`list`; observers hear of them
    /// either way).
    pub(super) fn commit(&self, tx: Tx<'_>, mark: Marking, list: Listing) -> Result<Commit> {
        let mut spare = tx.into_spare();
        let observed = self.0.observed.load(Ordering::Acquire);
        let mut graph = None;
        let mut changed = |key, writes: &[(Path, Value)]| {
            graph.get_or_insert_with(|| self.0.graph.lock()).changed(key, writes.iter().map(|(path, _)| path));
        };
        let lists = list == Listing::Changes || observed;
        let commit =
            self.0.space.commit(spare.committing(), lists, (mark == Marking::Readers).then_some(&mut changed as _));
        drop(graph);
        // Emptied now: what the transaction held (snapshots, entries) is not kept alive,
        // except the documents an engine's transaction keeps.
        let hooks = spare.clear(commit.is_ok());
        match spare.is_engine() {
            true => self.0.engine_spare.store(Some(spare)),
            false => self.0.spare.store(Some(spare)),
        }
        let commit = commit?;
        // What a commit sets off is nobody's write: a handle acting as a writer (see
        // `acting_as`) would pass its name on to work it never did.
        let unattributed;
        let rt = match self.1 {
            None => self,
            Some(_) => {
                unattributed = Runtime(self.0.clone(), None);
                &unattributed
            }
        };
        if observed && !commit.changes.is_empty() {
            rt.notify_observers(&commit.changes);
        }
        if let Some(hooks) = hooks {
            rt.run_hooks(hooks);
        }
        Ok(commit)
    }

    /// Takes whole documents another node made durable, into the copy of a space this
    /// runtime follows (a node keeping a space another holds, to read it and watch it,
    /// from the holder's change log): each replaces this runtime's copy when its version
    /// is newer. What reads a document taken runs again and its observers hear of it, as
    /// after a commit; nothing is written to storage. Returns the ids taken.
    ///
    /// ```
    /// use trellis_runner::prelude::*;
    /// use trellis_runner::storage::StoredDoc;
    ///
    /// let rt = Runtime::in_memory();
    /// let copy = rt.space().new_doc_id("copy");
    /// let doc = |version, n: i64| StoredDoc { id: copy.to_string(), version, value: Value::from(n) };
    /// let cell = Link::new(copy.clone(), Path::root());
    /// assert_eq!(rt.apply_stored(vec![doc(2, 20)]).len(), 1);
    /// assert!(rt.apply_stored(vec![doc(1, 10)]).is_empty(), "an older version is not taken");
    /// assert_eq!(rt.read(&cell)?, Value::from(20));
    /// # Ok::<(), trellis_runner::Error>(())
    /// ```
    pub fn apply_stored(&self, docs: Vec<StoredDoc>) -> Vec<DocId> {
        let mut graph = None;
        let whole = [Path::root()];
        let mut changed = |key| graph.get_or_insert_with(|| self.0.graph.lock()).changed(key, whole.iter());
        let taken = self.0.space.take_stored(docs, &mut changed);
        drop(graph);
        if !taken.is_empty() {
            let changes: Vec<_> = taken.iter().map(|id| (id.clone(), whole.to_vec())).collect();
            self.notify_observers(&changes);
            self.pump(None);
        }
        taken
    }

    /// Runs a committed transaction's after-commit hooks (out of line: most have none).
    #[inline(never)]
    fn run_hooks(&self, hooks: Vec<crate::tx::AfterCommit>) {
        // Only `Tx::after_commit` puts hooks in, each a `Hook`.
        for hook in hooks.into_iter().filter_map(|hook| hook.downcast::<Hook>().ok()) {
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| (hook.0)(self))) {
                self.report(Error::HookPanicked(panic_message(&panic)));
            }
        }
    }

    /// A new transaction, in the lists (and with the documents) a commit left: the
    /// engine's, unless another transaction holds them. A writer's transaction runs the
    /// computations its change makes dirty (see `commit_writer`), and the documents of
    /// both are best kept in one place: a document kept in two lists is read again by
    /// one whenever the other commits it.
    pub(crate) fn tx(&self) -> Tx<'_> {
        let spare = self.0.engine_spare.take().or_else(|| self.0.spare.take()).unwrap_or_default();
        Tx::reusing(&self.0.space, spare)
    }

    /// A new transaction for the engine's settle, with the documents the last settle kept
    /// (see [`Spare`]).
    pub(super) fn engine_tx(&self) -> Tx<'_> {
        let spare = self.0.engine_spare.take().unwrap_or_else(Spare::for_engine);
        Tx::reusing(&self.0.space, spare)
    }
}

/// Waits before retrying a conflicted transaction: randomised and growing, so that
/// transactions that keep colliding spread out instead of colliding again in lockstep.
fn backoff(attempt: u32) {
    if attempt == 0 {
        return;
    }
    if attempt < 3 {
        std::thread::yield_now();
        return;
    }
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let ceiling = 1u64 << attempt.min(14); // up to ~16 ms
    std::thread::sleep(Duration::from_micros(u64::from(nanos) % ceiling));
}

/// Whether a commit's changes mark the computations that read them dirty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Marking {
    /// They do: the transaction's writes were not told to the scheduler yet.
    Readers,
    /// They were told already: a settle marks them as each computation writes.
    Done,
}

/// Whether a commit lists its changes for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Listing {
    /// It does (a handler's sender hears what changed).
    Changes,
    /// It does not.
    Nothing,
}

/// What [`Tx::after_commit`] keeps in the transaction.
struct Hook(Box<dyn FnOnce(&Runtime) + Send>);

impl Tx<'_> {
    /// Runs `f` once this transaction has committed (never if it rolls back or is
    /// retried): the place to start async work that must see the transaction's writes.
    pub fn after_commit(&self, f: impl FnOnce(&Runtime) + Send + 'static) {
        self.push_hook(Box::new(Hook(Box::new(f))));
    }
}
