//! [`ToolRegistry`]: the defined tools a dialog's `tools` map may refer to by name.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use super::limits::ClientToolLimits;
use super::{human_input, DefinedTool, ToolRef};
use crate::naming::is_valid_wire_name;

/// Why a tool could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// The name is not one providers accept.
    #[error("tool name `{0}` is not valid: use 1 to 64 letters, digits, `_` or `-`")]
    BadName(String),
    /// Another tool has the name; nothing is overwritten.
    #[error("a tool named `{0}` is registered already; choose another name")]
    Taken(String),
}

/// Defined tools by name, and the limits on client-sent tool definitions. Cheap to clone; clones share the tools. The `llm_dialog`
/// builtin holds one (`LlmDialog::with_tools`); front ends that execute client phases
/// (the terminal) look tools up in the same one.
#[derive(Clone, Default)]
pub struct ToolRegistry(Arc<RwLock<Tools>>);

#[derive(Default)]
struct Tools {
    by_name: BTreeMap<String, ToolRef>,
    /// The rules client-sent tool definitions (`{"client"}` entries) must keep.
    limits: ClientToolLimits,
    /// Bumped by each registration, so cached catalogs notice a new tool.
    generation: u64,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.read().by_name.keys()).finish()
    }
}

impl ToolRegistry {
    /// A registry with the built-in tools (`request_human_input`).
    pub fn standard() -> Self {
        static BUILT_IN: OnceLock<ToolRef> = OnceLock::new();
        let registry = ToolRegistry::default();
        let human = BUILT_IN.get_or_init(|| Arc::new(human_input())).clone();
        registry.0.write().by_name.insert(human.name().to_string(), human);
        registry
    }

    /// The registry [`Catalog::build`](crate::catalog::Catalog::build) uses when it is
    /// given none: the built-in tools.
    pub(crate) fn shared_standard() -> &'static ToolRegistry {
        static STANDARD: OnceLock<ToolRegistry> = OnceLock::new();
        STANDARD.get_or_init(ToolRegistry::standard)
    }

    /// Registers a tool under its name; a name in use is refused, never overwritten.
    pub fn register(&self, tool: DefinedTool) -> Result<(), RegistryError> {
        if !is_valid_wire_name(tool.name()) {
            return Err(RegistryError::BadName(tool.name().to_string()));
        }
        let mut tools = self.0.write();
        if tools.by_name.contains_key(tool.name()) {
            return Err(RegistryError::Taken(tool.name().to_string()));
        }
        tools.by_name.insert(tool.name().to_string(), Arc::new(tool));
        tools.generation += 1;
        Ok(())
    }

    /// The tool registered as `name`.
    pub fn get(&self, name: &str) -> Option<ToolRef> {
        self.0.read().by_name.get(name).cloned()
    }

    /// Sets the limits on client tools (`{"client": {...}}` entries) of the dialogs that
    /// use this registry.
    pub fn set_client_limits(&self, limits: ClientToolLimits) {
        let mut tools = self.0.write();
        tools.limits = limits;
        tools.generation += 1;
    }

    /// The limits on client tools.
    pub fn client_limits(&self) -> ClientToolLimits {
        self.0.read().limits
    }

    /// How many registrations happened (changes whenever a tool is added).
    pub(crate) fn generation(&self) -> u64 {
        self.0.read().generation
    }

    /// The registered names, in order.
    pub fn names(&self) -> Vec<String> {
        self.0.read().by_name.keys().cloned().collect()
    }
}
