//! Approvals over `trellis serve`'s API as the page gives them: with the person's own
//! arguments, "always" (the chat's `allowed`), and `DELETE /api/chat/allowed/{tool}` to
//! make the tool ask again. Notes' `delete` needs approval; the offline model calls it.

use crate::common;
use crate::common::server::Events;
use crate::serve::{client, Client};
use common::Finish;

use serde_json::{json, Value};

/// The titles of the notes left.
fn titles(c: &Client) -> Vec<String> {
    let notes = c.ok("GET", "/api/charms/Notes", None, 200)["data"]["notes"].clone();
    notes.as_array().unwrap().iter().map(|n| n["title"].as_str().unwrap().to_string()).collect()
}

/// The tool results of the conversation.
fn results(chat: &Value) -> Vec<Value> {
    let parts = chat["messages"].as_array().unwrap().iter().flat_map(|m| m["content"].as_array().unwrap().clone());
    parts.filter(|p| p["type"] == "tool-result").collect()
}

/// Sends `text`, whose call waits for approval; that call's id.
fn waits(c: &Client, events: &mut Events, text: &str) -> String {
    c.ok("POST", "/api/chat/messages", Some(json!({"text": text})), 202);
    let waiting = events.until("chat", |s| !s["interactions"].as_array().unwrap().is_empty());
    assert_eq!(waiting["interactions"][0]["tool"], "Notes.delete");
    waiting["interactions"][0]["call_id"].as_str().unwrap().to_string()
}

/// Waits for the reply to end with `results_now` tool results and nothing waiting.
fn settled(events: &mut Events, results_now: usize) -> Value {
    events.until("chat", |s| {
        s["interactions"].as_array().unwrap().is_empty() && s["pending"] == false && results(s).len() == results_now
    })
}

#[test]
fn approvals_with_other_arguments_or_always_and_a_tool_made_to_ask_again() {
    let s = common::space();
    let c = client(&s.path, &[]);
    for title in ["milk", "eggs", "tea", "jam", "bread"] {
        c.ok("POST", "/api/charms/Notes/handlers/add", Some(json!({ "title": title })), 200);
    }
    let mut events = c.served.events("/api/chat/events", &[&c.auth]);
    assert_eq!(events.until("chat", |_| true)["allowed"], json!([]));
    let resolve =
        |call: &str, answer: Value| c.call("POST", &format!("/api/interactions/{call}/resolve"), Some(answer));

    // The person's arguments: the model asked for note 1, note 4 goes. Arguments that do
    // not fit the tool are refused, and the call still waits.
    let call = waits(&c, &mut events, "@Notes delete note 1");
    let refused = resolve(&call, json!({"approve_with": {"input": {"id": "four"}}}));
    assert_eq!(refused.status, 422, "{}", refused.body);
    let why = refused.json()["error"].as_str().unwrap().to_string();
    assert!(why.contains("do not fit") && why.contains("nothing was approved"), "{why}");
    assert_eq!(c.ok("GET", "/api/interactions", None, 200)[0]["call_id"], json!(call), "it still waits");
    assert_eq!(titles(&c), ["milk", "eggs", "tea", "jam", "bread"]);
    assert_eq!(resolve(&call, json!({"approve_with": {"input": {"id": 4}}})).status, 202);
    let done = settled(&mut events, 1);
    assert_eq!(titles(&c), ["milk", "eggs", "tea", "bread"], "note 4 went, not note 1");
    let told = results(&done)[0].to_string();
    assert!(told.contains(r#"the user changed this call's arguments to {\"id\":4}"#), "{told}");
    assert_eq!(done["allowed"], json!([]), "allowed once, not always");

    // Always: the tool is listed as allowed, and its next call runs without waiting.
    let call = waits(&c, &mut events, "@Notes delete note 1");
    assert_eq!(resolve(&call, json!({"approve_with": {"always": true}})).status, 202);
    let done = settled(&mut events, 2);
    assert_eq!(done["allowed"], json!(["Notes.delete"]));
    assert_eq!(c.ok("GET", "/api/chat", None, 200)["allowed"], json!(["Notes.delete"]));
    assert_eq!(titles(&c), ["eggs", "tea", "bread"]);
    c.ok("POST", "/api/chat/messages", Some(json!({"text": "@Notes delete note 2"})), 202);
    events.until("chat", |s| {
        assert_eq!(s["interactions"], json!([]), "an allowed tool does not ask");
        s["pending"] == false && results(s).len() == 3
    });
    assert_eq!(titles(&c), ["tea", "bread"]);

    // The command line, while the server holds the space, lists it and asks again through
    // the route, which takes it out of `allowed`; the next call waits.
    let cli = |args: &[&str]| common::trellis(&s.path).args(args).finish();
    let pending = cli(&["pending"]);
    let listed = String::from_utf8_lossy(&pending.stdout).into_owned();
    assert!(listed.contains("allowed without asking in this chat: Notes.delete"), "{listed}");
    let listed: Value = serde_json::from_slice(&cli(&["--json", "pending"]).stdout).expect("JSON");
    assert_eq!((&listed["allowed"], &listed["interrupted"]), (&json!(["Notes.delete"]), &json!(false)));
    let asked = cli(&["resolve", "--disallow", "Notes.delete"]);
    assert!(String::from_utf8_lossy(&asked.stdout).contains("Notes.delete asks for approval again"), "{asked:?}");
    assert_eq!(events.until("chat", |s| s["allowed"] == json!([]))["allowed"], json!([]));
    let again = c.call("DELETE", "/api/chat/allowed/Notes.delete", None);
    assert_eq!(again.status, 404, "{}", again.body);
    let why = again.json()["error"].as_str().unwrap().to_string();
    assert!(why.contains("`Notes.delete` does not run without asking") && why.contains("always"), "{why}");
    waits(&c, &mut events, "@Notes delete note 3");
    assert_eq!(titles(&c), ["tea", "bread"], "it waits for approval");
}
