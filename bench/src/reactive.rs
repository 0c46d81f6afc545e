//! The abstraction every reactive system implements so the propagation scenarios can be
//! written once, generically.
//!
//! # Model
//!
//! A system owns a graph of **signals** (writable sources) and **computeds** (derived
//! nodes with a declared list of dependencies). Effects observe one node each. Updates
//! follow the "set, then settle" model:
//!
//! 1. [`ReactiveSystem::set`] records new source values. A system that propagates
//!    eagerly (sycamore) may propagate right away; a system with an explicit scheduler
//!    (Trellis) may just queue the write.
//! 2. [`ReactiveSystem::settle`] runs every pending propagation synchronously: computeds
//!    are brought up to date and effects run, each at most once.
//! 3. [`ReactiveSystem::get`] reads the settled value of any node.
//!
//! [`ReactiveSystem::batch`] groups several `set`s with one `settle` (and lets systems with
//! a native batch primitive use it).
//!
//! # Semantics the scenarios verify
//!
//! * **Correct values** after every settle.
//! * **Glitch freedom**: during one settle every computed and effect runs at most once
//!   and never sees a half-updated state.
//! * **Equality cut-off**: a computed whose recomputed value equals its previous value
//!   (`PartialEq`) does not re-run its dependents or effects ("avoidable propagation").
//! * **Memoisation**: `get` on an up-to-date node does not re-run its computation.
//!
//! Whether `set` of a value equal to the current one propagates is left to the system.
//!
//! # Dependencies
//!
//! A computed declares its dependencies up front (`deps`) and reads them through
//! [`Inputs`]. This is required by pull/combinator systems such as futures-signals,
//! whose dependency sets are static. Systems with dynamic dependency tracking (sycamore)
//! may subscribe only to the inputs actually read by the last run, so scenarios such as
//! "unstable" keep their dynamic character there: `deps` is the *maximal* set.
//!
//! # Threads
//!
//! Scenario closures are `Send + Sync` (effects `Send`) so that a runtime which runs
//! computations on a thread pool can accept them; the benchmark itself only calls a
//! system from one thread.

use std::fmt::Debug;

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A row of numbers: the value type of the "mux" scenario (one node carrying many values).
pub type Row = Arc<[i64]>;

/// A value that can live in a node: `i64` and [`Row`].
///
/// Serde is there for systems that store values as JSON documents (Trellis reads and
/// writes them as a pattern's `Cell<T>` does); other adapters ignore it.
pub trait Value: Clone + PartialEq + Debug + Send + Sync + Serialize + DeserializeOwned + 'static {}

impl<T: Clone + PartialEq + Debug + Send + Sync + Serialize + DeserializeOwned + 'static> Value for T {}

/// The current values of a computed's declared dependencies, as seen by its function.
///
/// `get(i)` returns the value of `deps[i]`. A function may read an input several times
/// or not at all; systems with dynamic tracking may use that information.
pub trait Inputs<A> {
    /// Number of declared dependencies.
    fn len(&self) -> usize;

    /// The value of dependency `i` (panics if `i >= len()`).
    fn get(&self, i: usize) -> A;

    /// `true` when the computed has no dependency.
    #[allow(dead_code)] // API completeness (clippy::len_without_is_empty)
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A slice of values as [`Inputs`], for adapters that collect dependency values first.
#[allow(dead_code)] // for adapters that collect values first (e.g. the Trellis one)
#[derive(Clone, Copy, Debug)]
pub struct SliceInputs<'a, A>(pub &'a [A]);

impl<A: Clone> Inputs<A> for SliceInputs<'_, A> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn get(&self, i: usize) -> A {
        self.0[i].clone()
    }
}

/// A reactive system under benchmark: one adapter per system.
///
/// See the [module documentation](self) for the model and the semantics the scenarios
/// check. A method that hits an internal error of the system panics with a clear message:
/// the harness catches the panic and reports that system as failed for that scenario.
pub trait ReactiveSystem: Sized {
    /// Name shown in the table and the JSON (`"system"`). Names starting with `trellis`
    /// are ours; every other system is a peer (see [`crate::harness::is_trellis`]).
    const NAME: &'static str;

    /// Handle to a writable source created by [`ReactiveSystem::signal`].
    type Signal<T: Value>: Clone + 'static;

    /// Handle to a readable node: a source (via [`ReactiveSystem::node`]) or a computed.
    type Node<T: Value>: Clone + 'static;

    /// Creates an empty system (a fresh graph). Dropping it releases the graph.
    fn new() -> Self;

    /// Creates a source holding `initial`.
    fn signal<T: Value>(&mut self, initial: T) -> Self::Signal<T>;

    /// The readable node of a source, usable as a dependency or with [`ReactiveSystem::get`].
    fn node<T: Value>(&mut self, signal: &Self::Signal<T>) -> Self::Node<T>;

    /// Creates a computed node whose value is `f(inputs)`, `inputs` being the current values
    /// of `deps` (in order). It must be up to date after each settle (or lazily on `get`),
    /// run at most once per settle, and not notify its dependents when its new value equals
    /// the previous one.
    fn computed<A, B, F>(&mut self, deps: &[Self::Node<A>], f: F) -> Self::Node<B>
    where
        A: Value,
        B: Value,
        F: Fn(&dyn Inputs<A>) -> B + Send + Sync + 'static;

    /// Registers an effect: `f` runs with the value of `node` once initially (at the latest
    /// during the next settle) and then at most once per settle in which that value changed.
    fn effect<T, F>(&mut self, node: &Self::Node<T>, f: F)
    where
        T: Value,
        F: FnMut(&T) + Send + 'static;

    /// Writes a new value into a source. It is visible to `get` after the next settle.
    fn set<T: Value>(&mut self, signal: &Self::Signal<T>, value: T);

    /// Runs all pending propagation synchronously (computeds, then effects).
    fn settle(&mut self);

    /// Reads the current value of a node. Called after a settle.
    fn get<T: Value>(&mut self, node: &Self::Node<T>) -> T;

    /// Runs `f` (which calls `set`) as one batch, then settles. Systems with a native batch
    /// primitive override this; the default is `f(self)` followed by `settle()`.
    fn batch(&mut self, f: impl FnOnce(&mut Self)) {
        f(self);
        self.settle();
    }

    /// `set` followed by `settle`: one write as its own transaction.
    fn write<T: Value>(&mut self, signal: &Self::Signal<T>, value: T) {
        self.batch(|sys| sys.set(signal, value));
    }
}

/// Something that wants to be called once per registered [`ReactiveSystem`]
/// (generic methods cannot go through `dyn`, so the registry is a visitor).
pub trait SystemVisitor {
    /// Called with each system type in [`visit_systems`] order.
    fn visit<S: ReactiveSystem>(&mut self);
}

/// The registry of systems the generic suites run on, in table column order.
pub fn visit_systems(visitor: &mut impl SystemVisitor) {
    visitor.visit::<crate::trellis_system::Trellis>();
    visitor.visit::<crate::peers::futures_signals::FuturesSignals>();
    visitor.visit::<crate::peers::sycamore::Sycamore>();
    visitor.visit::<crate::peers::alien::AlienSignals>();
}

/// A shared run counter for computations and effects (cheap to clone, `Send + Sync`).
#[derive(Clone, Debug, Default)]
pub struct Counter(Arc<AtomicU64>);

impl Counter {
    /// A counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one.
    pub fn hit(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Returns the count and resets it to zero.
    pub fn take(&self) -> u64 {
        self.0.swap(0, Ordering::Relaxed)
    }
}
