//! The bodies of the computations the engine runs, kept by the engine from one settle to
//! the next.

use std::sync::Arc;

use super::{Body, ComputationId};

/// The bodies of the computations the engine ran, by slot. The engine takes them from the
/// graph for a chunk of a settle ([`super::Graph::take_bodies`]) and runs each computation
/// through its own reference while the graph is unlocked, so a run takes and gives back
/// no reference count on the body (two atomic writes, on a line of their own, per run).
#[derive(Default)]
pub(crate) struct Bodies(Vec<Option<(ComputationId, Arc<Body>)>>);

impl Bodies {
    /// The body of `id`, from `look_up` (the graph's) the first time it is asked for.
    /// Inlined: the engine asks once per computation run, and nearly always finds it.
    #[inline]
    pub fn get_or_look_up(&mut self, id: ComputationId, look_up: impl FnOnce() -> Option<Arc<Body>>) -> Option<&Body> {
        let slot = id.slot();
        if !matches!(self.0.get(slot), Some(Some((kept_id, _))) if *kept_id == id) {
            self.keep(id, look_up()?);
        }
        self.0[slot].as_ref().map(|(_, body)| &**body)
    }

    /// Keeps `body` as the body of `id`, in place of whatever its slot held (nothing, or
    /// the body of a computation that held the slot before).
    #[cold]
    fn keep(&mut self, id: ComputationId, body: Arc<Body>) {
        let slot = id.slot();
        if slot >= self.0.len() {
            self.0.resize_with(slot + 1, || None);
        }
        self.0[slot] = Some((id, body));
    }

    /// Lets go of the body of `id` (a removed computation), if it is kept.
    pub fn forget(&mut self, id: ComputationId) {
        if let Some(kept) = self.0.get_mut(id.slot()) {
            if kept.as_ref().is_some_and(|(kept_id, _)| *kept_id == id) {
                *kept = None;
            }
        }
    }
}
