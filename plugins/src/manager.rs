//! The plugin manager: registers plugins under the rules (`crate::rules`), offers their
//! tools' definitions for a request, runs their hooks in order (`crate::hooks`) and
//! executes client tool calls, always ending in a JSON result for the model.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;
use trellis_builtins::validation::violations;

use futures::FutureExt;
use parking_lot::RwLock;
use serde_json::Value;

use crate::hooks::{Chain, HookName, HookReport, Hooks, Layer, Next, Reports, Request, Response};
use crate::plugin::Plugin;
use crate::rules::{check, CheckedTool, RegisterError};
use crate::tool::{error_result, ToolCall, ToolDefinition};

/// How long an executor may run before its call ends with `{"error": ...}`, unless
/// [`PluginManager::with_timeout`] says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Registered plugins and their client tools. Cheap to share behind an `Arc`; every
/// method takes `&self`.
///
/// The chat uses it in four places: [`client_tools`](Self::client_tools) (definitions to
/// send with a request), [`before_request`](Self::before_request),
/// [`after_response`](Self::after_response) and [`execute`](Self::execute) (a call the
/// model made to a client tool).
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use trellis_plugins::{sync_executor, Plugin, PluginManager, ToolDefinition};
/// use serde_json::json;
///
/// let manager = PluginManager::new();
/// let echo = Plugin::builder("echo", "0.1.0")
///     .tool(
///         ToolDefinition::new("echo", "Say it back", json!({"type": "object"})),
///         sync_executor(|args| Ok(args)),
///     )
///     .build();
/// manager.register(echo, Vec::<String>::new()).expect("valid");
/// assert_eq!(manager.execute("echo", json!({"a": 1})).await, json!({"a": 1}));
/// assert!(manager.execute("nope", json!({})).await["error"].is_string());
/// # });
/// ```
pub struct PluginManager {
    state: RwLock<State>,
    reports: Reports,
    timeout: Duration,
}

#[derive(Default)]
struct State {
    /// In registration order: the order hooks run in.
    plugins: Vec<Registered>,
    /// Tool name → its plugin's name and the checked tool.
    tools: HashMap<String, (String, Arc<CheckedTool>)>,
    /// The embedder's `on_tool_call`, outermost.
    tool_call_override: Option<Arc<dyn Hooks>>,
}

struct Registered {
    name: String,
    version: String,
    tools: Vec<String>,
    hooks: Arc<dyn Hooks>,
}

/// A registered plugin as listed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PluginInfo {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Its tools' names.
    pub tools: Vec<String>,
}

impl Default for PluginManager {
    fn default() -> PluginManager {
        PluginManager::new()
    }
}

impl PluginManager {
    /// A manager with no plugins and the default executor timeout.
    pub fn new() -> PluginManager {
        PluginManager { state: RwLock::default(), reports: Reports::default(), timeout: DEFAULT_TIMEOUT }
    }

    /// The same manager with another executor timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> PluginManager {
        self.timeout = timeout;
        self
    }

    /// Registers `plugin` if it passes every rule (see [`RegisterError`] for them), where
    /// `server_tools` are the names the server's tools already take. Then runs its
    /// `on_register`; if that fails, nothing is registered.
    pub fn register(
        &self,
        plugin: Plugin,
        server_tools: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> Result<(), RegisterError> {
        let server: HashSet<String> = server_tools.into_iter().map(|s| s.as_ref().to_string()).collect();
        let checked = {
            let state = self.state.read();
            if state.plugins.iter().any(|p| p.name == plugin.name) {
                return Err(RegisterError::DuplicatePlugin { plugin: plugin.name });
            }
            check(&plugin, |tool| state.tools.get(tool).map(|(owner, _)| owner.clone()), &server)?
        };
        // The hook runs outside the lock: it may call back into the manager.
        if let Err(report) = self.reports.guard(&plugin.name, HookName::OnRegister, || plugin.hooks.on_register()) {
            return Err(RegisterError::Hook { plugin: plugin.name, message: report.message });
        }
        let lost = {
            let mut state = self.state.write();
            match race(&state, &plugin.name, &checked) {
                Some(lost) => Some(lost),
                None => {
                    let tools = checked.iter().map(|t| t.definition.name.clone()).collect();
                    for tool in checked {
                        state.tools.insert(tool.definition.name.clone(), (plugin.name.clone(), Arc::new(tool)));
                    }
                    let hooks = Arc::clone(&plugin.hooks);
                    state.plugins.push(Registered { name: plugin.name.clone(), version: plugin.version, tools, hooks });
                    None
                }
            }
        };
        match lost {
            None => Ok(()),
            Some(lost) => {
                // Its on_register ran: it gets its on_unregister too.
                let _ = self.reports.guard(&plugin.name, HookName::OnUnregister, || plugin.hooks.on_unregister());
                Err(lost)
            }
        }
    }

    /// Removes the plugin named `name` and runs its `on_unregister`; false if there was none.
    pub fn unregister(&self, name: &str) -> bool {
        let removed = {
            let mut state = self.state.write();
            let Some(at) = state.plugins.iter().position(|p| p.name == name) else { return false };
            let removed = state.plugins.remove(at);
            state.tools.retain(|_, (owner, _)| owner != name);
            removed
        };
        // A failure is reported; the plugin is gone either way.
        let _ = self.reports.guard(name, HookName::OnUnregister, || removed.hooks.on_unregister());
        true
    }

    /// Sets the embedder's own `on_tool_call`, which wraps every call outside the plugins'
    /// (a confirmation prompt, logging, a permission gate); see `crate::hooks`.
    pub fn set_tool_call_override(&self, hooks: Arc<dyn Hooks>) {
        self.state.write().tool_call_override = Some(hooks);
    }

    /// The registered plugins, in registration order.
    pub fn plugins(&self) -> Vec<PluginInfo> {
        let state = self.state.read();
        state
            .plugins
            .iter()
            .map(|p| PluginInfo { name: p.name.clone(), version: p.version.clone(), tools: p.tools.clone() })
            .collect()
    }

    /// The client tools' definitions to send with a request, by plugin in registration
    /// order.
    pub fn client_tools(&self) -> Vec<ToolDefinition> {
        self.client_tools_beside(std::iter::empty::<&str>()).0
    }

    /// The client tools to send beside server tools named `server_tools`, which may have
    /// changed since registration (a charm mentioned since): a client tool with a server
    /// tool's name is left out, never shadowing it, and comes back as a refusal to report.
    pub fn client_tools_beside(
        &self,
        server_tools: impl IntoIterator<Item = impl AsRef<str>>,
    ) -> (Vec<ToolDefinition>, Vec<RegisterError>) {
        let server: HashSet<String> = server_tools.into_iter().map(|s| s.as_ref().to_string()).collect();
        let state = self.state.read();
        let mut conflicts = Vec::new();
        let mut offered = Vec::new();
        for (plugin, tool) in state.plugins.iter().flat_map(|p| p.tools.iter().map(move |t| (&p.name, t))) {
            let Some((_, checked)) = state.tools.get(tool) else { continue };
            if server.contains(tool) {
                conflicts.push(RegisterError::ConflictWithServer { plugin: plugin.clone(), tool: tool.clone() });
            } else {
                offered.push(checked.definition.clone());
            }
        }
        (offered, conflicts)
    }

    /// Whether `tool` is a client tool this manager executes.
    pub fn has_tool(&self, tool: &str) -> bool {
        self.state.read().tools.contains_key(tool)
    }

    /// Runs every plugin's `before_request` in registration order on `request`.
    pub fn before_request(&self, request: &mut Request) {
        for (plugin, hooks) in self.hooks() {
            let mut changed = request.clone();
            if self.reports.guard(&plugin, HookName::BeforeRequest, || hooks.before_request(&mut changed)).is_ok() {
                *request = changed;
            }
        }
    }

    /// Runs every plugin's `after_response` in registration order.
    pub fn after_response(&self, response: &Response) {
        for (plugin, hooks) in self.hooks() {
            let _ = self.reports.guard(&plugin, HookName::AfterResponse, || hooks.after_response(response));
        }
    }

    /// Executes a model's call of the client tool `tool`: through the `on_tool_call`
    /// chain, then the tool's executor, with `arguments` validated against its schema and
    /// the timeout applied. Always a JSON result: a failure is `{"error": ...}`. Await it
    /// inside a Tokio runtime (the timeout and the sandbox's threads are Tokio's).
    pub async fn execute(&self, tool: &str, arguments: Value) -> Value {
        let (layers, plugin, checked) = {
            let state = self.state.read();
            let Some((plugin, checked)) = state.tools.get(tool) else {
                return error_result(format!(
                    "there is no client tool `{tool}`; call one of the tools offered with this request"
                ));
            };
            let mut layers: Vec<Layer> = Vec::new();
            if let Some(hooks) = &state.tool_call_override {
                layers.push(("override".to_string(), Arc::clone(hooks)));
            }
            layers.extend(state.plugins.iter().map(|p| (p.name.clone(), Arc::clone(&p.hooks))));
            (layers, plugin.clone(), Arc::clone(checked))
        };
        let timeout = self.timeout;
        let innermost = Box::new(move |call: ToolCall| run_executor(Arc::clone(&checked), call, timeout).boxed());
        let chain = Chain { layers, innermost, reports: self.reports.clone() };
        Next::start(chain).run(ToolCall { tool: tool.to_string(), plugin, arguments }).await
    }

    /// The hooks that failed since the last call (oldest first; at most the last 100).
    pub fn take_reports(&self) -> Vec<HookReport> {
        self.reports.take()
    }

    fn hooks(&self) -> Vec<(String, Arc<dyn Hooks>)> {
        self.state.read().plugins.iter().map(|p| (p.name.clone(), Arc::clone(&p.hooks))).collect()
    }
}

/// Checked again under the write lock, after `on_register`: another registration may have
/// taken the plugin's name or a tool's meanwhile.
fn race(state: &State, plugin: &str, checked: &[CheckedTool]) -> Option<RegisterError> {
    if state.plugins.iter().any(|p| p.name == plugin) {
        return Some(RegisterError::DuplicatePlugin { plugin: plugin.to_string() });
    }
    checked.iter().find_map(|t| {
        state.tools.get(&t.definition.name).map(|(other, _)| RegisterError::ConflictWithPlugin {
            plugin: plugin.to_string(),
            tool: t.definition.name.clone(),
            other: other.clone(),
        })
    })
}

/// The innermost step of a call: validate, run the executor under the timeout, and turn
/// every failure (refusal, error, panic, timeout) into `{"error": ...}`.
async fn run_executor(tool: Arc<CheckedTool>, call: ToolCall, timeout: Duration) -> Value {
    let name = &tool.definition.name;
    if let Some(problems) = violations(&tool.validator, &call.arguments) {
        return error_result(format!(
            "invalid arguments for `{name}`: {problems}. Nothing was run; call it again with arguments that match \
             its parameters."
        ));
    }
    let started = std::panic::catch_unwind(AssertUnwindSafe(|| tool.executor.execute(call.arguments)));
    let running = match started {
        Ok(running) => AssertUnwindSafe(running).catch_unwind(),
        Err(panic) => return error_result(format!("`{name}` failed: {}", crate::hooks::panic_message(&*panic))),
    };
    match tokio::time::timeout(timeout, running).await {
        Ok(Ok(Ok(result))) => result,
        Ok(Ok(Err(e))) => error_result(format!("`{name}` failed: {e}")),
        Ok(Err(panic)) => error_result(format!("`{name}` failed: {}", crate::hooks::panic_message(&*panic))),
        Err(_) => error_result(format!("`{name}` did not finish within {} s and was stopped", timeout.as_secs_f64())),
    }
}
