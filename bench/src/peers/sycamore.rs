//! Adapter for [`sycamore_reactive`] (0.9).
//!
//! * Each system instance owns a reactive root (`create_root`); dropping the instance
//!   disposes it. (sycamore leaks the small `Root` struct itself by design; the nodes are
//!   freed.)
//! * A signal is `create_signal`; a computed is `create_selector`, an eager memo that
//!   only notifies its dependents when its value changed (`PartialEq`), with dynamic
//!   dependency tracking: the computed's function reads its inputs with `get_clone`, so
//!   only the inputs actually read are subscribed.
//! * An effect is `create_effect` reading the node with `with`.
//! * sycamore propagates synchronously inside `Signal::set`, so `settle` has nothing left
//!   to do; `batch` uses sycamore's own `batch`, which defers propagation to its end.
//!
//! Every call that creates nodes runs inside `RootHandle::run_in`, because sycamore finds
//! the current root through a thread-local.

use sycamore_reactive::{
    batch, create_effect, create_root, create_selector, create_signal, ReadSignal, RootHandle, Signal,
};

use crate::reactive::{Inputs, ReactiveSystem, Value};

/// The sycamore-reactive system: one reactive root.
pub struct Sycamore {
    root: RootHandle,
}

/// Inputs read through sycamore's tracked `get_clone`, so the memo subscribes to them.
struct Tracked<'a, A: 'static>(&'a [ReadSignal<A>]);

impl<A: Clone + 'static> Inputs<A> for Tracked<'_, A> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn get(&self, i: usize) -> A {
        self.0[i].get_clone()
    }
}

impl ReactiveSystem for Sycamore {
    const NAME: &'static str = "sycamore";

    type Signal<T: Value> = Signal<T>;
    type Node<T: Value> = ReadSignal<T>;

    fn new() -> Self {
        Self { root: create_root(|| {}) }
    }

    fn signal<T: Value>(&mut self, initial: T) -> Signal<T> {
        self.root.run_in(|| create_signal(initial))
    }

    fn node<T: Value>(&mut self, signal: &Signal<T>) -> ReadSignal<T> {
        **signal
    }

    fn computed<A, B, F>(&mut self, deps: &[ReadSignal<A>], f: F) -> ReadSignal<B>
    where
        A: Value,
        B: Value,
        F: Fn(&dyn Inputs<A>) -> B + Send + Sync + 'static,
    {
        let deps = deps.to_vec();
        self.root.run_in(|| create_selector(move || f(&Tracked(&deps))))
    }

    fn effect<T, F>(&mut self, node: &ReadSignal<T>, mut f: F)
    where
        T: Value,
        F: FnMut(&T) + Send + 'static,
    {
        let node = *node;
        self.root.run_in(|| create_effect(move || node.with(|value| f(value))));
    }

    fn set<T: Value>(&mut self, signal: &Signal<T>, value: T) {
        signal.set(value);
    }

    fn settle(&mut self) {
        // `Signal::set` (or the end of `batch`) already propagated everything.
    }

    fn get<T: Value>(&mut self, node: &ReadSignal<T>) -> T {
        node.get_clone_untracked()
    }

    fn batch(&mut self, f: impl FnOnce(&mut Self)) {
        let root = self.root;
        root.run_in(|| batch(|| f(self)));
    }
}

impl Drop for Sycamore {
    fn drop(&mut self) {
        self.root.dispose();
    }
}
