//! The reference patterns: short, documented examples of what charms can do.

pub mod chatbot;
pub mod counter;
pub mod dice;
pub mod mailbox;
pub mod notes;
pub mod todo;

use trellis_runner::charm::NewCharm;
use trellis_runner::Runtime;

/// Registers the `llm_dialog` builtin and every reference pattern with `rt`.
pub fn register_all(rt: &Runtime) {
    rt.register_builtin(std::sync::Arc::new(trellis_builtins::dialog::LlmDialog::new()));
    rt.register_pattern(chatbot::chatbot());
    rt.register_pattern(counter::counter());
    rt.register_pattern(dice::dice());
    rt.register_pattern(mailbox::mailbox());
    rt.register_pattern(notes::notes());
    rt.register_pattern(todo::todo());
}

/// Creates one charm of each reference pattern (for a fresh space).
pub fn seed(rt: &Runtime) -> trellis_runner::Result<()> {
    let new = |pattern| NewCharm { pattern, argument: serde_json::json!({}), name: None };
    rt.charms().create_all(&[new("counter"), new("dice"), new("notes"), new("todo")])?;
    Ok(())
}
