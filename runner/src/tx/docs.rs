//! The documents a transaction touched, and how it finds one again: by the address of
//! an id's text (handles share their ids) or of the document's entry in the space.

use std::sync::Arc;

use smallvec::SmallVec;

use crate::link::DocId;
use crate::space::{DocEntry, DocWrites, Version};
use crate::value::{same_text, Value};

/// Up to this many documents a linear search finds a document fastest; beyond, an index
/// (a settle's transaction touches every document its computations read and write).
const SCAN_LIMIT: usize = 8;

/// The documents a transaction touched, and (in a settle's transaction) those the
/// settles before it touched, kept with what they last saw.
#[derive(Default)]
pub(super) struct Docs {
    pub list: Vec<DocWrites>,
    /// Positions in `list` of the documents this transaction touched, in first-touch
    /// order: what it commits.
    pub touched: Vec<u32>,
    /// Positions in `list` once it is longer than [`SCAN_LIMIT`], by the address of an
    /// id's text ([`text_key`]) and by the address of an entry ([`entry_key`]).
    ///
    /// Handles share their ids, so a text's address nearly always stands for one
    /// document; a hit is still checked against the id, since an address is reused once
    /// the text that had it is dropped. Entries are kept alive by `list`, so their
    /// addresses name documents: an id whose text is new to this transaction is told
    /// apart from one of its documents without comparing or hashing ids.
    index: Addresses,
    /// The position found last: computations often read one document many times.
    last: usize,
}

/// The key of an id's text: its address, tagged so that it never equals an entry's.
pub(super) fn text_key(id: &DocId) -> usize {
    Arc::as_ptr(id).cast::<u8>() as usize | 1
}

/// The key of an entry: its address (aligned, so never tagged like a text's).
fn entry_key(entry: &Arc<DocEntry>) -> usize {
    Arc::as_ptr(entry) as usize
}

impl Docs {
    /// After a commit (`committed`: whether it succeeded), keeps the documents for the
    /// next transaction, untouched. One a failed commit touched is marked out of date,
    /// to be read again.
    pub fn untouch(&mut self, committed: bool) {
        for at in self.touched.drain(..).map(|at| at as usize) {
            let d = &mut self.list[at];
            d.touched = false;
            if !committed {
                d.ops.clear();
                d.read_version = Version::UNKNOWN;
            }
        }
        self.last = 0;
    }

    /// Forgets every document (keeping the list's room; the index starts afresh).
    pub fn clear(&mut self) {
        self.list.clear();
        self.touched.clear();
        self.index = Addresses::default();
        self.last = 0;
    }

    /// Marks the document at `at` touched by this transaction. One kept from an earlier
    /// transaction is brought up to date first, if a commit moved it since.
    #[inline]
    fn touch(&mut self, at: usize) {
        let d = &mut self.list[at];
        if !d.touched {
            d.touched = true;
            self.touched.push(at as u32);
            if d.entry.version() != d.read_version {
                d.read_again();
            }
        }
    }

    /// Where `doc` is, if this transaction touched it under this id's text (the quick
    /// way: [`Docs::find`] finds it under any text).
    #[inline]
    pub fn position(&mut self, doc: &DocId) -> Option<usize> {
        if self.list.get(self.last).is_some_and(|d| d.touched && Arc::ptr_eq(&d.id, doc)) {
            #[cfg(debug_assertions)]
            self.check(doc, self.last);
            return Some(self.last);
        }
        let found = if self.list.len() <= SCAN_LIMIT {
            self.list.iter().position(|d| Arc::ptr_eq(&d.id, doc))
        } else {
            self.index.get(text_key(doc)).filter(|at| same_text(&self.list[*at].id, doc))
        };
        if let Some(at) = found {
            #[cfg(debug_assertions)]
            self.check(doc, at);
            self.touch(at);
            self.last = at;
        }
        found
    }

    /// Panics unless `at`, where the index or the last position found `doc`, holds the
    /// document of that id (debug builds check every answer of the index, comparing ids:
    /// a scan of the list would make a settle of thousands of documents quadratic).
    #[cfg(debug_assertions)]
    fn check(&self, doc: &DocId, at: usize) {
        let there = &self.list[at].id;
        assert!(**there == **doc, "the documents index found {doc} at {at}, which holds {there}");
    }

    /// Where the document of `entry` (looked up as `doc`) is, if this transaction touched
    /// it; remembers `doc`'s text for it.
    pub fn position_of_entry(&mut self, doc: &DocId, entry: &Arc<DocEntry>) -> Option<usize> {
        let at = if self.list.len() <= SCAN_LIMIT {
            self.list.iter().position(|d| Arc::ptr_eq(&d.entry, entry))
        } else {
            let at = self.index.get(entry_key(entry));
            // Another text of its id is remembered too (its own was, when it came).
            if let Some(at) = at.filter(|at| !Arc::ptr_eq(&self.list[*at].id, doc)) {
                self.index.insert(text_key(doc), at);
            }
            at
        }?;
        #[cfg(debug_assertions)]
        self.check(doc, at);
        self.touch(at);
        self.last = at;
        Some(at)
    }

    /// [`Docs::position_of_entry`], looking first at `hint`, where the caller found it
    /// last time.
    pub fn position_hinted(&mut self, doc: &DocId, entry: &Arc<DocEntry>, hint: usize) -> Option<usize> {
        if self.list.get(hint).is_some_and(|d| Arc::ptr_eq(&d.entry, entry)) {
            self.touch(hint);
            self.last = hint;
            return Some(hint);
        }
        self.position_of_entry(doc, entry)
    }

    /// Where `doc` is, if this transaction touched it under any text; otherwise its entry
    /// (from `entry`, which looks it up), for the caller to [`Docs::push`] it.
    pub fn find(&mut self, doc: &DocId, entry: impl FnOnce() -> Arc<DocEntry>) -> Result<usize, Arc<DocEntry>> {
        if let Some(at) = self.position(doc) {
            return Ok(at);
        }
        let entry = entry();
        self.position_of_entry(doc, &entry).ok_or(entry)
    }

    /// Adds a document first touched, with its entry and snapshot.
    pub fn push(&mut self, id: DocId, entry: Arc<DocEntry>, (local, read_version): (Value, Version)) -> usize {
        self.list.push(DocWrites {
            id,
            key: entry.key(),
            entry,
            read_version,
            local,
            ops: SmallVec::new(),
            touched: true,
        });
        let len = self.list.len();
        self.touched.push(len as u32 - 1);
        if len == SCAN_LIMIT + 1 {
            for (at, d) in self.list.iter().enumerate() {
                self.index.insert(text_key(&d.id), at);
                self.index.insert(entry_key(&d.entry), at);
            }
        } else if len > SCAN_LIMIT + 1 {
            let d = &self.list[len - 1];
            self.index.insert(text_key(&d.id), len - 1);
            self.index.insert(entry_key(&d.entry), len - 1);
        }
        self.last = len - 1;
        len - 1
    }
}

/// A table of (address, position) with linear probing: filled and looked up several
/// times for every computation a settle runs, where a general hash map costs more.
#[derive(Default)]
struct Addresses {
    /// A power of two of slots (or none); key 0 marks a free slot (no address is 0).
    slots: Vec<(usize, usize)>,
    len: usize,
    /// 64 minus the log2 of the slot count: a key's first slot is the top bits of its
    /// product with an odd constant (aligned addresses differ in their high bits only).
    shift: u32,
}

const FREE: usize = 0;

impl Addresses {
    fn home(&self, key: usize) -> usize {
        (key as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_shr(self.shift) as usize
    }

    fn get(&self, key: usize) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            match self.slots[i] {
                (k, at) if k == key => return Some(at),
                (FREE, _) => return None,
                _ => i = (i + 1) & mask,
            }
        }
    }

    /// Sets the position of `key` (replacing an earlier one).
    fn insert(&mut self, key: usize, at: usize) {
        if 2 * (self.len + 1) > self.slots.len() {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(key);
        loop {
            match self.slots[i].0 {
                k if k == key => break,
                FREE => {
                    self.len += 1;
                    break;
                }
                _ => i = (i + 1) & mask,
            }
        }
        self.slots[i] = (key, at);
    }

    /// Doubles the slots (at least 256: a settle's chunk touches dozens of documents, each
    /// under two keys).
    fn grow(&mut self) {
        let size = (2 * self.slots.len()).max(256);
        let old = std::mem::replace(&mut self.slots, vec![(FREE, 0); size]);
        self.shift = 64 - size.trailing_zeros();
        self.len = 0;
        for (key, at) in old.into_iter().filter(|(key, _)| *key != FREE) {
            self.insert(key, at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Addresses;

    #[test]
    fn addresses_find_what_was_inserted_and_nothing_else() {
        let mut index = Addresses::default();
        assert_eq!(index.get(8), None);
        // Aligned, like real addresses, and more than the first size holds.
        let keys: Vec<usize> = (1..=500).map(|i| i * 16).collect();
        for (at, key) in keys.iter().enumerate() {
            index.insert(*key, at);
            index.insert(key | 1, at + 1000);
        }
        for (at, key) in keys.iter().enumerate() {
            assert_eq!(index.get(*key), Some(at));
            assert_eq!(index.get(key | 1), Some(at + 1000));
        }
        assert_eq!(index.get(16 * 501), None);
        index.insert(16, 7);
        assert_eq!(index.get(16), Some(7), "a key inserted again takes its new position");
        assert_eq!(index.len, 1000);
    }
}
