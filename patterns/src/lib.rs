//! The reference patterns: short, documented examples of what charms can do.

pub mod chatbot;
pub mod counter;
pub mod dice;
pub mod notes;
pub mod todo;

use trellis_runner::Runtime;

/// Registers the `llm_dialog` builtin and every reference pattern with `rt`.
pub fn register_all(rt: &Runtime) {
    rt.register_builtin(std::sync::Arc::new(trellis_builtins::dialog::LlmDialog::new()));
    rt.register_pattern(chatbot::chatbot());
    rt.register_pattern(counter::counter());
    rt.register_pattern(dice::dice());
    rt.register_pattern(notes::notes());
    rt.register_pattern(todo::todo());
}

/// Creates one charm of each reference pattern (for a fresh space).
pub fn seed(rt: &Runtime) -> trellis_runner::Result<()> {
    rt.charms().create("counter", serde_json::json!({}))?;
    rt.charms().create("dice", serde_json::json!({}))?;
    rt.charms().create("notes", serde_json::json!({}))?;
    rt.charms().create("todo", serde_json::json!({}))?;
    Ok(())
}
