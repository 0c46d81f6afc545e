//! Client tools and plugins for Trellis.
//!
//! A client tool runs on the client (the terminal, later a web page or an SDK), not in the
//! runtime: its definition travels with a request, the model's call to it comes back to
//! the client, and the client executes it and hands the result on. Plugins bundle such
//! tools with their executors and lifecycle hooks:
//!
//! - [`Plugin`] / [`PluginBuilder`]: a plugin in Rust, for embedders;
//! - [`PluginManager`]: registration under the rules ([`RegisterError`] names each), hooks
//!   in a documented order ([`hooks`]), execution that always ends in a JSON result;
//! - installable plugins: a [`bundle`] (manifest + WebAssembly module, optionally
//!   signed), executed in the [`sandbox`] (fuel, memory cap, only the imports granted),
//!   signed and verified by [`signing`], kept in the space by [`store`], allowed to run
//!   by the user's own decisions in their [`trust`] file.
//!
//! # In a chat
//!
//! A front end loads the space's enabled plugins once, then, per request, sends the client
//! tools beside the server's, runs the request hooks, and executes the client tool calls
//! the model makes (each a pending interaction of kind "client execution"), handing each
//! result back as the call's output:
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use trellis_plugins::store::PluginStore;
//! use trellis_plugins::trust::TrustFile;
//! use trellis_plugins::{PluginManager, Request, Response};
//!
//! let rt = trellis_runner::Runtime::in_memory();
//! let config = tempfile::tempdir().unwrap(); // a program would use `TrustFile::of_user()`
//! let store = PluginStore::new(&rt, TrustFile::at(config.path().join("plugins.json")));
//! let server_tools = vec!["Counter_increment".to_string()];
//! let manager = PluginManager::new();
//! for (plugin, why) in store.load(&manager, &server_tools).unwrap() {
//!     eprintln!("plugin {plugin} was not loaded: {why}");
//! }
//! let (client_tools, shadowing) = manager.client_tools_beside(&server_tools);
//! assert!(client_tools.is_empty() && shadowing.is_empty(), "nothing installed here");
//! let mut request = Request { message: "count the words of ...".into(), ..Request::default() };
//! manager.before_request(&mut request);
//! // ... the model calls a client tool: run it here, resolve the call with its result.
//! let result = manager.execute("count_words", serde_json::json!({"text": "a b"})).await;
//! assert!(result["error"].is_string(), "not installed: an error result, never a panic");
//! manager.after_response(&Response { text: "...".into(), tools_called: vec!["count_words".into()] });
//! for failed in manager.take_reports() {
//!     eprintln!("{failed}");
//! }
//! # });
//! ```

pub mod actions;
pub mod bundle;
mod executor;
pub mod hooks;
mod manager;
pub mod manifest;
mod plugin;
pub mod rules;
pub mod sandbox;
pub mod signing;
pub mod store;
mod tool;
pub mod trust;

pub use executor::{sync_executor, Executor, ToolError};
pub use hooks::{HookName, HookReport, Hooks, Next, Request, Response};
pub use manager::{PluginInfo, PluginManager, DEFAULT_TIMEOUT};
pub use plugin::{Plugin, PluginBuilder};
pub use rules::RegisterError;
pub use tool::{error_result, ToolCall, ToolDefinition};
