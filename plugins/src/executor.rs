//! Executors: the code that runs a client tool on the client and gives back its JSON
//! result.

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::Value;

/// Why a tool (or a hook) failed; the model reads the message as `{"error": message}`:
/// the same error as a defined tool's phases.
pub use trellis_builtins::tool::ToolError;

/// Runs one tool: JSON arguments in (already validated against the tool's schema), a JSON
/// result out. An `Err` becomes `{"error": ...}` for the model.
///
/// Any `Fn(Value) -> impl Future<Output = Result<Value, ToolError>>` is an executor; see
/// [`sync_executor`] for plain functions.
pub trait Executor: Send + Sync {
    /// Runs the tool with `arguments`.
    fn execute(&self, arguments: Value) -> BoxFuture<'static, Result<Value, ToolError>>;
}

impl<F, Fut> Executor for F
where
    F: Fn(Value) -> Fut + Send + Sync,
    Fut: Future<Output = Result<Value, ToolError>> + Send + 'static,
{
    fn execute(&self, arguments: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        self(arguments).boxed()
    }
}

/// An executor from a function that does not wait on anything.
///
/// ```
/// use trellis_plugins::{sync_executor, Executor};
/// let double = sync_executor(|args| Ok(serde_json::json!(args["n"].as_i64().unwrap_or(0) * 2)));
/// # let _ = double;
/// ```
pub fn sync_executor(f: impl Fn(Value) -> Result<Value, ToolError> + Send + Sync + 'static) -> Arc<dyn Executor> {
    Arc::new(move |arguments: Value| std::future::ready(f(arguments)))
}
