//! `llm_dialog` with the scripted model: tool calls change charms and results flow back.

use crate::common;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use serde_json::json;
use tokio::sync::Notify;
use trellis::builtins::dialog::{DialogHandle, DialogSettings, LlmDialog};
use trellis::builtins::message::{Message, Part, Role, ToolOutput};
use trellis::builtins::model::{EventStream, Model, ModelError, ModelEvent, ModelRequest, ToolChoice};
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
            json!({
                "messages": messages.link().to_json(),
                "model": "test",
                "tools": arg["tools"].clone(),
                "tool_choice": arg["tool_choice"].clone(),
            }),
        )?;
        Ok(())
    })
}

/// Lets a test see a slow handler start and decide when it may finish, instead of
/// racing it with sleeps.
#[derive(Default)]
struct Gate {
    started: parking_lot::Mutex<bool>,
    released: parking_lot::Mutex<bool>,
    changed: parking_lot::Condvar,
}

impl Gate {
    /// Called by the handler: says it started, then blocks until released (or `WAIT`).
    fn pass(&self) {
        *self.started.lock() = true;
        self.changed.notify_all();
        let mut released = self.released.lock();
        let deadline = std::time::Instant::now() + WAIT;
        while !*released && !self.changed.wait_until(&mut released, deadline).timed_out() {}
    }

    /// Waits (off the async runtime) until the handler started.
    async fn started(self: &Arc<Self>) {
        let gate = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let mut started = gate.started.lock();
            let deadline = std::time::Instant::now() + WAIT;
            while !*started {
                assert!(!gate.changed.wait_until(&mut started, deadline).timed_out(), "the handler never started");
            }
        })
        .await
        .unwrap();
    }

    fn release(&self) {
        *self.released.lock() = true;
        self.changed.notify_all();
    }
}

/// A pattern whose handlers misbehave on purpose. Both write `touched` before they
/// fail or finish, so a test can tell whether their transaction committed.
fn fragile_pattern(gate: Arc<Gate>) -> Pattern {
    #[derive(Deserialize, JsonSchema)]
    struct Nothing {}
    Pattern::new("fragile", move |b, _: serde_json::Value| {
        b.name("Fragile")?;
        let touched = b.state("touched", 0i64)?;
        b.handler("explode", move |tx, _: Nothing| -> Result<()> {
            touched.set(tx, 1)?;
            panic!("kaboom")
        })?;
        let gate = Arc::clone(&gate);
        b.handler("dawdle", move |tx, _: Nothing| {
            gate.pass();
            touched.update(tx, |n| n + 1)
        })?;
        Ok(())
    })
}

struct Setup {
    rt: Runtime,
    dialog: DialogHandle,
    counters: Vec<DocId>,
    /// Holds the fragile charm's `dawdle` handler.
    gate: Arc<Gate>,
    /// The fragile charm, when the setup made one.
    fragile: Option<DocId>,
    /// The chat charm (its document holds the conversation).
    chat: DocId,
}

use trellis::runner::DocId;

fn setup_with(model: Arc<dyn Model>, settings: DialogSettings, counters: usize, extra: &[&str]) -> Setup {
    setup_on(Runtime::in_memory(), model, settings, counters, extra)
}

fn setup_on(rt: Runtime, model: Arc<dyn Model>, settings: DialogSettings, counters: usize, extra: &[&str]) -> Setup {
    setup_chat(rt, model, settings, counters, extra, serde_json::Value::Null)
}

fn setup_chat(
    rt: Runtime,
    model: Arc<dyn Model>,
    settings: DialogSettings,
    counters: usize,
    extra: &[&str],
    tool_choice: serde_json::Value,
) -> Setup {
    rt.register_pattern(counter());
    let gate = Arc::new(Gate::default());
    rt.register_pattern(fragile_pattern(Arc::clone(&gate)));
    rt.register_pattern(chat_pattern());
    let resolver = move |_: &str| -> Result<Arc<dyn Model>, ModelError> { Ok(model.clone()) };
    rt.register_builtin(Arc::new(LlmDialog::with_resolver(Arc::new(resolver)).with_settings(settings)));
    let counters: Vec<DocId> = (0..counters).map(|_| rt.charms().create("counter", json!({})).unwrap()).collect();
    let mut tools = serde_json::Map::new();
    for (i, id) in counters.iter().enumerate() {
        tools.insert(format!("counter{i}"), json!({"charm": rt.charms().result(id).to_json()}));
    }
    let mut fragile = None;
    for pattern in extra {
        let id = rt.charms().create(pattern, json!({})).unwrap();
        tools.insert(pattern.to_string(), json!({"charm": rt.charms().result(&id).to_json()}));
        if *pattern == "fragile" {
            fragile = Some(id);
        }
    }
    let chat = rt.charms().create("test-chat", json!({"tools": tools, "tool_choice": tool_choice})).unwrap();
    let dialog = DialogHandle::new(rt.clone(), rt.charms().result(&chat).child("dialog"));
    Setup { rt, dialog, counters, chat, gate, fragile }
}

fn setup(turns: Vec<Turn>) -> Setup {
    setup_with(Arc::new(ScriptedModel::from_turns(turns)), DialogSettings::default(), 1, &["fragile"])
}

fn count(s: &Setup, i: usize) -> i64 {
    s.rt.charms().get(&s.counters[i]).unwrap()["count"].as_i64().unwrap()
}

/// Sends a user message from another task. Whichever thread commits runs the queued
/// handlers (the engine has no thread of its own), so a test that sends from its own
/// thread could end up running the slow handler itself and never reach its next step.
async fn send_elsewhere(dialog: &DialogHandle, text: &str) {
    let (dialog, message) = (dialog.clone(), Message::user(text));
    let sent = tokio::spawn(async move { dialog.send(message).await });
    tokio::time::timeout(WAIT, sent).await.unwrap().unwrap().unwrap();
}

/// How often the fragile charm's handlers committed their write.
fn touched(s: &Setup) -> i64 {
    let fragile = s.fragile.as_ref().expect("the setup has a fragile charm");
    s.rt.charms().get(fragile).unwrap()["touched"].as_i64().unwrap()
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

/// A model made of a function from request to answer: what each test needs of a model
/// (waiting for a signal, recording requests, streaming slowly) in one place.
struct FnModel<F>(F);

impl<F> Model for FnModel<F>
where
    F: Fn(ModelRequest) -> BoxFuture<'static, Result<EventStream, ModelError>> + Send + Sync,
{
    fn name(&self) -> String {
        "test".into()
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<EventStream, ModelError>> + Send + '_>> {
        (self.0)(request)
    }
}

/// A scripted model that waits for `gate` before each answer, to observe a pending request.
fn gated(gate: Arc<Notify>, turns: Vec<Turn>) -> Arc<dyn Model> {
    let inner = Arc::new(ScriptedModel::from_turns(turns));
    Arc::new(FnModel(move |request| {
        let (gate, inner) = (gate.clone(), inner.clone());
        async move {
            gate.notified().await;
            inner.stream(request).await
        }
        .boxed()
    }))
}

/// A model whose one answer is `chunks` text deltas, with a pause before each group of
/// `group` deltas (so that the dialog shows progress in `partial` in between).
fn chatty(chunks: Vec<String>, group: usize) -> Arc<dyn Model> {
    let group = group.max(1);
    Arc::new(FnModel(move |_| {
        let chunks = chunks.clone();
        async move {
            let events = futures::stream::iter(chunks.into_iter().enumerate()).then(move |(i, chunk)| async move {
                if i % group == 0 {
                    tokio::time::sleep(Duration::from_millis(60)).await;
                }
                Ok(ModelEvent::TextDelta(chunk))
            });
            let finish = futures::stream::iter([Ok(ModelEvent::Finish { reason: "stop".into(), usage: None })]);
            Ok(Box::pin(events.chain(finish)) as EventStream)
        }
        .boxed()
    }))
}

#[tokio::test]
async fn a_tool_call_changes_the_charm_and_the_result_flows_back() {
    let s = setup(vec![Turn::tool_call("Counter.increment", json!({"amount": 5})), Turn::text("The count is 5 now.")]);
    s.dialog.say("add 5 to the counter", WAIT).await.unwrap();
    assert_eq!(count(&s, 0), 5);
    let messages = s.dialog.messages();
    let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::Assistant]);
    let ToolOutput::Json(result) = &common::tool_results(&messages)[0] else { panic!("expected JSON: {messages:?}") };
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
    let results = common::tool_results(&s.dialog.messages());
    let text = error_text(&results[0]);
    assert!(text.contains("Nope") && text.contains("Counter.increment"), "{text}");
}

#[tokio::test]
async fn invalid_arguments_are_refused_and_the_charm_is_unchanged() {
    let s = setup(vec![Turn::tool_call("Counter.increment", json!({"amount": "five"})), Turn::text("Oops.")]);
    s.dialog.say("add five", WAIT).await.unwrap();
    assert_eq!(count(&s, 0), 0);
    let text = error_text(&common::tool_results(&s.dialog.messages())[0]).to_string();
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
    let results = common::tool_results(&s.dialog.messages());
    assert!(error_text(&results[0]).contains("kaboom"), "{results:?}");
    assert_eq!(touched(&s), 0, "the write before the panic was rolled back");
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
    s.gate.release();
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

/// Defect: the calls of one answer ran at once, so two increments of one counter each
/// reported both changes (`count: 0 → 2` twice). Each result is its own call's change.
#[tokio::test]
async fn each_calls_result_tells_its_own_change() {
    let twice = Turn::tool_call("Counter.increment", json!({})).with_tool_call("Counter.increment", json!({}));
    let s = setup(vec![twice, Turn::text("ok")]);
    s.dialog.say("twice", WAIT).await.unwrap();
    let summaries: Vec<String> = common::tool_results(&s.dialog.messages())
        .iter()
        .map(|output| match output {
            ToolOutput::Json(json) => json["summary"].as_str().unwrap_or_default().to_string(),
            other => panic!("a result: {other:?}"),
        })
        .collect();
    assert!(summaries[0].starts_with("count: 0 → 1") && summaries[1].starts_with("count: 1 → 2"), "{summaries:?}");
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
async fn the_default_round_cap_is_ten() {
    assert_eq!(DialogSettings::default().max_rounds, 10);
    let turns = (0..12).map(|_| Turn::tool_call("Counter.increment", json!({}))).collect();
    let s = setup(turns);
    s.dialog.say("count forever", WAIT).await.unwrap();
    assert_eq!(count(&s, 0), 10);
    let last = s.dialog.messages().last().unwrap().clone();
    assert!(last.text().contains("stopped after 10 rounds"), "{last:?}");
}

/// The per-tool timeout, through `llm_dialog`: a hung handler fails its call, and the
/// dialog goes on to the model's next answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_outlives_its_timeout_fails_and_the_dialog_goes_on() {
    let turns = vec![Turn::tool_call("Fragile.dawdle", json!({})), Turn::text("It timed out.")];
    let settings = DialogSettings { tool_timeout: Duration::from_millis(300), ..DialogSettings::default() };
    let s = setup_with(Arc::new(ScriptedModel::from_turns(turns)), settings, 1, &["fragile"]);
    send_elsewhere(&s.dialog, "take your time").await;
    s.gate.started().await;
    // The handler is still blocked when its call's result arrives.
    let deadline = tokio::time::Instant::now() + WAIT;
    while common::tool_results(&s.dialog.messages()).is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no result for the hung call");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    s.gate.release();
    s.dialog.wait(WAIT).await.unwrap();
    let messages = s.dialog.messages();
    let results = common::tool_results(&messages);
    assert!(error_text(&results[0]).contains("timed out after 300ms"), "{results:?}");
    assert_eq!(messages.last().unwrap().text(), "It timed out.");
}

#[tokio::test]
async fn two_charms_with_the_same_name_are_both_usable() {
    // The model is chosen after the charms exist, so the script can use their wire names.
    let slot: Arc<parking_lot::Mutex<Option<Arc<dyn Model>>>> = Arc::default();
    let late = slot.clone();
    let model = FnModel(move |request| {
        let model = late.lock().clone();
        async move {
            match model {
                Some(model) => model.stream(request).await,
                None => Err(ModelError::Script("no model chosen yet".into())),
            }
        }
        .boxed()
    });
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

#[tokio::test]
async fn a_message_while_pending_waits_and_cancel_discards_it_and_the_late_answer() {
    let gate = Arc::new(Notify::new());
    let model = gated(gate.clone(), vec![Turn::text("late"), Turn::text("fresh")]);
    let s = setup_with(model, DialogSettings::default(), 1, &[]);
    s.dialog.send(Message::user("first")).await.unwrap();
    assert!(s.dialog.pending());
    s.dialog.send(Message::user("second")).await.expect("it waits for the reply");
    assert_eq!(s.dialog.queued().len(), 1);

    s.dialog.cancel().await.unwrap();
    assert!(s.dialog.queued().is_empty(), "a cancel drops what waited");
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

/// What cancel does to a running handler (see the `llm_dialog` module docs): handlers
/// are synchronous transactions run one at a time, so the cancel waits for the running
/// one, whose change stays. The request ends there: the model is not asked again, and
/// the call has exactly one result, its own or a "cancelled" one that says the change
/// may have been applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_while_a_tool_runs_lets_it_finish_and_ends_the_request() {
    let s = setup(vec![Turn::tool_call("Fragile.dawdle", json!({})), Turn::text("never")]);
    send_elsewhere(&s.dialog, "take your time").await;
    s.gate.started().await;
    // The first poll queues the cancel behind the running handler; only then may the
    // handler write.
    let mut cancel = Box::pin(s.dialog.cancel());
    let first = futures::poll!(&mut cancel);
    assert!(first.is_pending(), "the cancel waits for the running handler: {first:?}");
    s.gate.release();
    tokio::time::timeout(WAIT, cancel).await.unwrap().unwrap();
    s.dialog.wait(WAIT).await.unwrap();

    assert_eq!(touched(&s), 1, "the handler that was running when the user cancelled committed its write");
    let messages = s.dialog.messages();
    let results = common::tool_results(&messages);
    assert_eq!(results.len(), 1, "exactly one result for the one call: {messages:?}");
    if let ToolOutput::ErrorText(text) = &results[0] {
        assert!(text.contains("cancelled") && text.contains("may have been applied"), "{text}");
    }
    assert!(!s.dialog.pending());
    assert!(messages.iter().all(|m| m.text() != "never"), "the model was not asked again: {messages:?}");
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
    let model = gated(gate.clone(), vec![Turn::text("too late")]);
    let s = setup_with(model, DialogSettings::default(), 1, &[]);
    s.dialog.send(Message::user("hello")).await.unwrap();
    assert!(s.dialog.pending());
    let chat = s.rt.charms().list().into_iter().find(|c| c.pattern == "test-chat").unwrap();
    s.rt.charms().stop(&chat.id).unwrap();
    assert!(!s.dialog.pending(), "stopping ends the request");
    gate.notify_one();
    s.dialog.wait(WAIT).await.unwrap();
    assert_eq!(s.dialog.messages().len(), 1, "the stopped request wrote nothing: {:?}", s.dialog.messages());
}

/// Defect: every `partial` write rewrote the document holding the whole conversation, so a
/// long reply went quadratic. Streaming must leave the conversation's document alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_reply_does_not_rewrite_the_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let rt = Runtime::open(dir.path().join("space.sqlite")).unwrap();
    let chunks: Vec<String> = (0..4000).map(|i| format!("word{i:05} ")).collect();
    let reply: String = chunks.concat();
    let model = chatty(chunks, 250);
    let s = setup_on(rt, model, DialogSettings::default(), 1, &[]);
    let version = |doc: &str| s.rt.space().snapshot(doc).1 .0;
    let before = version(&s.chat);
    s.dialog.say("talk a lot", WAIT).await.unwrap();
    assert_eq!(s.dialog.error(), None);
    assert_eq!(s.dialog.messages().last().unwrap().text(), reply);
    // add_message, the reply, and the end of the request: a handful of commits, not one
    // per shown delta.
    let commits = version(&s.chat) - before;
    assert!(commits <= 6, "the conversation's document was written {commits} times");
    let live = s.rt.space().doc_ids(&format!("{}.", s.chat));
    assert_eq!(live.len(), 1, "one live document beside the charm: {live:?}");
    assert!(version(&live[0]) >= 2, "the reply was shown while it streamed");
}

#[tokio::test]
async fn a_reply_over_the_limit_is_kept_up_to_the_limit_and_reported() {
    let chunks: Vec<String> = (0..50).map(|_| "é".repeat(50)).collect(); // 100 bytes each
    let model = chatty(chunks, usize::MAX);
    let settings = DialogSettings { max_reply_bytes: 1001, ..DialogSettings::default() };
    let s = setup_with(model, settings, 1, &[]);
    s.dialog.say("talk a lot", WAIT).await.unwrap();
    let error = s.dialog.error().unwrap_or_default();
    assert!(error.contains("longer than 1001 bytes"), "{error}");
    let last = s.dialog.messages().last().unwrap().clone();
    assert_eq!(last.role, Role::Assistant);
    assert_eq!(last.text().len(), 1000, "cut at the last character boundary within the limit");
    assert!(!s.dialog.pending());
}

#[tokio::test]
async fn a_tool_choice_by_display_name_forces_the_first_answer_only() {
    let choices: Arc<parking_lot::Mutex<Vec<ToolChoice>>> = Arc::default();
    let inner =
        Arc::new(ScriptedModel::from_turns(vec![Turn::tool_call("Counter.increment", json!({})), Turn::text("done")]));
    let recorded = Arc::clone(&choices);
    let model = FnModel(move |request: ModelRequest| {
        recorded.lock().push(request.tool_choice.clone());
        let inner = inner.clone();
        async move { inner.stream(request).await }.boxed()
    });
    let s = setup_chat(
        Runtime::in_memory(),
        Arc::new(model),
        DialogSettings::default(),
        1,
        &[],
        json!("Counter.increment"),
    );
    s.dialog.say("count", WAIT).await.unwrap();
    assert_eq!(s.dialog.error(), None);
    assert_eq!(*choices.lock(), [ToolChoice::Tool("Counter_increment".into()), ToolChoice::Auto]);
}

#[tokio::test]
async fn a_tool_choice_naming_no_tool_fails_the_request_with_the_tools_listed() {
    let model = ScriptedModel::from_turns(vec![Turn::text("unused")]);
    let s = setup_chat(Runtime::in_memory(), Arc::new(model), DialogSettings::default(), 1, &[], json!("Nope.nothing"));
    s.dialog.say("count", WAIT).await.unwrap();
    let error = s.dialog.error().unwrap_or_default();
    assert!(error.contains("Nope.nothing") && error.contains("Counter.increment"), "{error}");
    assert!(!s.dialog.pending());
}

/// Defect: tool-call arguments nested ~125 deep were stored in `messages` and made the
/// space unopenable. Arguments past the runtime's depth limit are not kept, and the
/// model is told why.
#[tokio::test]
async fn tool_arguments_nested_too_deeply_are_refused_and_not_stored() {
    let mut deep = json!(1);
    for _ in 0..100 {
        deep = json!({ "a": deep });
    }
    let s = setup(vec![Turn::tool_call("Counter.increment", json!({ "amount": deep })), Turn::text("Sorry.")]);
    s.dialog.say("go deep", WAIT).await.unwrap();
    let messages = s.dialog.messages();
    let text = error_text(&common::tool_results(&messages)[0]).to_string();
    // Named as the model saw the tool; the advice said once, in plain grammar.
    assert!(text.starts_with("the arguments of `Counter.increment`: nested more than 64 levels deep"), "{text}");
    assert_eq!(text.matches("flat").count(), 1, "{text}");
    let Part::ToolCall { input, .. } = &messages[1].content[0] else { panic!("a tool call: {messages:?}") };
    assert_eq!(input, &json!("(not kept: nested too deeply)"));
    assert_eq!(count(&s, 0), 0);
}

/// Defect: a model could answer with arguments of any size (kept in `messages` and sent
/// again with every request) and any number of calls (each run). Arguments past 1 MiB are
/// not kept, and an answer of more than 64 calls ends the request with an error.
#[tokio::test]
async fn huge_arguments_are_not_kept_and_too_many_calls_end_the_request() {
    let huge = "x".repeat(2 << 20);
    let s = setup(vec![Turn::tool_call("Counter.increment", json!({ "note": huge })), Turn::text("Sorry.")]);
    s.dialog.say("go big", WAIT).await.unwrap();
    let messages = s.dialog.messages();
    let text = error_text(&common::tool_results(&messages)[0]).to_string();
    assert!(text.contains("larger than 1024 KiB"), "{text}");
    let Part::ToolCall { input, .. } = &messages[1].content[0] else { panic!("a tool call: {messages:?}") };
    assert_eq!(input, &json!("(not kept: too large)"));
    assert_eq!(count(&s, 0), 0);

    let many = (1..65).fold(Turn::tool_call("Counter.increment", json!({})), |turn, _| {
        turn.with_tool_call("Counter.increment", json!({}))
    });
    let s = setup(vec![many]);
    s.dialog.say("go many", WAIT).await.unwrap();
    let error = s.dialog.error().unwrap_or_default();
    assert!(error.contains("more than 64 tool calls"), "{error}");
    assert_eq!(count(&s, 0), 0, "none of them ran");
}
