//! A plugin: a name, a version, tools, their executors and lifecycle hooks, put together
//! with [`PluginBuilder`] (embedders) or loaded from an installed bundle
//! (`crate::bundle`).

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::executor::{Executor, ToolError};
use crate::hooks::{Hooks, Next, NoHooks, Request, Response};
use crate::tool::{ToolCall, ToolDefinition};

/// A plugin, ready to register with a [`PluginManager`](crate::PluginManager), which
/// checks it against the registration rules (`crate::rules`).
///
/// ```
/// use trellis_plugins::{sync_executor, Plugin, PluginManager, ToolDefinition};
/// use serde_json::json;
///
/// let plugin = Plugin::builder("words", "1.0.0")
///     .tool(
///         ToolDefinition::new("count_words", "Count the words of a text", json!({
///             "type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]
///         })),
///         sync_executor(|args| Ok(json!(args["text"].as_str().unwrap_or("").split_whitespace().count()))),
///     )
///     .before_request(|request| {
///         request.metadata.insert("words".into(), json!("enabled"));
///         Ok(())
///     })
///     .build();
/// let manager = PluginManager::new();
/// manager.register(plugin, ["Counter_increment"]).expect("valid");
/// assert_eq!(manager.client_tools()[0].name, "count_words");
/// ```
#[derive(Clone)]
pub struct Plugin {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) tools: Vec<ToolDefinition>,
    pub(crate) executors: Vec<(String, Arc<dyn Executor>)>,
    pub(crate) hooks: Arc<dyn Hooks>,
}

impl Plugin {
    /// Starts a plugin named `name` at `version`.
    pub fn builder(name: impl Into<String>, version: impl Into<String>) -> PluginBuilder {
        PluginBuilder {
            plugin: Plugin {
                name: name.into(),
                version: version.into(),
                tools: Vec::new(),
                executors: Vec::new(),
                hooks: Arc::new(NoHooks),
            },
            hooks: FnHooks::default(),
        }
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Its tools' definitions.
    pub fn tools(&self) -> &[ToolDefinition] {
        &self.tools
    }
}

/// Builds a [`Plugin`]. Nothing is checked here: the manager checks at registration and
/// names the rule a plugin breaks.
pub struct PluginBuilder {
    plugin: Plugin,
    hooks: FnHooks,
}

type HookFn = Box<dyn Fn() -> Result<(), ToolError> + Send + Sync>;
type RequestFn = Box<dyn Fn(&mut Request) -> Result<(), ToolError> + Send + Sync>;
type ResponseFn = Box<dyn Fn(&Response) -> Result<(), ToolError> + Send + Sync>;
type ToolCallFn = Box<dyn Fn(ToolCall, Next) -> BoxFuture<'static, Result<Value, ToolError>> + Send + Sync>;

impl PluginBuilder {
    /// Adds a tool and its executor.
    pub fn tool(self, definition: ToolDefinition, executor: Arc<dyn Executor>) -> PluginBuilder {
        let name = definition.name.clone();
        self.definition(definition).executor(name, executor)
    }

    /// Adds a tool's definition alone (its executor comes with [`executor`](Self::executor)).
    pub fn definition(mut self, definition: ToolDefinition) -> PluginBuilder {
        self.plugin.tools.push(definition);
        self
    }

    /// Adds the executor of the tool named `tool`.
    pub fn executor(mut self, tool: impl Into<String>, executor: Arc<dyn Executor>) -> PluginBuilder {
        self.plugin.executors.push((tool.into(), executor));
        self
    }

    /// Hooks from a [`Hooks`] implementation; the closure hooks below replace single
    /// methods of it.
    pub fn hooks(mut self, hooks: Arc<dyn Hooks>) -> PluginBuilder {
        self.plugin.hooks = hooks;
        self
    }

    /// Runs when the plugin is registered; an error refuses the registration.
    pub fn on_register(mut self, f: impl Fn() -> Result<(), ToolError> + Send + Sync + 'static) -> PluginBuilder {
        self.hooks.on_register = Some(Box::new(f));
        self
    }

    /// Runs before each request and may change it.
    pub fn before_request(
        mut self,
        f: impl Fn(&mut Request) -> Result<(), ToolError> + Send + Sync + 'static,
    ) -> PluginBuilder {
        self.hooks.before_request = Some(Box::new(f));
        self
    }

    /// Runs after each response.
    pub fn after_response(
        mut self,
        f: impl Fn(&Response) -> Result<(), ToolError> + Send + Sync + 'static,
    ) -> PluginBuilder {
        self.hooks.after_response = Some(Box::new(f));
        self
    }

    /// Wraps every client tool call (see `crate::hooks` for the chain).
    pub fn on_tool_call(
        mut self,
        f: impl Fn(ToolCall, Next) -> BoxFuture<'static, Result<Value, ToolError>> + Send + Sync + 'static,
    ) -> PluginBuilder {
        self.hooks.on_tool_call = Some(Box::new(f));
        self
    }

    /// Runs when the plugin is removed.
    pub fn on_unregister(mut self, f: impl Fn() -> Result<(), ToolError> + Send + Sync + 'static) -> PluginBuilder {
        self.hooks.on_unregister = Some(Box::new(f));
        self
    }

    /// The plugin.
    pub fn build(self) -> Plugin {
        let PluginBuilder { mut plugin, mut hooks } = self;
        if hooks.is_set() {
            hooks.base = std::mem::replace(&mut plugin.hooks, Arc::new(NoHooks));
            plugin.hooks = Arc::new(hooks);
        }
        plugin
    }
}

/// Hooks given as closures, each falling back to `base`.
struct FnHooks {
    base: Arc<dyn Hooks>,
    on_register: Option<HookFn>,
    before_request: Option<RequestFn>,
    after_response: Option<ResponseFn>,
    on_tool_call: Option<ToolCallFn>,
    on_unregister: Option<HookFn>,
}

impl Default for FnHooks {
    fn default() -> FnHooks {
        FnHooks {
            base: Arc::new(NoHooks),
            on_register: None,
            before_request: None,
            after_response: None,
            on_tool_call: None,
            on_unregister: None,
        }
    }
}

impl FnHooks {
    fn is_set(&self) -> bool {
        self.on_register.is_some()
            || self.before_request.is_some()
            || self.after_response.is_some()
            || self.on_tool_call.is_some()
            || self.on_unregister.is_some()
    }
}

impl Hooks for FnHooks {
    fn on_register(&self) -> Result<(), ToolError> {
        self.on_register.as_ref().map_or_else(|| self.base.on_register(), |f| f())
    }
    fn before_request(&self, request: &mut Request) -> Result<(), ToolError> {
        match &self.before_request {
            Some(f) => f(request),
            None => self.base.before_request(request),
        }
    }
    fn after_response(&self, response: &Response) -> Result<(), ToolError> {
        self.after_response.as_ref().map_or_else(|| self.base.after_response(response), |f| f(response))
    }
    fn on_tool_call(&self, call: ToolCall, next: Next) -> BoxFuture<'static, Result<Value, ToolError>> {
        match &self.on_tool_call {
            Some(f) => f(call, next),
            None => self.base.on_tool_call(call, next),
        }
    }
    fn on_unregister(&self) -> Result<(), ToolError> {
        self.on_unregister.as_ref().map_or_else(|| self.base.on_unregister(), |f| f())
    }
}
