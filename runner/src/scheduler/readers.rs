//! The computations that read one document.

use rustc_hash::FxHashMap as HashMap;
use smallvec::SmallVec;

use super::ComputationId;

/// Beyond this many readers, a document's readers are kept in a map.
const FEW: usize = 16;

/// The computations that read a document, each once, with whether it read the whole
/// document (its root: then every write there changes what it read, and a commit marks
/// it without looking at its reads). Most documents have a reader or two: those are kept
/// inline, so that finding who reads a written document touches no other memory; a
/// document many computations read keeps them in a map, so that adding and removing one
/// stays cheap however many there are.
pub(super) enum Readers {
    Few(SmallVec<[(ComputationId, bool); 2]>),
    Many(HashMap<ComputationId, bool>),
}

impl Default for Readers {
    fn default() -> Self {
        Readers::Few(SmallVec::new())
    }
}

impl Readers {
    /// Asks a list kept apart into the cache.
    pub fn prefetch(&self) {
        if let Readers::Few(few) = self {
            if let Some(first) = few.first().filter(|_| few.spilled()) {
                crate::prefetch::prefetch(first);
            }
        }
    }

    /// Adds `id`, or sets whether it reads the whole document if it is there.
    pub fn set(&mut self, id: ComputationId, whole: bool) {
        match self {
            Readers::Few(few) => match few.iter().position(|(reader, _)| *reader == id) {
                Some(at) => few[at].1 = whole,
                None if few.len() < FEW => few.push((id, whole)),
                None => {
                    let mut many: HashMap<ComputationId, bool> = few.drain(..).collect();
                    many.insert(id, whole);
                    *self = Readers::Many(many);
                }
            },
            Readers::Many(many) => {
                many.insert(id, whole);
            }
        }
    }

    /// Adds `id`, reading the whole document if `whole` or if it was added so before.
    pub fn add(&mut self, id: ComputationId, whole: bool) {
        let there = match self {
            Readers::Few(few) => few.iter_mut().find(|(reader, _)| *reader == id).map(|(_, w)| w),
            Readers::Many(many) => many.get_mut(&id),
        };
        match there {
            Some(read_whole) => *read_whole |= whole,
            None => self.set(id, whole),
        }
    }

    /// Removes `id`, if it is there.
    pub fn remove(&mut self, id: ComputationId) {
        match self {
            Readers::Few(few) => {
                if let Some(at) = few.iter().position(|(reader, _)| *reader == id) {
                    few.swap_remove(at);
                }
            }
            Readers::Many(many) => {
                many.remove(&id);
            }
        }
    }

    /// Calls `f` with each reader and whether it read the whole document, in no
    /// particular order (a loop over each kind of list rather than an iterator over
    /// either: this runs for every document a settle writes).
    #[inline]
    pub fn for_each(&self, mut f: impl FnMut(ComputationId, bool)) {
        match self {
            Readers::Few(few) => few.iter().for_each(|(id, whole)| f(*id, *whole)),
            Readers::Many(many) => many.iter().for_each(|(id, whole)| f(*id, *whole)),
        }
    }

    /// The readers, in no particular order.
    pub fn to_vec(&self) -> Vec<ComputationId> {
        let mut all = Vec::new();
        self.for_each(|id, _| all.push(id));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(readers: &Readers) -> Vec<(ComputationId, bool)> {
        let mut all = Vec::new();
        readers.for_each(|id, whole| all.push((id, whole)));
        all.sort_unstable();
        all
    }

    #[test]
    fn readers_are_kept_once_whether_few_or_many() {
        let id = |n| ComputationId::new(n, 0);
        let mut readers = Readers::default();
        for n in 0..40 {
            readers.add(id(n % 20), n % 3 == 0);
            assert_eq!(sorted(&readers).len(), (n + 1).min(20), "after adding {}", n % 20);
        }
        assert!(matches!(readers, Readers::Many(_)), "more than {FEW} readers are kept in a map");
        // Added twice (n and n + 20): whole if either time read the whole document.
        let expected: Vec<_> = (0..20).map(|n| (id(n), n % 3 == 0 || (n + 20) % 3 == 0)).collect();
        assert_eq!(sorted(&readers), expected);
        readers.set(id(0), false);
        assert_eq!(sorted(&readers)[0], (id(0), false), "set replaces what `add` keeps");
        for n in 0..20 {
            readers.remove(id(n));
            assert_eq!(readers.to_vec().len(), 19 - n);
        }
        let mut few = Readers::default();
        for n in [1, 2, 3] {
            few.add(id(n), n == 2);
        }
        few.remove(id(1));
        few.remove(id(9));
        few.set(id(3), true);
        assert_eq!(sorted(&few), vec![(id(2), true), (id(3), true)]);
    }
}
