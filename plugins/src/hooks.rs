//! Lifecycle hooks: what a plugin may do around registration, requests, responses and tool
//! calls, and how a failing hook is reported without taking anything down.
//!
//! # Order
//!
//! - `on_register` runs once the plugin passed every registration rule, before its tools
//!   are offered; if it fails the plugin is not registered (and its `on_unregister` does
//!   not run).
//! - `before_request` runs for every registered plugin, in registration order, each seeing
//!   the request as the previous one left it. A hook that fails leaves the request as it
//!   found it.
//! - `after_response` runs for every plugin in registration order.
//! - `on_tool_call` wraps the execution of every client tool call, whichever plugin owns
//!   the tool: the manager's override (if any) outermost, then each plugin's hook in
//!   registration order, then the owning plugin's executor (arguments validated, timeout
//!   applied). Each layer gets the call and a [`Next`] and may run the rest
//!   ([`Next::run`]), change the call first, or return a result of its own without running
//!   it (a refused confirmation, a permission gate).
//! - `on_unregister` runs when the plugin is removed, after its tools are withdrawn.
//!
//! A hook that returns an error or panics is recorded as a [`HookReport`] (see
//! `PluginManager::take_reports`); a failing `on_tool_call` layer gives the model
//! `{"error": ...}` for that call.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::Value;

use crate::executor::ToolError;
use crate::tool::{error_result, ToolCall};

/// A request as plugins see it before it is sent: the person's message and metadata
/// plugins may add to (a hook may change both).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Request {
    /// The message being sent.
    pub message: String,
    /// Free-form data for the front end (plugins may add keys).
    pub metadata: serde_json::Map<String, Value>,
}

/// A response as plugins see it once it arrived.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Response {
    /// The model's text.
    pub text: String,
    /// The tools it called, by name.
    pub tools_called: Vec<String>,
}

/// The hooks of a plugin; every method has a default that does nothing (or, for
/// `on_tool_call`, runs the rest of the chain). See the module docs for the order.
pub trait Hooks: Send + Sync {
    /// The plugin was accepted; an error refuses the registration.
    fn on_register(&self) -> Result<(), ToolError> {
        Ok(())
    }
    /// A request is about to be sent.
    fn before_request(&self, _request: &mut Request) -> Result<(), ToolError> {
        Ok(())
    }
    /// A response arrived.
    fn after_response(&self, _response: &Response) -> Result<(), ToolError> {
        Ok(())
    }
    /// A client tool is called: run `next` (maybe with a changed call), or answer alone.
    fn on_tool_call(&self, call: ToolCall, next: Next) -> BoxFuture<'static, Result<Value, ToolError>> {
        next.run(call).map(Ok).boxed()
    }
    /// The plugin is being removed.
    fn on_unregister(&self) -> Result<(), ToolError> {
        Ok(())
    }
}

/// Hooks that do nothing.
pub(crate) struct NoHooks;
impl Hooks for NoHooks {}

/// Which hook a report is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HookName {
    /// `on_register`.
    OnRegister,
    /// `before_request`.
    BeforeRequest,
    /// `after_response`.
    AfterResponse,
    /// `on_tool_call`.
    OnToolCall,
    /// `on_unregister`.
    OnUnregister,
}

impl std::fmt::Display for HookName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HookName::OnRegister => "on_register",
            HookName::BeforeRequest => "before_request",
            HookName::AfterResponse => "after_response",
            HookName::OnToolCall => "on_tool_call",
            HookName::OnUnregister => "on_unregister",
        })
    }
}

/// A hook that failed: which plugin, which hook, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("plugin `{plugin}`: its {hook} hook failed: {message}")]
pub struct HookReport {
    /// The plugin (or `override` for the manager's own `on_tool_call`).
    pub plugin: String,
    /// The hook.
    pub hook: HookName,
    /// What went wrong.
    pub message: String,
}

/// The most reports kept; older ones are dropped first.
const MAX_REPORTS: usize = 100;

/// Failed hooks waiting to be read, shared by the manager and running calls.
#[derive(Clone, Default)]
pub(crate) struct Reports(Arc<Mutex<VecDeque<HookReport>>>);

impl Reports {
    pub(crate) fn push(&self, report: HookReport) {
        let mut queue = self.0.lock();
        if queue.len() == MAX_REPORTS {
            queue.pop_front();
        }
        queue.push_back(report);
    }

    pub(crate) fn take(&self) -> Vec<HookReport> {
        self.0.lock().drain(..).collect()
    }

    /// Runs one synchronous hook, catching a panic; a failure is reported and returned.
    pub(crate) fn guard(
        &self,
        plugin: &str,
        hook: HookName,
        run: impl FnOnce() -> Result<(), ToolError>,
    ) -> Result<(), HookReport> {
        let outcome = match std::panic::catch_unwind(AssertUnwindSafe(run)) {
            Ok(outcome) => outcome.map_err(String::from),
            Err(panic) => Err(panic_message(&*panic)),
        };
        outcome.map_err(|message| {
            let report = HookReport { plugin: plugin.to_string(), hook, message };
            self.push(report.clone());
            report
        })
    }
}

/// The text of a panic's payload.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    format!("it panicked: {text}")
}

/// One `on_tool_call` layer: whose hook it is, and the hook.
pub(crate) type Layer = (String, Arc<dyn Hooks>);

/// What runs once every layer let the call through: the executor, behind validation and
/// the timeout.
pub(crate) type Innermost = Box<dyn Fn(ToolCall) -> BoxFuture<'static, Value> + Send + Sync>;

/// The layers of one call, outermost first, and what they wrap.
pub(crate) struct Chain {
    pub(crate) layers: Vec<Layer>,
    pub(crate) innermost: Innermost,
    pub(crate) reports: Reports,
}

/// The rest of a tool call's chain, handed to each `on_tool_call` layer.
pub struct Next {
    chain: Arc<Chain>,
    at: usize,
}

impl Next {
    pub(crate) fn start(chain: Chain) -> Next {
        Next { chain: Arc::new(chain), at: 0 }
    }

    /// Runs the rest of the chain with `call` (the next layer, or the executor): the
    /// result the model would read, `{"error": ...}` included.
    pub fn run(self, call: ToolCall) -> BoxFuture<'static, Value> {
        let Some((plugin, hooks)) = self.chain.layers.get(self.at).cloned() else {
            return (self.chain.innermost)(call);
        };
        let reports = self.chain.reports.clone();
        let next = Next { chain: Arc::clone(&self.chain), at: self.at + 1 };
        let fail = move |message: String| {
            let report = HookReport { plugin, hook: HookName::OnToolCall, message };
            reports.push(report.clone());
            error_result(report)
        };
        let started = std::panic::catch_unwind(AssertUnwindSafe(|| hooks.on_tool_call(call, next)));
        async move {
            let running = match started {
                Ok(running) => running,
                Err(panic) => return fail(panic_message(&*panic)),
            };
            match AssertUnwindSafe(running).catch_unwind().await {
                Ok(Ok(result)) => result,
                Ok(Err(e)) => fail(e.into()),
                Err(panic) => fail(panic_message(&*panic)),
            }
        }
        .boxed()
    }
}
