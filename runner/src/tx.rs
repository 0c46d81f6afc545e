//! Transactions: reads against a snapshot, buffered writes, atomic commit.
//!
//! A [`Tx`] takes a snapshot of each document the first time it touches it (O(1) with
//! persistent values), records every path it reads (the read set: for conflict checks
//! and for the scheduler's dependency tracking) and buffers writes (the write set). It
//! commits through [`crate::Runtime::transact`] or as part of a handler or computation.

use std::cell::RefCell;

use crate::depth::MAX_DOC_DEPTH;
use crate::error::{Error, Result};
use crate::link::{DocId, Link};
use crate::runtime::Runtime;
use crate::space::Space;
use crate::value::{Path, Segment, Value};

/// How many links a read may follow before it is considered a loop.
const MAX_LINK_HOPS: usize = 64;

/// Read access to a space: a [`Tx`] (tracked, snapshot-consistent) or the runtime itself
/// (latest committed values, untracked).
pub trait Read {
    /// The value stored exactly at `path` of `doc`, not following links.
    fn read_raw(&self, doc: &DocId, path: &Path) -> Value;

    /// Records that `link` was read (a no-op outside transactions).
    fn note_read(&self, link: &Link);

    /// Follows links along `link` and at its end; returns the final location and value.
    fn resolve(&self, link: &Link) -> Result<(Link, Value)> {
        resolve(self, link, true, true)
    }

    /// The value at `link`, following links.
    fn read(&self, link: &Link) -> Result<Value> {
        self.resolve(link).map(|(_, v)| v)
    }

    /// The value at `link` with every nested link replaced by what it points to: a plain
    /// JSON snapshot (stream markers stay markers).
    fn read_deep(&self, link: &Link) -> Result<Value> {
        let (at, value) = self.resolve(link)?;
        deep(self, &at, value, 0, 0)
    }
}

/// Replaces the links inside `value` (found at `at`) by what they point to. `hops` counts
/// the links followed on the way here (a loop never ends), `depth` the containers entered
/// (data is deep, not circular; bounded so the recursion stays within the stack).
fn deep<R: Read + ?Sized>(r: &R, at: &Link, value: Value, hops: usize, depth: usize) -> Result<Value> {
    if hops > MAX_LINK_HOPS {
        return Err(Error::LinkLoop(at.clone()));
    }
    if depth > MAX_DOC_DEPTH {
        let what = "the value read";
        return Err(Error::TooDeep { what: what.into(), at: at.to_string(), limit: MAX_DOC_DEPTH });
    }
    if Link::from_value(&value).is_some() {
        let (target, resolved) = r.resolve(at)?;
        return deep(r, &target, resolved, hops + 1, depth);
    }
    match value {
        Value::Object(map) => {
            let mut out = map.clone();
            for (k, v) in map {
                out.insert(k.clone(), deep(r, &at.child(k), v, hops, depth + 1)?);
            }
            Ok(Value::Object(out))
        }
        Value::Array(items) => {
            let mut out = items.clone();
            for (i, v) in items.into_iter().enumerate() {
                out.set(i, deep(r, &at.child(i.to_string()), v, hops, depth + 1)?);
            }
            Ok(Value::Array(out))
        }
        other => Ok(other),
    }
}

/// Follows links along the path (and at its end when `follow_last`). The links followed
/// are recorded as reads; so is the final location when `note_end` (a write target's
/// parent is not a read: recording it would make writes to sibling fields conflict).
pub(crate) fn resolve<R: Read + ?Sized>(
    r: &R,
    link: &Link,
    follow_last: bool,
    note_end: bool,
) -> Result<(Link, Value)> {
    let mut doc = link.doc.clone();
    let mut segments: Vec<Segment> = link.path.segments().to_vec();
    'hops: for _ in 0..MAX_LINK_HOPS {
        let root = r.read_raw(&doc, &Path::root());
        let mut cur = &root;
        for i in 0..=segments.len() {
            let at_end = i == segments.len();
            if !at_end || follow_last {
                if let Some(target) = Link::from_value(cur) {
                    r.note_read(&Link::new(doc.clone(), Path::new(segments[..i].iter().cloned())));
                    let rest = segments.split_off(i);
                    segments = target.path.join(&rest).segments().to_vec();
                    doc = target.doc;
                    continue 'hops;
                }
            }
            if at_end {
                break;
            }
            match cur.child(&segments[i]) {
                Some(child) => cur = child,
                None => {
                    cur = &Value::Null;
                    break;
                }
            }
        }
        let at = Link::new(doc, Path::new(segments));
        if note_end {
            r.note_read(&at);
        }
        return Ok((at, cur.clone()));
    }
    Err(Error::LinkLoop(link.clone()))
}

/// Work to run once a transaction has committed.
pub(crate) type AfterCommit = Box<dyn FnOnce(&Runtime) + Send>;

/// The buffered state of one document inside a transaction.
#[derive(Debug, Clone)]
pub(crate) struct DocWrites {
    /// The version of the snapshot this transaction works on.
    pub read_version: u64,
    /// The snapshot with this transaction's writes applied.
    pub local: Value,
    /// Writes in order, to replay onto a newer version at commit.
    pub ops: Vec<(Path, Value)>,
    /// Paths read in this document.
    pub reads: Vec<Path>,
}

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
                let (parent_at, _) = resolve(self, &parent, true, false)?;
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
