//! Wiring a charm: the [`Builder`] a pattern's build function gets, and what it
//! registers once the charm's setup transaction has committed.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::cell::Cell;
use crate::error::{Error, Result};
use crate::link::{stream_marker, DocId, Link};
use crate::read::Read;
use crate::runtime::{Handler, HandlerFn, Runtime};
use crate::scheduler::ComputeFn;
use crate::stream::Stream;
use crate::tx::Tx;
use crate::value::{Path, Value};

/// The key of a charm's display name in its result.
pub const NAME: &str = "$NAME";
/// The key of a charm's UI description in its result.
pub const UI: &str = "$UI";

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
    /// A builder for `charm` whose setup writes go into `tx`.
    pub(crate) fn new(rt: &'a Runtime, charm: DocId, tx: Tx<'a>) -> Self {
        Builder { rt, charm, tx, wiring: Wiring::default() }
    }

    /// The setup transaction and what to register once it committed.
    pub(crate) fn into_parts(self) -> (Tx<'a>, Wiring) {
        (self.tx, self.wiring)
    }

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

    pub(crate) fn write(&self, key: &str, value: Value) -> Result<()> {
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
    pub fn derive<T, F>(&mut self, key: &str, compute: F) -> Result<Cell<T>>
    where
        T: Serialize + 'static,
        F: Fn(&Tx) -> Result<T> + Send + Sync + 'static,
    {
        let at = self.at(key);
        let run: ComputeFn = Arc::new(move |tx| Ok(Value::from_typed(&compute(tx)?)?));
        self.wiring.computations.push((key.to_string(), at.clone(), run));
        Ok(Cell::from_link(at))
    }

    /// A derived value at `key` computed from one cell by a plain function.
    pub fn lift<A, T, F>(&mut self, key: &str, input: Cell<A>, f: F) -> Result<Cell<T>>
    where
        A: Serialize + DeserializeOwned + Clone + Send + Sync + 'static,
        T: Serialize + 'static,
        F: Fn(A) -> T + Send + Sync + 'static,
    {
        self.derive(key, move |tx| Ok(f(input.get(tx)?)))
    }

    /// A stream at `key` whose events of type `E` run `handle` in a transaction. The
    /// event schema (with the doc comments of `E`) is stored with the stream.
    ///
    /// `handle` returns the runtime's [`Result`], so it can end with a cell write
    /// (`count.set(tx, 0)`), and refuse with a message: `Err("there is no task 3".into())`.
    ///
    /// It may also answer: a handler returning `Result<R>` for an `R` other than `()` has
    /// the schema of `R` (doc comments as descriptions) stored beside the event schema,
    /// and whoever sends it an event gets the value back once the transaction committed:
    /// [`Sent::returned`](crate::Sent::returned), [`Stream::call`], and the `returned`
    /// a model reads when it calls the handler as a tool.
    ///
    /// ```
    /// use trellis_runner::prelude::*;
    ///
    /// /// Add a note.
    /// #[derive(Serialize, Deserialize, JsonSchema)]
    /// struct Add {
    ///     /// What the note says.
    ///     text: String,
    /// }
    ///
    /// /// The note added, with its number.
    /// #[derive(Serialize, Deserialize, JsonSchema)]
    /// struct Added {
    ///     id: usize,
    ///     text: String,
    /// }
    ///
    /// let notes = Pattern::new("notes", |b, _: serde_json::Value| {
    ///     let notes = b.state("notes", Vec::<String>::new())?;
    ///     let add: Stream<Add, Added> = b.handler("add", move |tx, e: Add| -> Result<Added> {
    ///         let id = notes.get(tx)?.len();
    ///         notes.push(tx, e.text.clone())?;
    ///         Ok(Added { id, text: e.text })
    ///     })?;
    ///     # let _ = add;
    ///     Ok(())
    /// });
    /// # let _ = notes;
    /// ```
    pub fn handler<E, R, F>(&mut self, key: &str, handle: F) -> Result<Stream<E, R>>
    where
        E: DeserializeOwned + JsonSchema + 'static,
        R: Serialize + JsonSchema + 'static,
        F: Fn(&Tx, E) -> Result<R> + Send + Sync + 'static,
    {
        let schema = schemars::schema_for!(E).to_value();
        let returns = std::any::TypeId::of::<R>() != std::any::TypeId::of::<()>();
        let result_schema = returns.then(|| schemars::schema_for!(R).to_value());
        let stream = self.at(key);
        let at = stream.clone();
        let run: HandlerFn = Arc::new(move |tx, json| {
            // serde_path_to_error names the offending field: `amount: invalid type ...`.
            let event: E = serde_path_to_error::deserialize(json)
                .map_err(|e| Error::BadEvent { stream: at.clone(), message: e.to_string() })?;
            let returned = handle(tx, event)?;
            if !returns {
                return Ok(None);
            }
            // Checked before the commit: an answer nobody could read leaves no change.
            let returned = serde_json::to_value(&returned).map_err(Error::Serialize)?;
            crate::depth::check_depth_of(&returned, format_args!("what the handler of {at} returned"))?;
            Ok(Some(returned))
        });
        self.handler_returning(key, Some(schema), result_schema, run)?;
        Ok(Stream::from_link(stream))
    }

    /// A stream at `key` whose handler takes raw JSON, with an optional event schema and
    /// no declared result (what `run` returns still reaches the sender).
    pub fn handler_json(&mut self, key: &str, schema: Option<serde_json::Value>, run: HandlerFn) -> Result<Link> {
        self.handler_returning(key, schema, None, run)
    }

    /// [`Builder::handler_json`] for a handler that returns values of `result_schema`.
    pub fn handler_returning(
        &mut self,
        key: &str,
        schema: Option<serde_json::Value>,
        result_schema: Option<serde_json::Value>,
        run: HandlerFn,
    ) -> Result<Link> {
        let at = self.at(key);
        self.tx.write(&at, stream_marker(schema.as_ref(), result_schema.as_ref()))?;
        let handler = Handler { owner: self.charm.clone(), schema, result_schema, run };
        self.wiring.handlers.push((at.clone(), handler));
        Ok(at)
    }

    /// Marks the stream at `key` as needing a person's approval before an event sent on
    /// someone else's behalf (a model's tool call) runs; `reason` tells the person what
    /// is at stake. The policy is stored with the stream, so every catalog that offers
    /// the stream as a tool enforces it.
    ///
    /// ```
    /// use trellis_runner::prelude::*;
    ///
    /// /// Delete everything.
    /// #[derive(Deserialize, JsonSchema)]
    /// struct Wipe {}
    ///
    /// let wipe = Pattern::new("wipe", |b, _: serde_json::Value| {
    ///     let items = b.state("items", vec![1, 2, 3])?;
    ///     b.handler("wipe", move |tx, _: Wipe| items.set(tx, Vec::new()))?;
    ///     b.require_approval("wipe", "Removes every item; this cannot be undone")
    /// });
    /// # let _ = wipe;
    /// ```
    pub fn require_approval(&mut self, key: &str, reason: &str) -> Result<()> {
        let at = self.at(key);
        let marker = self.tx.read(&at)?;
        if !crate::link::is_stream(&marker) {
            return Err(format!("`{key}` is not a stream: declare its handler before requiring approval").into());
        }
        self.tx.write(&at.child(crate::link::STREAM_KEY).child(crate::link::APPROVAL_KEY), Value::from(reason))
    }

    /// Marks `fields` of the event of the stream at `key` as **person-only**: a model's
    /// call of the stream waits for a person, who sets those fields; what the model put
    /// there is shown to them as a suggestion and never used as it is. Events a person
    /// sends (`trellis charm send`, the page, the API) are theirs already. Stored with the
    /// stream, like [`Builder::require_approval`], so every catalog enforces it.
    ///
    /// ```
    /// use trellis_runner::prelude::*;
    ///
    /// /// Send a mail.
    /// #[derive(Deserialize, JsonSchema)]
    /// struct Send {
    ///     /// Who it goes to.
    ///     to: String,
    ///     /// What it says.
    ///     body: String,
    /// }
    ///
    /// let mailbox = Pattern::new("mailbox", |b, _: serde_json::Value| {
    ///     let sent = b.state("sent", Vec::<String>::new())?;
    ///     b.handler("send", move |tx, mail: Send| sent.update(tx, |s| [s, vec![mail.to]].concat()))?;
    ///     b.person_only("send", &["to"])
    /// });
    /// # let _ = mailbox;
    /// ```
    pub fn person_only(&mut self, key: &str, fields: &[&str]) -> Result<()> {
        let at = self.at(key);
        let marker = self.tx.read(&at)?.to_json();
        let Some(schema) = crate::link::stream_schema(&marker) else {
            return Err(
                format!("`{key}` is not a stream: declare its handler before marking person-only fields").into()
            );
        };
        let properties = schema.and_then(|schema| schema.get("properties")).and_then(|p| p.as_object());
        if fields.is_empty() {
            return Err(format!("person_only(`{key}`) names no field").into());
        }
        if let Some(unknown) = fields.iter().find(|field| properties.is_some_and(|p| !p.contains_key(**field))) {
            return Err(format!("`{unknown}` is not a field of the event of `{key}`").into());
        }
        let fields: Vec<serde_json::Value> = fields.iter().map(|field| serde_json::Value::from(*field)).collect();
        let at = at.child(crate::link::STREAM_KEY).child(crate::link::PERSON_ONLY_KEY);
        self.tx.write(&at, Value::from(serde_json::Value::Array(fields)))
    }

    /// Stores a link at `key`, so that reads (and events) there go to `target`.
    pub fn alias(&mut self, key: &str, target: &Link) -> Result<()> {
        self.write(key, target.to_value())
    }

    /// Instantiates the builtin `id` with `inputs`; its outputs appear under `key`.
    pub fn builtin(&mut self, key: &str, id: &str, inputs: serde_json::Value) -> Result<Link> {
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
