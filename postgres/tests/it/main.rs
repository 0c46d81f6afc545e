//! trellis-postgres against a real PostgreSQL server (see `server.rs` for which).

mod conformance;
mod errors;
mod feed;
mod fidelity;
mod lease;
mod server;
