//! The example crate's integration tests, in one binary: its command line and its tools, as
//! an author's own crate tests them.

#![allow(clippy::unwrap_used)] // a failing unwrap is a failing test

mod cli;
mod tools;
