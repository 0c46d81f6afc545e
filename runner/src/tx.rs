//! Transactions: reads against a snapshot, buffered writes, atomic commit.
//!
//! A [`Tx`] takes a snapshot of each document the first time it touches it (O(1) with
//! persistent values), records every path it reads (the read set: for conflict checks
//! and for the scheduler's dependency tracking) and buffers writes (the write set). It
//! commits through [`crate::Runtime::transact`] or as part of a handler or computation.

use std::cell::RefCell;

use crate::error::Result;
use crate::link::{DocId, Link};
use crate::read::{resolve, Read};
use crate::runtime::Runtime;
use crate::space::{DocWrites, Space};
use crate::value::{Path, Value};

/// Work to run once a transaction has committed.
pub(crate) type AfterCommit = Box<dyn FnOnce(&Runtime) + Send>;

/// A transaction against one space.
pub struct Tx<'s> {
    space: &'s Space,
    /// Documents touched, in first-touch order (transactions touch few documents, so a
    /// vector beats a hash map).
    docs: RefCell<Vec<(DocId, DocWrites)>>,
    after_commit: RefCell<Vec<AfterCommit>>,
    reads: RefCell<Vec<Link>>,
}

impl<'s> Tx<'s> {
    pub(crate) fn new(space: &'s Space) -> Self {
        Tx {
            space,
            docs: RefCell::new(Vec::new()),
            after_commit: RefCell::new(Vec::new()),
            reads: RefCell::new(Vec::new()),
        }
    }

    /// The space this transaction runs against.
    pub fn space(&self) -> &'s Space {
        self.space
    }

    fn with_doc<T>(&self, doc: &DocId, f: impl FnOnce(&mut DocWrites) -> T) -> T {
        let mut docs = self.docs.borrow_mut();
        let index = match docs.iter().position(|(id, _)| id == doc) {
            Some(index) => index,
            None => {
                let (value, version) = self.space.snapshot(doc);
                docs.push((
                    doc.clone(),
                    DocWrites { read_version: version, local: value, ops: Vec::new(), reads: Vec::new() },
                ));
                docs.len() - 1
            }
        };
        f(&mut docs[index].1)
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
        self.with_doc(&target.doc, |d| {
            // Writing what is already there changes nothing: no commit entry, no re-runs.
            if d.local.at(target.path.segments()) == Some(&value) {
                return Ok(());
            }
            d.local.set_at(target.path.segments(), value.clone())?;
            d.ops.push((target.path.clone(), value));
            Ok(())
        })
    }

    /// Whether this transaction has written anything.
    pub fn has_writes(&self) -> bool {
        self.docs.borrow().iter().any(|(_, d)| !d.ops.is_empty())
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

    pub(crate) fn into_parts(self) -> (Vec<(DocId, DocWrites)>, Vec<AfterCommit>) {
        (self.docs.into_inner(), self.after_commit.into_inner())
    }
}

impl Read for Tx<'_> {
    fn read_raw(&self, doc: &DocId, path: &Path) -> Value {
        self.with_doc(doc, |d| d.local.at(path.segments()).cloned().unwrap_or(Value::Null))
    }

    fn note_read(&self, link: &Link) {
        self.with_doc(&link.doc, |d| d.reads.push(link.path.clone()));
        self.reads.borrow_mut().push(link.clone());
    }
}

impl std::fmt::Debug for Tx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx").field("documents", &self.docs.borrow().len()).finish()
    }
}
