//! Building on a runtime: new and computed cells, patterns and builtins, and charms
//! (built from a pattern through a [`Builder`]).

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::Runtime;
use crate::builder::{Builder, Wiring, NAME};
use crate::cell::Cell;
use crate::charm::Charms;
use crate::error::{Error, Result};
use crate::link::{DocId, Link};
use crate::pattern::{Pattern, PatternRegistry};
use crate::tx::Tx;
use crate::value::Value;

impl Runtime {
    /// A new document holding `initial`, viewed as a cell. `kind` prefixes the id.
    pub fn new_cell<T: Serialize>(&self, kind: &str, initial: T) -> Result<Cell<T>> {
        let value = Value::from_serialize(&initial).map_err(Error::Serialize)?;
        let link = Link::new(self.space().new_doc_id(kind), crate::value::Path::root());
        self.transact(|tx| tx.write(&link, value.clone()))?;
        Ok(Cell::from_link(link))
    }

    /// A computed cell in a new document: `compute` re-runs whenever a cell it read
    /// changes. The value is there once this returns, unless another thread is running
    /// the engine at that moment (then await [`Runtime::idle`]).
    pub fn computed<T, F>(&self, name: &str, compute: F) -> Result<Cell<T>>
    where
        T: Serialize + DeserializeOwned + 'static,
        F: Fn(&Tx) -> Result<T> + Send + Sync + 'static,
    {
        let link = Link::new(self.space().new_doc_id(name), crate::value::Path::root());
        self.add_computation(name, link.clone(), None, Arc::new(move |tx| Ok(Value::from_typed(&compute(tx)?)?)));
        self.settle();
        Ok(Cell::from_link(link))
    }
}

impl Runtime {
    /// Registers (or replaces) a pattern under its id.
    pub fn register_pattern(&self, pattern: Pattern) {
        self.0.patterns.insert(pattern);
    }

    /// The registered patterns.
    pub fn patterns(&self) -> &PatternRegistry {
        &self.0.patterns
    }

    /// Registers a builtin node patterns can use through [`Builder::builtin`].
    pub fn register_builtin(&self, builtin: Arc<dyn crate::builtin::Builtin>) {
        self.0.builtins.register(builtin);
    }

    /// Builds a charm of `pattern` in `tx` (its cells' first values, its name); gives back
    /// the transaction and what to register once it committed.
    pub(crate) fn build_in<'a>(
        &'a self,
        tx: Tx<'a>,
        pattern: &Pattern,
        charm: &DocId,
        argument: &serde_json::Value,
        name: Option<&str>,
    ) -> Result<(Tx<'a>, Wiring)> {
        let mut builder = Builder::new(self, charm.clone(), tx);
        (pattern.build)(&mut builder, argument.clone()).map_err(|e| match e {
            Error::Refused(message) => Error::PatternFailed { pattern: pattern.id().to_string(), message },
            other => other,
        })?;
        if let Some(name) = name {
            builder.write(NAME, Value::from(name))?;
        }
        Ok(builder.into_parts())
    }

    /// Builds a stored charm again, in a transaction of its own.
    pub(crate) fn build_charm(
        &self,
        pattern: &Pattern,
        charm: &DocId,
        argument: serde_json::Value,
        name: Option<&str>,
    ) -> Result<Wiring> {
        self.with_retries(|| {
            let (tx, wiring) = self.build_in(self.tx(), pattern, charm, &argument, name)?;
            self.commit(tx, super::Marking::Readers, super::Listing::Nothing)?;
            Ok(wiring)
        })
    }
}

impl Runtime {
    /// Creates, lists, finds, renames, stops and starts charms.
    pub fn charms(&self) -> Charms<'_> {
        Charms { rt: self }
    }

    /// Starts the charm a stream belongs to, if it is a stored charm that is not running.
    pub(crate) fn start_charm_for(&self, stream: &Link) -> Result<()> {
        let charms = self.charms();
        if charms.record(&stream.doc).is_some() {
            charms.start(&stream.doc)?;
        }
        Ok(())
    }
}
