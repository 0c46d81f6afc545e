//! The `trellis::testing` helpers, used the way a pattern author's tests use them.

use serde_json::json;
use trellis::builtins::message::{Part, ToolOutput};
use trellis::builtins::scripted::Turn;
use trellis::patterns::chatbot::Chatbot;
use trellis::patterns::{counter::counter, todo::todo};
use trellis::testing::TestSpace;

#[test]
fn two_charms_yield_their_handlers_with_schemas() {
    let space = TestSpace::with_patterns([counter(), todo()]);
    let (counter, todo) = (space.charm("counter"), space.charm("todo"));
    let tools = space.tools_of(&[&counter, &todo]);
    tools.assert_displays(&[
        "Counter.decrement",
        "Counter.increment",
        "Counter.reset",
        "Todo.add",
        "Todo.complete",
        "Todo.remove",
        "Todo.rename",
    ]);
    let add = tools.get("Todo.add");
    assert_eq!(add.wire, "Todo_add");
    assert_eq!(add.schema["required"], json!(["title"]));
}

#[test]
#[should_panic(expected = "!                   | Counter.reset")]
fn a_wrong_expectation_shows_both_lists() {
    let space = TestSpace::with_patterns([counter()]);
    let counter = space.charm("counter");
    space.tools_of(&[&counter]).assert_displays(&["Counter.decrement", "Counter.increment"]);
}

#[tokio::test]
async fn a_scripted_dialog_calls_a_tool_and_returns_the_conversation() {
    let space = TestSpace::with_patterns([counter()]);
    let counter = space.charm("counter");
    let script = vec![Turn::tool_call("Counter.increment", json!({"amount": 2})), Turn::text("Now 2.")];
    let messages = space.run_dialog(&[&counter], script, "add 2").await;
    assert_eq!(messages.len(), 4);
    let Part::ToolResult { output: ToolOutput::Json(result), .. } = &messages[2].content[0] else {
        panic!("expected a JSON tool result: {messages:?}")
    };
    assert_eq!(result["result"]["count"], 2);
    assert_eq!(messages[3].text(), "Now 2.");
    // A second run has its own script.
    let again = space.run_dialog(&[&counter], vec![Turn::text("Hi.")], "hello").await;
    assert_eq!(again.last().unwrap().text(), "Hi.");
}

#[tokio::test]
async fn a_chatbots_tools_follow_its_attachments() {
    let space = TestSpace::with_patterns([counter()]);
    space.charm("counter");
    let chat = Chatbot::find_or_create(space.runtime(), "chatbot").unwrap();
    space.chatbot_tools(&chat).assert_displays(&["request_human_input"]);
    chat.attach_mentions("@Counter").await.unwrap();
    space.chatbot_tools(&chat).assert_displays(&[
        "Counter.decrement",
        "Counter.increment",
        "Counter.read",
        "Counter.reset",
        "request_human_input",
    ]);
}
