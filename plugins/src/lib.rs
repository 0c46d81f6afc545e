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
//!   signed and verified by [`signing`], kept in the space by [`store`].
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

pub use executor::{sync_executor, Executor, ToolError};
pub use hooks::{HookName, HookReport, Hooks, Next, Request, Response};
pub use manager::{PluginInfo, PluginManager, DEFAULT_TIMEOUT};
pub use plugin::{Plugin, PluginBuilder};
pub use rules::RegisterError;
pub use tool::{error_result, ToolCall, ToolDefinition};
