//! The builtins' integration tests, in one binary: the tool protocol, client tools, and the
//! providers against recorded streams served over loopback.

#![allow(clippy::unwrap_used)] // a failing unwrap is a failing test

mod client_tools;
mod compaction;
mod providers;
mod structured;
mod tool_protocol;
