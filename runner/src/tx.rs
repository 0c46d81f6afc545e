//! Transactions: reads against a snapshot, buffered writes, atomic commit.
//!
//! A [`Tx`] takes a snapshot of each document the first time it touches it (O(1) with
//! persistent values), records every path it reads (the read set: for conflict checks
//! and for the scheduler's dependency tracking) and buffers writes (the write set). It
//! commits through [`crate::Runtime::transact`] or as part of a handler or computation.
//!
//! The engine runs all the computations of one settle in a single transaction; each
//! runs between a `Savepoint` and `Tx::release` (keep its writes) or
//! `Tx::rollback` (it failed: forget them).

use std::cell::RefCell;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::error::Result;
use crate::link::{DocId, Link};
use crate::read::{resolve, Read};
use crate::runtime::Runtime;
use crate::space::{DocWrites, Space, Version};
use crate::value::{Path, Value};

/// Work to run once a transaction has committed.
pub(crate) type AfterCommit = Box<dyn FnOnce(&Runtime) + Send>;

/// Up to this many documents a linear search finds a document fastest; beyond, an index
/// (a settle's transaction touches every document its computations read and write).
const SCAN_LIMIT: usize = 8;

/// The documents a transaction touched, in first-touch order.
#[derive(Default)]
struct Docs {
    list: Vec<(DocId, DocWrites)>,
    /// Position in `list` by id, once `list` is longer than [`SCAN_LIMIT`].
    index: FxHashMap<DocId, usize>,
    /// The position found last: reading a location looks its document up twice (value,
    /// then read set), and computations often read one document many times.
    last: usize,
}

impl Docs {
    fn position(&mut self, doc: &DocId) -> Option<usize> {
        if self.list.get(self.last).is_some_and(|(id, _)| Arc::ptr_eq(id, doc)) {
            return Some(self.last);
        }
        let found = if self.list.len() <= SCAN_LIMIT {
            self.list.iter().position(|(id, _)| id == doc)
        } else {
            self.index.get(doc).copied()
        };
        if let Some(at) = found {
            self.last = at;
        }
        found
    }

    /// Adds a document first touched, with its snapshot.
    fn push(&mut self, doc: DocId, (local, read_version): (Value, Version)) -> usize {
        self.list.push((doc, DocWrites { read_version, local, ops: Vec::new(), reads: Vec::new() }));
        let len = self.list.len();
        if len == SCAN_LIMIT + 1 {
            self.index = self.list.iter().enumerate().map(|(i, (id, _))| (id.clone(), i)).collect();
        } else if len > SCAN_LIMIT + 1 {
            self.index.insert(self.list[len - 1].0.clone(), len - 1);
        }
        len - 1
    }
}

/// The state of a document before the first write since the open [`Savepoint`].
struct Undo {
    doc: usize,
    local: Value,
    ops: usize,
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
    docs: RefCell<Docs>,
    after_commit: RefCell<Vec<AfterCommit>>,
    reads: RefCell<Vec<Link>>,
    /// Where the open savepoint's reads start (a read before it is not one of its own).
    reads_floor: std::cell::Cell<usize>,
    /// How to undo the writes made since the open savepoint (kept allocated between
    /// savepoints: a settle opens one per computation).
    undo: RefCell<Vec<Undo>>,
    /// Whether a savepoint is open.
    open: std::cell::Cell<bool>,
}

impl<'s> Tx<'s> {
    pub(crate) fn new(space: &'s Space) -> Self {
        Tx {
            space,
            docs: RefCell::new(Docs::default()),
            after_commit: RefCell::new(Vec::new()),
            reads: RefCell::new(Vec::new()),
            reads_floor: std::cell::Cell::new(0),
            undo: RefCell::new(Vec::new()),
            open: std::cell::Cell::new(false),
        }
    }

    /// The space this transaction runs against.
    pub fn space(&self) -> &'s Space {
        self.space
    }

    fn with_doc<T>(&self, doc: &DocId, f: impl FnOnce(usize, &mut DocWrites) -> T) -> T {
        let mut docs = self.docs.borrow_mut();
        let index = match docs.position(doc) {
            Some(index) => index,
            None => docs.push(doc.clone(), self.space.snapshot(doc)),
        };
        f(index, &mut docs.list[index].1)
    }

    /// Writes `value` at `link`. Links along the path are followed; a link stored exactly
    /// at `link` is replaced, not written through.
    pub fn write(&self, link: &Link, value: Value) -> Result<()> {
        let target = match link.path.segments().split_last() {
            None => link.clone(),
            Some((last, parent)) => {
                let parent = Link::new(link.doc.clone(), Path::new(parent.iter().cloned()));
                let (parent_at, _) = resolve(self, &parent, false)?;
                parent_at.child(last.clone())
            }
        };
        crate::depth::check_write(&value, &target.path, format_args!("the value written at {target}"))?;
        // Writing what is already there changes nothing: no commit entry, no re-runs (and
        // a document this transaction did not touch yet is not even added to it).
        let unchanged = |local: &Value| local.at(target.path.segments()) == Some(&value);
        let mut docs = self.docs.borrow_mut();
        let index = match docs.position(&target.doc) {
            Some(index) => index,
            None => {
                let snapshot = self.space.snapshot(&target.doc);
                if unchanged(&snapshot.0) {
                    return Ok(());
                }
                docs.push(target.doc.clone(), snapshot)
            }
        };
        let d = &mut docs.list[index].1;
        if unchanged(&d.local) {
            return Ok(());
        }
        let mut log = self.undo.borrow_mut();
        let before = (self.open.get() && !log.iter().any(|u| u.doc == index)).then(|| d.local.clone());
        d.local.set_at(target.path.segments(), value.clone())?;
        if let Some(local) = before {
            log.push(Undo { doc: index, local, ops: d.ops.len() });
        }
        d.ops.push((target.path, value));
        Ok(())
    }

    /// Whether this transaction has written anything.
    pub fn has_writes(&self) -> bool {
        self.docs.borrow().list.iter().any(|(_, d)| !d.ops.is_empty())
    }

    /// Every location read so far (the dependencies of a computation).
    pub fn reads(&self) -> Vec<Link> {
        self.reads.borrow().clone()
    }

    /// Runs `f` once this transaction has committed (never if it rolls back or is
    /// retried): the place to start async work that must see the transaction's writes.
    pub fn after_commit(&self, f: impl FnOnce(&Runtime) + Send + 'static) {
        self.after_commit.borrow_mut().push(Box::new(f));
    }

    /// Opens a savepoint: what is written from now on can be undone with
    /// [`Tx::rollback`] or kept with [`Tx::release`]. Savepoints do not nest.
    pub(crate) fn savepoint(&self) -> Savepoint {
        self.undo.borrow_mut().clear();
        self.open.set(true);
        let reads = self.reads.borrow().len();
        self.reads_floor.set(reads);
        Savepoint { reads, hooks: self.after_commit.borrow().len() }
    }

    /// The locations read since `savepoint` (taken out of the list: the reads of each
    /// computation of a settle are its own dependencies). Hand the list back with
    /// [`Tx::recycle_reads`] when done, so the next computation reuses it.
    pub(crate) fn reads_since(&self, savepoint: &Savepoint) -> Vec<Link> {
        let mut reads = self.reads.borrow_mut();
        match savepoint.reads {
            0 => std::mem::take(&mut *reads),
            at => reads.split_off(at),
        }
    }

    /// Gives back a list taken with [`Tx::reads_since`], to be reused.
    pub(crate) fn recycle_reads(&self, mut list: Vec<Link>) {
        let mut reads = self.reads.borrow_mut();
        if reads.is_empty() && list.capacity() > reads.capacity() {
            list.clear();
            *reads = list;
        }
    }

    /// Keeps what was written since `savepoint`; calls `written` with each document
    /// written since and the paths written there.
    pub(crate) fn release(&self, _savepoint: Savepoint, mut written: impl FnMut(&DocId, PathsWritten<'_>)) {
        self.open.set(false);
        let log = self.undo.borrow();
        let docs = self.docs.borrow();
        for u in log.iter() {
            let (id, d) = &docs.list[u.doc];
            written(id, d.ops[u.ops..].iter().map(|(p, _)| p));
        }
    }

    /// Undoes every write and after-commit hook since `savepoint`.
    pub(crate) fn rollback(&self, savepoint: Savepoint) {
        self.open.set(false);
        let mut docs = self.docs.borrow_mut();
        for u in self.undo.borrow_mut().drain(..) {
            let d = &mut docs.list[u.doc].1;
            d.local = u.local;
            d.ops.truncate(u.ops);
        }
        self.after_commit.borrow_mut().truncate(savepoint.hooks);
    }

    pub(crate) fn into_parts(self) -> (Vec<(DocId, DocWrites)>, Vec<AfterCommit>) {
        (self.docs.into_inner().list, self.after_commit.into_inner())
    }
}

impl Read for Tx<'_> {
    fn read_raw(&self, doc: &DocId, path: &Path) -> Value {
        self.with_doc(doc, |_, d| d.local.at(path.segments()).cloned().unwrap_or(Value::Null))
    }

    fn note_read(&self, link: &Link) {
        self.with_doc(&link.doc, |_, d| {
            // Computations often read one location many times in a row.
            if d.reads.last() != Some(&link.path) {
                d.reads.push(link.path.clone());
            }
        });
        let mut reads = self.reads.borrow_mut();
        if reads.len() <= self.reads_floor.get() || reads.last() != Some(link) {
            reads.push(link.clone());
        }
    }
}

impl std::fmt::Debug for Tx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx").field("documents", &self.docs.borrow().list.len()).finish()
    }
}
