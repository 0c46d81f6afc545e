//! Builtins: nodes implemented natively (such as `llm_dialog`) that patterns use like
//! any other building block. `trellis-builtins` implements [`Builtin`]; the runtime only
//! knows the trait.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::builder::Builder;
use crate::error::Result;

/// A natively implemented node.
pub trait Builtin: Send + Sync + 'static {
    /// The stable id patterns use (`llm_dialog`).
    fn id(&self) -> &'static str;

    /// Wires the builtin into the charm being built. Its outputs go under `key` of the
    /// charm's result; `inputs` is the JSON (links included) the pattern passed.
    fn instantiate(&self, builder: &mut Builder<'_>, key: &str, inputs: serde_json::Value) -> Result<()>;
}

/// The builtins a runtime knows, by id.
#[derive(Default)]
pub struct BuiltinRegistry(RwLock<HashMap<&'static str, Arc<dyn Builtin>>>);

impl BuiltinRegistry {
    /// Registers (or replaces) a builtin.
    pub fn register(&self, builtin: Arc<dyn Builtin>) {
        self.0.write().insert(builtin.id(), builtin);
    }

    /// The builtin with this id.
    pub fn get(&self, id: &str) -> Option<Arc<dyn Builtin>> {
        self.0.read().get(id).cloned()
    }
}
