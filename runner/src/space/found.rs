//! The entries a space found lately, by the address of the id's text they were asked by.
//!
//! Handles share their ids' texts, so the same few texts ask for the same documents over
//! and over: a write and a read per change, at least. Finding a document in the space's
//! map hashes and compares its id; here one look at a slot, picked by the text's
//! address, does. A slot keeps the text alive, so its address names that text as long as
//! it is there.

use std::sync::Arc;

use parking_lot::Mutex;

use super::DocEntry;
use crate::link::DocId;

/// How many slots (a power of two): the documents a thread works on at a time.
const SLOTS: usize = 64;

/// An entry, and the text of the id it was found by.
type Slot = Option<(DocId, Arc<DocEntry>)>;

/// The entries found lately; each slot has its own lock, so threads rarely meet.
pub(super) struct Found {
    slots: Box<[Mutex<Slot>]>,
}

impl Default for Found {
    fn default() -> Self {
        Found { slots: (0..SLOTS).map(|_| Mutex::new(None)).collect() }
    }
}

/// The slot of an id's text: the top bits of its address times an odd constant.
fn slot(id: &DocId) -> usize {
    let address = Arc::as_ptr(id).cast::<u8>() as usize as u64;
    (address.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros())) as usize
}

impl Found {
    /// The entry found lately by this very text, if it is still kept. A slot another
    /// thread holds counts as a miss: the space's map answers instead.
    pub fn get(&self, id: &DocId) -> Option<Arc<DocEntry>> {
        self.with(id, Arc::clone)
    }

    /// `f` of the entry found lately by this very text, if it is still kept, without a
    /// handle of its own (for a short look, with the slot held).
    pub fn with<R>(&self, id: &DocId, f: impl FnOnce(&Arc<DocEntry>) -> R) -> Option<R> {
        let kept = self.slots[slot(id)].try_lock()?;
        match &*kept {
            Some((text, entry)) if Arc::ptr_eq(text, id) => Some(f(entry)),
            _ => None,
        }
    }

    /// Keeps `entry`, the space's own entry of `id`, for the next ask by this text.
    pub fn put(&self, id: &DocId, entry: &Arc<DocEntry>) {
        if let Some(mut kept) = self.slots[slot(id)].try_lock() {
            *kept = Some((id.clone(), entry.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::Space;

    #[test]
    fn an_entry_is_found_again_by_the_text_it_was_asked_by_only() {
        let space = Space::in_memory();
        let id: DocId = "doc".into();
        let entry = space.entry(&id);
        assert!(space.found.get(&id).is_some_and(|found| Arc::ptr_eq(&found, &entry)));
        let same_id_other_text: DocId = "doc".into();
        assert!(space.found.get(&same_id_other_text).is_none(), "another text is looked up in the map");
        assert!(Arc::ptr_eq(&space.entry(&same_id_other_text), &entry), "where it finds the same entry");
    }

    /// The debug check, shown to catch a wrong answer: an entry kept for a text that is
    /// not the space's entry of that id.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "an entry that is not the space's")]
    fn a_wrong_entry_kept_for_a_text_trips_the_check() {
        let space = Space::in_memory();
        let (id, other): (DocId, DocId) = ("doc".into(), "other".into());
        let _ = space.entry(&id);
        let wrong = space.entry(&other);
        space.found.put(&id, &wrong);
        let _ = space.entry(&id);
    }
}
