//! The registration rules: what a plugin must be before its tools are offered to a model.
//! Each refusal names the rule it broke.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde_json::{json, Value};
use trellis_builtins::naming::{is_valid_wire_name, MAX_WIRE_LEN};
use trellis_builtins::tool::limits::ClientToolLimits;

use crate::executor::Executor;
use crate::plugin::Plugin;
use crate::tool::ToolDefinition;

/// The longest plugin version string.
pub const MAX_VERSION_CHARS: usize = 64;
/// The longest tool description, in bytes: what a chat request takes of a client tool,
/// since a plugin's tools are offered as client tools.
pub const MAX_DESCRIPTION_BYTES: usize = ClientToolLimits::DEFAULT.max_description;
/// The most tools one plugin may have: as many as one chat request takes client tools;
/// more could never all be offered.
pub const MAX_TOOLS_PER_PLUGIN: usize = ClientToolLimits::DEFAULT.max_tools;

/// Why a plugin was not registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// Rule: a plugin has a name, spelled like a tool name.
    #[error(
        "a plugin's name {shown} is not valid (rule: a plugin name is 1 to {MAX_WIRE_LEN} letters, digits, `_` or `-`)"
    )]
    BadPluginName {
        /// The name, quoted.
        shown: String,
    },
    /// Rule: a plugin has a version.
    #[error(
        "plugin `{plugin}` has no valid version (rule: a version is present, at most {MAX_VERSION_CHARS} characters, \
         no control characters, no white space around it)"
    )]
    BadVersion {
        /// The plugin.
        plugin: String,
    },
    /// Rule: tool names are valid for providers.
    #[error(
        "plugin `{plugin}`: tool name {shown} is not valid (rule: a tool name is 1 to {MAX_WIRE_LEN} letters, digits, \
         `_` or `-`, as every provider accepts)"
    )]
    BadToolName {
        /// The plugin.
        plugin: String,
        /// The tool name, quoted.
        shown: String,
    },
    /// Rule: a tool's description is bounded.
    #[error(
        "plugin `{plugin}`: the description of `{tool}` is too long (rule: at most {MAX_DESCRIPTION_BYTES} bytes, as a chat request takes)"
    )]
    LongDescription {
        /// The plugin.
        plugin: String,
        /// The tool.
        tool: String,
    },
    /// Rule: a tool's parameters are a usable JSON Schema of an object.
    #[error(
        "plugin `{plugin}`: the parameters of `{tool}` are not usable: {reason} (rule: parameters are a JSON Schema \
         with \"type\": \"object\", within the limits of a client tool's schema)"
    )]
    BadParameters {
        /// The plugin.
        plugin: String,
        /// The tool.
        tool: String,
        /// What is wrong.
        reason: String,
    },
    /// Rule: a plugin has at most so many tools.
    #[error("plugin `{plugin}` has {count} tools (rule: at most {MAX_TOOLS_PER_PLUGIN} tools per plugin, as many as a chat request takes)")]
    TooManyTools {
        /// The plugin.
        plugin: String,
        /// How many it has.
        count: usize,
    },
    /// Rule: every tool has an executor.
    #[error("plugin `{plugin}`: tool `{tool}` has no executor (rule: every tool has exactly one executor)")]
    ToolWithoutExecutor {
        /// The plugin.
        plugin: String,
        /// The tool.
        tool: String,
    },
    /// Rule: every executor has a tool.
    #[error(
        "plugin `{plugin}`: executor {shown} has no tool of that name (rule: every executor belongs to one of the \
         plugin's tools)"
    )]
    ExecutorWithoutTool {
        /// The plugin.
        plugin: String,
        /// The executor's tool name, quoted.
        shown: String,
    },
    /// Rule: a tool name appears once in a plugin.
    #[error(
        "plugin `{plugin}` defines `{tool}` (or its executor) twice (rule: one definition and one executor per tool)"
    )]
    DuplicateTool {
        /// The plugin.
        plugin: String,
        /// The tool.
        tool: String,
    },
    /// Rule: no two plugins with one name.
    #[error("a plugin named `{plugin}` is already registered (rule: plugin names are unique; unregister it first)")]
    DuplicatePlugin {
        /// The plugin.
        plugin: String,
    },
    /// Rule: no tool-name conflict across plugins.
    #[error(
        "plugin `{plugin}`: tool `{tool}` is already provided by plugin `{other}` (rule: tool names are unique across \
         plugins; nothing is overwritten)"
    )]
    ConflictWithPlugin {
        /// The plugin.
        plugin: String,
        /// The tool.
        tool: String,
        /// The plugin that has it.
        other: String,
    },
    /// Rule: no tool-name conflict with server tools.
    #[error(
        "plugin `{plugin}`: tool `{tool}` has the name of a server tool (rule: client tools never shadow server tools; \
         rename the plugin's tool)"
    )]
    ConflictWithServer {
        /// The plugin.
        plugin: String,
        /// The tool.
        tool: String,
    },
    /// The plugin's `on_register` hook refused.
    #[error("plugin `{plugin}` refused to register: its on_register hook failed: {message}")]
    Hook {
        /// The plugin.
        plugin: String,
        /// What the hook said.
        message: String,
    },
}

/// A tool that passed the rules: its definition, executor and argument validator.
pub(crate) struct CheckedTool {
    pub(crate) definition: ToolDefinition,
    pub(crate) executor: Arc<dyn Executor>,
    pub(crate) validator: Arc<jsonschema::Validator>,
}

/// Checks `plugin` against every rule. `owner` tells which registered plugin has a tool
/// name; `server` whether a server tool has it.
pub(crate) fn check(
    plugin: &Plugin,
    owner: impl Fn(&str) -> Option<String>,
    server: &HashSet<String>,
) -> Result<Vec<CheckedTool>, RegisterError> {
    let name = &plugin.name;
    if !is_valid_wire_name(name) {
        return Err(RegisterError::BadPluginName { shown: quoted(name) });
    }
    let version = &plugin.version;
    let padded = version.trim() != version;
    if version.is_empty()
        || padded
        || version.chars().count() > MAX_VERSION_CHARS
        || version.chars().any(char::is_control)
    {
        return Err(RegisterError::BadVersion { plugin: name.clone() });
    }
    if plugin.tools.len() > MAX_TOOLS_PER_PLUGIN {
        return Err(RegisterError::TooManyTools { plugin: name.clone(), count: plugin.tools.len() });
    }
    let mut executors: HashMap<&str, &Arc<dyn Executor>> = HashMap::new();
    for (tool, executor) in &plugin.executors {
        if executors.insert(tool, executor).is_some() {
            return Err(RegisterError::DuplicateTool { plugin: name.clone(), tool: tool.clone() });
        }
    }
    let mut checked = Vec::with_capacity(plugin.tools.len());
    let mut seen = HashSet::new();
    for tool in &plugin.tools {
        let at = |tool: &str| (name.clone(), tool.to_string());
        if !is_valid_wire_name(&tool.name) {
            return Err(RegisterError::BadToolName { plugin: name.clone(), shown: quoted(&tool.name) });
        }
        if !seen.insert(tool.name.as_str()) {
            return Err(RegisterError::DuplicateTool { plugin: name.clone(), tool: tool.name.clone() });
        }
        if tool.description.len() > MAX_DESCRIPTION_BYTES {
            let (plugin, tool) = at(&tool.name);
            return Err(RegisterError::LongDescription { plugin, tool });
        }
        let validator = validator(&tool.name, &tool.parameters).map_err(|reason| {
            let (plugin, tool) = at(&tool.name);
            RegisterError::BadParameters { plugin, tool, reason }
        })?;
        let Some(executor) = executors.remove(tool.name.as_str()) else {
            let (plugin, tool) = at(&tool.name);
            return Err(RegisterError::ToolWithoutExecutor { plugin, tool });
        };
        if let Some(other) = owner(&tool.name) {
            let (plugin, tool) = at(&tool.name);
            return Err(RegisterError::ConflictWithPlugin { plugin, tool, other });
        }
        if server.contains(&tool.name) {
            let (plugin, tool) = at(&tool.name);
            return Err(RegisterError::ConflictWithServer { plugin, tool });
        }
        checked.push(CheckedTool {
            definition: tool.clone(),
            executor: Arc::clone(executor),
            validator: Arc::new(validator),
        });
    }
    if let Some(orphan) = executors.keys().min() {
        return Err(RegisterError::ExecutorWithoutTool { plugin: name.clone(), shown: quoted(orphan) });
    }
    Ok(checked)
}

/// A validator for a tool's parameters, which must be an object schema that a client
/// tool may have: a plugin's tools are offered to the model as client tools, and one
/// beyond their limits would be refused in every chat.
fn validator(tool: &str, parameters: &Value) -> Result<jsonschema::Validator, String> {
    let Some(schema) = parameters.as_object() else {
        let kind = trellis_runner::Value::from(parameters.clone()).kind();
        return Err(format!("they are a JSON {kind}, not an object"));
    };
    if schema.get("type") != Some(&Value::from("object")) {
        return Err("the schema's \"type\" is not \"object\"".to_string());
    }
    ClientToolLimits::DEFAULT.check(tool, &json!({ "parameters": parameters })).map_err(|e| e.to_string())?;
    trellis_builtins::validation::compile(parameters)
}

/// A name as a refusal shows it: debug-quoted (control characters escaped), cut at 80.
fn quoted(name: &str) -> String {
    let head: String = name.chars().take(80).collect();
    let more = if name.chars().nth(80).is_some() { "…" } else { "" };
    format!("{head:?}{more}")
}
