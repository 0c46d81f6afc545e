//! The runner's integration tests, in one binary: spaces opened lazily from real SQLite
//! files, and the limits every input is held to.

#![allow(clippy::unwrap_used)] // a failing unwrap is a failing test

mod lazy;
mod limits;
mod returned;
