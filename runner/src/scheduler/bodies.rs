//! The bodies of the computations the engine runs, kept by the engine from one settle to
//! the next.

use super::{Body, ComputationId};

/// The bodies of the computations the engine ran, by slot. The engine takes them from the
/// graph for a chunk of a settle ([`super::Graph::take_bodies`]) and runs each computation
/// through its own body while the graph is unlocked: no reference count per run, and what
/// running one takes is read from one place in a list, not through a pointer.
#[derive(Default)]
pub(crate) struct Bodies(Vec<Option<Body>>);

impl Bodies {
    /// The body of `id`, from `make` (the graph's) the first time it is asked for.
    /// Inlined: the engine asks once per computation run, and nearly always finds it.
    #[inline]
    pub fn get_or_make(&mut self, id: ComputationId, make: impl FnOnce() -> Option<Body>) -> Option<&mut Body> {
        if self.get(id).is_none() {
            self.keep(id.slot(), make()?);
        }
        self.0[id.slot()].as_mut()
    }

    /// The body of `id`, if kept (a body kept in its slot for an earlier computation is
    /// not its body).
    #[inline]
    pub fn get(&self, id: ComputationId) -> Option<&Body> {
        self.0.get(id.slot())?.as_ref().filter(|body| body.generation == id.generation())
    }

    /// Asks the body of `id` into the cache.
    pub fn prefetch(&self, id: ComputationId) {
        if let Some(body) = self.0.get(id.slot()) {
            crate::prefetch::prefetch(body);
        }
    }

    /// Keeps `body` in `slot`, in place of whatever it held (nothing, or the body of a
    /// computation that held the slot before).
    #[cold]
    fn keep(&mut self, slot: usize, body: Body) {
        if slot >= self.0.len() {
            self.0.resize_with(slot + 1, || None);
        }
        self.0[slot] = Some(body);
    }

    /// Lets go of the body of `id` (a removed computation), if it is kept.
    pub fn forget(&mut self, id: ComputationId) {
        if self.get(id).is_some() {
            self.0[id.slot()] = None;
        }
    }
}
