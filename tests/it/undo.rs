//! Who changed what, and undoing a turn, driven as a user would: a model (an
//! OpenAI-compatible server on loopback that replays calls) changes charms through
//! `trellis chat`, a person through `trellis charm send`; `trellis charm get --provenance`
//! names the last writer of each field, and `trellis undo` puts back a request's writes,
//! unless someone wrote them again since.

use crate::common;
use crate::common::provider::{Provider, Reply};

use common::{fails, json_of, ok, space, Finish};
use serde_json::{json, Value};

fn count(space: &std::path::Path) -> Value {
    json_of(space, &["charm", "get", "Counter"])["count"].clone()
}

/// The provenance entry of `path` in `charm get NAME --provenance --json`.
fn writer_of(space: &std::path::Path, charm: &str, path: &str) -> Value {
    let report = json_of(space, &["charm", "get", charm, "--provenance"]);
    let entries = report["provenance"].as_array().cloned().unwrap_or_default();
    entries.into_iter().find(|e| e["path"] == path).unwrap_or_else(|| panic!("no {path} in {report}"))
}

#[test]
fn each_field_names_its_last_writer_and_an_undo_puts_back_the_whole_turn() {
    let s = space();
    let start = count(&s.path);
    let provider = Provider::start(vec![
        Reply::Calls(vec![
            ("Counter_increment".into(), json!({"amount": 2})),
            ("Counter_increment".into(), json!({"amount": 3})),
        ]),
        Reply::Text("Added five.".into()),
        Reply::Text("Understood.".into()),
    ]);
    provider.chat(&s.path, "@Counter add two, then three");
    assert_eq!(count(&s.path), json!(start.as_i64().expect("a count") + 5));

    let count_by = writer_of(&s.path, "Counter", "count");
    assert_eq!(count_by["by"]["kind"], "model", "{count_by}");
    assert_eq!(count_by["by"]["details"]["request"], 1, "{count_by}");
    assert_eq!(count_by["by"]["details"]["tool"], "Counter.increment", "{count_by}");
    assert!(count_by["by"]["details"]["call"].is_string(), "{count_by}");
    let label = writer_of(&s.path, "Counter", "label");
    assert_eq!((label["derived"].clone(), label["by"].clone()), (json!(true), Value::Null), "{label}");
    let shown = ok(&s.path, &["charm", "get", "Counter", "--provenance"]);
    assert!(
        shown.contains("Counter.count: the model (openai:loopback) calling Counter.increment in request 1"),
        "{shown}"
    );
    assert!(shown.contains("Counter.label: a derived value"), "{shown}");

    let undone = ok(&s.path, &["undo"]);
    assert!(undone.contains("undid request 1"), "{undone}");
    assert!(undone.contains(&format!("Counter.count: {} → {start}", start.as_i64().unwrap_or(0) + 5)), "{undone}");
    assert_eq!(count(&s.path), start, "the count is back");
    let label = json_of(&s.path, &["charm", "get", "Counter"])["label"].clone();
    assert_eq!(label, json!(format!("Count: {start}")), "derived values follow");
    assert_eq!(writer_of(&s.path, "Counter", "count")["by"]["kind"], "undo");

    // The model is told, in the conversation, before its next request.
    provider.chat(&s.path, "ok");
    let received = provider.received();
    let told = received[2]["messages"].to_string();
    assert!(told.contains("The user undid your turn of request 1"), "{told}");

    let again = fails(&s.path, &["undo", "--request", "1"]);
    assert!(again.contains("undid it already"), "{again}");
    // The latest request that changed something is request 1, undone already.
    assert!(fails(&s.path, &["undo"]).contains("cannot undo request 1: trellis undo undid it already"));
    let nothing = fails(&s.path, &["undo", "--request", "2"]);
    assert!(nothing.contains("cannot undo request 2: its tool calls changed nothing"), "{nothing}");
}

#[test]
fn an_undo_is_refused_after_someone_elses_later_write_and_lists_it() {
    let s = space();
    let start = count(&s.path).as_i64().expect("a count");
    let provider = Provider::start(vec![
        Reply::Call("Counter_increment".into(), json!({"amount": 2})),
        Reply::Text("Added two.".into()),
    ]);
    provider.chat(&s.path, "@Counter add two");
    ok(&s.path, &["charm", "send", "Counter", "increment", r#"{"amount": 5}"#]);
    let by = writer_of(&s.path, "Counter", "count");
    assert_eq!((by["by"]["kind"].clone(), by["by"]["name"].clone()), (json!("command"), json!("charm send")));

    let refused = fails(&s.path, &["undo"]);
    let line = format!("Counter.count is {} (request 1 left it at {}), written by charm send", start + 7, start + 2);
    assert!(refused.contains(&line), "{refused}");
    assert_eq!(count(&s.path), json!(start + 7), "nothing was changed");
}

#[test]
fn provenance_and_undo_go_through_the_server_that_holds_the_space() {
    let s = space();
    let served = common::server::Served::start(&s.path, &[], &[]);
    // The offline model, through the server: `add 4` increments the Counter.
    ok(&s.path, &["chat", "-m", "@Counter add 4"]);
    // Sent through the server by this machine's command: written as `charm send`.
    ok(&s.path, &["charm", "send", "Notes", "add", r#"{"title": "milk"}"#]);
    let by_model = writer_of(&s.path, "Counter", "count");
    assert_eq!(by_model["by"]["kind"], "model", "{by_model}");
    let notes = writer_of(&s.path, "Notes", "notes[0]");
    assert_eq!(notes["by"]["name"], "charm send", "{notes}");

    let undone = json_of(&s.path, &["undo"]);
    assert_eq!(undone["changes"]["lines"][0], "Counter.count: 4 → 0", "{undone}");
    assert_eq!(count(&s.path), json!(0));
    drop(served);
}

#[test]
fn what_a_turn_did_outside_the_space_is_listed_as_not_undone() {
    let s = space();
    let start = count(&s.path).as_i64().expect("a count");
    let provider = Provider::start(vec![
        Reply::Calls(vec![
            ("Counter_increment".into(), json!({"amount": 2})),
            ("ev_toggle_simulated_logging".into(), json!({})),
        ]),
        Reply::Text("Done both.".into()),
    ]);
    let words = common::mcp_tools::everything();
    let config = s.path.with_file_name("mcp.json");
    let servers = json!({"mcpServers": {"ev": {"command": words[0], "args": words[1..], "trusted": true}}});
    std::fs::write(&config, servers.to_string()).expect("written");
    let out = provider
        .trellis(&s.path)
        .args(["chat", "--model", "openai:loopback", "--mcp-config", config.to_str().unwrap_or_default()])
        .args(["-m", "@Counter add two and toggle the logging"])
        .finish();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(count(&s.path), json!(start + 2));

    let undone = json_of(&s.path, &["undo"]);
    let outside = undone["not_undone"].as_array().cloned().unwrap_or_default();
    assert_eq!(outside.len(), 1, "{undone}");
    assert!(outside[0].as_str().is_some_and(|o| o.starts_with("ev.toggle-simulated-logging (call ")), "{undone}");
    assert_eq!(count(&s.path), json!(start), "what it did in the space is put back");
}
