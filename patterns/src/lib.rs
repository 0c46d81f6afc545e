//! The reference patterns: short, documented examples of what charms can do.

pub mod counter;
pub mod todo;

use trellis_runner::Runtime;

/// Registers every reference pattern with `rt`.
pub fn register_all(rt: &Runtime) {
    rt.register_pattern(counter::counter());
    rt.register_pattern(todo::todo());
}

/// Creates one charm of each reference pattern (for a fresh space).
pub fn seed(rt: &Runtime) -> trellis_runner::Result<()> {
    rt.charms().create("counter", serde_json::json!({}))?;
    rt.charms().create("todo", serde_json::json!({}))?;
    Ok(())
}
