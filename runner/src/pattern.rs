//! Patterns: reusable programs that wire cells, derives and handlers into a charm.
//!
//! A pattern has a stable id, a typed argument (its JSON schema comes from the Rust type)
//! and a build function. Building runs each time a charm starts (at creation and after a
//! restart), so state cells keep their stored value: [`Builder::state`] only writes the
//! initial value when the location is empty.
//!
//! ```
//! use trellis_runner::prelude::*;
//!
//! /// Add to the count.
//! #[derive(Deserialize, JsonSchema)]
//! struct Increment {
//!     /// How much to add (default 1).
//!     amount: Option<i64>,
//! }
//!
//! let counter = Pattern::new("counter", |b, _arg: serde_json::Value| {
//!     b.name("Counter")?;
//!     let count = b.state("count", 0i64)?;
//!     b.lift("label", &count, |n: i64| format!("Count: {n}"));
//!     b.handler("increment", move |tx, e: Increment| {
//!         count.update(tx, |n| n + e.amount.unwrap_or(1))?;
//!         Ok(())
//!     });
//!     Ok(())
//! })
//! .description("A number you can increase");
//!
//! let rt = Runtime::in_memory();
//! rt.register_pattern(counter);
//! let id = rt.charms().create("counter", serde_json::json!({}))?;
//! let increment = rt.charms().result(&id).child("increment");
//! futures::executor::block_on(rt.send(&increment, serde_json::json!({"amount": 5})))?;
//! assert_eq!(rt.charms().get(&id)?["label"], "Count: 5");
//! # Ok::<(), trellis_runner::Error>(())
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::cell::Cell;
use crate::error::{BoxError, Error, Result};
use crate::link::{stream_marker, DocId, Link};
use crate::runtime::{Handler, HandlerFn, Runtime};
use crate::scheduler::ComputeFn;
use crate::stream::Stream;
use crate::tx::{Read, Tx};
use crate::value::{Path, Value};

/// The key of a charm's display name in its result.
pub const NAME: &str = "$NAME";
/// The key of a charm's UI description in its result.
pub const UI: &str = "$UI";

type BuildFn = Arc<dyn Fn(&mut Builder<'_>, serde_json::Value) -> Result<(), BoxError> + Send + Sync>;

/// A reusable program, registered by a stable id.
#[derive(Clone)]
pub struct Pattern {
    id: String,
    description: String,
    argument_schema: serde_json::Value,
    result_schema: Option<serde_json::Value>,
    build: BuildFn,
}

impl Pattern {
    /// A pattern whose argument deserialises into `A`. A missing argument (`null`) is
    /// read as `{}`, so `#[serde(default)]` fields work as defaults.
    pub fn new<A, F>(id: &str, build: F) -> Self
    where
        A: DeserializeOwned + JsonSchema,
        F: Fn(&mut Builder<'_>, A) -> Result<(), BoxError> + Send + Sync + 'static,
    {
        let pattern_id = id.to_string();
        let build: BuildFn = Arc::new(move |b, json| {
            let json = if json.is_null() { serde_json::json!({}) } else { json };
            let arg = serde_json::from_value::<A>(json)
                .map_err(|e| Error::BadArgument { pattern: pattern_id.clone(), message: e.to_string() })?;
            build(b, arg)
        });
        Pattern {
            id: id.to_string(),
            description: String::new(),
            argument_schema: schemars::schema_for!(A).to_value(),
            result_schema: None,
            build,
        }
    }

    /// Sets the description shown in pattern lists.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Declares the result's schema from a Rust type.
    pub fn result<R: JsonSchema>(mut self) -> Self {
        self.result_schema = Some(schemars::schema_for!(R).to_value());
        self
    }

    /// The stable id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The description.
    pub fn about(&self) -> &str {
        &self.description
    }

    /// The JSON schema of the argument.
    pub fn argument_schema(&self) -> &serde_json::Value {
        &self.argument_schema
    }

    /// The JSON schema of the result, if declared.
    pub fn result_schema(&self) -> Option<&serde_json::Value> {
        self.result_schema.as_ref()
    }
}

impl std::fmt::Debug for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pattern").field("id", &self.id).finish()
    }
}

/// The patterns a runtime knows, by id.
#[derive(Default)]
pub struct PatternRegistry(RwLock<HashMap<String, Arc<Pattern>>>);

impl PatternRegistry {
    /// The pattern with this id.
    pub fn get(&self, id: &str) -> Option<Arc<Pattern>> {
        self.0.read().get(id).cloned()
    }

    /// All patterns, sorted by id.
    pub fn all(&self) -> Vec<Arc<Pattern>> {
        let mut all: Vec<_> = self.0.read().values().cloned().collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }
}

impl Runtime {
    /// Registers (or replaces) a pattern under its id.
    pub fn register_pattern(&self, pattern: Pattern) {
        self.0.patterns.0.write().insert(pattern.id.clone(), Arc::new(pattern));
    }

    /// The registered patterns.
    pub fn patterns(&self) -> &PatternRegistry {
        &self.0.patterns
    }

    /// Registers a builtin node patterns can use through [`Builder::builtin`].
    pub fn register_builtin(&self, builtin: Arc<dyn crate::builtin::Builtin>) {
        self.0.builtins.register(builtin);
    }

    pub(crate) fn build_charm(
        &self,
        pattern: &Pattern,
        charm: &DocId,
        argument: serde_json::Value,
        name: Option<&str>,
    ) -> Result<Wiring> {
        self.with_retries(|| {
            let mut builder =
                Builder { rt: self, charm: charm.clone(), tx: Tx::new(self.space()), wiring: Wiring::default() };
            (pattern.build)(&mut builder, argument.clone()).map_err(|e| match e.downcast::<Error>() {
                Ok(e) => *e,
                Err(e) => Error::PatternFailed { pattern: pattern.id.clone(), message: e.to_string() },
            })?;
            if let Some(name) = name {
                builder.write(NAME, Value::from(name))?;
            }
            let Builder { tx, wiring, .. } = builder;
            self.commit(tx)?;
            Ok(wiring)
        })
    }
}

/// What building a charm registers once its setup transaction committed.
#[derive(Default)]
pub(crate) struct Wiring {
    pub handlers: Vec<(Link, Handler)>,
    pub computations: Vec<(String, Link, ComputeFn)>,
    pub tasks: Vec<StartTask>,
    pub stops: Vec<StartTask>,
}

/// Work a builtin asked to run once its charm is active (see [`Builder::on_start`]), or
/// once it stops (see [`Builder::on_stop`]).
pub(crate) type StartTask = Box<dyn FnOnce(&Runtime) + Send>;

/// Wires one charm: its state, derived values, handlers and builtins. Keys are paths
/// in the charm's result, with `/` between segments (`"dialog/pending"`).
pub struct Builder<'a> {
    rt: &'a Runtime,
    charm: DocId,
    tx: Tx<'a>,
    wiring: Wiring,
}

impl<'a> Builder<'a> {
    /// The runtime.
    pub fn runtime(&self) -> &'a Runtime {
        self.rt
    }

    /// The id of the charm being built (also its result document).
    pub fn charm_id(&self) -> &DocId {
        &self.charm
    }

    /// The location of `key` in the charm's result.
    pub fn at(&self, key: &str) -> Link {
        let segments = key.split('/').filter(|s| !s.is_empty());
        Link::new(self.charm.clone(), Path::new(segments))
    }

    /// The setup transaction, to read arguments or existing state while building.
    pub fn tx(&self) -> &Tx<'a> {
        &self.tx
    }

    fn write(&self, key: &str, value: Value) -> Result<()> {
        self.tx.write(&self.at(key), value)
    }

    /// Sets the charm's display name (`$NAME`), unless the user renamed the charm. The
    /// name must pass [`check_name`](crate::charm::check_name).
    pub fn name(&mut self, name: impl Into<String>) -> Result<()> {
        let name = name.into();
        let name = crate::charm::check_name(&name)?;
        let at = self.at(NAME);
        if self.tx.read(&at)? == Value::Null {
            self.tx.write(&at, Value::from(name))?;
        }
        Ok(())
    }

    /// Sets the charm's UI description (`$UI`).
    pub fn ui(&mut self, ui: serde_json::Value) -> Result<()> {
        self.write(UI, Value::from(ui))
    }

    /// A state cell at `key`, holding `initial` unless a value is already stored there
    /// (so state survives restarts).
    pub fn state<T: Serialize + DeserializeOwned>(&mut self, key: &str, initial: T) -> Result<Cell<T>> {
        let at = self.at(key);
        if self.tx.read(&at)? == Value::Null {
            self.tx.write(&at, Value::from_serialize(&initial).map_err(Error::Serialize)?)?;
        }
        Ok(Cell::from_link(at))
    }

    /// A derived value at `key`: `compute` re-runs whenever a cell it read changes.
    pub fn derive<T, F>(&mut self, key: &str, compute: F) -> Cell<T>
    where
        T: Serialize,
        F: Fn(&Tx) -> Result<T> + Send + Sync + 'static,
    {
        let at = self.at(key);
        let run: ComputeFn = Arc::new(move |tx| Ok(Value::from_serialize(&compute(tx)?)?));
        self.wiring.computations.push((key.to_string(), at.clone(), run));
        Cell::from_link(at)
    }

    /// A derived value at `key` computed from one cell by a plain function.
    pub fn lift<A, T, F>(&mut self, key: &str, input: &Cell<A>, f: F) -> Cell<T>
    where
        A: Serialize + DeserializeOwned + 'static,
        T: Serialize,
        F: Fn(A) -> T + Send + Sync + 'static,
    {
        let input = input.clone();
        self.derive(key, move |tx| Ok(f(input.get(tx)?)))
    }

    /// A stream at `key` whose events of type `E` run `handle` in a transaction. The
    /// event schema (with the doc comments of `E`) is stored with the stream.
    pub fn handler<E, F>(&mut self, key: &str, handle: F) -> Stream<E>
    where
        E: DeserializeOwned + JsonSchema + 'static,
        F: Fn(&Tx, E) -> Result<(), BoxError> + Send + Sync + 'static,
    {
        let schema = schemars::schema_for!(E).to_value();
        let stream = self.at(key);
        let at = stream.clone();
        let run: HandlerFn = Arc::new(move |tx, json| {
            // serde_path_to_error names the offending field: `amount: invalid type ...`.
            let event: E = serde_path_to_error::deserialize(json)
                .map_err(|e| Error::BadEvent { stream: at.clone(), message: e.to_string() })?;
            handle(tx, event)
        });
        self.handler_json(key, Some(schema), run);
        Stream::from_link(stream)
    }

    /// A stream at `key` whose handler takes raw JSON, with an optional event schema.
    pub fn handler_json(&mut self, key: &str, schema: Option<serde_json::Value>, run: HandlerFn) -> Link {
        let at = self.at(key);
        if let Err(error) = self.tx.write(&at, stream_marker(schema.as_ref())) {
            tracing::warn!(%error, key, "could not store stream marker");
        }
        let handler = Handler { owner: self.charm.clone(), schema, run };
        self.wiring.handlers.push((at.clone(), handler));
        at
    }

    /// Stores a link at `key`, so that reads (and events) there go to `target`.
    pub fn alias(&mut self, key: &str, target: &Link) -> Result<()> {
        self.write(key, target.to_value())
    }

    /// Instantiates the builtin `id` with `inputs`; its outputs appear under `key`.
    pub fn builtin(&mut self, key: &str, id: &str, inputs: serde_json::Value) -> Result<Link, BoxError> {
        let builtin = self.rt.0.builtins.get(id).ok_or_else(|| Error::UnknownBuiltin(id.to_string()))?;
        builtin.instantiate(self, key, inputs)?;
        Ok(self.at(key))
    }

    /// Runs `start` once the charm is wired and running (for builtins that spawn tasks).
    pub fn on_start(&mut self, start: impl FnOnce(&Runtime) + Send + 'static) {
        self.wiring.tasks.push(Box::new(start));
    }

    /// Runs `stop` when the charm is stopped (for builtins whose tasks must end with it).
    pub fn on_stop(&mut self, stop: impl FnOnce(&Runtime) + Send + 'static) {
        self.wiring.stops.push(Box::new(stop));
    }
}
