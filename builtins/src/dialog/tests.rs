//! The dialog's catalog between rounds: reused while its tools stand still, fresh when a
//! charm changes name (or a source its tools), in the requests and in `flattened_tools` alike.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;
use trellis_runner::{Pattern, Read, Runtime};

use super::{DialogHandle, LlmDialog};
use crate::message::Message;
use crate::model::{EventStream, Model, ModelError, ModelEvent, ModelRequest};

const WAIT: Duration = Duration::from_secs(10);

/// Answers every request with the text "ok", keeping each request.
#[derive(Default)]
pub(super) struct Recorder {
    pub(super) asked: Mutex<Vec<ModelRequest>>,
}

impl Recorder {
    /// The tool names each request offered.
    fn offered(&self) -> Vec<Vec<String>> {
        self.asked.lock().iter().map(|r| r.tools.iter().map(|t| t.name.clone()).collect()).collect()
    }
}

impl Model for Recorder {
    fn name(&self) -> String {
        "recorder".into()
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<EventStream, ModelError>> + Send + '_>> {
        self.asked.lock().push(request);
        let events =
            vec![Ok(ModelEvent::TextDelta("ok".into())), Ok(ModelEvent::Finish { reason: "stop".into(), usage: None })];
        Box::pin(async move { Ok(Box::pin(futures::stream::iter(events)) as EventStream) })
    }
}

/// Add to the count.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Increment {
    amount: i64,
}

/// A chat charm on `rt` whose dialog uses `model` and offers `tools`: where its dialog is,
/// and its handle.
fn chat(rt: &Runtime, model: Arc<dyn Model>, tools: serde_json::Value) -> (trellis_runner::Link, DialogHandle) {
    rt.register_builtin(Arc::new(LlmDialog::with_resolver(Arc::new(move |_| Ok(model.clone())))));
    rt.register_pattern(Pattern::new("chat", |b, tools: serde_json::Value| {
        let messages = b.state::<Vec<Message>>("messages", Vec::new())?;
        b.builtin("dialog", "llm_dialog", json!({"messages": messages, "model": "recorder", "tools": tools}))?;
        Ok(())
    }));
    let chat = rt.charms().create("chat", tools).expect("create the chat");
    let base = rt.charms().result(&chat).child("dialog");
    (base.clone(), DialogHandle::new(rt.clone(), base))
}

/// The display names of the tools `dialog`'s `flattened_tools` lists.
fn displays(dialog: &DialogHandle) -> Vec<String> {
    let flattened = dialog.flattened_tools();
    let tools = flattened.as_array().cloned().unwrap_or_default();
    tools.iter().filter_map(|t| t["display"].as_str().map(str::to_string)).collect()
}

#[tokio::test]
async fn a_charm_renamed_between_rounds_is_offered_under_its_new_name() {
    let rt = Runtime::in_memory();
    let model = Arc::new(Recorder::default());
    rt.register_pattern(Pattern::new("counter", |b, _: serde_json::Value| {
        b.name("Counter")?;
        let count = b.state("count", 0i64)?;
        b.handler("increment", move |tx, e: Increment| count.update(tx, |n| n + e.amount))?;
        Ok(())
    }));
    let counter = rt.charms().create("counter", json!({})).expect("create the counter");
    let tools = json!({"c": {"charm": rt.charms().result(&counter).to_json()}});
    let (base, dialog) = chat(&rt, model.clone(), tools);

    dialog.say("hello", WAIT).await.expect("first round");
    dialog.say("again", WAIT).await.expect("second round, nothing changed");
    assert_eq!(displays(&dialog), ["Counter.increment"]);
    rt.charms().rename(&counter, "Tally").expect("rename");
    dialog.say("and now", WAIT).await.expect("third round, after the rename");
    rt.settled(&base, WAIT).await.expect("flattened_tools settles");

    // Beside the charm's tools, the conversation's own `watch`.
    let offered = [["Counter_increment", "watch"], ["Counter_increment", "watch"], ["Tally_increment", "watch"]];
    assert_eq!(model.offered(), offered);
    assert_eq!(displays(&dialog), ["Tally.increment"], "flattened_tools follows the rename too");
}

/// A source with one tool more each time `grow` is called.
struct Growing(std::sync::atomic::AtomicU64);

impl crate::sources::ToolSource for Growing {
    fn name(&self) -> &str {
        "grow"
    }
    fn tools(&self) -> Arc<[crate::sources::SourceTool]> {
        let count = self.0.load(std::sync::atomic::Ordering::SeqCst);
        (0..=count).map(|n| crate::sources::SourceTool::new(format!("t{n}"), "A tool.", json!({}))).collect()
    }
    fn version(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
    fn trusted(&self) -> bool {
        true
    }
    fn call(&self, _: &str, _: serde_json::Value, _: Duration) -> crate::sources::CallFuture {
        Box::pin(async { crate::message::ToolOutput::Text("ran".into()) })
    }
}

#[tokio::test]
async fn flattened_tools_follows_a_sources_tools_when_it_announces_the_change() {
    use crate::sources;
    let rt = Runtime::in_memory();
    let (base, dialog) = chat(&rt, Arc::new(Recorder::default()), json!({}));
    rt.settled(&base, WAIT).await.expect("settles");
    assert!(displays(&dialog).is_empty());

    let source = Arc::new(Growing(0.into()));
    sources::attach(&rt, source.clone()).expect("attach");
    rt.settled(&base, WAIT).await.expect("settles");
    assert_eq!(displays(&dialog), ["grow.t0"], "attaching announces itself");
    source.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    sources::announce_change(&rt);
    rt.settled(&base, WAIT).await.expect("settles");
    assert_eq!(displays(&dialog), ["grow.t0", "grow.t1"], "the source's change reached the derived list");
    sources::detach(&rt, "grow").expect("detach");
    rt.settled(&base, WAIT).await.expect("settles");
    assert!(displays(&dialog).is_empty(), "detaching announces itself");
}

/// A file over the default limit of 5 MiB is refused with what to do, and the conversation
/// is as it was.
#[tokio::test]
async fn a_file_over_the_limit_is_refused_and_nothing_is_added() {
    use crate::message::{FilePart, Part, Role};
    let rt = Runtime::in_memory();
    let (_, dialog) = chat(&rt, Arc::new(Recorder::default()), json!({}));
    let big = FilePart::from_bytes("image/png", Some("big.png".into()), &vec![0u8; 6_000_000]);
    let message = Message::new(Role::User, vec![Part::Text { text: "look".into() }, Part::File(big)]);
    let error = dialog.send(message).await.expect_err("refused");
    assert!(error.to_string().contains("`big.png` is larger than the 5.0 MB limit for one file"), "{error}");
    assert!(dialog.messages().is_empty(), "nothing added");
}

/// Calls the counter in its first two answers and answers in words after; its second
/// answer waits until `gate` opens. Keeps each request.
#[derive(Default)]
struct Gated {
    asked: Mutex<Vec<ModelRequest>>,
    gate: tokio::sync::Notify,
}

impl Model for Gated {
    fn name(&self) -> String {
        "gated".into()
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<EventStream, ModelError>> + Send + '_>> {
        let n = {
            let mut asked = self.asked.lock();
            asked.push(request);
            asked.len()
        };
        Box::pin(async move {
            if n == 2 {
                self.gate.notified().await;
            }
            let events = match n {
                1 | 2 => vec![
                    Ok(ModelEvent::ToolCall {
                        id: format!("c{n}"),
                        name: "Counter_increment".into(),
                        input: json!({"amount": 1}),
                    }),
                    Ok(ModelEvent::Finish { reason: "tool_calls".into(), usage: None }),
                ],
                _ => vec![
                    Ok(ModelEvent::TextDelta(format!("answer {n}"))),
                    Ok(ModelEvent::Finish { reason: "stop".into(), usage: None }),
                ],
            };
            Ok(Box::pin(futures::stream::iter(events)) as EventStream)
        })
    }
}

/// A message sent while the model's second answer is delayed: with `steer` it is in the
/// next request, after the second call's result; with `queue` it starts a request of its
/// own once the reply ends.
async fn sent_while_running(while_running: &str) -> (Vec<ModelRequest>, Vec<Message>) {
    let rt = Runtime::in_memory();
    rt.register_pattern(Pattern::new("counter", |b, _: serde_json::Value| {
        b.name("Counter")?;
        let count = b.state("count", 0i64)?;
        b.handler("increment", move |tx, e: Increment| count.update(tx, |n| n + e.amount))?;
        Ok(())
    }));
    let counter = rt.charms().create("counter", json!({})).expect("create the counter");
    let model = Arc::new(Gated::default());
    let resolved = model.clone();
    rt.register_builtin(Arc::new(LlmDialog::with_resolver(Arc::new(move |_| Ok(resolved.clone() as Arc<dyn Model>)))));
    let tools = json!({"c": {"charm": rt.charms().result(&counter).to_json()}});
    let inputs = json!({"model": "gated", "tools": tools, "while_running": while_running});
    rt.register_pattern(Pattern::new("chat", move |b, _: serde_json::Value| {
        b.builtin("dialog", "llm_dialog", inputs.clone())?;
        Ok(())
    }));
    let chat = rt.charms().create("chat", json!({})).expect("create the chat");
    let dialog = DialogHandle::new(rt.clone(), rt.charms().result(&chat).child("dialog"));
    dialog.send(Message::user("count twice")).await.expect("sent");
    while model.asked.lock().len() < 2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    dialog.send(Message::user("and say hi")).await.expect("accepted while the reply runs");
    let queued = rt.read(&rt.charms().result(&chat).child("dialog").child("queued")).expect("queued").to_json();
    assert_eq!(queued.as_array().map(Vec::len), Some(1), "it waits in `queued`: {queued}");
    model.gate.notify_one();
    dialog.wait(WAIT).await.expect("the reply ends");
    // With `queue`, the message starts its own request once the first ends.
    dialog.wait(WAIT).await.expect("and so does the next");
    let asked = std::mem::take(&mut *model.asked.lock());
    (asked, dialog.messages())
}

/// The roles and texts of `messages`, tool messages as `tool`.
fn shape(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .map(|m| match m.role {
            crate::message::Role::User => format!("user: {}", m.text()),
            crate::message::Role::Assistant if m.text().is_empty() => "call".into(),
            crate::message::Role::Assistant => format!("assistant: {}", m.text()),
            crate::message::Role::Tool => "result".into(),
        })
        .collect()
}

#[tokio::test]
async fn a_message_sent_while_a_reply_runs_steers_its_next_request() {
    let (asked, messages) = sent_while_running("steer").await;
    assert_eq!(asked.len(), 3, "one reply of three answers");
    assert_eq!(
        shape(&asked[2].messages),
        ["user: count twice", "call", "result", "call", "result", "user: and say hi"]
    );
    assert_eq!(shape(&messages).last().map(String::as_str), Some("assistant: answer 3"));
}

#[tokio::test]
async fn a_queued_message_waits_for_the_reply_to_end() {
    let (asked, messages) = sent_while_running("queue").await;
    assert_eq!(asked.len(), 4, "the reply's three answers, then the queued message's");
    assert!(!shape(&asked[2].messages).contains(&"user: and say hi".to_string()), "not in the running reply");
    assert_eq!(
        shape(&messages)[5..],
        ["assistant: answer 3", "user: and say hi", "assistant: answer 4"],
        "after the reply's end: {messages:?}"
    );
}
