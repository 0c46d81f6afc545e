//! Reading a space: following links, and deep reads that replace every link by what it
//! points to. Transactions, the space and the runtime all read through [`Read`].

use serde::de::DeserializeOwned;

use crate::depth::MAX_DOC_DEPTH;
use crate::error::{Error, Result};
use crate::link::{DocId, Link};
use crate::value::{Path, Value};

/// How many links a read may follow before it is considered a loop.
const MAX_LINK_HOPS: usize = 64;

/// Read access to a space: a `Tx` (tracked, snapshot-consistent) or the runtime itself
/// (latest committed values, untracked).
pub trait Read {
    /// The value stored exactly at `path` of `doc`, not following links.
    fn read_raw(&self, doc: &DocId, path: &Path) -> Value;

    /// Records that `link` was read (a no-op outside transactions).
    fn note_read(&self, link: &Link);

    /// Follows links along `link` and at its end; returns the final location and value.
    fn resolve(&self, link: &Link) -> Result<(Link, Value)> {
        resolve(self, link, true)
    }

    /// The value at `link`, following links.
    fn read(&self, link: &Link) -> Result<Value> {
        self.resolve(link).map(|(_, v)| v)
    }

    /// The value at `link` (links followed) read as `T`, as [`Value::read_as`] reads it:
    /// what [`Cell::get`](crate::Cell::get) does. A transaction reads a location it read
    /// before straight from what it remembers, without copying the value.
    fn read_as<T>(&self, link: &Link) -> Result<T>
    where
        Self: Sized,
        T: DeserializeOwned + Clone + Send + Sync + 'static,
    {
        // Read where the read left it, not moved out first: a value just written as two
        // halves and loaded again whole waits for the writes to land.
        match self.read(link) {
            Ok(ref value) => shaped(link, value.read_as()),
            Err(error) => Err(error),
        }
    }

    /// The value at `link` with every nested link replaced by what it points to: a plain
    /// JSON snapshot (stream markers stay markers).
    fn read_deep(&self, link: &Link) -> Result<Value> {
        let (at, value) = self.resolve(link)?;
        deep(self, &at, value, 0, 0)
    }
}

/// A value read as a type, or why it is not of that type.
#[inline]
pub(crate) fn shaped<T>(link: &Link, read: std::result::Result<T, serde_json::Error>) -> Result<T> {
    read.map_err(|source| shape_error(link, source))
}

/// Out of line: a value of the wrong shape is rare, and building the error inline would
/// widen every reader's frame.
#[cold]
#[inline(never)]
fn shape_error(link: &Link, source: serde_json::Error) -> Error {
    Error::Shape { at: link.clone(), source }
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
            let mut out = (*items).clone();
            for (i, v) in items.iter().enumerate() {
                out.set(i, deep(r, &at.child(i.to_string()), v.clone(), hops, depth + 1)?);
            }
            Ok(Value::Array(std::sync::Arc::new(out)))
        }
        other => Ok(other),
    }
}

/// The value at `path` in `root` when no link lies on the way or at the end (the common
/// case: then the location is found in one look); `None` when links must be followed.
#[inline]
pub(crate) fn plain_at<'v>(root: &'v Value, path: &Path) -> Option<&'v Value> {
    static ABSENT: Value = Value::Null;
    let may_be_link = |v: &Value| v.as_object().is_some_and(|m| m.contains_key(crate::link::LINK_KEY));
    let mut cur = root;
    for segment in path.segments() {
        if may_be_link(cur) {
            return None;
        }
        match cur.child(segment) {
            Some(child) => cur = child,
            None => return Some(&ABSENT),
        }
    }
    (!may_be_link(cur)).then_some(cur)
}

/// Follows links along the path and at its end. The links followed are recorded as
/// reads; so is the final location when `note_end` (a write target's parent is not a
/// read: recording it would make writes to sibling fields conflict).
pub(crate) fn resolve<R: Read + ?Sized>(r: &R, link: &Link, note_end: bool) -> Result<(Link, Value)> {
    // The location reached so far; a new one is made only when a link is followed.
    let mut at = link.clone();
    'hops: for _ in 0..MAX_LINK_HOPS {
        let root = r.read_raw(&at.doc, &Path::root());
        let mut cur = &root;
        let segments = at.path.segments();
        for i in 0..=segments.len() {
            if let Some(target) = Link::from_value(cur) {
                r.note_read(&Link::new(at.doc.clone(), Path::new(segments[..i].iter().cloned())));
                let next = Link::new(target.doc, target.path.join(&segments[i..]));
                at = next;
                continue 'hops;
            }
            if i == segments.len() {
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
        if note_end {
            r.note_read(&at);
        }
        return Ok((at, cur.clone()));
    }
    Err(Error::LinkLoop(link.clone()))
}
