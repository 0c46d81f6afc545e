//! The `tools` suite: what turning charms into tools costs (issue targets in brackets).
//!
//! * `catalog-100x10`: build the tool catalog of 100 charms with 10 handlers each
//!   (≤ 1 ms): introspect each charm's result, prepare 1000 input schemas, allocate
//!   1000 wire names.
//! * `catalog-reuse-100x10`: what a dialog round pays for the same catalog when nothing
//!   changed: `CatalogCache` asks every question the build asked again and finds the
//!   same answers.
//! * `tool-call`: one tool call without a model (≤ 20 µs median): look the tool up,
//!   validate the arguments against its schema, run the handler in a transaction, commit,
//!   re-run the derived label, and build the result snapshot and change summary.
//! * `tool-call-with-result`: the same call of a handler that answers (the new count):
//!   its answer travels back with the commit and into the result (within 10% of
//!   `tool-call`).
//! * `tool-call-once`: the `tool-call` call as a dialog makes it, with a receipt the
//!   handler's transaction writes beside its own writes, so that a request resumed after
//!   a crash does not run it twice (within 15% of `tool-call`). The receipt is cleared
//!   after each sample, untimed, as a dialog clears a round's receipts with its results.
//! * `dialog-round`: the dialog's own overhead per round with an instant model
//!   (≤ 100 µs): a user message whose answer is one tool call, then a text — two rounds —
//!   including the catalog (reused when unchanged, after checking what it was built from),
//!   message storage, tool invocation and request bookkeeping.
//!   Each sample starts a fresh conversation.
//!
//! All on an in-memory space. Trellis only: no peer has charms, so there is no ratio.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use trellis_builtins::catalog::{Catalog, CatalogCache};
use trellis_builtins::dialog::{DialogHandle, LlmDialog, ModelResolver};
use trellis_builtins::message::{Message, Role, ToolOutput};
use trellis_builtins::model::{EventStream, Model, ModelError, ModelEvent, ModelRequest};
use trellis_runner::{Link, Pattern, Runtime};

use crate::harness::{self, Budget, Measurement, RunConfig, Stats, Suite};

/// The suite entry for `main.rs`.
pub const SUITE: Suite =
    Suite { name: "tools", description: "tool catalog build, tool call round trip, dialog overhead per round", run };

const BUDGET: Budget = Budget { warmup: 20, min_samples: 50, max_samples: 5000, max_time: Duration::from_millis(2000) };

/// Handlers per charm in `catalog-100x10`.
const HANDLERS: usize = 10;
/// Charms in `catalog-100x10`.
const CHARMS: usize = 100;

fn run(config: &RunConfig) -> Vec<Measurement> {
    type Scenario = (&'static str, fn(&RunConfig) -> Stats);
    let scenarios: [Scenario; 6] = [
        ("catalog-100x10", catalog_build),
        ("catalog-reuse-100x10", catalog_reuse),
        ("tool-call", tool_call),
        ("tool-call-with-result", tool_call_with_result),
        ("tool-call-once", tool_call_once),
        ("dialog-round", dialog_round),
    ];
    scenarios
        .into_iter()
        .map(|(name, measure)| harness::run_guarded(config, SUITE.name, name, "trellis", || measure(config)))
        .collect()
}

/// A pattern with `HANDLERS` handlers, each with a small documented event.
fn wide_pattern() -> Pattern {
    /// Set one slot to a value.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct SetSlot {
        /// The new value.
        #[allow(dead_code)]
        value: i64,
        /// An optional note.
        #[allow(dead_code)]
        note: Option<String>,
    }
    Pattern::new("wide", |b, _: serde_json::Value| {
        b.name("Wide")?;
        for i in 0..HANDLERS {
            let slot = b.state(&format!("slot{i}"), 0i64)?;
            b.handler(&format!("set{i}"), move |tx, e: SetSlot| slot.set(tx, e.value))?;
        }
        Ok(())
    })
}

/// A counter charm: `count`, a derived `label`, and an `increment` handler.
pub(crate) fn counter_pattern() -> Pattern {
    /// Add to the count.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Increment {
        /// How much to add.
        amount: i64,
    }
    Pattern::new("counter", |b, _: serde_json::Value| {
        b.name("Counter")?;
        let count = b.state("count", 0i64)?;
        b.lift("label", count, |n: i64| format!("Count: {n}"))?;
        b.handler("increment", move |tx, e: Increment| count.update(tx, |n| n + e.amount))?;
        Ok(())
    })
}

/// [`counter_pattern`] whose `increment` answers with the new count.
fn answering_counter_pattern() -> Pattern {
    /// Add to the count.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Increment {
        /// How much to add.
        amount: i64,
    }
    /// The count after the change.
    #[derive(serde::Serialize, schemars::JsonSchema)]
    struct Now {
        count: i64,
    }
    Pattern::new("counter", |b, _: serde_json::Value| {
        b.name("Counter")?;
        let count = b.state("count", 0i64)?;
        b.lift("label", count, |n: i64| format!("Count: {n}"))?;
        b.handler("increment", move |tx, e: Increment| -> trellis_runner::Result<Now> {
            count.update(tx, |n| n + e.amount)?;
            Ok(Now { count: count.get(tx)? })
        })?;
        Ok(())
    })
}

/// A runtime with `CHARMS` wide charms, and the `tools` map listing them all.
fn wide_charms() -> (Runtime, serde_json::Value) {
    let rt = Runtime::in_memory();
    rt.register_pattern(wide_pattern());
    let mut entries = serde_json::Map::new();
    for _ in 0..CHARMS {
        let id = rt.charms().create("wide", json!({})).expect("tools: create a charm");
        entries.insert(id.to_string(), json!({"charm": rt.charms().result(&id).to_json()}));
    }
    (rt, serde_json::Value::Object(entries))
}

fn catalog_build(config: &RunConfig) -> Stats {
    let (rt, tools) = wide_charms();
    harness::measure(config.budget(BUDGET), || {
        let (catalog, took) = harness::time(|| Catalog::build(&rt, &tools));
        assert_eq!(catalog.len(), CHARMS * HANDLERS, "tools: every handler is a tool");
        took
    })
}

fn catalog_reuse(config: &RunConfig) -> Stats {
    let (rt, tools) = wide_charms();
    let cache = CatalogCache::default();
    let built = cache.get(&rt, &tools);
    harness::measure(config.budget(BUDGET), || {
        let (catalog, took) = harness::time(|| cache.get(&rt, &tools));
        assert!(Arc::ptr_eq(&catalog, &built), "tools: nothing changed, so the catalog is reused");
        took
    })
}

/// A single-threaded Tokio runtime to drive async calls from a benchmark.
pub(crate) fn tokio() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tools: tokio runtime")
}

fn tool_call(config: &RunConfig) -> Stats {
    call_increment(config, counter_pattern(), false)
}

fn tool_call_with_result(config: &RunConfig) -> Stats {
    call_increment(config, answering_counter_pattern(), true)
}

/// Times calls of `Counter_increment` of a charm of `pattern`, whose answer carries
/// `returned` if `answers`.
fn call_increment(config: &RunConfig, pattern: Pattern, answers: bool) -> Stats {
    let rt = Runtime::in_memory();
    rt.register_pattern(pattern);
    let id = rt.charms().create("counter", json!({})).expect("tools: create the counter");
    let catalog = Catalog::build(&rt, &json!({"c": {"charm": rt.charms().result(&id).to_json()}}));
    let tokio = tokio();
    let timeout = Duration::from_secs(5);
    harness::measure(config.budget(BUDGET), || {
        let (invocation, took) =
            harness::time(|| tokio.block_on(catalog.invoke(&rt, "Counter_increment", json!({"amount": 1}), timeout)));
        assert!(!invocation.is_error(), "tools: the call failed: {:?}", invocation.output);
        let returned = matches!(&invocation.output, ToolOutput::Json(answer) if answer.get("returned").is_some());
        assert_eq!(returned, answers, "tools: the call answers as its handler does");
        took
    })
}

fn tool_call_once(config: &RunConfig) -> Stats {
    use trellis_builtins::invoke::Step;
    let rt = Runtime::in_memory();
    rt.register_pattern(counter_pattern());
    let id = rt.charms().create("counter", json!({})).expect("tools: create the counter");
    let catalog = Catalog::build(&rt, &json!({"c": {"charm": rt.charms().result(&id).to_json()}}));
    let tokio = tokio();
    let timeout = Duration::from_secs(5);
    let receipts = Link::new("bench.receipts", trellis_runner::Path::root());
    let receipt = receipts.child("ran").child("1:0");
    harness::measure(config.budget(BUDGET), || {
        let call = catalog.begin(&rt, "Counter_increment", json!({"amount": 1}), None, timeout, Some(&receipt));
        let (step, took) = harness::time(|| tokio.block_on(call));
        let Step::Done(invocation) = step else { panic!("tools: the call waits") };
        assert!(!invocation.is_error(), "tools: the call failed: {:?}", invocation.output);
        rt.transact(|tx| tx.write(&receipts, trellis_runner::Value::Null)).expect("tools: clear the receipt");
        took
    })
}

/// A model that answers at once: a tool call to the user's message, text to a result.
struct InstantModel;

impl Model for InstantModel {
    fn name(&self) -> String {
        "instant".into()
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<EventStream, ModelError>> + Send + '_>> {
        let answered = request.messages.last().is_some_and(|m| m.role == Role::Tool);
        let events = if answered {
            vec![
                Ok(ModelEvent::TextDelta("done".into())),
                Ok(ModelEvent::Finish { reason: "stop".into(), usage: None }),
            ]
        } else {
            vec![
                Ok(ModelEvent::ToolCall {
                    id: "c1".into(),
                    name: "Counter_increment".into(),
                    input: json!({"amount": 1}),
                }),
                Ok(ModelEvent::Finish { reason: "tool_calls".into(), usage: None }),
            ]
        };
        Box::pin(async move { Ok(Box::pin(futures::stream::iter(events)) as EventStream) })
    }
}

fn dialog_round(config: &RunConfig) -> Stats {
    let rt = Runtime::in_memory();
    rt.register_pattern(counter_pattern());
    let model: Arc<dyn Model> = Arc::new(InstantModel);
    register_chat(&rt, Arc::new(move |_| Ok(model.clone())));
    let chat = Chat::new(&rt, "instant");
    let tokio = tokio();
    harness::measure(config.budget(BUDGET), || chat.conversation(&tokio))
}

/// Registers the `llm_dialog` builtin with `models` and the `chat` pattern: a dialog whose
/// argument is its tools, and a `clear` stream that starts a new conversation.
pub(crate) fn register_chat(rt: &Runtime, models: ModelResolver) {
    rt.register_builtin(Arc::new(LlmDialog::with_resolver(models)));
    rt.register_pattern(Pattern::new("chat", |b, argument: serde_json::Value| {
        /// Start a new conversation.
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        struct Clear {}
        let messages = b.state::<Vec<Message>>("messages", Vec::new())?;
        let inputs = json!({"messages": messages, "model": argument["model"], "tools": argument["tools"]});
        b.builtin("dialog", "llm_dialog", inputs)?;
        b.handler("clear", move |tx, _: Clear| messages.set(tx, Vec::new()))?;
        Ok(())
    }));
}

/// A chat charm whose dialog has one counter of its own as its tool.
pub(crate) struct Chat {
    rt: Runtime,
    dialog: DialogHandle,
    clear: Link,
}

impl Chat {
    /// A new counter and a chat with it as its tool, asking `model`.
    pub(crate) fn new(rt: &Runtime, model: &str) -> Self {
        let counter = rt.charms().create("counter", json!({})).expect("bench: create the counter");
        let tools = json!({"c": {"charm": rt.charms().result(&counter).to_json()}});
        let chat = rt.charms().create("chat", json!({"model": model, "tools": tools})).expect("bench: create the chat");
        let dialog = DialogHandle::new(rt.clone(), rt.charms().result(&chat).child("dialog"));
        Chat { rt: rt.clone(), dialog, clear: rt.charms().result(&chat).child("clear") }
    }

    /// Starts a new conversation (not timed), then says "count": the model calls the
    /// counter, then answers. Returns the time per round (two rounds).
    pub(crate) fn conversation(&self, tokio: &tokio::runtime::Runtime) -> Duration {
        tokio.block_on(self.clear()).expect("bench: clear the conversation");
        let (said, took) = harness::time(|| tokio.block_on(self.say()));
        said.expect("bench: the dialog answered");
        self.check();
        took / ROUNDS_PER_SAY
    }

    /// Starts a new conversation.
    pub(crate) async fn clear(&self) -> trellis_runner::Result<()> {
        self.rt.send(&self.clear, json!({})).await.map(drop)
    }

    /// Says "count" and waits for the answer.
    pub(crate) async fn say(&self) -> trellis_runner::Result<()> {
        self.dialog.say("count", Duration::from_secs(30)).await
    }

    /// Panics unless the last conversation went as planned.
    pub(crate) fn check(&self) {
        assert!(self.dialog.error().is_none(), "bench: the dialog failed: {:?}", self.dialog.error());
        assert_eq!(self.dialog.messages().len(), 4, "bench: user, call, result, answer");
    }
}

/// Rounds in one [`Chat::conversation`]: the tool call, then the answer.
pub(crate) const ROUNDS_PER_SAY: u32 = 2;
