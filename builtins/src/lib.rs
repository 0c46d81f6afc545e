//! Trellis builtins: `llm_dialog`, the tool catalog and language models.

pub mod catalog;
pub mod dialog;
pub mod message;
pub mod model;
pub mod offline;
pub mod provider;
pub mod scripted;
#[cfg(test)]
mod test_rng;
pub mod text;
pub mod tool;
pub mod validation;
