//! The bodies of the computations the engine runs, kept by the engine from one settle to
//! the next.
//!
//! In debug builds every body found kept is compared with the one the graph makes for
//! the same computation (the same code, the same output): a slot that came to keep a
//! stale body would fail every test that runs a computation.

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
        match self.get(id) {
            None => self.keep(id.slot(), make()?),
            #[cfg(debug_assertions)]
            Some(kept) => check(kept, make()),
            #[cfg(not(debug_assertions))]
            Some(_) => {}
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

/// Asserts that a body found kept is the one the graph makes now (`fresh`): the same code
/// (the very closure, which both hold alive) and the same output. The flags and the
/// output's place are the engine's own and are not compared.
#[cfg(debug_assertions)]
fn check(kept: &Body, fresh: Option<Body>) {
    let fresh = fresh.expect("the engine kept the body of a computation the graph no longer has");
    assert!(
        std::sync::Arc::ptr_eq(&kept.run, &fresh.run) && kept.output == fresh.output,
        "the engine's kept body of {} differs from the graph's (its slot keeps a stale body)",
        fresh.output
    );
}

#[cfg(all(test, debug_assertions))]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::link::Link;
    use crate::value::{Path, Value};

    fn body(output: &str) -> Body {
        Body {
            run: Arc::new(|_| Ok(Value::Null)),
            output: Link::new(output, Path::root()),
            output_entry: None,
            output_at: u32::MAX,
            generation: 0,
            rereads: false,
            reads_committed: false,
        }
    }

    #[test]
    fn a_kept_body_is_the_graphs() {
        let mut bodies = Bodies::default();
        let id = ComputationId::new(0, 0);
        let kept = body("a");
        let same = Body { run: kept.run.clone(), ..body("a") };
        assert!(bodies.get_or_make(id, || Some(kept)).is_some());
        assert!(bodies.get_or_make(id, || Some(same)).is_some(), "the same code and output agree");
    }

    #[test]
    #[should_panic(expected = "keeps a stale body")]
    fn a_stale_body_trips_the_check() {
        let mut bodies = Bodies::default();
        let id = ComputationId::new(0, 0);
        bodies.get_or_make(id, || Some(body("a")));
        // The graph now makes another computation's body for the same id.
        bodies.get_or_make(id, || Some(body("b")));
    }
}
