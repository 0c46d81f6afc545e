//! `assistant`: every `trellis` subcommand, with the Shopping list and the assistant
//! chatbot beside the reference patterns.

use trellis_example_assistant::{assistant, shopping};

#[global_allocator]
static ALLOCATOR: trellis::Allocator = trellis::Allocator;

fn main() -> std::process::ExitCode {
    trellis::App::new("assistant")
        .about("A household assistant that keeps your shopping list")
        .pattern(shopping())
        .pattern(assistant())
        .chatbot("assistant")
        // A fresh space gets a shopping list (and no reference charms).
        .reference_charms(false)
        .seed(|rt| Ok(rt.charms().create("shopping", serde_json::json!({})).map(drop)?))
        .run()
}
