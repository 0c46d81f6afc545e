//! `assistant`: a chatbot with its own system prompt that always offers the Shopping
//! list's handlers, so "add milk to my shopping list" needs no @-mention. Mentioned
//! charms still become tools, as in the built-in chatbot.

use serde_json::json;
use trellis::patterns::chatbot::{wire, ChatbotArgs};
use trellis::prelude::*;

/// The assistant's system prompt.
pub const SYSTEM: &str = "You are a household assistant. You keep the user's shopping list \
with the Shopping tools; other charms the user mentions with @Name are tools too. Act, then \
say briefly what you did.";

/// The assistant chatbot pattern. Its static tools name the Shopping charm by its name,
/// so they follow whichever charm is called "Shopping" in the space.
pub fn assistant() -> Pattern {
    Pattern::new("assistant", |b, _: serde_json::Value| {
        b.name("Assistant")?;
        let mut tools = serde_json::Map::new();
        tools.insert("Shopping".into(), json!({ "charm": "Shopping" }));
        wire(b, ChatbotArgs { system: Some(SYSTEM.into()), model: None, tools })
    })
    .description("A household assistant that keeps your shopping list")
}
