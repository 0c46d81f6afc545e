//! Which tools the assistant offers, and what a conversation does with them.

use serde_json::json;
use trellis::builtins::scripted::Turn;
use trellis::patterns::chatbot::Chatbot;
use trellis::testing::TestSpace;
use trellis_example_assistant::{assistant, shopping};

#[test]
fn shopping_yields_add_remove_and_check() {
    let space = TestSpace::with_patterns([shopping()]);
    let list = space.charm("shopping");
    let tools = space.tools_of(&[&list]);
    tools.assert_displays(&["Shopping.add", "Shopping.check", "Shopping.remove"]);
    assert!(tools.get("Shopping.add").description.contains("Add something"));
}

#[test]
fn the_assistant_offers_shopping_without_a_mention() {
    let space = TestSpace::with_patterns([shopping(), assistant()]);
    space.charm("shopping");
    let chat = Chatbot::find_or_create(space.runtime(), "assistant").expect("the assistant keeps the chatbot contract");
    space.chatbot_tools(&chat).assert_displays(&[
        "Shopping.add",
        "Shopping.check",
        "Shopping.remove",
        "request_human_input",
    ]);
}

#[tokio::test]
async fn adding_and_checking_off_leaves_the_rest() {
    let space = TestSpace::with_patterns([shopping()]);
    let list = space.charm("shopping");
    // One call per turn: calls of one turn run concurrently, in no fixed order.
    let script = vec![
        Turn::tool_call("Shopping.add", json!({"item": "milk"})),
        Turn::tool_call("Shopping.add", json!({"item": "bread"})),
        Turn::tool_call("Shopping.check", json!({"item": "Milk"})),
        Turn::text("Added milk and bread; milk is bought."),
    ];
    space.run_dialog(&[&list], script, "add milk and bread, I already have milk").await;
    let data = space.runtime().charms().get(&list).expect("the list exists");
    assert_eq!(data["left"], 1);
    assert_eq!(data["items"], json!([{"name": "milk", "checked": true}, {"name": "bread", "checked": false}]));
}

#[tokio::test]
async fn checking_off_something_not_on_the_list_tells_the_model_what_is() {
    let space = TestSpace::with_patterns([shopping()]);
    let list = space.charm("shopping");
    let script = vec![
        Turn::tool_call("Shopping.add", json!({"item": "eggs"})),
        Turn::tool_call("Shopping.check", json!({"item": "tea"})),
        Turn::text("Tea is not on the list."),
    ];
    let messages = space.run_dialog(&[&list], script, "add eggs, check off tea").await;
    let results = format!("{:?}", messages[4]);
    assert!(results.contains("`tea` is not on the list; it has: eggs"), "{results}");
}
