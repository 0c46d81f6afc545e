//! The manifest of an installable plugin: `manifest.json` in a bundle.
//!
//! ```json
//! {
//!   "name": "text-tools",
//!   "version": "1.0.0",
//!   "description": "Counting and reversing text",
//!   "permissions": ["clock"],
//!   "limits": {"fuel": 20000000, "memory_mib": 4},
//!   "tools": [
//!     {
//!       "name": "count_words",
//!       "description": "Count the words of a text",
//!       "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
//!       "export": "count_words"
//!     }
//!   ]
//! }
//! ```
//!
//! - `name`, `version`, `tools` are required; `name` and each tool's `name` follow the
//!   registration rules (`crate::rules`). Unknown fields are refused.
//! - `export` is the module's function that executes the tool (default: the tool's name);
//!   see `crate::sandbox` for the ABI.
//! - `permissions` lists what the module may import beyond computing ([`Permission`]); the
//!   user must grant each at install.
//! - `limits` may lower the sandbox's budgets, never raise them past [`DEFAULT_FUEL`] and
//!   [`DEFAULT_MEMORY_MIB`] (nor take fuel below [`MIN_FUEL`]): a bundle does not decide
//!   how much of the user's machine it gets.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::sandbox::{DEFAULT_FUEL, DEFAULT_MEMORY_MIB, MIN_FUEL};
use crate::tool::ToolDefinition;

/// The largest manifest read.
pub const MAX_MANIFEST_BYTES: usize = 256 * 1024;

/// A bundle's manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The plugin's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// What it is for, for people.
    #[serde(default)]
    pub description: String,
    /// Its tools.
    pub tools: Vec<ManifestTool>,
    /// What it asks to be allowed beyond computing.
    #[serde(default)]
    pub permissions: Vec<Permission>,
    /// Budgets lower than the sandbox's defaults (never higher).
    #[serde(default)]
    pub limits: Limits,
}

/// A tool of a manifest: its definition and the module export that executes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestTool {
    /// The tool's name.
    pub name: String,
    /// What it does, for the model.
    #[serde(default)]
    pub description: String,
    /// A JSON Schema of an object.
    pub parameters: Value,
    /// The module's exported function that executes it [default: the tool's name].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export: Option<String>,
}

impl ManifestTool {
    /// The export that executes it.
    pub fn export(&self) -> &str {
        self.export.as_deref().unwrap_or(&self.name)
    }

    /// Its definition for the model.
    pub fn definition(&self) -> ToolDefinition {
        ToolDefinition::new(&self.name, &self.description, self.parameters.clone())
    }
}

/// Budgets a manifest may lower.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Fuel for one call (about one unit per WebAssembly instruction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuel: Option<u64>,
    /// The most linear memory one call may use, in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u32>,
}

/// Something a plugin's module may do beyond computing, each only if the manifest asks
/// for it and the user granted it at install. Written as a string in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Permission {
    /// `clock`: read the wall clock (`trellis.now_ms`).
    Clock,
    /// `random`: random bytes (`trellis.random`).
    Random,
    /// `env:NAME`: read the environment variable NAME (`trellis.env`).
    Env(String),
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Permission::Clock => f.write_str("clock"),
            Permission::Random => f.write_str("random"),
            Permission::Env(name) => write!(f, "env:{name}"),
        }
    }
}

impl std::str::FromStr for Permission {
    type Err = String;

    fn from_str(text: &str) -> Result<Permission, String> {
        match text {
            "clock" => Ok(Permission::Clock),
            "random" => Ok(Permission::Random),
            _ => match text.strip_prefix("env:") {
                Some(name)
                    if (1..=64).contains(&name.len())
                        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
                {
                    Ok(Permission::Env(name.to_string()))
                }
                _ => Err(format!(
                    "unknown permission {:?}: the permissions are `clock`, `random` and `env:NAME` (NAME of letters, \
                     digits and `_`); plugins get no file system or network",
                    text.chars().take(80).collect::<String>()
                )),
            },
        }
    }
}

impl TryFrom<String> for Permission {
    type Error = String;
    fn try_from(text: String) -> Result<Permission, String> {
        text.parse()
    }
}

impl From<Permission> for String {
    fn from(permission: Permission) -> String {
        permission.to_string()
    }
}

/// Why a manifest was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    /// It is too large.
    #[error("the manifest has {0} bytes; at most {MAX_MANIFEST_BYTES} are read")]
    TooLarge(usize),
    /// It is not a manifest.
    #[error("the manifest is not valid: {0} (see the manifest format in the plugins README section)")]
    Invalid(String),
    /// Its limits are above the sandbox's defaults, or too low to run anything.
    #[error("the manifest's limits are out of range: {0}")]
    Limits(String),
    /// Two tools name one export, or an export name is reserved.
    #[error("the manifest's export {0:?} is not usable: exports are 1 to 64 characters, one per tool, and not `memory` or `alloc`")]
    Export(String),
}

impl Manifest {
    /// Reads a manifest from its JSON bytes and checks what the registration rules do not:
    /// size, fields, limits and exports.
    pub fn parse(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        if bytes.len() > MAX_MANIFEST_BYTES {
            return Err(ManifestError::TooLarge(bytes.len()));
        }
        let manifest: Manifest = serde_json::from_slice(bytes).map_err(|e| ManifestError::Invalid(e.to_string()))?;
        if manifest.limits.fuel.is_some_and(|fuel| !(MIN_FUEL..=DEFAULT_FUEL).contains(&fuel)) {
            return Err(ManifestError::Limits(format!(
                "fuel is {MIN_FUEL} to {DEFAULT_FUEL} (a manifest may only lower the sandbox's budgets)"
            )));
        }
        if manifest.tools.is_empty() {
            return Err(ManifestError::Invalid("it has no tools: a plugin brings at least one".into()));
        }
        if manifest.limits.memory_mib.is_some_and(|mib| mib == 0 || mib > DEFAULT_MEMORY_MIB) {
            return Err(ManifestError::Limits(format!(
                "memory_mib is 1 to {DEFAULT_MEMORY_MIB} (a manifest may only lower the sandbox's budgets)"
            )));
        }
        let mut exports = std::collections::HashSet::new();
        for tool in &manifest.tools {
            let export = tool.export();
            if !(1..=64).contains(&export.len()) || ["memory", "alloc"].contains(&export) || !exports.insert(export) {
                return Err(ManifestError::Export(export.chars().take(80).collect()));
            }
        }
        Ok(manifest)
    }
}
