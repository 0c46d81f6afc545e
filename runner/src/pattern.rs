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
//!     b.lift("label", count, |n: i64| format!("Count: {n}"))?;
//!     b.handler("increment", move |tx, e: Increment| {
//!         count.update(tx, |n| n + e.amount.unwrap_or(1))?;
//!         Ok(())
//!     })?;
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

use crate::builder::Builder;
use crate::error::{Error, Result};

pub(crate) type BuildFn = Arc<dyn Fn(&mut Builder<'_>, serde_json::Value) -> Result<()> + Send + Sync>;

/// A reusable program, registered by a stable id.
#[derive(Clone)]
pub struct Pattern {
    id: String,
    description: String,
    argument_schema: serde_json::Value,
    result_schema: Option<serde_json::Value>,
    pub(crate) build: BuildFn,
}

impl Pattern {
    /// A pattern whose argument deserialises into `A`. A missing argument (`null`) is
    /// read as `{}`, so `#[serde(default)]` fields work as defaults.
    ///
    /// `build` returns the runtime's [`Result`], like every [`Builder`] method, so `?`
    /// works throughout; `Err("…".into())` refuses with a message.
    pub fn new<A, F>(id: &str, build: F) -> Self
    where
        A: DeserializeOwned + JsonSchema,
        F: Fn(&mut Builder<'_>, A) -> Result<()> + Send + Sync + 'static,
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
    /// Registers (or replaces) a pattern under its id.
    pub(crate) fn insert(&self, pattern: Pattern) {
        self.0.write().insert(pattern.id.clone(), Arc::new(pattern));
    }

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
