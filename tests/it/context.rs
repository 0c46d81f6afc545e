//! What of a conversation reaches the model: a long tool result is cut in each request,
//! kept whole in the space, and read on page by page with the dialog's own tool; a long
//! conversation is compacted to stay within its budget.

use crate::common;

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use trellis::builtins::dialog::{estimate_tokens, DialogHandle, LlmDialog, READ_RESULT, TOOL_RESULT_CAP};
use trellis::builtins::message::{Part, Role, ToolOutput};
use trellis::builtins::model::{EventStream, Model, ModelError, ModelRequest};
use trellis::builtins::scripted::{ScriptedModel, Turn};
use trellis::prelude::*;

const WAIT: Duration = Duration::from_secs(30);

/// The scripted model, keeping every request it was asked.
struct Recording {
    script: ScriptedModel,
    asked: Mutex<Vec<ModelRequest>>,
}

impl Model for Recording {
    fn name(&self) -> String {
        self.script.name()
    }

    fn summarizes(&self) -> bool {
        self.script.summarizes()
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> Pin<Box<dyn std::future::Future<Output = Result<EventStream, ModelError>> + Send + '_>> {
        self.asked.lock().unwrap().push(request.clone());
        self.script.stream(request)
    }
}

/// Dump a megabyte.
#[derive(Deserialize, JsonSchema)]
struct Dump {}

/// Add one.
#[derive(Deserialize, JsonSchema)]
struct Add {}

/// A charm whose `dump` answers with a megabyte of text and whose `add` counts, and a
/// chat whose tools are it, with these dialog inputs besides.
fn space(model: Arc<Recording>, inputs: Value) -> (Runtime, DialogHandle) {
    let rt = Runtime::in_memory();
    rt.register_pattern(Pattern::new("big", |b, _: Value| {
        b.name("Big")?;
        let count = b.state("count", 0i64)?;
        b.handler("dump", |_, _: Dump| -> Result<String> { Ok(megabyte()) })?;
        b.handler("add", move |tx, _: Add| count.update(tx, |n| n + 1))?;
        Ok(())
    }));
    rt.register_pattern(Pattern::new("chat", move |b, tools: Value| {
        let mut all = json!({"model": "recording", "tools": tools});
        all.as_object_mut().unwrap().extend(inputs.as_object().cloned().unwrap_or_default());
        b.builtin("dialog", "llm_dialog", all)?;
        Ok(())
    }));
    let resolver = move |_: &str| -> Result<Arc<dyn Model>, ModelError> { Ok(model.clone()) };
    rt.register_builtin(Arc::new(LlmDialog::with_resolver(Arc::new(resolver))));
    let big = rt.charms().create("big", json!({})).unwrap();
    let chat = rt.charms().create("chat", json!({"Big": {"charm": rt.charms().result(&big).to_json()}})).unwrap();
    let dialog = DialogHandle::new(rt.clone(), rt.charms().result(&chat).child("dialog"));
    (rt, dialog)
}

/// 1 MiB of numbered lines, so each page can be told apart.
fn megabyte() -> String {
    let mut text = String::with_capacity(1 << 20);
    let mut line = 0;
    while text.len() < (1 << 20) {
        text.push_str(&format!("line {line:06} of the dump\n"));
        line += 1;
    }
    text.truncate(1 << 20);
    text
}

/// The results of the tool calls in a request's messages.
fn results(request: &ModelRequest) -> Vec<ToolOutput> {
    common::tool_results(&request.messages)
}

#[tokio::test]
async fn a_megabyte_result_is_cut_in_the_request_and_read_on_from_the_space() {
    let script = vec![
        Turn::tool_call("Big.dump", json!({})),
        Turn::tool_call(READ_RESULT, json!({"call_id": "call_1", "offset": TOOL_RESULT_CAP})),
        Turn::text("It is a dump of numbered lines."),
    ];
    let model = Arc::new(Recording { script: ScriptedModel::from_turns(script), asked: Mutex::default() });
    let (_rt, dialog) = space(model.clone(), json!({}));
    dialog.say("what does Big dump?", WAIT).await.unwrap();
    let asked = model.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 3);
    assert!(!asked[0].tools.iter().any(|t| t.name == READ_RESULT), "nothing was cut yet");

    // The second request carries the start of the result and a note, and offers the tool.
    let ToolOutput::Text(start) = &results(&asked[1])[0] else { panic!("{:?}", results(&asked[1])) };
    assert!(start.len() < TOOL_RESULT_CAP + 300, "{} bytes", start.len());
    assert!(start.starts_with(r#"{"result":"#) || start.starts_with(r#"{"returned":"#), "{}", &start[..80]);
    assert!(start.contains("[cut: this result is") && start.contains(READ_RESULT), "{}", &start[start.len() - 300..]);
    assert!(asked[1].tools.iter().any(|t| t.name == READ_RESULT));
    let request_bytes: usize = asked[1].messages.iter().map(|m| serde_json::to_string(m).unwrap().len()).sum();
    assert!(request_bytes < 2 * TOOL_RESULT_CAP, "the request stays small: {request_bytes} bytes");

    // The page the model asked for continues where the start stopped.
    let ToolOutput::Json(page) = &results(&asked[2])[1] else { panic!("{:?}", results(&asked[2])) };
    assert_eq!(page["offset"], TOOL_RESULT_CAP);
    assert_eq!(page["next"], 2 * TOOL_RESULT_CAP);
    assert!(page["total"].as_u64().unwrap() > 1 << 20, "{}", page["total"]);
    let whole = match &common::tool_results(&dialog.messages())[0] {
        ToolOutput::Json(answer) => answer.to_string(),
        other => panic!("{other:?}"),
    };
    assert_eq!(page["text"], whole[TOOL_RESULT_CAP..2 * TOOL_RESULT_CAP], "the space keeps the whole result");
    let kept: Value = serde_json::from_str(&whole).unwrap();
    assert_eq!(kept["returned"], megabyte(), "the handler's whole answer");
}

#[tokio::test]
async fn two_hundred_turns_stay_within_the_budget_with_every_call_answered() {
    const BUDGET: u64 = 2_000;
    const TURNS: usize = 200;
    let script = (0..TURNS).flat_map(|n| [Turn::tool_call("Big.add", json!({})), Turn::text(format!("Added ({n})."))]);
    let model = Arc::new(Recording { script: ScriptedModel::from_turns(script.collect()), asked: Mutex::default() });
    let (_rt, dialog) = space(model.clone(), json!({"context_budget": BUDGET}));
    for n in 0..TURNS {
        dialog.say(&format!("add one more, this is turn {n}"), WAIT).await.unwrap();
    }
    let asked = model.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 2 * TURNS);
    for (n, request) in asked.iter().enumerate() {
        let tokens = estimate_tokens(request);
        assert!(tokens <= BUDGET, "request {n} carries {tokens} tokens");
        let ids = |calls: bool| -> Vec<&str> {
            let parts = request.messages.iter().flat_map(|m| &m.content);
            parts
                .filter_map(|part| match part {
                    Part::ToolCall { id, .. } if calls => Some(id.as_str()),
                    Part::ToolResult { id, .. } if !calls => Some(id.as_str()),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(ids(true), ids(false), "request {n}: every call with its result, none alone");
        assert_eq!(request.messages[0].role, Role::User, "request {n} starts with a turn");
    }
    // The space keeps every turn; the model reads the oldest as a listing.
    assert_eq!(dialog.messages().len(), 4 * TURNS);
    assert!(dialog.compacted() > 3 * TURNS, "compacted up to {}", dialog.compacted());
    let system = asked.last().unwrap().system.clone().unwrap_or_default();
    assert!(system.contains("earlier messages were set aside"), "{system}");
}
