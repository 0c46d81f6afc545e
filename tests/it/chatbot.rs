//! The chatbot pattern: attachments become tools, detaching removes them.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use trellis::builtins::dialog::LlmDialog;
use trellis::builtins::model::{Model, ModelError};
use trellis::builtins::scripted::{ScriptedModel, Turn};
use trellis::patterns::chatbot::{wire, Chatbot, ChatbotArgs, ChatbotError};
use trellis::prelude::*;
use trellis::runner::DocId;

const WAIT: Duration = Duration::from_secs(10);

fn runtime(turns: Vec<Turn>) -> Runtime {
    let rt = Runtime::in_memory();
    trellis::patterns::register_all(&rt);
    let model: Arc<dyn Model> = Arc::new(ScriptedModel::from_turns(turns));
    let resolver = move |_: &str| -> Result<Arc<dyn Model>, ModelError> { Ok(model.clone()) };
    rt.register_builtin(Arc::new(LlmDialog::with_resolver(Arc::new(resolver))));
    rt
}

async fn attach(rt: &Runtime, chat: &DocId, charm: &DocId) {
    let name = rt.charms().name(charm);
    let event = json!({"name": name, "charm": rt.charms().result(charm).to_json()});
    rt.send(&rt.charms().result(chat).child("attach"), event).await.unwrap();
}

fn tool_names(rt: &Runtime, chat: &DocId) -> Vec<String> {
    let tools = rt.charms().get(chat).unwrap()["flattened_tools"].clone();
    let mut names: Vec<String> =
        tools.as_array().unwrap().iter().map(|t| t["display"].as_str().unwrap().to_string()).collect();
    names.sort();
    names
}

#[tokio::test]
async fn attachments_add_and_remove_tools() {
    let rt = runtime(vec![]);
    let counter = rt.charms().create("counter", json!({})).unwrap();
    let todo = rt.charms().create("todo", json!({})).unwrap();
    let chat = rt.charms().create("chatbot", json!({})).unwrap();
    assert_eq!(tool_names(&rt, &chat), ["request_human_input"], "only the built-in question tool");

    attach(&rt, &chat, &counter).await;
    attach(&rt, &chat, &counter).await; // attaching twice keeps one attachment
    attach(&rt, &chat, &todo).await;
    let names = tool_names(&rt, &chat);
    assert!(names.contains(&"Counter.increment".to_string()) && names.contains(&"Todo.add".to_string()), "{names:?}");
    assert_eq!(rt.charms().get(&chat).unwrap()["attachments"].as_array().unwrap().len(), 2);

    rt.send(&rt.charms().result(&chat).child("detach"), json!({"name": "Counter"})).await.unwrap();
    let names = tool_names(&rt, &chat);
    assert!(!names.iter().any(|n| n.starts_with("Counter.")), "{names:?}");
    assert!(names.contains(&"Todo.add".to_string()));
}

#[tokio::test]
async fn the_model_acts_on_a_mentioned_charm_through_the_chatbot() {
    let rt = runtime(vec![Turn::tool_call("Counter.increment", json!({"amount": 5})), Turn::text("Added 5.")]);
    let counter = rt.charms().create("counter", json!({})).unwrap();
    let chat = Chatbot::find_or_create(&rt, "chatbot").unwrap();
    chat.set_model("test").await.unwrap();
    assert!(chat.attachments().is_empty());

    // The mention, not the test, attaches the counter.
    let reply = chat.say("@counter add 5", WAIT).await.unwrap();
    assert_eq!(chat.attachments(), ["Counter"]);
    assert_eq!(rt.charms().get(&counter).unwrap()["count"], 5);
    assert_eq!(reply.len(), 4, "user, tool call, tool result, answer: {reply:?}");
    assert_eq!(reply[3].text(), "Added 5.");
    let snapshot = rt.charms().get(chat.charm()).unwrap();
    assert_eq!(snapshot["pending"], false);

    chat.clear().await.unwrap();
    let snapshot = rt.charms().get(chat.charm()).unwrap();
    assert_eq!(snapshot["messages"], json!([]));
    assert_eq!(snapshot["attachments"], json!([]));
}

#[tokio::test]
async fn an_unknown_mention_attaches_nothing_and_sends_nothing() {
    let rt = runtime(vec![Turn::text("unused")]);
    rt.charms().create("counter", json!({})).unwrap();
    let chat = Chatbot::find_or_create(&rt, "chatbot").unwrap();
    let err = chat.say("@Counter and @Nope", WAIT).await.err().unwrap();
    assert!(matches!(err, ChatbotError::UnknownMention(_)), "{err}");
    assert!(err.to_string().contains("@Nope") && err.to_string().contains("Counter"), "{err}");
    assert!(chat.attachments().is_empty());
    assert!(chat.dialog().messages().is_empty());
}

#[tokio::test]
async fn a_custom_chatbot_keeps_the_contract_and_a_counter_does_not() {
    let rt = runtime(vec![Turn::text("Short.")]);
    rt.register_pattern(Pattern::new("terse", |b, _: serde_json::Value| {
        b.name("Terse")?;
        wire(b, ChatbotArgs { system: Some("Five words at most.".into()), ..ChatbotArgs::default() })
    }));
    let chat = Chatbot::find_or_create(&rt, "terse").unwrap();
    chat.set_model("test").await.unwrap();
    let reply = chat.say("hello", WAIT).await.unwrap();
    assert_eq!(reply.last().unwrap().text(), "Short.");
    assert_eq!(rt.charms().get(chat.charm()).unwrap()["system"], "Five words at most.");
    assert!(!chat.mentionable().contains(&"Terse".to_string()), "chatbots are not mention targets");

    let err = Chatbot::find_or_create(&rt, "counter").err().unwrap();
    let text = err.to_string();
    assert!(text.contains("not a chatbot") && text.contains("stream attach") && text.contains("messages"), "{text}");
    assert!(matches!(Chatbot::find_or_create(&rt, "nope"), Err(ChatbotError::UnknownPattern(_))));
}

#[tokio::test]
async fn two_charms_with_the_same_name_both_get_tools() {
    let rt = runtime(vec![]);
    let a = rt.charms().create("counter", json!({})).unwrap();
    let b = rt.charms().create("counter", json!({})).unwrap();
    let chat = rt.charms().create("chatbot", json!({})).unwrap();
    attach(&rt, &chat, &a).await;
    attach(&rt, &chat, &b).await;
    let tools = rt.charms().get(&chat).unwrap()["flattened_tools"].clone();
    let wires: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["display"] == "Counter.increment")
        .map(|t| t["wire"].as_str().unwrap())
        .collect();
    assert_eq!(wires.len(), 2);
    assert_ne!(wires[0], wires[1]);
}

#[tokio::test]
async fn renaming_an_attached_charm_renames_its_tools() {
    let rt = runtime(vec![]);
    let counter = rt.charms().create("counter", json!({})).unwrap();
    let chat = rt.charms().create("chatbot", json!({})).unwrap();
    attach(&rt, &chat, &counter).await;
    rt.charms().rename(&counter, "Steps").unwrap();
    let names = tool_names(&rt, &chat);
    assert!(names.contains(&"Steps.increment".to_string()), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("Counter.")), "{names:?}");
}

#[tokio::test]
async fn clear_waits_for_the_calls_that_wait_for_an_answer() {
    let rt = runtime(vec![Turn::tool_call("Notes.delete", json!({"id": 1})), Turn::text("Kept it.")]);
    rt.charms().create("notes", json!({})).unwrap();
    let chat = Chatbot::find_or_create(&rt, "chatbot").unwrap();
    chat.set_model("test").await.unwrap();
    chat.say("@Notes delete note 1", WAIT).await.unwrap();
    let waiting = chat.interactions();
    assert_eq!(waiting.len(), 1);
    let refused = chat.clear().await.err().unwrap();
    assert!(refused.to_string().contains("waiting for your answer"), "{refused}");
    chat.cancel().await.unwrap();
    chat.clear().await.unwrap();
    assert!(chat.dialog().messages().is_empty() && chat.interactions().is_empty());
}
