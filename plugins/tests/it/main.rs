//! The plugins' integration tests, in one binary: the manager, the WebAssembly sandbox, and
//! the plugin store. `common` builds bundles (the root package's tests use it too).

#![allow(clippy::unwrap_used)] // a failing unwrap is a failing test

mod common;
mod manager;
mod sandbox;
mod store;
