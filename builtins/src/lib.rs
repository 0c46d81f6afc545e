//! Trellis builtins: `llm_dialog`, the tool catalog and language models.

pub mod message;
pub mod model;
