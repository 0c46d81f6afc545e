//! What a computation read on its latest run: its dependencies, the readers index that a
//! commit marks through, the computations whose outputs it reads, and its height.

use smallvec::SmallVec;

use super::{ComputationId, Graph};
use crate::space::DocKey;
use crate::value::Path;

/// Up to how many reads [`Graph::ran`] re-indexes only the documents whose reading
/// changed (comparing each read with each), rather than every document read.
const FEW_READS: usize = 16;

impl Graph {
    /// Puts in `producers` the computations (other than `id`) whose outputs overlap
    /// `deps`, each once.
    fn find_producers(&self, id: ComputationId, deps: &[(DocKey, Path)], producers: &mut SmallVec<[ComputationId; 2]>) {
        producers.clear();
        for (key, dep) in deps {
            for (path, writer) in self.writers.get(key.0).into_iter().flatten() {
                if *writer != id && path.overlaps(dep) {
                    producers.push(*writer);
                }
            }
        }
        if producers.len() > 1 {
            producers.sort_unstable();
            producers.dedup();
        }
    }

    /// Records what a computation read on its latest run, as (document, path) in the
    /// order first read, and recomputes its height.
    pub fn ran<'r>(&mut self, id: ComputationId, reads: impl ExactSizeIterator<Item = (DocKey, &'r Path)> + Clone) {
        let Some(c) = self.get(id) else { return };
        if c.deps.len() == reads.len()
            && c.deps.iter().zip(reads.clone()).all(|((k, read), (key, path))| *k == key && read == path)
        {
            return; // the common case: same reads as last time, nothing to re-index
        }
        // The lists are built in the room of the lists they replace: a computation whose
        // reads change does so on every run.
        let mut deps = std::mem::take(&mut self.spare_deps);
        deps.extend(reads.map(|(key, path)| (key, path.clone())));
        let (mut old, mut producers) = self
            .get_mut(id)
            .map(|c| (std::mem::take(&mut c.deps), std::mem::take(&mut c.producers)))
            .unwrap_or_default();
        // Only the documents read before and not now (or the reverse) change readers: a
        // computation whose reads flip between two inputs keeps the rest. Beyond a few
        // reads, comparing the lists costs more than re-indexing them.
        let few = old.len() <= FEW_READS && deps.len() <= FEW_READS;
        let kept = |list: &[(DocKey, Path)], key: &DocKey| few && list.iter().any(|(k, _)| k == key);
        for (key, _) in old.iter().filter(|(key, _)| !kept(&deps, key)) {
            if let Some(readers) = self.readers.get_mut(key.0) {
                readers.remove(id);
            }
        }
        if few {
            // Each document once, with whether any read of it was of the whole.
            for (at, (key, _)) in deps.iter().enumerate() {
                if !deps[..at].iter().any(|(k, _)| k == key) {
                    let whole = deps[at..].iter().any(|(k, read)| k == key && read.is_root());
                    self.readers_of(*key).set(id, whole);
                }
            }
        } else {
            for (key, read) in &deps {
                self.readers_of(*key).add(id, read.is_root());
            }
        }
        self.find_producers(id, &deps, &mut producers);
        let limit = self.len as u32 + 1;
        let height =
            producers.iter().filter_map(|p| self.mark_of(*p)).map(|p| p.height + 1).max().unwrap_or(0).min(limit);
        if let Some(c) = self.get_mut(id) {
            c.deps = deps;
            c.producers = producers;
        }
        if let Some(m) = self.mark_of_mut(id) {
            m.height = height;
        }
        old.clear();
        self.spare_deps = old;
    }
}
