//! Trellis builtins: `llm_dialog`, the tool catalog and language models.

pub mod ask;
pub mod catalog;
mod counted;
pub mod dialog;
pub mod files;
pub mod invoke;
pub mod message;
pub mod model;
pub mod naming;
pub mod offline;
pub mod provider;
pub mod schema;
pub mod scripted;
pub mod sources;
pub mod structured;
#[cfg(test)]
mod test_rng;
pub mod text;
pub mod tool;
pub mod traced;
pub mod validation;
pub mod watch;
