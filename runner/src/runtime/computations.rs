//! Running dirty computations: what a change makes dirty runs, lowest height first, in
//! transactions of up to [`SETTLE_CHUNK`] runs. A settle's own transaction holds only the
//! runs; a writer's (a handler's, or a `transact`'s that found the engine free) runs them
//! beside its change, so the change and the values it implies commit as one
//! (`commit_writer`). The engine (`engine` module) decides when to run them; this module
//! holds how they run, fail, conflict and commit.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;

use parking_lot::MutexGuard;
use smallvec::SmallVec;

use super::engine::EngineThread;
use super::{panic_message, Listing, Marking, Runtime};
use crate::error::{Error, Result};
use crate::scheduler::{Bodies, Body, ComputationId, Graph, Next};
use crate::space::Commit;
use crate::tx::{Known, Tx};

/// How many computation runs share one transaction while settling: enough to spread a
/// commit's fixed cost, few enough that a chunk's documents stay in cache and a conflict
/// re-runs little.
const SETTLE_CHUNK: usize = 64;

/// What a transaction that runs dirty computations started as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// A settle's own: it holds only the runs.
    Settle,
    /// A writer's (a handler, or a `transact` that found the engine free): it holds a
    /// change not committed yet, so each run is watched for a read of the committed space.
    Writer,
}

impl Runtime {
    /// Runs every dirty computation, and those their writes make dirty (lowest height
    /// first: glitch-free); false when none was dirty.
    ///
    /// Computations run in transactions of up to [`SETTLE_CHUNK`] runs each instead of
    /// one per run: a chunk commits once. If a concurrent commit wrote something a chunk
    /// read, the chunk's computations run again (as one computation's transaction would).
    pub(super) fn run_computations(&self) -> bool {
        if !self.has_dirty() {
            return false;
        }
        while self.run_chunk() {}
        true
    }

    /// Whether computations wait to run, without taking the graph's lock: one that a
    /// commit on another thread marks meanwhile is found by `pump`'s last look, which
    /// takes the lock.
    pub(super) fn has_dirty(&self) -> bool {
        self.0.dirty.load(Ordering::Acquire) > 0
    }

    /// Runs up to [`SETTLE_CHUNK`] dirty computations in one transaction and commits it;
    /// false when none was dirty.
    fn run_chunk(&self) -> bool {
        if !self.has_dirty() {
            return false;
        }
        let result =
            self.with_retries(|| self.run_and_commit(self.engine_tx(), self.0.graph.lock(), Origin::Settle).map(drop));
        // Nobody waits for a computation's commit; storage logs a failed write, and the
        // next awaited commit (ordered after this one) reports it.
        if let Err(error) = result {
            self.report(error);
        }
        true
    }

    /// Commits a writer's transaction (a handler's, or that of a `transact` that found
    /// the engine free) after running inside it the computations its change makes dirty,
    /// up to a chunk: the change and what follows from it commit as one, so no observer
    /// and no reader of the space sees one without the other. A computation that reads
    /// the committed space (which does not hold the change yet) runs after the commit,
    /// with whatever is left for the caller's settle. The engine must be held; `list`
    /// says whether the commit lists the writer's own changes (those of the computations
    /// are not listed).
    pub(super) fn commit_writer(&self, tx: Tx<'_>, list: Listing) -> Result<Commit> {
        let mut graph = self.0.graph.lock();
        tx.written(|key, _, paths| graph.changed(key, paths));
        if !graph.has_dirty() {
            drop(graph);
            return self.commit(tx, Marking::Done, list);
        }
        let mut changes = Vec::new();
        if list == Listing::Changes {
            tx.written(|_, id, paths| changes.push((id.clone(), paths.cloned().collect())));
        }
        let mut commit = self.run_and_commit(tx, graph, Origin::Writer)?;
        if list == Listing::Changes {
            commit.changes = changes;
        }
        Ok(commit)
    }

    /// Commits a transaction made outside the engine (`transact`): through
    /// [`Runtime::commit_writer`] if the engine is free, else as it is (the engine's
    /// thread then runs the computations it affects). Returns the engine if it took it,
    /// for the caller to pump what is left with ([`Runtime::pump`]).
    pub(super) fn commit_outside(&self, tx: Tx<'_>) -> Result<(Commit, Option<MutexGuard<'_, ()>>)> {
        match self.0.engine.try_lock() {
            Some(engine) => Ok((self.commit_writer(tx, Listing::Nothing)?, Some(engine))),
            None => Ok((self.commit(tx, Marking::Readers, Listing::Nothing)?, None)),
        }
    }

    /// Runs dirty computations in `tx` ([`Runtime::run_dirty`]; `origin` as there) and
    /// commits it. The one place both are done, for a settle's chunk and a writer alike:
    /// the compiler then makes one loop of it all.
    ///
    /// Each output write marked its readers as it was made, so the commit marks nothing.
    /// The errors of the runs are reported once it committed (nobody waits for them); if
    /// it conflicts, the computations that ran are dirty again.
    fn run_and_commit(&self, tx: Tx<'_>, graph: MutexGuard<'_, Graph>, origin: Origin) -> Result<Commit> {
        let mut runs = Runs::default();
        let running = EngineThread::enter();
        crate::space::watching(|| self.run_dirty(graph, &tx, origin, &mut runs));
        drop(running);
        self.commit_runs(tx, &mut runs)
    }

    /// Commits a transaction computations ran in (see [`Runtime::run_and_commit`]).
    fn commit_runs(&self, tx: Tx<'_>, runs: &mut Runs) -> Result<Commit> {
        match self.commit(tx, Marking::Done, Listing::Nothing) {
            Ok(commit) => {
                if !runs.errors.is_empty() {
                    std::hint::cold_path();
                    runs.errors.drain(..).for_each(|e| self.report(e));
                }
                Ok(commit)
            }
            Err(error) => {
                std::hint::cold_path();
                if matches!(error, Error::Conflict { .. }) {
                    // Nothing of these runs was written: they run again.
                    self.0.graph.lock().mark_all(&runs.ran);
                }
                Err(error)
            }
        }
    }

    /// Runs dirty computations in `tx`, lowest height first, up to [`SETTLE_CHUNK`] of
    /// them, into `runs`. A writer's transaction (`origin`) holds a change not committed
    /// yet (see [`Runtime::commit_writer`]): each of its runs is watched for a read of
    /// the committed space, and the run ends before a computation known to make one.
    fn run_dirty<'r>(&'r self, mut graph: MutexGuard<'r, Graph>, tx: &Tx<'_>, origin: Origin, runs: &mut Runs) {
        let writer = origin == Origin::Writer;
        let Runs { ran, errors } = runs;
        // The graph is held between runs (what a run did and what runs next take it
        // once), not while a computation runs: it may add computations.
        let mut bodies = graph.take_bodies();
        while ran.len() < SETTLE_CHUNK {
            let next = graph.next();
            match next {
                Some(Next::Run(id)) => {
                    prefetch_upcoming(&graph, &bodies, tx);
                    let Some(body) = bodies.get_or_make(id, || graph.body(id)) else { continue };
                    if writer && body.reads_committed {
                        graph.put_back(id);
                        break;
                    }
                    // Named only for a subscriber that traces computations.
                    let span = tracing::trace_span!("computation", name = %graph.name(id).unwrap_or_default());
                    drop(graph);
                    ran.push(id);
                    let (result, relocked) = self.run_computation(tx, id, body, span, writer);
                    graph = relocked;
                    match result {
                        Ran::Written => {}
                        Ran::Failed(error) => {
                            std::hint::cold_path();
                            errors.push(error);
                        }
                        Ran::ReadCommitted => {
                            std::hint::cold_path();
                            body.reads_committed = true;
                            ran.pop();
                            graph.put_back(id);
                            break;
                        }
                    }
                }
                Some(Next::Runaway { name, runs }) => {
                    std::hint::cold_path();
                    let error = Error::Cycle { name: name.to_string(), runs };
                    tracing::error!(%error, "stopped a runaway computation");
                    errors.push(error);
                }
                None => break,
            }
        }
        graph.give_back_bodies(bodies);
    }

    /// Runs one computation inside `tx` and marks dirty what its output change affects.
    /// A computation that fails or panics leaves no write, nor does one that read the
    /// committed space in a `watched` run (see [`Runtime::commit_writer`]). Returns
    /// with the graph locked (the settle asks it for the next computation).
    fn run_computation(
        &self,
        tx: &Tx,
        id: ComputationId,
        body: &mut Body,
        span: tracing::Span,
        watched: bool,
    ) -> (Ran, MutexGuard<'_, Graph>) {
        let _enter = span.enter();
        let savepoint = tx.savepoint(body.rereads);
        let outcome = catch_unwind(AssertUnwindSafe(|| (body.run)(tx)));
        if watched && crate::space::take_read() {
            std::hint::cold_path();
            tx.rollback(savepoint);
            return (Ran::ReadCommitted, self.0.graph.lock());
        }
        body.rereads |= tx.reread();
        // Why nothing was written, if so: the code's failure is told with the
        // computation's name, which the graph has.
        enum Failed {
            Write(Error),
            Code(String),
        }
        let written = match outcome {
            Ok(Ok(value)) => {
                let Body { output, output_entry, output_at, .. } = body;
                let looked_up;
                let entry = match output_entry {
                    Some(entry) => &*entry,
                    None => {
                        std::hint::cold_path();
                        looked_up = self.0.space.entry(&output.doc);
                        // A stand-in for a document storage failed to give is not kept.
                        if self.0.space.holds(&output.doc, &looked_up) {
                            *output_entry = Some(looked_up.clone());
                        }
                        &looked_up
                    }
                };
                tx.write_to(output, Some(Known { entry, at: output_at }), value).map_err(Failed::Write)
            }
            Ok(Err(e)) => {
                std::hint::cold_path();
                Err(Failed::Code(e.to_string()))
            }
            Err(panic) => {
                std::hint::cold_path();
                Err(Failed::Code(panic_message(&panic)))
            }
        };
        let mut graph = self.0.graph.lock();
        tx.reads_since(&savepoint, |reads| graph.ran(id, reads.iter()));
        let ran = match written {
            Ok(()) => {
                tx.release(savepoint, |key, paths| graph.changed(key, paths));
                Ran::Written
            }
            Err(failed) => {
                std::hint::cold_path();
                tx.rollback(savepoint);
                Ran::Failed(match failed {
                    Failed::Write(error) => error,
                    Failed::Code(message) => {
                        Error::ComputationFailed { name: graph.name(id).unwrap_or_default().to_string(), message }
                    }
                })
            }
        };
        (ran, graph)
    }
}

/// What runs of dirty computations in one transaction did: the computations that ran
/// (dirty again if it does not commit) and the errors of those that failed (reported
/// once it commits).
#[derive(Default)]
struct Runs {
    ran: SmallVec<[ComputationId; SETTLE_CHUNK]>,
    errors: Vec<Error>,
}

/// How a computation's run ended (see [`Runtime::run_computation`]).
enum Ran {
    /// Its output is written (or was already what it returned).
    Written,
    /// It failed, and wrote nothing.
    Failed(Error),
    /// It read the committed space in a watched run, and wrote nothing: it runs after
    /// the writer's commit.
    ReadCommitted,
}

/// Asks into the cache what the next two computations of a large graph will touch, while
/// the one taken now runs. In a graph larger than a core's cache, each run would otherwise
/// wait on memory once for every structure it touches (its slot, its body, its output
/// document and that document's readers), one after the other, since each is found
/// through the one before. In two steps: the body of the one after next is asked for now,
/// so that by the next run it is in the cache and tells, without waiting, where that
/// computation's output document and entry are, which are asked for then.
fn prefetch_upcoming(graph: &Graph, bodies: &Bodies, tx: &Tx<'_>) {
    let Some((next, after)) = graph.upcoming() else { return };
    graph.prefetch(after);
    bodies.prefetch(after);
    graph.prefetch_readers(next);
    if let Some(body) = bodies.get(next) {
        tx.prefetch_doc(body.output_at);
        if let Some(entry) = &body.output_entry {
            entry.prefetch();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use crate::prelude::*;
    use crate::{Link, Path, Value};

    #[test]
    fn a_failing_computation_leaves_no_write_in_its_settle() {
        let rt = Runtime::in_memory();
        let n = rt.new_cell("n", 1i64).expect("cell");
        let side = rt.new_cell("side", 0i64).expect("cell");
        let fine = rt.computed("fine", move |tx| Ok(n.get(tx)? + 1)).expect("computed");
        rt.computed("fails", move |tx| {
            let n = n.get(tx)?;
            // Writes, then fails: the write must not survive, though the settle's
            // other computations commit in the same transaction.
            side.set(tx, n)?;
            if n == 2 {
                return Err("refused".into());
            }
            Ok(n)
        })
        .expect("computed");
        assert_eq!(side.get(&rt).expect("read"), 1);
        rt.take_errors();
        rt.transact(|tx| n.set(tx, 2)).expect("commit");
        assert_eq!(fine.get(&rt).expect("read"), 3, "the other computation committed");
        assert_eq!(side.get(&rt).expect("read"), 1, "the failed computation's write was undone");
        let errors = rt.take_errors();
        assert!(
            matches!(&errors[..], [crate::Error::ComputationFailed { name, message }]
                if name == "fails" && message.contains("refused")),
            "the error names the computation and says why: {errors:?}"
        );
    }

    #[test]
    fn after_commit_hooks_run_once_for_what_committed_and_never_for_what_did_not() {
        use std::sync::atomic::AtomicUsize;
        let rt = Runtime::in_memory();
        let ran = Arc::new(AtomicUsize::new(0));
        let hook = |tx: &Tx, by: usize| {
            let ran = ran.clone();
            tx.after_commit(move |_| {
                ran.fetch_add(by, Ordering::SeqCst);
            });
        };
        let n = rt.new_cell("n", 1i64).expect("cell");
        // A transaction that fails runs none of its hooks, and leaves none to the next.
        let refused = rt.transact(|tx| {
            hook(tx, 1000);
            n.set(tx, 5)?;
            Err::<(), _>("refused".into())
        });
        assert!(refused.is_err());
        rt.transact(|tx| {
            hook(tx, 1);
            n.set(tx, 2)
        })
        .expect("commit");
        assert_eq!(ran.load(Ordering::SeqCst), 1, "only the committed transaction's hook ran");
        // An attempt that conflicts (another thread wrote what it read) is retried: only
        // the hook of the attempt that committed runs.
        let attempts = AtomicUsize::new(0);
        rt.transact(|tx| {
            hook(tx, 1);
            let read = n.get(tx)?;
            if attempts.fetch_add(1, Ordering::SeqCst) == 0 {
                std::thread::scope(|s| s.spawn(|| rt.transact(|other| n.set(other, 7))).join())
                    .expect("the other thread")?;
            }
            n.set(tx, read + 1)
        })
        .expect("commit");
        assert_eq!(attempts.load(Ordering::SeqCst), 2, "the first attempt conflicted");
        assert_eq!(n.get(&rt).expect("read"), 8);
        assert_eq!(ran.load(Ordering::SeqCst), 2, "one hook ran for the retried transaction");
        rt.transact(|tx| n.set(tx, 2)).expect("commit");

        // In a settle, the hook of a computation that fails is undone with its writes; the
        // other computation's runs once its chunk committed.
        let fine_hook = ran.clone();
        rt.computed("fine", move |tx| {
            let fine_hook = fine_hook.clone();
            tx.after_commit(move |_| {
                fine_hook.fetch_add(10, Ordering::SeqCst);
            });
            n.get(tx)
        })
        .expect("computed");
        let failing_hook = ran.clone();
        rt.computed("fails", move |tx| {
            let failing_hook = failing_hook.clone();
            tx.after_commit(move |_| {
                failing_hook.fetch_add(100, Ordering::SeqCst);
            });
            match n.get(tx)? {
                3 => Err("refused".into()),
                n => Ok(n),
            }
        })
        .expect("computed");
        assert_eq!(ran.load(Ordering::SeqCst), 2 + 10 + 100, "both computations' first runs committed");
        rt.transact(|tx| n.set(tx, 3)).expect("commit");
        assert_eq!(ran.load(Ordering::SeqCst), 2 + 10 + 100 + 10, "the failed run's hook did not run");
        assert_eq!(rt.take_errors().len(), 1);
    }

    #[test]
    fn a_computation_that_reads_again_sees_every_change_from_its_second_run_on() {
        let rt = Runtime::in_memory();
        let (n, m) = (rt.new_cell("n", 1i64).expect("cell"), rt.new_cell("m", 100i64).expect("cell"));
        // Reads `n` again: from its second run on, each location is remembered at its
        // first read, which must not outlive the run.
        let sum =
            rt.computed("sum", move |tx| Ok(n.get(tx)? + m.get(tx)? + n.get(tx)? + m.get(tx)?)).expect("computed");
        for i in 2..6 {
            rt.transact(|tx| n.set(tx, i)).expect("commit");
            assert_eq!(sum.get(&rt).expect("read"), 2 * i + 200);
        }
        rt.transact(|tx| m.set(tx, 7)).expect("commit");
        assert_eq!(sum.get(&rt).expect("read"), 10 + 14);
    }

    #[test]
    fn a_commit_that_finds_the_engine_busy_leaves_its_computations_to_the_thread_running_it() {
        use std::sync::mpsc;
        let rt = Runtime::in_memory();
        let (a, b) = (rt.new_cell("a", 0i64).expect("cell"), rt.new_cell("b", 0i64).expect("cell"));
        let (running_tx, running) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let go_rx = std::sync::Mutex::new(go_rx);
        // Holds the engine, once `a` is 1, until told to go on.
        rt.computed("holds", move |tx| {
            if a.get(tx)? == 1 {
                running_tx.send(()).map_err(|_| "test gone")?;
                go_rx.lock().map_err(|_| "poisoned")?.recv().map_err(|_| "test gone")?;
            }
            Ok(0)
        })
        .expect("computed");
        let doubled = rt.computed("doubled", move |tx| Ok(b.get(tx)? * 2)).expect("computed");
        let holder = {
            let rt = rt.clone();
            std::thread::spawn(move || rt.transact(|tx| a.set(tx, 1)))
        };
        running.recv().expect("the engine runs `holds`");
        // The engine is busy: this commit's computation is left to the thread running it.
        rt.transact(|tx| b.set(tx, 5)).expect("commit");
        assert_eq!(doubled.get(&rt).expect("read"), 0, "not run here: the engine was busy");
        go.send(()).expect("go on");
        holder.join().expect("holder").expect("commit");
        // Read from the space, with nothing run on this thread since.
        assert_eq!(doubled.get(&rt).expect("read"), 10, "run by the thread that held the engine");
        assert!(!rt.has_queued_work());
    }

    /// A computation that commits `n` = 7 (through another transaction) the first time
    /// it reads `n` = `trigger`, and doubles `n`.
    fn doubling_with_a_commit_between(rt: &Runtime, n: Cell<i64>, trigger: i64) -> Cell<i64> {
        let first = Arc::new(AtomicBool::new(true));
        let weak = rt.downgrade();
        rt.computed("double", move |tx| {
            let value = n.get(tx)?;
            if value == trigger && first.swap(false, Ordering::SeqCst) {
                // Another writer commits `n` after this run read it.
                let rt = weak.upgrade().ok_or("runtime gone")?;
                rt.transact(|tx| n.set(tx, 7))?;
            }
            Ok(value * 2)
        })
        .expect("computed")
    }

    #[test]
    fn a_settle_that_read_what_a_concurrent_commit_wrote_runs_again() {
        let rt = Runtime::in_memory();
        let n = rt.new_cell("n", 1i64).expect("cell");
        // Its first run is a settle's own.
        let double = doubling_with_a_commit_between(&rt, n, 1);
        rt.settle();
        assert_eq!(double.get(&rt).expect("read"), 14, "the stale result was not committed");
        assert!(rt.stats().conflict_retries >= 1);
    }

    #[test]
    fn a_handler_whose_computations_read_what_a_concurrent_commit_wrote_runs_again() {
        let rt = Runtime::in_memory();
        let n = rt.new_cell("n", 1i64).expect("cell");
        let double = doubling_with_a_commit_between(&rt, n, 5);
        rt.settle();
        // The change comes from a handler, whose answer waits for its computations.
        let set = setter(&rt, n);
        futures::executor::block_on(rt.send(&set, serde_json::json!(5))).expect("sent");
        // The handler's transaction, its computation's run in it included, conflicted
        // with the commit between and ran again: it committed last.
        assert_eq!((n.get(&rt).expect("read"), double.get(&rt).expect("read")), (5, 10));
        assert!(rt.stats().conflict_retries >= 1);
    }

    #[test]
    fn a_computation_runs_after_the_change_that_made_it_dirty_is_committed() {
        let rt = Runtime::in_memory();
        let n = rt.new_cell("n", 1i64).expect("cell");
        let weak = rt.downgrade();
        // Reads its input through the transaction (a dependency), then the committed
        // space, as a builtin checking a cache against the space does.
        let committed = rt
            .computed("committed", move |tx| {
                n.get(tx)?;
                let rt = weak.upgrade().ok_or("runtime gone")?;
                n.get(&rt)
            })
            .expect("computed");
        rt.transact(|tx| n.set(tx, 5)).expect("commit");
        assert_eq!(committed.get(&rt).expect("read"), 5);
    }

    #[test]
    fn an_output_is_written_to_its_own_document_after_the_kept_documents_moved() {
        let rt = Runtime::in_memory();
        let (x, y) = (rt.new_cell("x", 1i64).expect("cell"), rt.new_cell("y", 2i64).expect("cell"));
        let a = rt.computed("a", move |tx| Ok(x.get(tx)? + 100)).expect("computed");
        let b = rt.computed("b", move |tx| Ok(y.get(tx)? + 200)).expect("computed");
        // Removing a computation lets go of the kept documents: the next settles keep
        // them in another order, so where `a` and `b` last wrote is now someone else's.
        let gone = rt.add_computation("gone", Link::new(rt.space().new_doc_id("gone"), Path::root()), None, {
            Arc::new(|_| Ok(Value::Null))
        });
        rt.settle();
        rt.remove_computation(gone);
        rt.transact(|tx| y.set(tx, 3)).expect("commit");
        rt.transact(|tx| x.set(tx, 4)).expect("commit");
        assert_eq!((a.get(&rt).expect("read"), b.get(&rt).expect("read")), (104, 203));
        rt.transact(|tx| x.set(tx, 5)).expect("commit");
        assert_eq!((a.get(&rt).expect("read"), b.get(&rt).expect("read")), (105, 203));
    }

    #[test]
    fn a_removed_computation_is_let_go_though_the_engine_ran_it() {
        let rt = Runtime::in_memory();
        let n = rt.new_cell("n", 1i64).expect("cell");
        let held = Arc::new(());
        let output = |name| Link::new(rt.space().new_doc_id(name), Path::root());
        let holder = rt.add_computation("holder", output("holder"), None, {
            let held = held.clone();
            Arc::new(move |tx| Ok(Value::from(n.get(tx)? + Arc::strong_count(&held) as i64)))
        });
        // Removes the holder from inside a settle, while the engine holds the bodies it
        // ran computations through.
        let weak = rt.downgrade();
        rt.add_computation("remover", output("remover"), None, {
            Arc::new(move |tx| {
                if n.get(tx)? == 3 {
                    weak.upgrade().ok_or("runtime gone")?.remove_computation(holder);
                }
                Ok(Value::Null)
            })
        });
        rt.settle();
        rt.transact(|tx| n.set(tx, 2)).expect("commit");
        assert_eq!(Arc::strong_count(&held), 2, "the holder lives while it is a computation");
        rt.transact(|tx| n.set(tx, 3)).expect("commit");
        assert_eq!(Arc::strong_count(&held), 1, "its body was let go, in the graph and in the engine");
    }

    #[test]
    fn a_settle_works_on_what_others_committed_to_the_documents_it_kept() {
        let rt = Runtime::in_memory();
        let n = rt.new_cell("n", 3i64).expect("cell");
        let parity = rt.computed("parity", move |tx| Ok(n.get(tx)? % 2)).expect("computed");
        let doubled = rt.computed("doubled", move |tx| Ok(parity.get(tx)? * 2)).expect("computed");
        assert_eq!(doubled.get(&rt).expect("read"), 2);
        // Written behind the engine's back: the settles kept these documents as they
        // left them, and must not take their own copies for what is there now.
        rt.transact(|tx| {
            parity.set(tx, 7)?;
            doubled.set(tx, 99)
        })
        .expect("commit");
        rt.transact(|tx| n.set(tx, 5)).expect("commit");
        assert_eq!(parity.get(&rt).expect("read"), 1, "1 differs from the 7 there, though not from what it wrote");
        assert_eq!(doubled.get(&rt).expect("read"), 2, "recomputed from the new parity, not left at 99");
    }

    /// A handler setting `n` to the number it is sent, on a stream of its own.
    fn setter(rt: &Runtime, n: Cell<i64>) -> Link {
        let set = Link::new(rt.space().new_doc_id("set"), Path::root());
        let run: crate::runtime::HandlerFn =
            Arc::new(move |tx, event| n.set(tx, event.as_i64().unwrap_or(0)).map(|()| None));
        rt.set_handler(
            set.clone(),
            crate::runtime::Handler { owner: "test".into(), schema: None, result_schema: None, run },
        );
        set
    }

    #[test]
    fn a_change_and_the_values_it_implies_commit_as_one() {
        let rt = Runtime::in_memory();
        let n = rt.new_cell("n", 1i64).expect("cell");
        let double = rt.computed("double", move |tx| Ok(n.get(tx)? * 2)).expect("computed");
        // What an observer of `n` finds in the space when it hears of each change.
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let _observation = rt.observe(n.link(), {
            let seen = seen.clone();
            move |rt| {
                let pair = (n.get(rt).expect("read"), double.get(rt).expect("read"));
                seen.lock().expect("list").push(pair);
                true
            }
        });
        let set = setter(&rt, n);
        let sent = futures::executor::block_on(rt.send(&set, serde_json::json!(5))).expect("sent");
        rt.transact(|tx| n.set(tx, 7)).expect("commit");
        assert_eq!(*seen.lock().expect("list"), [(5, 10), (7, 14)], "never `n` without its double");
        // The handler's answer lists its own change, not what followed from it.
        let docs: Vec<&str> = sent.changes.iter().map(|(doc, _)| &**doc).collect();
        assert_eq!(docs, [&*n.link().doc]);
    }

    #[test]
    fn a_computation_reading_the_committed_space_runs_once_a_change_after_its_commit() {
        let rt = Runtime::in_memory();
        let n = rt.new_cell("n", 1i64).expect("cell");
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let weak = rt.downgrade();
        let committed = rt
            .computed("committed", {
                let runs = runs.clone();
                move |tx| {
                    runs.fetch_add(1, Ordering::SeqCst);
                    n.get(tx)?;
                    let rt = weak.upgrade().ok_or("runtime gone")?;
                    n.get(&rt)
                }
            })
            .expect("computed");
        let set = setter(&rt, n);
        for value in 2..6 {
            futures::executor::block_on(rt.send(&set, serde_json::json!(value))).expect("sent");
            assert_eq!(committed.get(&rt).expect("read"), value, "it saw the change committed");
        }
        // Its first run, then a run in the handler's transaction that read the committed
        // space (undone), then one run per change: it is known to read the space now.
        assert_eq!(runs.load(Ordering::SeqCst), 1 + 1 + 4);
        assert!(rt.take_errors().is_empty());
    }
}
