//! Adapter for [`futures_signals`] (0.3).
//!
//! # How the graph maps to futures-signals
//!
//! * A signal is a [`Mutable`]; every consumer gets its own `signal_cloned()`.
//! * A computed is a [`Broadcaster`] (the library's way to share one signal between
//!   several consumers) over the combined signal of its dependencies, followed by
//!   `dedupe_cloned()` for the equality cut-off:
//!   - one dependency: `SignalExt::map`;
//!   - two dependencies: the `map_ref!` macro;
//!   - more: [`CombineAll`], a small `Signal` written here that does what `map_ref!`
//!     does for a run-time number of inputs (poll every input once, recompute once if any
//!     changed). futures-signals has no combinator for a dynamic number of signals.
//!
//! # How it is driven
//!
//! futures-signals is lazy: nothing is computed until a signal is polled. A `set` only
//! wakes the downstream wakers (a cascade through the broadcasters' notifiers that marks
//! them changed); values are pulled when polled, so one poll after several sets
//! recomputes each node once (glitch-free).
//!
//! * Effects are `signal.for_each(..)` futures spawned on a single-threaded
//!   [`LocalPool`] (the `futures` executor). [`ReactiveSystem::settle`] is
//!   `LocalPool::run_until_stalled`: it polls exactly the effect tasks that were woken,
//!   until none is left.
//! * [`ReactiveSystem::get`] on a computed polls a per-node reader signal (created on the
//!   first `get`) with a no-op waker (`std::task::Waker::noop`) until it is `Pending`,
//!   keeping the last value; on a source it is `Mutable::get_cloned`.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use futures::executor::{LocalPool, LocalSpawner};
use futures::task::LocalSpawnExt;
use futures_signals::map_ref;
use futures_signals::signal::{Broadcaster, BroadcasterSignalCloned, LocalBoxSignal, Mutable, Signal, SignalExt};

use crate::reactive::{Inputs, ReactiveSystem, Value};

/// A boxed, type-erased signal of `T`.
type Boxed<T> = LocalBoxSignal<'static, T>;

/// The futures-signals system: a [`LocalPool`] running the effects.
pub struct FuturesSignals {
    pool: LocalPool,
    spawner: LocalSpawner,
}

/// A readable node: a source [`Mutable`] or a shared computed.
pub enum FsNode<T: Value> {
    /// A source created by `signal`.
    Source(Mutable<T>),
    /// A computed node.
    Computed(Rc<Computed<T>>),
}

impl<T: Value> Clone for FsNode<T> {
    fn clone(&self) -> Self {
        match self {
            Self::Source(m) => Self::Source(m.clone()),
            Self::Computed(c) => Self::Computed(Rc::clone(c)),
        }
    }
}

/// A computed node: the broadcaster every consumer subscribes to, and the reader used by
/// `get`.
pub struct Computed<T: Value> {
    broadcaster: Broadcaster<Boxed<T>>,
    reader: RefCell<Option<Reader<T>>>,
}

/// A subscription used only by `get`, with the last value it saw.
struct Reader<T: Value> {
    signal: BroadcasterSignalCloned<Boxed<T>>,
    last: Option<T>,
}

impl<T: Value> FsNode<T> {
    /// A new signal of this node's values, for one consumer.
    fn signal(&self) -> Boxed<T> {
        match self {
            Self::Source(m) => m.signal_cloned().boxed_local(),
            Self::Computed(c) => c.broadcaster.signal_cloned().boxed_local(),
        }
    }

    /// The current value (pulling a computed up to date).
    fn current(&self) -> T {
        match self {
            Self::Source(m) => m.get_cloned(),
            Self::Computed(c) => {
                let mut slot = c.reader.borrow_mut();
                let reader = slot.get_or_insert_with(|| Reader { signal: c.broadcaster.signal_cloned(), last: None });
                let mut cx = Context::from_waker(Waker::noop());
                while let Poll::Ready(Some(value)) = reader.signal.poll_change_unpin(&mut cx) {
                    reader.last = Some(value);
                }
                reader.last.clone().expect("futures-signals: a computed produced no value when polled")
            }
        }
    }
}

/// Inputs of a one-dependency computed (`SignalExt::map`).
struct One<'a, A>(&'a A);

impl<A: Clone> Inputs<A> for One<'_, A> {
    fn len(&self) -> usize {
        1
    }

    fn get(&self, i: usize) -> A {
        assert_eq!(i, 0, "input index out of range");
        self.0.clone()
    }
}

/// Inputs of a two-dependency computed (`map_ref!`).
struct Two<'a, A>(&'a A, &'a A);

impl<A: Clone> Inputs<A> for Two<'_, A> {
    fn len(&self) -> usize {
        2
    }

    fn get(&self, i: usize) -> A {
        match i {
            0 => self.0.clone(),
            1 => self.1.clone(),
            _ => panic!("input index {i} out of range"),
        }
    }
}

/// Inputs of a [`CombineAll`], all present when the function runs.
struct Many<'a, A>(&'a [Option<A>]);

impl<A: Clone> Inputs<A> for Many<'_, A> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn get(&self, i: usize) -> A {
        self.0[i].clone().expect("CombineAll runs its function only once every input has a value")
    }
}

/// `map_ref!` for a run-time number of input signals: each poll polls every input once
/// and, if any changed and all have a value, yields `f(inputs)` once.
pub struct CombineAll<A, B, F> {
    inputs: Vec<Boxed<A>>,
    values: Vec<Option<A>>,
    ended: Vec<bool>,
    f: F,
    output: PhantomData<fn() -> B>,
}

// `CombineAll` never pins its fields structurally (the inputs are boxed), so it can be Unpin.
impl<A, B, F> Unpin for CombineAll<A, B, F> {}

impl<A, B, F> CombineAll<A, B, F> {
    /// Combines `inputs` with `f`.
    pub fn new(inputs: Vec<Boxed<A>>, f: F) -> Self {
        let n = inputs.len();
        Self {
            inputs,
            values: std::iter::repeat_with(|| None).take(n).collect(),
            ended: vec![false; n],
            f,
            output: PhantomData,
        }
    }
}

impl<A, B, F> Signal for CombineAll<A, B, F>
where
    A: Clone,
    F: Fn(&dyn Inputs<A>) -> B,
{
    type Item = B;

    fn poll_change(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<B>> {
        let this = self.get_mut();
        let mut changed = false;
        let mut all_ended = true;
        for ((input, value), ended) in this.inputs.iter_mut().zip(this.values.iter_mut()).zip(this.ended.iter_mut()) {
            if *ended {
                continue;
            }
            match input.as_mut().poll_change(cx) {
                Poll::Ready(Some(v)) => {
                    *value = Some(v);
                    changed = true;
                    all_ended = false;
                }
                Poll::Ready(None) => *ended = true,
                Poll::Pending => all_ended = false,
            }
        }
        if changed && this.values.iter().all(Option::is_some) {
            Poll::Ready(Some((this.f)(&Many(&this.values))))
        } else if all_ended {
            Poll::Ready(None)
        } else {
            Poll::Pending
        }
    }
}

impl ReactiveSystem for FuturesSignals {
    const NAME: &'static str = "futures-signals";

    type Signal<T: Value> = Mutable<T>;
    type Node<T: Value> = FsNode<T>;

    fn new() -> Self {
        let pool = LocalPool::new();
        let spawner = pool.spawner();
        Self { pool, spawner }
    }

    fn signal<T: Value>(&mut self, initial: T) -> Mutable<T> {
        Mutable::new(initial)
    }

    fn node<T: Value>(&mut self, signal: &Mutable<T>) -> FsNode<T> {
        FsNode::Source(signal.clone())
    }

    fn computed<A, B, F>(&mut self, deps: &[FsNode<A>], f: F) -> FsNode<B>
    where
        A: Value,
        B: Value,
        F: Fn(&dyn Inputs<A>) -> B + Send + Sync + 'static,
    {
        let combined: Boxed<B> = match deps {
            [a] => a.signal().map(move |x| f(&One(&x))).dedupe_cloned().boxed_local(),
            [a, b] => {
                let (sa, sb) = (a.signal(), b.signal());
                map_ref! {
                    let x = sa,
                    let y = sb => f(&Two(x, y))
                }
                .dedupe_cloned()
                .boxed_local()
            }
            _ => CombineAll::new(deps.iter().map(FsNode::signal).collect(), f).dedupe_cloned().boxed_local(),
        };
        FsNode::Computed(Rc::new(Computed { broadcaster: Broadcaster::new(combined), reader: RefCell::new(None) }))
    }

    fn effect<T, F>(&mut self, node: &FsNode<T>, mut f: F)
    where
        T: Value,
        F: FnMut(&T) + Send + 'static,
    {
        let task = node.signal().for_each(move |value| {
            f(&value);
            std::future::ready(())
        });
        self.spawner.spawn_local(task).expect("futures-signals: the LocalPool refused to spawn an effect");
    }

    fn set<T: Value>(&mut self, signal: &Mutable<T>, value: T) {
        signal.set(value);
    }

    fn settle(&mut self) {
        self.pool.run_until_stalled();
    }

    fn get<T: Value>(&mut self, node: &FsNode<T>) -> T {
        node.current()
    }
}
