//! Trellis: a reactive dataflow runtime where patterns run as live charms, and a
//! language model can act on them through tools.
//!
//! This facade re-exports the crates of the workspace:
//! - [`runner`]: values, spaces, cells, streams, transactions, scheduler, patterns, charms;
//! - [`builtins`]: `llm_dialog`, the tool catalog, language models;
//! - [`patterns`]: the chatbot and the reference charms;
//! - [`plugins`]: client tools and plugins (for [`App::plugin`]).
//!
//! `use trellis::prelude::*;` brings in what a pattern author needs.

pub use trellis_builtins as builtins;
pub use trellis_patterns as patterns;
pub use trellis_plugins as plugins;
pub use trellis_runner as runner;

mod cli;
mod client;
mod handoff;
mod nodes;
mod program;
mod serve;
mod session;
mod telemetry;
mod terminal;
pub mod testing;
mod tokens;

pub use cli::App;

/// The allocator the `trellis` command runs on (mimalloc). A dialog round and a catalog
/// build allocate thousands of small values, and with this allocator they take a third to
/// a half less time than with glibc's (`trellis-bench tools`). A binary built on this
/// crate runs on it with two lines beside its `main`:
///
/// ```
/// #[global_allocator]
/// static ALLOCATOR: trellis::Allocator = trellis::Allocator;
/// # fn main() {}
/// ```
///
/// The libraries of the workspace choose no allocator: that is the binary's choice.
pub use mimalloc::MiMalloc as Allocator;

/// What a pattern author needs in scope.
pub mod prelude {
    pub use trellis_runner::prelude::*;
}

/// The README's Rust examples, compiled as doc tests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
