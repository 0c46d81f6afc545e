//! `llm_dialog` with the scripted model: tool calls change charms and results flow back.

#![allow(clippy::unwrap_used)] // a failing unwrap is a failing test

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::Notify;
use trellis::builtins::dialog::{DialogHandle, DialogSettings, LlmDialog};
use trellis::builtins::message::{Message, Part, Role, ToolOutput};
use trellis::builtins::model::{EventStream, Model, ModelError, ModelRequest};
use trellis::builtins::scripted::{ScriptedModel, Turn};
use trellis::patterns::counter::counter;
use trellis::prelude::*;

const WAIT: Duration = Duration::from_secs(10);

/// A chat pattern for tests: a dialog whose tools are the charms given as argument.
fn chat_pattern() -> Pattern {
    Pattern::new("test-chat", |b, arg: serde_json::Value| {
        let messages = b.state::<Vec<Message>>("messages", Vec::new())?;
        b.builtin(
            "dialog",
            "llm_dialog",
            json!({"messages": messages.link().to_json(), "model": "test", "tools": arg["tools"].clone()}),
        )?;
        Ok(())
    })
}

/// A pattern whose handlers misbehave on purpose.
fn fragile_pattern() -> Pattern {
    #[derive(Deserialize, JsonSchema)]
    struct Nothing {}
    Pattern::new("fragile", |b, _: serde_json::Value| {
        b.name("Fragile")?;
        b.handler("explode", |_, _: Nothing| panic!("kaboom"));
        b.handler("dawdle", |_, _: Nothing| {
            std::thread::sleep(Duration::from_millis(400));
            Ok(())
        });
        Ok(())
    })
}

struct Setup {
    rt: Runtime,
    dialog: DialogHandle,
    counters: Vec<DocId>,
}

use trellis::runner::DocId;

fn setup_with(model: Arc<dyn Model>, settings: DialogSettings, counters: usize, extra: &[&str]) -> Setup {
    let rt = Runtime::in_memory();
    rt.register_pattern(counter());
    rt.register_pattern(fragile_pattern());
    rt.register_pattern(chat_pattern());
    let resolver = move |_: &str| -> Result<Arc<dyn Model>, ModelError> { Ok(model.clone()) };
    rt.register_builtin(Arc::new(LlmDialog::with_resolver(Arc::new(resolver)).with_settings(settings)));
    let counters: Vec<DocId> = (0..counters).map(|_| rt.charms().create("counter", json!({})).unwrap()).collect();
    let mut tools = serde_json::Map::new();
    for (i, id) in counters.iter().enumerate() {
        tools.insert(format!("counter{i}"), json!({"charm": rt.charms().result(id).to_json()}));
    }
    for pattern in extra {
        let id = rt.charms().create(pattern, json!({})).unwrap();
        tools.insert(pattern.to_string(), json!({"charm": rt.charms().result(&id).to_json()}));
    }
    let chat = rt.charms().create("test-chat", json!({"tools": tools})).unwrap();
    let dialog = DialogHandle::new(rt.clone(), rt.charms().result(&chat).child("dialog"));
    Setup { rt, dialog, counters }
}

fn setup(turns: Vec<Turn>) -> Setup {
    setup_with(Arc::new(ScriptedModel::from_turns(turns)), DialogSettings::default(), 1, &["fragile"])
}

fn count(s: &Setup, i: usize) -> i64 {
    s.rt.charms().get(&s.counters[i]).unwrap()["count"].as_i64().unwrap()
}

fn tool_results(messages: &[Message]) -> Vec<ToolOutput> {
    messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|p| match p {
            Part::ToolResult { output, .. } => Some(output.clone()),
            _ => None,
        })
        .collect()
}

fn displays(dialog: &DialogHandle) -> Vec<String> {
    let tools = dialog.flattened_tools();
    tools.as_array().into_iter().flatten().filter_map(|t| t["display"].as_str().map(str::to_string)).collect()
}

fn error_text(output: &ToolOutput) -> &str {
    match output {
        ToolOutput::ErrorText(text) => text,
        other => panic!("expected an error result, got {other:?}"),
    }
}

#[tokio::test]
async fn a_tool_call_changes_the_charm_and_the_result_flows_back() {
    let s = setup(vec![Turn::tool_call("Counter.increment", json!({"amount": 5})), Turn::text("The count is 5 now.")]);
    s.dialog.say("add 5 to the counter", WAIT).await.unwrap();
    assert_eq!(count(&s, 0), 5);
    let messages = s.dialog.messages();
    let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::Assistant]);
    let ToolOutput::Json(result) = &tool_results(&messages)[0] else { panic!("expected JSON: {messages:?}") };
    assert_eq!(result["summary"], "count: 0 → 5, label: \"Count: 0\" → \"Count: 5\"");
    assert_eq!(messages[3].text(), "The count is 5 now.");
    assert!(!s.dialog.pending());
    assert_eq!(s.dialog.error(), None);
    let names = displays(&s.dialog);
    assert!(
        names.iter().any(|n| n == "Counter.increment") && names.iter().any(|n| n == "Fragile.explode"),
        "{names:?}"
    );
}

#[tokio::test]
async fn an_unknown_tool_gets_an_error_listing_the_tools() {
    let s = setup(vec![Turn::tool_call("Nope.nothing", json!({})), Turn::text("Sorry.")]);
    s.dialog.say("do something", WAIT).await.unwrap();
    let results = tool_results(&s.dialog.messages());
    let text = error_text(&results[0]);
    assert!(text.contains("Nope") && text.contains("Counter.increment"), "{text}");
}

#[tokio::test]
async fn invalid_arguments_are_refused_and_the_charm_is_unchanged() {
    let s = setup(vec![Turn::tool_call("Counter.increment", json!({"amount": "five"})), Turn::text("Oops.")]);
    s.dialog.say("add five", WAIT).await.unwrap();
    assert_eq!(count(&s, 0), 0);
    let text = error_text(&tool_results(&s.dialog.messages())[0]).to_string();
    assert!(text.contains("amount"), "{text}");
}

#[tokio::test]
async fn a_panicking_handler_becomes_an_error_result_and_the_dialog_goes_on() {
    let s = setup(vec![
        Turn::tool_call("Fragile.explode", json!({})),
        Turn::tool_call("Counter.increment", json!({"amount": 1})),
        Turn::text("Recovered."),
    ]);
    s.dialog.say("break it, then count", WAIT).await.unwrap();
    let results = tool_results(&s.dialog.messages());
    assert!(error_text(&results[0]).contains("kaboom"), "{results:?}");
    assert!(matches!(results[1], ToolOutput::Json(_)));
    assert_eq!(count(&s, 0), 1);
    assert_eq!(s.dialog.messages().last().unwrap().text(), "Recovered.");
}

#[tokio::test]
async fn parallel_calls_keep_their_order() {
    let s = setup_with(
        Arc::new(ScriptedModel::from_turns(vec![
            Turn::tool_call("Fragile.dawdle", json!({}))
                .with_tool_call("Counter.increment", json!({"amount": 2}))
                .with_tool_call("Counter.decrement", json!({"amount": 1})),
            Turn::text("ok"),
        ])),
        DialogSettings::default(),
        1,
        &["fragile"],
    );
    s.dialog.say("all at once", WAIT).await.unwrap();
    let messages = s.dialog.messages();
    let calls: Vec<&String> = messages[1]
        .content
        .iter()
        .filter_map(|p| if let Part::ToolCall { id, .. } = p { Some(id) } else { None })
        .collect();
    let results: Vec<&String> = messages[2]
        .content
        .iter()
        .filter_map(|p| if let Part::ToolResult { id, .. } = p { Some(id) } else { None })
        .collect();
    assert_eq!(calls, results, "one result per call, in call order");
    assert_eq!(count(&s, 0), 1);
}

#[tokio::test]
async fn the_round_cap_ends_with_a_visible_message() {
    let turns = (0..5).map(|_| Turn::tool_call("Counter.increment", json!({}))).collect();
    let s = setup_with(
        Arc::new(ScriptedModel::from_turns(turns)),
        DialogSettings { max_rounds: 3, ..DialogSettings::default() },
        1,
        &[],
    );
    s.dialog.say("count forever", WAIT).await.unwrap();
    assert_eq!(count(&s, 0), 3);
    let last = s.dialog.messages().last().unwrap().clone();
    assert_eq!(last.role, Role::Assistant);
    assert!(last.text().contains("stopped after 3 rounds"), "{last:?}");
}

#[tokio::test]
async fn two_charms_with_the_same_name_are_both_usable() {
    // The model is chosen after the charms exist, so the script can use their wire names.
    let slot: Arc<parking_lot::Mutex<Option<Arc<dyn Model>>>> = Arc::default();
    let model = LateModel(slot.clone());
    let s = setup_with(Arc::new(model), DialogSettings::default(), 2, &[]);
    let wires: Vec<String> = s
        .dialog
        .flattened_tools()
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["display"] == "Counter.increment")
        .map(|t| t["wire"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(wires.len(), 2, "both charms' tools are listed");
    assert_ne!(wires[0], wires[1]);
    *slot.lock() = Some(Arc::new(ScriptedModel::from_turns(vec![
        Turn::tool_call(&wires[0], json!({"amount": 1})).with_tool_call(&wires[1], json!({"amount": 10})),
        Turn::text("both"),
    ])));
    s.dialog.say("add to both", WAIT).await.unwrap();
    let mut counts = [count(&s, 0), count(&s, 1)];
    counts.sort();
    assert_eq!(counts, [1, 10], "each call changed its own charm only");
}

/// A model decided after setup.
struct LateModel(Arc<parking_lot::Mutex<Option<Arc<dyn Model>>>>);

impl Model for LateModel {
    fn name(&self) -> String {
        "late".into()
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<EventStream, ModelError>> + Send + '_>> {
        let model = self.0.lock().clone();
        Box::pin(async move {
            match model {
                Some(model) => model.stream(request).await,
                None => Err(ModelError::Script("no model chosen yet".into())),
            }
        })
    }
}

/// A model that waits for a signal before each answer, to observe a pending request.
struct GatedModel {
    gate: Arc<Notify>,
    inner: ScriptedModel,
}

impl Model for GatedModel {
    fn name(&self) -> String {
        "gated".into()
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<EventStream, ModelError>> + Send + '_>> {
        Box::pin(async move {
            self.gate.notified().await;
            self.inner.stream(request).await
        })
    }
}

#[tokio::test]
async fn a_message_while_pending_is_refused_and_cancel_discards_the_late_answer() {
    let gate = Arc::new(Notify::new());
    let model = GatedModel {
        gate: gate.clone(),
        inner: ScriptedModel::from_turns(vec![Turn::text("late"), Turn::text("fresh")]),
    };
    let s = setup_with(Arc::new(model), DialogSettings::default(), 1, &[]);
    s.dialog.send(Message::user("first")).await.unwrap();
    assert!(s.dialog.pending());
    let refused = s.dialog.send(Message::user("second")).await.unwrap_err();
    assert!(refused.to_string().contains("still being generated"), "{refused}");

    s.dialog.cancel().await.unwrap();
    assert!(!s.dialog.pending());
    gate.notify_one(); // the aborted request would answer now; it must not
    s.dialog.wait(WAIT).await.unwrap();
    assert_eq!(s.dialog.messages().len(), 1, "only the user's message: {:?}", s.dialog.messages());

    let next = s.dialog.send(Message::user("again"));
    next.await.unwrap();
    gate.notify_one();
    s.dialog.wait(WAIT).await.unwrap();
    let texts: Vec<String> = s.dialog.messages().iter().map(Message::text).collect();
    assert_eq!(texts.last().map(String::as_str), Some("late"), "the script resumes where it was: {texts:?}");
}

#[tokio::test]
async fn cancel_while_a_tool_runs_answers_every_call() {
    let s = setup(vec![Turn::tool_call("Fragile.dawdle", json!({})), Turn::text("never")]);
    s.dialog.send(Message::user("take your time")).await.unwrap();
    // Let the request reach the slow tool, then cancel.
    tokio::time::sleep(Duration::from_millis(150)).await;
    s.dialog.cancel().await.unwrap();
    s.dialog.wait(WAIT).await.unwrap();
    let messages = s.dialog.messages();
    let results = tool_results(&messages);
    assert_eq!(results.len(), 1, "exactly one result for the one call: {messages:?}");
    assert!(error_text(&results[0]).contains("cancelled"), "{results:?}");
    assert!(!s.dialog.pending());
    assert!(messages.iter().all(|m| m.text() != "never"));
}

#[tokio::test]
async fn a_model_error_is_reported_and_the_dialog_is_not_stuck() {
    let s = setup(vec![]); // an empty script fails on the first request
    s.dialog.say("hello", WAIT).await.unwrap();
    assert!(!s.dialog.pending());
    assert!(s.dialog.error().unwrap_or_default().contains("script"), "{:?}", s.dialog.error());
}

#[tokio::test]
async fn stopping_the_charm_stops_its_request() {
    let gate = Arc::new(Notify::new());
    let model = GatedModel { gate: gate.clone(), inner: ScriptedModel::from_turns(vec![Turn::text("too late")]) };
    let s = setup_with(Arc::new(model), DialogSettings::default(), 1, &[]);
    s.dialog.send(Message::user("hello")).await.unwrap();
    assert!(s.dialog.pending());
    let chat = s.rt.charms().list().into_iter().find(|c| c.pattern == "test-chat").unwrap();
    s.rt.charms().stop(&chat.id).unwrap();
    assert!(!s.dialog.pending(), "stopping ends the request");
    gate.notify_one();
    s.dialog.wait(WAIT).await.unwrap();
    assert_eq!(s.dialog.messages().len(), 1, "the stopped request wrote nothing: {:?}", s.dialog.messages());
}
