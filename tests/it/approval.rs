//! Handlers that need a person's approval: the call waits in the dialog's cells, a
//! `resolve` answers it, and the request goes on; nothing else can run it.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use trellis::builtins::dialog::{DialogHandle, InteractionKind, LlmDialog, Resolution, Resolve};
use trellis::builtins::message::{Message, Part, ToolOutput};
use trellis::builtins::model::{Model, ModelError};
use trellis::builtins::scripted::{ScriptedModel, Turn};
use trellis::prelude::*;
use trellis::runner::DocId;

const WAIT: Duration = Duration::from_secs(10);

/// A safe whose `wipe` needs approval and whose `bump` does not.
fn safe() -> Pattern {
    /// Add one.
    #[derive(Deserialize, JsonSchema)]
    struct Bump {}
    /// Set the count to zero.
    #[derive(Deserialize, JsonSchema)]
    struct Wipe {}
    Pattern::new("safe", |b, _: serde_json::Value| {
        b.name("Safe")?;
        let count = b.state("count", 5i64)?;
        b.handler("bump", move |tx, _: Bump| count.update(tx, |n| n + 1))?;
        b.handler("wipe", move |tx, _: Wipe| count.set(tx, 0))?;
        b.require_approval("wipe", "Erases the count")
    })
}

fn chat() -> Pattern {
    Pattern::new("chat", |b, arg: serde_json::Value| {
        let messages = b.state::<Vec<Message>>("messages", Vec::new())?;
        let mut tools = arg["tools"].clone();
        tools["ask"] = json!({"human_input": true});
        let inputs = json!({"messages": messages, "model": "test", "tools": tools});
        b.builtin("dialog", "llm_dialog", inputs)?;
        Ok(())
    })
}

struct Setup {
    rt: Runtime,
    safe: DocId,
    dialog: DialogHandle,
}

/// Registers the patterns and a dialog whose model plays `turns` on `rt`; creates the
/// charms unless the space has them (a second process finds them).
fn setup_on(rt: Runtime, turns: Vec<Turn>) -> Setup {
    rt.register_pattern(safe());
    rt.register_pattern(chat());
    let model: Arc<dyn Model> = Arc::new(ScriptedModel::from_turns(turns));
    let resolver = move |_: &str| -> Result<Arc<dyn Model>, ModelError> { Ok(model.clone()) };
    rt.register_builtin(Arc::new(LlmDialog::with_resolver(Arc::new(resolver))));
    let find = |pattern: &str| rt.charms().list().into_iter().find(|c| c.pattern == pattern).map(|c| DocId::from(c.id));
    let safe = find("safe").unwrap_or_else(|| rt.charms().create("safe", json!({})).unwrap());
    let chat = find("chat").unwrap_or_else(|| {
        let tools = json!({"Safe": {"charm": rt.charms().result(&safe).to_json()}});
        rt.charms().create("chat", json!({"tools": tools})).unwrap()
    });
    let dialog = DialogHandle::new(rt.clone(), rt.charms().result(&chat).child("dialog"));
    Setup { rt, safe, dialog }
}

fn setup(turns: Vec<Turn>) -> Setup {
    setup_on(Runtime::in_memory(), turns)
}

fn count(s: &Setup) -> i64 {
    s.rt.charms().get(&s.safe).unwrap()["count"].as_i64().unwrap()
}

fn results(s: &Setup) -> Vec<ToolOutput> {
    let messages = s.dialog.messages();
    messages
        .iter()
        .flat_map(|m| m.content.clone())
        .filter_map(|p| if let Part::ToolResult { output, .. } = p { Some(output) } else { None })
        .collect()
}

#[tokio::test]
async fn an_approved_call_runs_and_the_dialog_goes_on() {
    let s = setup(vec![Turn::tool_call("Safe.wipe", json!({})), Turn::text("Wiped.")]);
    s.dialog.say("wipe the safe", WAIT).await.unwrap();
    let waiting = s.dialog.interactions();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!((waiting[0].tool.as_str(), waiting[0].prompt.as_str()), ("Safe.wipe", "Erases the count"));
    assert_eq!(count(&s), 5, "nothing ran before the answer");
    assert!(!s.dialog.pending() && s.dialog.error().is_none());

    s.dialog.resolve(Resolve::approve(&waiting[0].call_id)).await.unwrap();
    s.dialog.wait(WAIT).await.unwrap();
    assert_eq!(count(&s), 0);
    assert!(s.dialog.interactions().is_empty());
    assert_eq!(s.dialog.messages().last().unwrap().text(), "Wiped.");
}

#[tokio::test]
async fn a_denied_call_is_an_error_the_model_reads() {
    let s = setup(vec![Turn::tool_call("Safe.wipe", json!({})), Turn::text("Understood.")]);
    s.dialog.say("wipe the safe", WAIT).await.unwrap();
    let call = s.dialog.interactions()[0].call_id.clone();
    let denial = Resolve::deny(&call, "not today");
    s.dialog.resolve(denial).await.unwrap();
    s.dialog.wait(WAIT).await.unwrap();
    assert_eq!(count(&s), 5);
    let ToolOutput::ErrorText(text) = &results(&s)[0] else { panic!("{:?}", results(&s)) };
    assert!(text.contains("denied") && text.contains("not today"), "{text}");
    assert_eq!(s.dialog.messages().last().unwrap().text(), "Understood.");
}

#[tokio::test]
async fn forged_and_misdirected_answers_are_refused() {
    let s = setup(vec![Turn::tool_call("Safe.wipe", json!({})), Turn::text("unused")]);
    s.dialog.say("wipe the safe", WAIT).await.unwrap();
    let call = s.dialog.interactions()[0].call_id.clone();

    let forged = s.dialog.resolve(Resolve::approve("call_that_never_was")).await.unwrap_err();
    assert!(forged.to_string().contains("not waiting"), "{forged}");
    let other_tool = Resolve::approve(&call).for_tool("Safe.bump");
    let refused = s.dialog.resolve(other_tool).await.unwrap_err();
    assert!(refused.to_string().contains("is for Safe.wipe"), "{refused}");
    let busy = s.dialog.send(Message::user("something else")).await.unwrap_err();
    assert!(busy.to_string().contains("waiting for your answer"), "{busy}");
    assert_eq!(count(&s), 5);

    // After a cancel nothing waits, and a late approval runs nothing.
    s.dialog.cancel().await.unwrap();
    assert!(s.dialog.interactions().is_empty());
    let late = s.dialog.resolve(Resolve::approve(&call)).await.unwrap_err();
    assert!(late.to_string().contains("no call is waiting"), "{late}");
    s.dialog.wait(WAIT).await.unwrap();
    assert_eq!(count(&s), 5);
    let ToolOutput::ErrorText(text) = &results(&s)[0] else { panic!("{:?}", results(&s)) };
    assert!(text.contains("cancelled") && text.contains("did not run"), "{text}");
}

#[tokio::test]
async fn a_round_runs_what_needs_no_approval_and_waits_for_the_rest_in_any_order() {
    let turns = vec![
        Turn::tool_call("Safe.wipe", json!({}))
            .with_tool_call("Safe.bump", json!({}))
            .with_tool_call("Safe.wipe", json!({})),
        Turn::text("Done."),
    ];
    let s = setup(turns);
    s.dialog.say("wipe, bump, wipe", WAIT).await.unwrap();
    assert_eq!(count(&s), 6, "bump ran at once");
    let waiting = s.dialog.interactions();
    assert_eq!(waiting.len(), 2);
    // The second asked is answered first.
    s.dialog.resolve(Resolve::new(&waiting[1].call_id, Resolution::Denied { reason: None })).await.unwrap();
    assert_eq!(s.dialog.interactions().len(), 1);
    assert_eq!(count(&s), 6, "nothing runs before every call has its answer");
    s.dialog.resolve(Resolve::approve(&waiting[0].call_id)).await.unwrap();
    s.dialog.wait(WAIT).await.unwrap();
    assert_eq!(count(&s), 0);
    // One result per call, in the order the model called them.
    let outputs = results(&s);
    assert_eq!(outputs.len(), 3, "{outputs:?}");
    assert!(matches!(outputs[0], ToolOutput::Json(_)) && matches!(outputs[1], ToolOutput::Json(_)));
    assert!(matches!(&outputs[2], ToolOutput::ErrorText(t) if t.contains("denied")), "{outputs:?}");
    assert_eq!(s.dialog.messages().last().unwrap().text(), "Done.");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_call_survives_a_restart_and_is_answered_by_the_next_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("space.sqlite");
    // Both processes play the same script: the second goes on where the conversation is.
    let script = || vec![Turn::tool_call("Safe.wipe", json!({})), Turn::text("Wiped after the restart.")];
    let call = {
        let s = setup_on(Runtime::open(&path).unwrap(), script());
        s.dialog.say("wipe the safe", WAIT).await.unwrap();
        s.dialog.interactions()[0].call_id.clone()
    };
    // The first runtime is gone (its last task lets go of it just after the reply is
    // settled, so the space's lock may take a moment); the next one finds the call still
    // waiting.
    let deadline = std::time::Instant::now() + WAIT;
    let rt = loop {
        match Runtime::open(&path) {
            Ok(rt) => break rt,
            Err(trellis::runner::storage::StorageError::InUse { .. }) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("cannot reopen the space: {e}"),
        }
    };
    let s = setup_on(rt, script());
    assert_eq!(s.dialog.interactions().len(), 1, "still waiting after the restart");
    s.dialog.resolve(Resolve::approve(&call)).await.unwrap();
    s.dialog.wait(WAIT).await.unwrap();
    assert_eq!(s.dialog.error(), None);
    assert_eq!(count(&s), 0);
    assert_eq!(s.dialog.messages().last().unwrap().text(), "Wiped after the restart.");
}

#[tokio::test]
async fn the_model_asks_a_question_and_reads_the_answer() {
    let ask = json!({"type": "choice", "message": "Which colour?", "options": ["red", "blue"]});
    let s = setup(vec![Turn::tool_call("ask", ask), Turn::text("Blue it is.")]);
    s.dialog.say("paint it", WAIT).await.unwrap();
    let waiting = s.dialog.interactions();
    assert_eq!(waiting[0].kind, InteractionKind::Choice);
    assert_eq!(
        (waiting[0].prompt.as_str(), waiting[0].options.clone()),
        ("Which colour?", vec!["red".into(), "blue".into()])
    );
    let call = waiting[0].call_id.clone();

    let off_the_list = Resolve::answer(&call, json!("purple"));
    let refused = s.dialog.resolve(off_the_list).await.unwrap_err();
    assert!(refused.to_string().contains("one of: red, blue"), "{refused}");
    assert_eq!(s.dialog.interactions().len(), 1, "a refused answer leaves the call waiting");

    s.dialog.resolve(Resolve::answer(&call, json!("Blue"))).await.unwrap();
    s.dialog.wait(WAIT).await.unwrap();
    assert_eq!(results(&s)[0], ToolOutput::Json(json!({"choice": "blue"})));
    assert_eq!(s.dialog.messages().last().unwrap().text(), "Blue it is.");
}

#[tokio::test]
async fn questions_and_confirmations_take_text_and_yes_or_no() {
    let turns = vec![
        Turn::tool_call("ask", json!({"message": "Your name?"}))
            .with_tool_call("ask", json!({"type": "confirmation", "message": "Proceed?"})),
        Turn::text("Thanks."),
    ];
    let s = setup(turns);
    s.dialog.say("go", WAIT).await.unwrap();
    let waiting = s.dialog.interactions();
    assert_eq!((waiting[0].kind, waiting[1].kind), (InteractionKind::Question, InteractionKind::Confirmation));
    let approved = s.dialog.resolve(Resolve::approve(&waiting[0].call_id)).await.unwrap_err();
    assert!(approved.to_string().contains("asks for an answer"), "{approved}");
    let maybe = Resolve::answer(&waiting[1].call_id, json!("maybe"));
    assert!(s.dialog.resolve(maybe).await.unwrap_err().to_string().contains("yes or no"));
    s.dialog.resolve(Resolve::answer(&waiting[1].call_id, json!("no"))).await.unwrap();
    s.dialog.resolve(Resolve::answer(&waiting[0].call_id, json!("Ada"))).await.unwrap();
    s.dialog.wait(WAIT).await.unwrap();
    assert_eq!(
        results(&s),
        [ToolOutput::Json(json!({"answer": "Ada"})), ToolOutput::Json(json!({"confirmed": false}))]
    );
}

/// The titles of the notes `Notes` holds, through the binary.
fn note_titles(space: &std::path::Path) -> Vec<String> {
    let notes = crate::common::json_of(space, &["charm", "get", "Notes"]);
    let all = notes["notes"].as_array().cloned().unwrap_or_default();
    all.iter().filter_map(|n| n["title"].as_str().map(str::to_string)).collect()
}

/// "Allow always" and edited arguments, from the command line: an approval with
/// `--input` runs the call with the person's arguments and tells the model; one with
/// `--always` lets the tool's next call run without asking, `trellis pending` lists it, and
/// `--disallow` makes it ask again.
#[test]
fn allow_always_and_edited_arguments_from_the_command_line() {
    use crate::common;
    let s = common::space();
    for title in ["milk", "eggs", "tea", "jam"] {
        common::ok(&s.path, &["charm", "send", "Notes", "add", &json!({ "title": title }).to_string()]);
    }
    let delete = |id: u64| json!({"tool_calls": [{"name": "Notes.delete", "arguments": {"id": id}}]});
    let model = common::script(
        &s.path,
        json!([delete(1), {"text": "Deleted."}, delete(2), {"text": "Deleted again."}, delete(3), {"text": "And again."}]),
    );
    let chat = |text: &str| common::run(&s.path, &["chat", "--model", &model, "-m", text]);

    // Edited: the model asked for note 1; the person runs it on note 4.
    assert_eq!(chat("@Notes delete the first note").status.code(), Some(3), "it waits for approval");
    let refused = common::fails(&s.path, &["resolve", "--approve", "--input", r#"{"id": "four"}"#]);
    assert!(refused.contains("do not fit") && refused.contains("nothing was approved"), "{refused}");
    common::ok(&s.path, &["resolve", "--approve", "--input", r#"{"id": 4}"#]);
    assert_eq!(note_titles(&s.path), ["milk", "eggs", "tea"], "note 4 went, not note 1");
    let result = parts_of(&s.path, "tool-result").pop().expect("the call's result");
    assert!(result.to_string().contains(r#"the user changed this call's arguments to {\"id\":4}"#), "{result}");

    // Always: approved once, the tool's next call runs without asking.
    assert_eq!(chat("@Notes delete another").status.code(), Some(3));
    common::ok(&s.path, &["resolve", "--approve", "--always"]);
    assert_eq!(note_titles(&s.path), ["milk", "tea"]);
    let pending = common::ok(&s.path, &["pending"]);
    assert!(pending.contains("allowed without asking in this chat: Notes.delete"), "{pending}");
    let listed = common::ok(&s.path, &["--json", "pending"]);
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("pending --json is JSON");
    assert_eq!(listed["allowed"], serde_json::json!(["Notes.delete"]), "{listed}");
    let out = chat("@Notes and one more");
    assert!(out.status.success(), "it ran without asking: {}", String::from_utf8_lossy(&out.stdout));
    assert_eq!(note_titles(&s.path), ["milk"]);

    // Disallowed: it asks again.
    let said = common::ok(&s.path, &["resolve", "--disallow", "Notes.delete"]);
    assert!(said.contains("Notes.delete asks for approval again"), "{said}");
    assert!(!common::ok(&s.path, &["pending"]).contains("allowed without asking"));
    let err = common::fails(&s.path, &["resolve", "--disallow", "Notes.delete"]);
    assert!(err.contains("was not allowed to run without asking") && !err.contains("handler "), "{err}");
}

/// The parts of type `kind` of the chat's conversation, through the binary.
fn parts_of(space: &std::path::Path, kind: &str) -> Vec<serde_json::Value> {
    let chat = crate::common::json_of(space, &["charm", "get", "Chat"]);
    let messages = chat["messages"].as_array().cloned().unwrap_or_default();
    let all = messages.iter().flat_map(|m| m["content"].as_array().cloned().unwrap_or_default());
    all.filter(|p| p["type"] == kind).collect()
}
