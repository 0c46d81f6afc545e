//! Adapter for Trellis's JSON-document cells.
//!
//! * A signal is a cell in its own document (`Runtime::new_cell`); a computed is a
//!   runtime computation whose output is a fresh document; an effect is a computation
//!   that calls the closure and writes nothing (an unchanged output commits nothing).
//! * `set` buffers writes; `settle` commits them in one transaction, which runs the
//!   engine synchronously on this thread before it returns (`Runtime::transact`), so a
//!   batch is one transaction, like a handler.
//! * Dependencies are tracked dynamically: a computation depends on what it read.
//!
//! Every read and write goes through the real transaction, commit and scheduler path
//! (in-memory storage), so this measures what a charm's derived values cost.

use std::sync::{Arc, Mutex};

use smallvec::SmallVec;

use trellis_runner::{Cell, Link, Path, Read, Runtime, Tx};

use crate::reactive::{Inputs, ReactiveSystem, Value};

/// A Trellis runtime on an in-memory space.
pub struct Trellis {
    rt: Runtime,
    pending: Vec<(Link, trellis_runner::Value)>,
}

/// Reads the inputs of a computation through its transaction (so they are tracked).
struct TxInputs<'a, 'tx> {
    tx: &'a Tx<'tx>,
    deps: &'a [Link],
}

/// Reads a typed value as `Cell::get` does (`Read::read_as`).
fn read<T: Value>(r: &impl Read, link: &Link) -> T {
    r.read_as(link).unwrap_or_else(|e| panic!("trellis: cannot read {link} as the expected type: {e}"))
}

/// Stores a typed value as `Cell::set` does.
fn stored<T: Value>(value: &T) -> trellis_runner::Value {
    trellis_runner::Value::from_typed(value).expect("trellis: a number or a row of numbers is JSON")
}

impl<A: Value> Inputs<A> for TxInputs<'_, '_> {
    fn len(&self) -> usize {
        self.deps.len()
    }

    fn get(&self, i: usize) -> A {
        read(self.tx, &self.deps[i])
    }
}

impl Trellis {
    fn output(&self, kind: &str) -> Link {
        Link::new(self.rt.space().new_doc_id(kind), Path::root())
    }
}

impl ReactiveSystem for Trellis {
    const NAME: &'static str = "trellis";

    type Signal<T: Value> = Link;
    type Node<T: Value> = Link;

    fn new() -> Self {
        Trellis { rt: Runtime::in_memory(), pending: Vec::new() }
    }

    fn signal<T: Value>(&mut self, initial: T) -> Link {
        let cell: Cell<T> = self.rt.new_cell("s", initial).expect("trellis: create a cell");
        cell.link().clone()
    }

    fn node<T: Value>(&mut self, signal: &Link) -> Link {
        signal.clone()
    }

    fn computed<A, B, F>(&mut self, deps: &[Link], f: F) -> Link
    where
        A: Value,
        B: Value,
        F: Fn(&dyn Inputs<A>) -> B + Send + Sync + 'static,
    {
        let output = self.output("c");
        // Held in the closure itself, as a pattern's closure holds the cells it captures
        // (and as the futures-signals adapter captures one or two inputs): no separate
        // allocation to follow on every run.
        let deps: SmallVec<[Link; 2]> = deps.iter().cloned().collect();
        self.rt.add_computation(
            "computed",
            output.clone(),
            None,
            Arc::new(move |tx| {
                let inputs = TxInputs { tx, deps: &deps };
                Ok(stored(&f(&inputs)))
            }),
        );
        output
    }

    fn effect<T, F>(&mut self, node: &Link, f: F)
    where
        T: Value,
        F: FnMut(&T) + Send + 'static,
    {
        let node = node.clone();
        let f = Mutex::new(f);
        let output = self.output("e");
        self.rt.add_computation(
            "effect",
            output,
            None,
            Arc::new(move |tx| {
                let value: T = read(tx, &node);
                (f.lock().expect("effect closure panicked before"))(&value);
                Ok(trellis_runner::Value::Null)
            }),
        );
    }

    fn set<T: Value>(&mut self, signal: &Link, value: T) {
        self.pending.push((signal.clone(), stored(&value)));
    }

    fn settle(&mut self) {
        if self.pending.is_empty() {
            // New computations wait for their first run.
            self.rt.settle();
            return;
        }
        // A transaction runs the computations its commit made dirty before it returns,
        // on this thread, as a pattern's caller sees it. The list keeps its room for the
        // next batch: the adapter allocates nothing per write.
        let writes = &self.pending;
        self.rt
            .transact(|tx| {
                for (link, value) in writes {
                    tx.write(link, value.clone())?;
                }
                Ok(())
            })
            .expect("trellis: commit");
        self.pending.clear();
    }

    fn get<T: Value>(&mut self, node: &Link) -> T {
        read(&self.rt, node)
    }
}
