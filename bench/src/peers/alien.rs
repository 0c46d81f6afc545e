//! Adapter for [`alien_signals`] (0.1), the Rust port of the JS alien-signals.
//!
//! * A signal is `Signal::new`; a computed is `Computed::new`, a lazy memo with dynamic
//!   dependency tracking (its function reads its inputs with `get`, so only the inputs
//!   actually read are subscribed) that notifies dependents only when its value changed
//!   (`PartialEq`).
//! * An effect is `Effect::new` reading the node; the adapter disposes every effect when
//!   the system is dropped. alien-signals frees no signal or computed node by itself, so
//!   their (small) nodes outlive the system: the benchmark makes few graphs.
//! * alien-signals propagates synchronously inside `Signal::set`, so `settle` has nothing
//!   left to do; `batch` uses `start_batch` / `end_batch`, which defer effects to the end.
//!
//! The library is not thread-safe (its graph lives in thread-locals); the benchmark calls
//! a system from one thread only.

use std::cell::RefCell;

use alien_signals::{end_batch, start_batch, Computed, Effect, Signal};

use crate::reactive::{Inputs, ReactiveSystem, Value};

/// The alien-signals system: the effects to dispose when it is dropped.
pub struct AlienSignals {
    effects: Vec<Effect>,
}

/// A readable alien-signals node: a source or a computed.
pub enum Node<T> {
    /// A source.
    Signal(Signal<T>),
    /// A computed.
    Computed(Computed<T>),
}

impl<T> Clone for Node<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Node<T> {}

impl<T: Value> Node<T> {
    /// The value, tracked when read inside a computed or effect.
    fn get(&self) -> T {
        match self {
            Node::Signal(signal) => signal.get(),
            Node::Computed(computed) => computed.get(),
        }
    }
}

/// Inputs read through the tracked `get`, so the computed subscribes to them.
struct Tracked<'a, A>(&'a [Node<A>]);

impl<A: Value> Inputs<A> for Tracked<'_, A> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn get(&self, i: usize) -> A {
        self.0[i].get()
    }
}

impl ReactiveSystem for AlienSignals {
    const NAME: &'static str = "alien-signals";

    type Signal<T: Value> = Signal<T>;
    type Node<T: Value> = Node<T>;

    fn new() -> Self {
        Self { effects: Vec::new() }
    }

    fn signal<T: Value>(&mut self, initial: T) -> Signal<T> {
        Signal::new(initial)
    }

    fn node<T: Value>(&mut self, signal: &Signal<T>) -> Node<T> {
        Node::Signal(*signal)
    }

    fn computed<A, B, F>(&mut self, deps: &[Node<A>], f: F) -> Node<B>
    where
        A: Value,
        B: Value,
        F: Fn(&dyn Inputs<A>) -> B + Send + Sync + 'static,
    {
        let deps = deps.to_vec();
        Node::Computed(Computed::new(move |_| f(&Tracked(&deps))))
    }

    fn effect<T, F>(&mut self, node: &Node<T>, f: F)
    where
        T: Value,
        F: FnMut(&T) + Send + 'static,
    {
        let node = *node;
        // alien-signals takes `Fn`; an effect never runs inside itself, so the cell is
        // never borrowed twice.
        let f = RefCell::new(f);
        self.effects.push(Effect::new(move || (f.borrow_mut())(&node.get())));
    }

    fn set<T: Value>(&mut self, signal: &Signal<T>, value: T) {
        signal.set(value);
    }

    fn settle(&mut self) {
        // `Signal::set` (or the end of `batch`) already propagated everything.
    }

    fn get<T: Value>(&mut self, node: &Node<T>) -> T {
        node.get()
    }

    fn batch(&mut self, f: impl FnOnce(&mut Self)) {
        start_batch();
        f(self);
        end_batch();
    }
}

impl Drop for AlienSignals {
    fn drop(&mut self) {
        for effect in self.effects.drain(..) {
            effect.dispose();
        }
    }
}
