//! The computations that read one document.

use rustc_hash::FxHashSet as HashSet;
use smallvec::SmallVec;

use super::ComputationId;

/// Beyond this many readers, a document's readers are kept in a set.
const FEW: usize = 16;

/// The computations that read a document, each once. Most documents have a reader or
/// two: those are kept inline, so that finding who reads a written document touches no
/// other memory; a document many computations read keeps them in a set, so that adding
/// and removing one stays cheap however many there are.
pub(super) enum Readers {
    Few(SmallVec<[ComputationId; 2]>),
    Many(HashSet<ComputationId>),
}

impl Default for Readers {
    fn default() -> Self {
        Readers::Few(SmallVec::new())
    }
}

impl Readers {
    /// Adds `id` (once, however often it is added).
    pub fn insert(&mut self, id: ComputationId) {
        match self {
            Readers::Few(few) if few.contains(&id) => {}
            Readers::Few(few) if few.len() < FEW => few.push(id),
            Readers::Few(few) => {
                let mut many: HashSet<ComputationId> = few.drain(..).collect();
                many.insert(id);
                *self = Readers::Many(many);
            }
            Readers::Many(many) => {
                many.insert(id);
            }
        }
    }

    /// Removes `id`, if it is there.
    pub fn remove(&mut self, id: ComputationId) {
        match self {
            Readers::Few(few) => {
                if let Some(at) = few.iter().position(|r| *r == id) {
                    few.swap_remove(at);
                }
            }
            Readers::Many(many) => {
                many.remove(&id);
            }
        }
    }

    /// Calls `f` with each reader, in no particular order (a loop over each kind of list
    /// rather than an iterator over either: this runs for every document a settle writes).
    #[inline]
    pub fn for_each(&self, mut f: impl FnMut(ComputationId)) {
        match self {
            Readers::Few(few) => few.iter().for_each(|id| f(*id)),
            Readers::Many(many) => many.iter().for_each(|id| f(*id)),
        }
    }

    /// The readers, in no particular order.
    pub fn to_vec(&self) -> Vec<ComputationId> {
        let mut all = Vec::new();
        self.for_each(|id| all.push(id));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_are_kept_once_whether_few_or_many() {
        let id = |n| ComputationId::new(n, 0);
        let mut readers = Readers::default();
        for n in 0..40 {
            readers.insert(id(n % 20));
            let mut seen = readers.to_vec();
            seen.sort_unstable();
            let expected: Vec<_> = (0..(n + 1).min(20)).map(id).collect();
            assert_eq!(seen, expected, "after adding {}", n % 20);
        }
        assert!(matches!(readers, Readers::Many(_)), "more than {FEW} readers are kept in a set");
        for n in 0..20 {
            readers.remove(id(n));
            assert_eq!(readers.to_vec().len(), 19 - n);
        }
        let mut few = Readers::default();
        for n in [1, 2, 3] {
            few.insert(id(n));
        }
        few.remove(id(1));
        few.remove(id(9));
        let mut seen = few.to_vec();
        seen.sort_unstable();
        assert_eq!(seen, vec![id(2), id(3)]);
    }
}
