//! The scheduler's dependency graph: which computation reads what, and which must re-run
//! after a commit, in an order that never shows a half-updated state.
//!
//! A computation's dependencies are the locations it read last time it ran. A commit
//! marks dirty every computation whose dependencies overlap a written path. Dirty
//! computations run lowest *height* first, where a computation's height is one more than
//! the height of any computation whose output it reads: so in a diamond `a → b, c → d`,
//! `d` runs once, after both `b` and `c`. Heights are rechecked when a computation is
//! taken from the queue, so graphs whose shape changes at run time stay glitch-free.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::error::BoxError;
use crate::link::{DocId, Link};
use crate::space::{DocEntry, DocKey};
use crate::tx::Tx;
use crate::value::{Path, Value};

use smallvec::SmallVec;

mod bodies;
mod dependencies;
mod queue;
mod readers;

pub(crate) use bodies::Bodies;
use queue::Queue;
use readers::Readers;

/// Identifies a computation inside one runtime: its slot in the graph and the generation
/// of that slot, so an id of a removed computation never names the one reusing its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ComputationId(pub(crate) u64);

impl ComputationId {
    fn new(slot: usize, generation: u32) -> Self {
        ComputationId((u64::from(generation) << 32) | slot as u64)
    }

    fn slot(self) -> usize {
        (self.0 & u64::from(u32::MAX)) as usize
    }

    fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// From how many computations a graph is taken to outgrow a core's own cache (a
/// computation with its documents takes about a kilobyte; a core's L2 is commonly 512 KB
/// to 2 MB): then the engine asks what the next computations will touch into the cache
/// while the current one runs. Below, everything is in the cache already, and asking
/// costs more than it saves.
const PREFETCH_FROM: usize = 512;

/// The body of a computation: reads through the transaction, returns the output value.
pub type ComputeFn = Arc<dyn Fn(&Tx) -> Result<Value, BoxError> + Send + Sync>;

/// How often one computation may run while settling one change before it counts as a
/// runaway cycle.
pub(crate) const MAX_RUNS_PER_SETTLE: u32 = 100;

/// What a computation is, as added: the engine makes its [`Body`] from it.
struct Definition {
    name: Arc<str>,
    output: Link,
    /// The entry of the output's document, when it was given (one storage could give).
    output_entry: Option<Arc<DocEntry>>,
    run: ComputeFn,
}

/// What the engine keeps of a computation to run it, in a list of its own by slot
/// ([`Bodies`]): a settle running computations in order reads one after the other there,
/// not each through a pointer to memory of its own. Only the engine (one thread at a
/// time) holds it, so what it learns of a computation is kept in plain fields.
pub(crate) struct Body {
    pub run: ComputeFn,
    pub output: Link,
    /// The entry of the output's document, once the engine has it.
    pub output_entry: Option<Arc<DocEntry>>,
    /// Where the output's document was among the documents the engine's transactions
    /// keep, when it was last written (a hint: checked against the entry).
    pub output_at: u32,
    /// The generation of the slot it was made for (see [`ComputationId`]).
    generation: u32,
    /// Whether a run of it read a location again (then its next runs remember each
    /// location at its first read, so that the second is answered from the memo; see
    /// [`Tx::savepoint`]). Once set, it stays: a run that reads from the memo no longer
    /// tells.
    pub rereads: bool,
    /// Whether a run of it read the committed space while it ran inside a writer's
    /// transaction (see [`crate::space::watching`]): it then runs only after the writer
    /// committed. Once set, it stays.
    pub reads_committed: bool,
}

pub(crate) struct Computation {
    definition: Box<Definition>,
    pub owner: Option<DocId>,
    /// The key of the output's document.
    output_key: DocKey,
    /// The locations read on the latest run, with their documents' keys. Most
    /// computations read one or two, kept inline: every run compares them, and taking
    /// the next looks at the producers, without a trip to memory elsewhere.
    deps: SmallVec<[(DocKey, Path); 2]>,
    /// The computations whose outputs `deps` overlap, as of the latest run.
    producers: SmallVec<[ComputationId; 2]>,
}

/// What marking and ordering need of a computation, kept apart from the rest in one dense
/// list by slot: a commit marks the readers of what it wrote, and taking the next checks
/// the heights of producers, without touching each computation's other memory.
#[derive(Default, Clone, Copy)]
struct Mark {
    /// The generation of the slot, as in [`Slot`]: an id of another matches no mark.
    generation: u32,
    height: u32,
    /// How many times it ran since the queue was last empty (its run budget).
    runs: u32,
    /// Whether it waits in the queue to run.
    dirty: bool,
}

/// A place for one computation; its generation counts the computations it held.
#[derive(Default)]
struct Slot {
    generation: u32,
    computation: Option<Computation>,
}

/// The graph and the queue of dirty computations.
///
/// Computations live in slots indexed by their id (no hashing on the paths that run per
/// computation: marking, taking the next, recording reads), and a freed slot is reused.
#[derive(Default)]
pub(crate) struct Graph {
    slots: Vec<Slot>,
    /// By slot, as `slots`.
    marks: Vec<Mark>,
    free: Vec<usize>,
    /// How many computations there are.
    len: usize,
    /// For each document, the computations that read something in it.
    readers: Vec<Readers>,
    /// For each document (indexed by its key, as `readers`), the outputs written by
    /// computations into it: a computation whose reads change looks up its producers
    /// here on every run.
    writers: Vec<Vec<(Path, ComputationId)>>,
    dirty: Queue,
    /// How many computations are dirty: changed under the graph's lock only, and read
    /// without it through [`Graph::dirty_counter`].
    dirty_count: Arc<AtomicUsize>,
    /// Computations that ran since the queue was last empty (their run budgets to reset).
    ran: Vec<ComputationId>,
    /// An emptied list of reads, for the next computation whose reads change (see
    /// [`Graph::ran`]).
    spare_deps: SmallVec<[(DocKey, Path); 2]>,
    /// The engine's bodies, while it does not hold them (see [`Graph::take_bodies`]);
    /// `None` while it does.
    bodies: Option<Bodies>,
    /// Computations removed while the engine held its bodies: it lets go of theirs when
    /// it gives them back.
    removed: Vec<ComputationId>,
}

/// What [`Graph::next`] hands out.
pub(crate) enum Next {
    /// A computation to run now (its body: [`Graph::body`]).
    Run(ComputationId),
    /// A computation that ran more than [`MAX_RUNS_PER_SETTLE`] times in one settle: a
    /// cycle. It is not run again until the next change.
    Runaway {
        /// Its name.
        name: Arc<str>,
        /// How often it ran.
        runs: u32,
    },
}

impl Graph {
    /// Adds a computation writing `output` (in the document `key` names, whose entry is
    /// given when it may be kept); it is dirty until it first runs.
    pub fn add(
        &mut self,
        name: &str,
        output: Link,
        key: DocKey,
        entry: Option<Arc<DocEntry>>,
        owner: Option<DocId>,
        run: ComputeFn,
    ) -> ComputationId {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(Slot::default());
            self.marks.push(Mark::default());
            self.slots.len() - 1
        });
        let id = ComputationId::new(slot, self.slots[slot].generation);
        if key.0 >= self.writers.len() {
            self.writers.resize_with(key.0 + 1, Vec::new);
        }
        self.writers[key.0].push((output.path.clone(), id));
        // Computations that already read where this one writes now depend on it.
        let readers = self.readers.get(key.0).map(Readers::to_vec).unwrap_or_default();
        for reader in readers {
            if let Some(c) = self.get_mut(reader) {
                if c.deps.iter().any(|(k, read)| *k == key && read.overlaps(&output.path)) {
                    c.producers.push(id);
                }
            }
        }
        let c = Computation {
            definition: Box::new(Definition { name: name.into(), output, output_entry: entry, run }),
            owner,
            output_key: key,
            deps: SmallVec::new(),
            producers: SmallVec::new(),
        };
        self.slots[slot].computation = Some(c);
        self.marks[slot] = Mark { generation: self.slots[slot].generation, ..Mark::default() };
        self.len += 1;
        self.mark(id);
        id
    }

    fn get(&self, id: ComputationId) -> Option<&Computation> {
        let slot = self.slots.get(id.slot())?;
        (slot.generation == id.generation()).then_some(slot.computation.as_ref()).flatten()
    }

    fn get_mut(&mut self, id: ComputationId) -> Option<&mut Computation> {
        let slot = self.slots.get_mut(id.slot())?;
        (slot.generation == id.generation()).then_some(slot.computation.as_mut()).flatten()
    }

    /// The readers of the document `key` names (an empty list the first time).
    fn readers_of(&mut self, key: DocKey) -> &mut Readers {
        if key.0 >= self.readers.len() {
            self.readers.resize_with(key.0 + 1, Readers::default);
        }
        &mut self.readers[key.0]
    }

    fn mark_of(&self, id: ComputationId) -> Option<&Mark> {
        self.marks.get(id.slot()).filter(|m| m.generation == id.generation())
    }

    fn mark_of_mut(&mut self, id: ComputationId) -> Option<&mut Mark> {
        self.marks.get_mut(id.slot()).filter(|m| m.generation == id.generation())
    }

    fn computations(&self) -> impl Iterator<Item = (ComputationId, &Computation)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(at, slot)| slot.computation.as_ref().map(|c| (ComputationId::new(at, slot.generation), c)))
    }

    /// Whether a computation writes `link`, or a location it covers or lies inside.
    pub fn writes(&self, link: &Link) -> bool {
        self.computations()
            .any(|(_, c)| c.definition.output.doc == link.doc && c.definition.output.path.overlaps(&link.path))
    }

    /// Removes a computation and forgets its edges.
    pub fn remove(&mut self, id: ComputationId) {
        if self.get(id).is_none() {
            return;
        }
        let slot = &mut self.slots[id.slot()];
        let Some(c) = slot.computation.take() else { return };
        match &mut self.bodies {
            Some(bodies) => bodies.forget(id),
            None => self.removed.push(id),
        }
        // The next computation in this slot gets another id.
        slot.generation = slot.generation.wrapping_add(1);
        let mark = &mut self.marks[id.slot()];
        if mark.dirty {
            count(&self.dirty_count, -1);
        }
        *mark = Mark { generation: slot.generation, ..Mark::default() };
        self.free.push(id.slot());
        self.len -= 1;
        for other in self.slots.iter_mut().filter_map(|s| s.computation.as_mut()) {
            other.producers.retain(|p| *p != id);
        }
        for (key, _) in &c.deps {
            if let Some(readers) = self.readers.get_mut(key.0) {
                readers.remove(id);
            }
        }
        if let Some(list) = self.writers.get_mut(c.output_key.0) {
            list.retain(|(_, w)| *w != id);
        }
    }

    /// The computations owned by `owner` (a charm).
    pub fn owned_by(&self, owner: &DocId) -> Vec<ComputationId> {
        self.computations().filter(|(_, c)| c.owner.as_ref() == Some(owner)).map(|(id, _)| id).collect()
    }

    fn mark(&mut self, id: ComputationId) {
        let Some(m) = self.mark_of_mut(id) else { return };
        if !m.dirty {
            m.dirty = true;
            let height = m.height;
            count(&self.dirty_count, 1);
            self.dirty.push(height, id);
        }
    }

    /// Marks computations dirty again (their runs were not committed).
    pub fn mark_all(&mut self, ids: &[ComputationId]) {
        for id in ids {
            self.mark(*id);
        }
    }

    /// Queues again a computation [`Graph::next`] just handed out, not run: it runs in a
    /// later transaction, and the run handed out does not count against its budget.
    pub fn put_back(&mut self, id: ComputationId) {
        if let Some(m) = self.mark_of_mut(id) {
            m.runs = m.runs.saturating_sub(1);
        }
        self.mark(id);
    }

    /// Marks dirty every computation that read a location overlapping a path written in
    /// `doc` (named by `key`).
    pub fn changed<'p>(&mut self, key: DocKey, paths: impl Iterator<Item = &'p Path> + Clone) {
        let Graph { readers, slots, marks, dirty, dirty_count, .. } = self;
        let Some(readers) = readers.get(key.0) else { return };
        readers.for_each(|id, whole| {
            let Some(m) = marks.get_mut(id.slot()).filter(|m| m.generation == id.generation()) else { return };
            if m.dirty {
                return;
            }
            // A reader of the whole document reads whatever was written there.
            let read_what_changed = whole
                || slots[id.slot()].computation.as_ref().is_some_and(|c| {
                    c.deps.iter().any(|(k, read)| *k == key && paths.clone().any(|p| p.overlaps(read)))
                });
            if read_what_changed {
                m.dirty = true;
                count(dirty_count, 1);
                dirty.push(m.height, id);
            }
        });
    }

    /// Marks dirty every computation that reads document `key` or writes into it: the
    /// document went back to an older value (see the space's `restore`), and what a
    /// computation wrote there may be undone too.
    pub fn restored(&mut self, key: DocKey) {
        self.changed(key, std::iter::once(&Path::root()));
        let writers: SmallVec<[ComputationId; 4]> =
            self.writers.get(key.0).into_iter().flatten().map(|(_, id)| *id).collect();
        self.mark_all(&writers);
    }

    /// Whether any computation waits to run.
    pub fn has_dirty(&self) -> bool {
        self.dirty_count.load(Ordering::Relaxed) > 0
    }

    /// How many computations are dirty, readable without the graph's lock: a hint there
    /// (a commit on another thread may be marking some as it is read).
    pub fn dirty_counter(&self) -> Arc<AtomicUsize> {
        self.dirty_count.clone()
    }

    /// Takes the lowest dirty computation whose producers are all clean, or reports one
    /// that ran too often.
    pub fn next(&mut self) -> Option<Next> {
        let limit = self.len as u32 + 1;
        while let Some((height, id)) = self.dirty.pop() {
            let Some(&Mark { height: current, .. }) = self.mark_of(id).filter(|m| m.dirty) else { continue };
            if height != current {
                std::hint::cold_path();
                // Its height changed after it was queued (it ran again meanwhile): queue
                // it again at its current height rather than lose it.
                self.dirty.push(current, id);
                continue;
            }
            let Some(c) = self.get(id) else { continue };
            let needed = self.producer_height(c).map_or(0, |h| h + 1);
            if needed > current && needed <= limit {
                std::hint::cold_path();
                self.raise(id, needed);
                continue;
            }
            let Some(m) = self.mark_of_mut(id) else { continue };
            m.dirty = false;
            m.runs += 1;
            let runs = m.runs;
            let first_run = runs == 1;
            let runaway = (runs > MAX_RUNS_PER_SETTLE).then(|| self.get(id)).flatten();
            let next = match runaway {
                Some(c) => Next::Runaway { name: c.definition.name.clone(), runs: runs - 1 },
                None => Next::Run(id),
            };
            count(&self.dirty_count, -1);
            if first_run {
                self.ran.push(id);
            }
            return Some(next);
        }
        // Nothing is dirty: the next change starts with a fresh run budget.
        self.reset_budgets();
        None
    }

    /// The two computations due to run after the one taken last, as queued now, in a
    /// graph too large for a core's own cache (see [`PREFETCH_FROM`]).
    pub fn upcoming(&self) -> Option<(ComputationId, ComputationId)> {
        if self.len < PREFETCH_FROM {
            return None;
        }
        self.dirty.next_two()
    }

    /// Asks the memory of `id`'s slot and mark into the cache.
    pub fn prefetch(&self, id: ComputationId) {
        if let (Some(slot), Some(mark)) = (self.slots.get(id.slot()), self.marks.get(id.slot())) {
            crate::prefetch::prefetch(slot);
            crate::prefetch::prefetch(mark);
        }
    }

    /// Asks the readers of `id`'s output document into the cache.
    pub fn prefetch_readers(&self, id: ComputationId) {
        if let Some(c) = self.get(id) {
            if let Some(readers) = self.readers.get(c.output_key.0) {
                crate::prefetch::prefetch(readers);
                readers.prefetch();
            }
        }
    }

    /// A new body for a computation, to run it (the engine keeps it: see [`Bodies`]).
    pub fn body(&self, id: ComputationId) -> Option<Body> {
        let d = &self.get(id)?.definition;
        Some(Body {
            run: d.run.clone(),
            output: d.output.clone(),
            output_entry: d.output_entry.clone(),
            output_at: u32::MAX,
            generation: id.generation(),
            rereads: false,
            reads_committed: false,
        })
    }

    /// The name of a computation.
    pub fn name(&self, id: ComputationId) -> Option<Arc<str>> {
        self.get(id).map(|c| c.definition.name.clone())
    }

    /// The bodies the engine ran computations through, for it to keep while it runs a
    /// chunk of a settle; given back with [`Graph::give_back_bodies`].
    pub fn take_bodies(&mut self) -> Bodies {
        self.bodies.take().unwrap_or_default()
    }

    /// Gives back the bodies [`Graph::take_bodies`] took, letting go of those of the
    /// computations removed meanwhile.
    pub fn give_back_bodies(&mut self, mut bodies: Bodies) {
        for id in self.removed.drain(..) {
            bodies.forget(id);
        }
        self.bodies = Some(bodies);
    }

    fn raise(&mut self, id: ComputationId, height: u32) {
        if let Some(m) = self.mark_of_mut(id) {
            m.height = height;
            self.dirty.push(height, id);
        }
    }

    /// The greatest height among dirty computations whose output this one reads.
    fn producer_height(&self, c: &Computation) -> Option<u32> {
        c.producers.iter().filter_map(|p| self.mark_of(*p)).filter(|p| p.dirty).map(|p| p.height).max()
    }

    fn reset_budgets(&mut self) {
        let mut ran = std::mem::take(&mut self.ran);
        for id in ran.drain(..) {
            if let Some(m) = self.mark_of_mut(id) {
                m.runs = 0;
            }
        }
        // Given back emptied: the list keeps its room for the next settle.
        self.ran = ran;
    }
}

/// Changes the count of dirty computations by `by`. Only done under the graph's lock, so
/// a load and a store are enough (no read-modify-write).
fn count(dirty: &AtomicUsize, by: isize) {
    dirty.store(dirty.load(Ordering::Relaxed).wrapping_add_signed(by), Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::Space;

    fn link(doc: &str, key: &str) -> Link {
        Link::new(doc, Path::new([key]))
    }

    /// A graph, and the space whose entries name its documents.
    fn graph() -> (Graph, Space) {
        (Graph::default(), Space::in_memory())
    }

    fn add(g: &mut Graph, space: &Space, name: &str, output: Link) -> ComputationId {
        let key = space.entry(&output.doc).key();
        g.add(name, output, key, None, None, noop())
    }

    fn ran(g: &mut Graph, space: &Space, id: ComputationId, reads: &[Link]) {
        g.ran(id, reads.iter().map(|l| (space.entry(&l.doc).key(), &l.path)));
    }

    fn changed(g: &mut Graph, space: &Space, doc: &str, key: &str) {
        let doc: DocId = doc.into();
        g.changed(space.entry(&doc).key(), [Path::new([key])].iter());
    }

    fn noop() -> ComputeFn {
        Arc::new(|_| Ok(Value::Null))
    }

    #[test]
    fn a_computation_marked_while_its_height_changes_still_runs() {
        let (mut g, space) = graph();
        let p = add(&mut g, &space, "p", link("d", "p"));
        let c = add(&mut g, &space, "c", link("d", "c"));
        assert!(matches!(g.next(), Some(Next::Run(id)) if id == p));
        ran(&mut g, &space, p, &[link("d", "other")]);
        assert!(matches!(g.next(), Some(Next::Run(id)) if id == c));
        ran(&mut g, &space, c, &[link("d", "src")]);
        changed(&mut g, &space, "d", "src");
        assert!(matches!(g.next(), Some(Next::Run(id)) if id == c), "c runs again");
        // While it runs, a commit marks it dirty again (queued at its height 0)...
        changed(&mut g, &space, "d", "src");
        // ...and this run reads `p`, which raises its height to 1.
        ran(&mut g, &space, c, &[link("d", "src"), link("d", "p")]);
        assert!(matches!(g.next(), Some(Next::Run(id)) if id == c), "the stale entry is requeued, not dropped");
        assert!(g.next().is_none());
        assert!(!g.has_dirty());
    }

    #[test]
    fn a_removed_computations_id_never_names_the_one_in_its_slot() {
        let (mut g, space) = graph();
        let old = add(&mut g, &space, "old", link("d", "old"));
        g.remove(old);
        assert!(!g.has_dirty(), "a removed dirty computation is no longer waiting");
        let new = add(&mut g, &space, "new", link("d", "new"));
        assert_eq!(old.slot(), new.slot(), "the slot is reused");
        assert_ne!(old, new);
        g.remove(old);
        assert!(matches!(g.next(), Some(Next::Run(id)) if id == new), "removing the old id left the new one");
        assert!(g.next().is_none());
    }

    #[test]
    fn a_producer_added_later_orders_its_readers() {
        let (mut g, space) = graph();
        let reader = add(&mut g, &space, "reader", link("d", "out"));
        assert!(g.next().is_some());
        ran(&mut g, &space, reader, &[link("d", "later")]);
        let producer = add(&mut g, &space, "producer", link("d", "later"));
        changed(&mut g, &space, "d", "later");
        // Both are dirty; the producer must run first although the reader was queued at
        // height 0 before the producer existed.
        assert!(matches!(g.next(), Some(Next::Run(id)) if id == producer));
    }
}
