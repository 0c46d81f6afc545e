//! An assistant built on Trellis in its own crate: a `Shopping` pattern, and an
//! `assistant` chatbot that offers Shopping's handlers without an @-mention.
//!
//! `src/main.rs` turns these into a whole `trellis`-style command named `assistant`.

pub mod assistant;
pub mod shopping;

pub use assistant::assistant;
pub use shopping::shopping;
