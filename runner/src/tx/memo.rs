//! The memo of a transaction: the locations read again since its last write (or its
//! computation's savepoint), with their values, so that reading one again is a look at
//! a short list, not a read of its document. Only the transaction's own writes change
//! what it sees, so every write forgets the memo.

use serde::de::DeserializeOwned;

use super::docs::text_key;
use super::{Tx, RECENT_READS};
use crate::link::{DocId, Link};
use crate::value::{same_text, Path, Value};

/// How many locations a transaction remembers having read since its last write (see
/// [`Tx::read`]).
const MEMO: usize = 8;

/// A value read, and where: the addresses of the id and path asked for, kept alive by
/// [`Docs::list`](super::docs::Docs::list) and the transaction's reads (`read` is its place there) or, when links
/// led elsewhere, by `asked`.
pub(super) struct Remembered {
    doc: usize,
    path: usize,
    read: usize,
    value: Value,
    asked: Option<Link>,
}

impl Remembered {
    /// `value`, read at the location the transaction noted as its `read`th read: `path`
    /// in the document of `id`.
    pub(super) fn noted(id: &DocId, read: usize, path: &Path, value: &Value) -> Self {
        Remembered { doc: text_key(id), path: path.address(), read, value: value.clone(), asked: None }
    }
}

/// What a look at the memo for a number found (see [`Tx::remembered_number`]).
pub(super) enum MemoLook<T> {
    /// The number remembered, as `T`.
    Found(T),
    /// Nothing is remembered under the link's texts.
    Absent,
    /// Not looked at (`T` is no number type), or what is remembered is not a `T`.
    NotLooked,
}

impl Tx<'_> {
    /// The value read at `link` since the last write, if `link` shares its id's and
    /// path's texts with the read (handles share them, so this is nearly always how a
    /// location read again is recognised; the memo and this transaction keep those texts
    /// alive, so no other text can have their addresses). Small and inlined: a computation
    /// reads its inputs many times, and most of those reads end here.
    #[inline]
    pub(super) fn remembered_here(&self, link: &Link) -> Option<Value> {
        let memo = self.lists.memo.borrow();
        let (doc, path) = (text_key(&link.doc), link.path.address());
        memo.iter().find(|m| m.doc == doc && m.path == path).map(|hit| hit.value.clone())
    }

    /// [`Tx::remembered_here`] read as `T`, from the value remembered (not a copy).
    pub(super) fn remembered_as<T>(&self, link: &Link) -> Option<std::result::Result<T, serde_json::Error>>
    where
        T: DeserializeOwned + Clone + Send + Sync + 'static,
    {
        let memo = self.lists.memo.borrow();
        let (doc, path) = (text_key(&link.doc), link.path.address());
        memo.iter().find(|m| m.doc == doc && m.path == path).map(|hit| hit.value.read_as())
    }

    /// [`Tx::remembered_here`] as `T` when `T` is a number type ([`Value::number_as`]):
    /// no call on the way, so the inlined look at the memo needs no frame of its own.
    #[inline]
    pub(super) fn remembered_number<T: Clone + 'static>(&self, link: &Link) -> MemoLook<T> {
        use std::any::TypeId;
        if TypeId::of::<T>() != TypeId::of::<i64>() && TypeId::of::<T>() != TypeId::of::<f64>() {
            return MemoLook::NotLooked;
        }
        let memo = self.lists.memo.borrow();
        let (doc, path) = (text_key(&link.doc), link.path.address());
        match memo.iter().find(|m| m.doc == doc && m.path == path) {
            None => MemoLook::Absent,
            Some(hit) => hit.value.number_as().map_or(MemoLook::NotLooked, MemoLook::Found),
        }
    }

    /// The value read at `link` since the last write, found by content (another link to
    /// a location read; see [`Tx::remembered_here`] for the usual way).
    pub(super) fn remembered(&self, link: &Link) -> Option<Value> {
        let memo = self.lists.memo.borrow();
        if memo.is_empty() {
            return None;
        }
        let reads = self.lists.reads.borrow();
        let docs = self.lists.docs.borrow();
        let same = |m: &Remembered| match &m.asked {
            Some(asked) => asked == link,
            None => reads.get(m.read).is_some_and(|(doc, path)| {
                *path == link.path && docs.list.get(*doc as usize).is_some_and(|d| same_text(&d.id, &link.doc))
            }),
        };
        memo.iter().find(|m| same(m)).map(|m| m.value.clone())
    }

    /// Remembers the value just read at `link`, which led to `at`, the latest of `reads`.
    pub(super) fn remember(&self, link: &Link, at: &Link, value: &Value) {
        let remembered = if at == link {
            // Its read was just noted, or found among the latest (see `note_read`).
            let reads = self.lists.reads.borrow();
            let docs = self.lists.docs.borrow();
            let floor = self.reads_floor.get().max(reads.len().saturating_sub(RECENT_READS + 1));
            let noted = reads.iter().enumerate().skip(floor).rev().find(|(_, (doc, path))| {
                *path == link.path && docs.list.get(*doc as usize).is_some_and(|d| same_text(&d.id, &link.doc))
            });
            let Some((read, (doc, path))) = noted else { return };
            Remembered::noted(&docs.list[*doc as usize].id, read, path, value)
        } else {
            // Links on the way: the location asked for is kept, so its addresses stay its.
            let asked = link.clone();
            let (doc, path) = (text_key(&asked.doc), asked.path.address());
            Remembered { doc, path, read: usize::MAX, value: value.clone(), asked: Some(asked) }
        };
        self.memorise(remembered);
    }

    pub(super) fn memorise(&self, remembered: Remembered) {
        let mut memo = self.lists.memo.borrow_mut();
        if memo.len() == MEMO {
            // The oldest goes: a computation reading more locations than this is rare.
            memo.rotate_left(1);
            memo.pop();
        }
        memo.push(remembered);
    }
}
