//! Transactions: reads against a snapshot, buffered writes, atomic commit.
//!
//! A [`Tx`] takes a snapshot of each document the first time it touches it (O(1) with
//! persistent values), records every path it reads (the read set: for conflict checks
//! and for the scheduler's dependency tracking) and buffers writes (the write set). It
//! commits through [`crate::Runtime::transact`] or as part of a handler or computation.
//!
//! The engine runs all the computations of one settle in a single transaction; each
//! runs between a `Savepoint` and `Tx::release` (keep its writes) or
//! `Tx::rollback` (it failed: forget them). Transactions keep their documents for the
//! next one in their lists (`Spare`): a kept document is snapshotted again only when
//! a commit moved it.

use std::sync::Arc;

use crate::error::Result;
use crate::link::{DocId, Link};
use serde::de::DeserializeOwned;

use crate::read::{plain_at, resolve, shaped, Read};
use crate::space::{DocEntry, DocKey, DocWrites, Space};
use crate::value::{same_text, Path, Value};

mod docs;
mod lists;
mod memo;

pub(crate) use lists::Spare;
use lists::{Ledger, Lists, Undo};
use memo::Remembered;

/// Work to run once a transaction has committed, kept here without knowing its type: the
/// runtime layer puts it in ([`Tx::after_commit`]) and runs it, so the storage floor the
/// transaction belongs to names no `Runtime`.
pub(crate) type AfterCommit = Box<dyn std::any::Any + Send>;

/// How many of the latest reads a new read is checked against before it is noted.
const RECENT_READS: usize = 8;

/// What a writer knows of the document it writes (see [`Tx::write_to`]): its entry, and
/// where it was among the transaction's documents when last written (checked before it
/// is trusted; kept documents keep their places from one settle to the next).
pub(crate) struct Known<'a> {
    pub entry: &'a Arc<DocEntry>,
    pub at: &'a mut u32,
}

/// The paths written in one document, as [`Tx::release`] reports them.
pub(crate) type PathsWritten<'a> = std::iter::Map<std::slice::Iter<'a, (Path, Value)>, fn(&(Path, Value)) -> &Path>;

/// A point in a transaction to come back to: see [`Tx::savepoint`].
pub(crate) struct Savepoint {
    reads: usize,
    hooks: usize,
}

/// A transaction against one space.
pub struct Tx<'s> {
    space: &'s Space,
    lists: Box<Lists>,
    /// Where the open savepoint's reads start (a read before it is not one of its own).
    reads_floor: std::cell::Cell<usize>,
    /// Whether a savepoint is open.
    open: std::cell::Cell<bool>,
    /// Whether a location is remembered at its first read, not only once read again
    /// (see [`Tx::savepoint`]).
    memorise_first: std::cell::Cell<bool>,
    /// Whether a location was read again since the open savepoint, and found among the
    /// latest reads (not in the memo).
    reread: std::cell::Cell<bool>,
}

impl<'s> Tx<'s> {
    /// A transaction that keeps its documents and reads in the emptied lists of an
    /// earlier one (see [`Spare`]; `Spare::default()` for new lists).
    pub(crate) fn reusing(space: &'s Space, spare: Spare) -> Self {
        let mut lists = spare.0;
        // Before any document is touched: each is then at least as new as this count.
        lists.began = space.commit_count();
        debug_assert!(
            lists.ledger.borrow().reads.is_empty()
                && lists.ledger.borrow().undo.is_empty()
                && lists.memo.is_empty()
                && lists.hooks.borrow().is_empty(),
            "spare lists come emptied"
        );
        Tx {
            space,
            lists,
            reads_floor: std::cell::Cell::new(0),
            open: std::cell::Cell::new(false),
            memorise_first: std::cell::Cell::new(false),
            reread: std::cell::Cell::new(false),
        }
    }

    /// The space this transaction runs against.
    pub fn space(&self) -> &'s Space {
        self.space
    }

    fn with_doc<T>(&self, doc: &DocId, f: impl FnOnce(usize, &mut DocWrites) -> T) -> T {
        let mut ledger = self.lists.ledger.borrow_mut();
        let index = ledger.position(self.space, doc);
        f(index, &mut ledger.docs.list[index])
    }

    /// Notes a read of `path` in the document at `doc` among the documents, in `reads`,
    /// unless it was read lately and noted then; returns where among the reads it is
    /// noted, and whether it was noted before (a read again).
    #[inline]
    fn note(&self, reads: &mut Vec<(u32, Path)>, doc: usize, path: &Path) -> (usize, bool) {
        let doc = doc as u32;
        // A location read again lately (a link and its target, read in turns) is noted
        // once; the memo answers most repeated reads before they get here.
        let floor = self.reads_floor.get().max(reads.len().saturating_sub(RECENT_READS)).min(reads.len());
        if let Some(at) = reads[floor..].iter().position(|(d, p)| *d == doc && p == path) {
            self.reread.set(true);
            return (floor + at, true);
        }
        reads.push((doc, path.clone()));
        (reads.len() - 1, false)
    }

    /// `take` of the value at `link` when no link lies on the way or at its end, found in
    /// one look at its document (where it is taken from: a first read copies nothing it
    /// need not) and noted as read; `None` when links must be followed.
    #[inline(always)]
    fn read_plain<R>(&self, link: &Link, take: impl FnOnce(&Value) -> R) -> Option<R> {
        let mut ledger = self.lists.ledger.borrow_mut();
        let doc = ledger.position(self.space, &link.doc);
        let Ledger { docs, reads, .. } = &mut *ledger;
        let d = &docs.list[doc];
        let value = plain_at(&d.local, &link.path)?;
        // Remembered once read again (nothing new noted): most locations are read once.
        // In a computation known to read locations again, at the first read.
        let (read, again) = self.note(reads, doc, &link.path);
        if again || self.memorise_first.get() {
            self.memorise(Remembered::noted(&d.id, read, &reads[read].1, value));
        }
        Some(take(value))
    }

    /// Writes `value` at `link`. Links along the path are followed; a link stored exactly
    /// at `link` is replaced, not written through.
    pub fn write(&self, link: &Link, value: Value) -> Result<()> {
        self.write_to(link, None, value)
    }

    /// [`Tx::write`], given what the caller knows of `link`'s document (a computation
    /// writes one output over and over): used when the write lands in that document,
    /// which then is not looked up in the space.
    pub(crate) fn write_to(&self, link: &Link, known: Option<Known<'_>>, value: Value) -> Result<()> {
        let beyond_links;
        let target = match link.path.segments().split_last() {
            None => link,
            Some((last, parent)) => {
                let parent = Link::new(link.doc.clone(), Path::new(parent.iter().cloned()));
                let (parent_at, _) = resolve(self, &parent, false)?;
                beyond_links = parent_at.child(last.clone());
                &beyond_links
            }
        };
        crate::depth::check_write(&value, &target.path, format_args!("the value written at {target}"))?;
        // Writing what is already there changes nothing: no commit entry, no re-runs. The
        // document is still kept among the touched: an effect writes the same nothing
        // every run, and finds it there again without a snapshot.
        let unchanged = |local: &Value| local.at(target.path.segments()).is_some_and(|there| there.same_as(&value));
        let mut ledger = self.lists.ledger.borrow_mut();
        let Ledger { docs, undo, .. } = &mut *ledger;
        let known = known.filter(|_| same_text(&target.doc, &link.doc));
        let found = match &known {
            // Found where it was last time, or by its entry (an output is often first
            // touched here).
            Some(Known { entry, at }) => {
                docs.position_hinted(&target.doc, entry, **at as usize).ok_or_else(|| Arc::clone(entry))
            }
            None => docs.find(&target.doc, || self.space.entry(&target.doc)),
        };
        let index = match found {
            Ok(index) => index,
            Err(entry) => {
                let snapshot = entry.snapshot();
                docs.push(target.doc.clone(), entry, snapshot)
            }
        };
        // Debug builds check every place found, by a hint or by the index, by its id.
        #[cfg(debug_assertions)]
        assert!(
            *docs.list[index].id == *target.doc,
            "{target} was found among the documents at {index}, which holds {}",
            docs.list[index].id
        );
        if let Some(Known { at, .. }) = known {
            *at = index as u32;
        }
        if unchanged(&docs.list[index].local) {
            return Ok(());
        }
        let d = &mut docs.list[index];
        self.lists.memo.clear();
        let keep_before = self.open.get() && !undo.iter().any(|u| u.doc == index);
        let before = match target.path.segments() {
            // A whole document written (a computation's output, mostly): what was there
            // is what an undo puts back, not a copy of it.
            [] => Some(std::mem::replace(&mut d.local, value.clone())).filter(|_| keep_before),
            segments => {
                let before = keep_before.then(|| d.local.clone());
                d.local.set_at(segments, value.clone())?;
                before
            }
        };
        if let Some(local) = before {
            undo.push(Undo { doc: index, local, ops: d.ops.len() });
        }
        d.ops.push((target.path.clone(), value));
        Ok(())
    }

    /// Asks the document kept at `at` among this transaction's documents into the cache.
    pub(crate) fn prefetch_doc(&self, at: u32) {
        if let Some(d) = self.lists.ledger.try_borrow().ok().as_ref().and_then(|l| l.docs.list.get(at as usize)) {
            crate::prefetch::prefetch(d);
        }
    }

    /// Whether this transaction has written anything.
    pub fn has_writes(&self) -> bool {
        let docs = &self.lists.ledger.borrow().docs;
        docs.touched.iter().any(|at| !docs.list[*at as usize].ops.is_empty())
    }

    /// Every location read so far (the dependencies of a computation).
    pub fn reads(&self) -> Vec<Link> {
        let ledger = self.lists.ledger.borrow();
        let Ledger { docs, reads, .. } = &*ledger;
        reads.iter().map(|(doc, path)| Link::new(docs.list[*doc as usize].id.clone(), path.clone())).collect()
    }

    /// Keeps `hook` to hand back once this transaction has committed (see
    /// [`AfterCommit`]).
    pub(crate) fn push_hook(&self, hook: AfterCommit) {
        self.lists.hooks.borrow_mut().push(hook);
    }

    /// Opens a savepoint: what is written from now on can be undone with
    /// [`Tx::rollback`] or kept with [`Tx::release`]. Savepoints do not nest.
    /// `rereads`: whether the code about to run is known to read locations again (then
    /// each location is remembered at its first read, where remembering it costs more
    /// than it saves for code that reads each once).
    pub(crate) fn savepoint(&self, rereads: bool) -> Savepoint {
        let reads = {
            let mut ledger = self.lists.ledger.borrow_mut();
            ledger.undo.clear();
            ledger.reads.len()
        };
        self.lists.memo.clear();
        self.memorise_first.set(rereads);
        self.reread.set(false);
        self.open.set(true);
        self.reads_floor.set(reads);
        Savepoint { reads, hooks: self.lists.hooks.borrow().len() }
    }

    /// Calls `f` with the locations read since `savepoint`, as (document, path) in the
    /// order first read: a computation's dependencies.
    pub(crate) fn reads_since<T>(&self, savepoint: &Savepoint, f: impl FnOnce(ReadsSince<'_>) -> T) -> T {
        let ledger = self.lists.ledger.borrow();
        let Ledger { docs, reads, .. } = &*ledger;
        f(ReadsSince { reads: &reads[savepoint.reads.min(reads.len())..], docs: &docs.list })
    }

    /// Whether a location was read again since the open savepoint without the memo
    /// answering (so the code that ran reads locations again).
    pub(crate) fn reread(&self) -> bool {
        self.reread.get()
    }

    /// Keeps what was written since `savepoint`; calls `written` with each document
    /// written since and the paths written there.
    pub(crate) fn release(&self, _savepoint: Savepoint, mut written: impl FnMut(DocKey, PathsWritten<'_>)) {
        self.open.set(false);
        let ledger = self.lists.ledger.borrow();
        let Ledger { docs, undo, .. } = &*ledger;
        for u in undo {
            let d = &docs.list[u.doc];
            written(d.key, d.ops[u.ops..].iter().map(|(p, _)| p));
        }
    }

    /// Calls `written` with each document written so far (its key and id) and the paths
    /// written there, in the order first touched: a writer's change, told before the
    /// computations it affects run in this same transaction.
    pub(crate) fn written(&self, mut written: impl FnMut(DocKey, &DocId, PathsWritten<'_>)) {
        let ledger = self.lists.ledger.borrow();
        let docs = &ledger.docs;
        for d in docs.touched.iter().map(|at| &docs.list[*at as usize]).filter(|d| !d.ops.is_empty()) {
            written(d.key, &d.id, d.ops.iter().map(|(p, _)| p));
        }
    }

    /// Undoes every write and after-commit hook since `savepoint`.
    pub(crate) fn rollback(&self, savepoint: Savepoint) {
        self.open.set(false);
        self.lists.memo.clear();
        let mut ledger = self.lists.ledger.borrow_mut();
        let Ledger { docs, undo, .. } = &mut *ledger;
        for u in undo.drain(..) {
            let d = &mut docs.list[u.doc];
            d.local = u.local;
            d.ops.truncate(u.ops);
        }
        self.lists.hooks.borrow_mut().truncate(savepoint.hooks);
    }

    /// What a commit needs: the lists (documents, reads, hooks, and the rest to reuse).
    pub(crate) fn into_spare(self) -> Spare {
        Spare(self.lists)
    }
}

/// The locations a computation read: see [`Tx::reads_since`].
#[derive(Clone, Copy)]
pub(crate) struct ReadsSince<'a> {
    reads: &'a [(u32, Path)],
    docs: &'a [DocWrites],
}

impl<'a> ReadsSince<'a> {
    /// The locations, as (document, path); consecutive reads of one location count once.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (DocKey, &'a Path)> + Clone + 'a {
        let docs = self.docs;
        self.reads.iter().map(move |(doc, path)| (docs[*doc as usize].key, path))
    }
}

impl Read for Tx<'_> {
    /// The value at `link`. A computation that reads one cell many times resolves it
    /// twice: read again, the value is remembered until this transaction writes (only its
    /// own writes can change what it sees), and the read was noted the first time.
    #[inline]
    fn read(&self, link: &Link) -> Result<Value> {
        match self.remembered_here(link) {
            Some(value) => Ok(value),
            None => self.read_uncached(link),
        }
    }

    #[inline(always)]
    fn read_as<T>(&self, link: &Link) -> Result<T>
    where
        T: DeserializeOwned + Clone + Send + Sync + 'static,
    {
        // The counter or sum remembered last is answered here, inlined; any other read is
        // one call in tail position.
        let memo = &self.lists.memo;
        if memo.is_empty() {
            return self.read_as_uncached(link);
        }
        match memo.number(link) {
            Some(value) => {
                #[cfg(debug_assertions)]
                self.check_number(link);
                Ok(value)
            }
            None => self.read_as_remembered(link),
        }
    }

    fn read_raw(&self, doc: &DocId, path: &Path) -> Value {
        self.with_doc(doc, |_, d| d.local.at(path.segments()).cloned().unwrap_or(Value::Null))
    }

    fn note_read(&self, link: &Link) {
        let mut ledger = self.lists.ledger.borrow_mut();
        let doc = ledger.position(self.space, &link.doc);
        self.note(&mut ledger.reads, doc, &link.path);
    }
}

impl Tx<'_> {
    /// [`Read::read_as`] of what [`memo::Memo::number`] did not answer: from the memo
    /// if remembered under `link`'s texts, else [`Tx::read_as_uncached`].
    #[inline(never)]
    fn read_as_remembered<T>(&self, link: &Link) -> Result<T>
    where
        T: DeserializeOwned + Clone + Send + Sync + 'static,
    {
        match self.remembered_as(link) {
            Some(read) => shaped(link, read),
            None => self.read_as_uncached(link),
        }
    }

    /// [`Read::read_as`] of a location not remembered under `link`'s texts: out of line,
    /// so that the inlined look at the memo needs no frame.
    #[inline(never)]
    fn read_as_uncached<T>(&self, link: &Link) -> Result<T>
    where
        T: DeserializeOwned + Clone + Send + Sync + 'static,
    {
        self.uncached(link, |value| shaped(link, value.read_as()))
    }

    /// [`Read::read`] of a location not remembered under `link`'s texts.
    #[inline(never)]
    fn read_uncached(&self, link: &Link) -> Result<Value> {
        self.uncached(link, |value| Ok(value.clone()))
    }

    /// `take` of the value at a location not remembered under `link`'s texts. The
    /// document is looked at before the memo is searched by content: a plain location
    /// reads the same from either (the memo forgets at every write), and a first typed
    /// read then takes its type from the value where it lies.
    #[inline(always)]
    fn uncached<R>(&self, link: &Link, take: impl Fn(&Value) -> Result<R>) -> Result<R> {
        if let Some(taken) = self.read_plain(link, &take) {
            return taken;
        }
        let value = match self.remembered(link) {
            Some(value) => value,
            None => self.read_through_links(link)?,
        };
        take(&value)
    }

    /// The value at `link`, which has links on the way or at its end.
    fn read_through_links(&self, link: &Link) -> Result<Value> {
        let noted = self.lists.ledger.borrow().reads.len();
        let (at, value) = resolve(self, link, true)?;
        // Remembered once read again (nothing new noted): most locations are read once.
        if self.lists.ledger.borrow().reads.len() == noted {
            self.remember(link, &at, &value);
        }
        Ok(value)
    }
}

impl std::fmt::Debug for Tx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx").field("documents", &self.lists.ledger.borrow().docs.list.len()).finish()
    }
}

#[cfg(test)]
mod tests {
    use crate::prelude::*;
    use crate::{Link, Path, Read};

    #[test]
    fn a_read_after_a_write_sees_the_write_though_the_first_read_was_remembered() {
        let rt = Runtime::in_memory();
        let n = rt.new_cell("n", 1i64).expect("cell");
        let other = rt.new_cell("other", 10i64).expect("cell");
        rt.transact(|tx| {
            assert_eq!(n.get(tx)?, 1);
            assert_eq!(n.get(tx)?, 1, "remembered");
            n.set(tx, 2)?;
            assert_eq!(n.get(tx)?, 2, "the write is seen, not the remembered value");
            // The same location through a link made apart from the cell's own.
            let copy = Link::new(n.link().doc.to_string(), Path::root());
            assert_eq!(tx.read(&copy)?, Value::from(2));
            other.set(tx, 11)?;
            assert_eq!(n.get(tx)?, 2);
            assert_eq!(other.get(tx)?, 11);
            Ok(())
        })
        .expect("commit");
        assert_eq!(n.get(&rt).expect("read"), 2);
    }

    #[test]
    fn code_known_to_read_again_has_each_location_remembered_at_its_first_read() {
        let rt = Runtime::in_memory();
        let (n, other) = (rt.new_cell("n", 1i64).expect("cell"), rt.new_cell("other", 10i64).expect("cell"));
        let tx = rt.tx();
        let savepoint = tx.savepoint(true);
        assert_eq!(n.get(&tx).expect("read"), 1);
        assert_eq!(tx.lists.memo.entries().len(), 1, "remembered at its first read");
        assert_eq!(n.get(&tx).expect("read"), 1);
        assert!(!tx.reread(), "the second read was the memo's: nothing read again was noted");
        n.set(&tx, 2).expect("write");
        assert!(tx.lists.memo.is_empty(), "a write forgets what was remembered");
        assert_eq!(n.get(&tx).expect("read"), 2, "the write is seen");
        assert_eq!(other.get(&tx).expect("read"), 10);
        assert_eq!(n.get(&tx).expect("read"), 2);
        tx.release(savepoint, |_, _| {});
        // Without the hint, a location is remembered once read again, and that is told.
        let savepoint = tx.savepoint(false);
        assert_eq!(other.get(&tx).expect("read"), 10);
        assert!(tx.lists.memo.is_empty());
        assert_eq!(other.get(&tx).expect("read"), 10);
        assert!(tx.reread() && tx.lists.memo.entries().len() == 1);
        tx.release(savepoint, |_, _| {});
        rt.commit_by_hand(tx).expect("commit");
        assert_eq!(n.get(&rt).expect("read"), 2);
    }

    #[test]
    fn a_remembered_value_read_as_another_type_is_refused_with_where_it_is() {
        let rt = Runtime::in_memory();
        let n = rt.new_cell("n", 1i64).expect("cell");
        rt.transact(|tx| {
            for _ in 0..3 {
                assert_eq!(n.get(tx)?, 1, "read, then remembered");
            }
            let error = tx.read_as::<String>(n.link()).expect_err("a number is not a text");
            assert!(matches!(&error, crate::Error::Shape { at, .. } if at == n.link()), "{error}");
            assert_eq!(tx.read_as::<f64>(n.link())?, 1.0);
            Ok(())
        })
        .expect("commit");
        // The other way round: numbers are answered from the memo without serde, but a
        // remembered text or fraction read as a whole number is still refused, and a
        // remembered text still reads as itself.
        let (text, half) =
            (rt.new_cell("text", "1".to_string()).expect("cell"), rt.new_cell("half", 0.5).expect("cell"));
        rt.transact(|tx| {
            for _ in 0..3 {
                assert_eq!(text.get(tx)?, "1");
                assert_eq!(half.get(tx)?, 0.5);
            }
            for link in [text.link(), half.link()] {
                let error = tx.read_as::<i64>(link).expect_err("not a whole number");
                assert!(matches!(&error, crate::Error::Shape { at, .. } if at == link), "{error}");
            }
            assert_eq!(tx.read_as::<String>(text.link())?, "1");
            Ok(())
        })
        .expect("commit");
    }

    #[test]
    fn numbers_remembered_read_right_whichever_are_read_in_turns_and_however_many() {
        let rt = Runtime::in_memory();
        let cells: Vec<Cell<i64>> = (0..12).map(|i| rt.new_cell("n", i * 10).expect("cell")).collect();
        let big = rt.new_cell("big", u64::MAX).expect("cell");
        let tx = rt.tx();
        let savepoint = tx.savepoint(true);
        // More locations than the memo holds, read in turns (the oldest go), two by two
        // (as a computation reading a counter and a sum), and each as both number types.
        for round in 0..3 {
            for (i, cell) in cells.iter().enumerate() {
                let expected = i as i64 * 10;
                assert_eq!(cell.get(&tx).expect("read"), expected, "round {round}, cell {i}");
                assert_eq!(cells[0].get(&tx).expect("read"), 0, "round {round}, beside cell {i}");
                assert_eq!(tx.read_as::<f64>(cell.link()).expect("read"), expected as f64);
            }
        }
        for _ in 0..3 {
            assert_eq!(big.get(&tx).expect("read"), u64::MAX);
            assert_eq!(tx.read_as::<f64>(big.link()).expect("read"), u64::MAX as f64);
            assert!(tx.read_as::<i64>(big.link()).is_err(), "beyond i64: refused as it is without the memo");
        }
        // A write, and a computation's rollback, forget every number remembered.
        cells[1].set(&tx, 7).expect("write");
        assert_eq!((cells[1].get(&tx).expect("read"), cells[1].get(&tx).expect("read")), (7, 7));
        tx.rollback(savepoint);
        let savepoint = tx.savepoint(true);
        assert_eq!((cells[1].get(&tx).expect("read"), cells[1].get(&tx).expect("read")), (10, 10));
        tx.release(savepoint, |_, _| {});
        rt.commit_by_hand(tx).expect("commit");
    }

    /// The memo's debug check, shown to catch a wrong answer: a remembered value that is
    /// not what the transaction holds.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "the memo answered")]
    fn a_wrong_remembered_value_trips_the_memos_check() {
        let rt = Runtime::in_memory();
        let n = rt.new_cell("n", 1i64).expect("cell");
        let tx = rt.tx();
        let _savepoint = tx.savepoint(true);
        assert_eq!(n.get(&tx).expect("read"), 1, "remembered at its first read");
        tx.lists.memo.poison_values(99);
        let _ = tx.read(n.link());
    }

    /// The same for a number kept inline that is not the value remembered.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "inline number")]
    fn a_wrong_inline_number_trips_the_memos_check() {
        let rt = Runtime::in_memory();
        let n = rt.new_cell("n", 1i64).expect("cell");
        let tx = rt.tx();
        let _savepoint = tx.savepoint(true);
        assert_eq!(n.get(&tx).expect("read"), 1, "remembered at its first read");
        tx.lists.memo.poison_numbers(99);
        let _ = n.get(&tx);
    }

    #[test]
    fn a_transaction_sees_what_others_committed_to_the_documents_the_last_one_kept() {
        let rt = Runtime::in_memory();
        let n = rt.new_cell("n", 1i64).expect("cell");
        let m = rt.new_cell("m", 0i64).expect("cell");
        rt.transact(|tx| n.set(tx, n.get(tx)? + 1)).expect("commit");
        // `kept` gets the lists the last commit left, with n's document as it left it;
        // `other` gets lists of its own and moves that document meanwhile.
        let kept = rt.tx();
        let other = rt.tx();
        n.set(&other, 3).expect("write");
        rt.commit_by_hand(other).expect("commit");
        assert_eq!(n.get(&kept).expect("read"), 3, "the kept document is brought up to date");
        m.set(&kept, 30).expect("write");
        rt.commit_by_hand(kept).expect("commit");

        // A transaction that read a document another then moved conflicts, and the next
        // reads the document afresh.
        let (stale, other) = (rt.tx(), rt.tx());
        assert_eq!(n.get(&stale).expect("read"), 3);
        n.set(&other, 4).expect("write");
        rt.commit_by_hand(other).expect("commit");
        m.set(&stale, 40).expect("write");
        assert!(matches!(rt.commit_by_hand(stale), Err(crate::Error::Conflict { .. })), "n moved after it was read");
        rt.transact(|tx| {
            assert_eq!((n.get(tx)?, m.get(tx)?), (4, 30), "nothing of the failed commit, n as committed");
            Ok(())
        })
        .expect("commit");
    }

    #[test]
    fn a_typed_read_through_a_link_is_noted_once_and_sees_writes() {
        let rt = Runtime::in_memory();
        let a = rt.new_cell("a", 1i64).expect("cell");
        let pointer = Link::new(rt.space().new_doc_id("p"), Path::root());
        rt.transact(|tx| tx.write(&pointer, a.link().to_value())).expect("commit");
        rt.transact(|tx| {
            for _ in 0..5 {
                assert_eq!(tx.read_as::<i64>(&pointer)?, 1, "through the link");
                assert_eq!(tx.read_as::<i64>(a.link())?, 1, "plainly");
            }
            assert_eq!(tx.reads().len(), 2, "the link and its target, once each: {:?}", tx.reads());
            a.set(tx, 2)?;
            assert_eq!(tx.read_as::<i64>(&pointer)?, 2, "the write is seen through the link");
            assert!(tx.read_as::<String>(&pointer).is_err(), "a number is not a text");
            Ok(())
        })
        .expect("commit");
    }

    #[test]
    fn a_location_reached_through_a_link_follows_the_link_as_it_changes() {
        let rt = Runtime::in_memory();
        let a = rt.new_cell("a", 1i64).expect("cell");
        let b = rt.new_cell("b", 2i64).expect("cell");
        let pointer = Link::new(rt.space().new_doc_id("p"), Path::root());
        rt.transact(|tx| {
            tx.write(&pointer, a.link().to_value())?;
            for _ in 0..3 {
                assert_eq!(tx.read(&pointer)?, Value::from(1));
            }
            tx.write(&pointer, b.link().to_value())?;
            assert_eq!(tx.read(&pointer)?, Value::from(2), "the new link is followed");
            Ok(())
        })
        .expect("commit");
        rt.transact(|tx| {
            for _ in 0..20 {
                assert_eq!(tx.read(&pointer)?, Value::from(2));
                assert_eq!(a.get(tx)?, 1);
            }
            // The link, its target and `a`, each noted once however often they are read.
            assert_eq!(tx.reads().len(), 3, "{:?}", tx.reads());
            Ok(())
        })
        .expect("commit");
    }
}
