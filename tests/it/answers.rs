//! Handlers that answer, through every path a sender takes: a model's tool call (the
//! conversation it reads next), `trellis charm send`, the HTTP API and `trellis tools`;
//! and a large charm's data kept out of each answer. (`Runtime::send` is tested in the
//! runner, an MCP host's `structuredContent` and `outputSchema` in `mcp`.)

use crate::common;
use crate::common::server::Served;

use common::Finish;
use serde_json::{json, Value};
use trellis::builtins::message::{Part, ToolOutput};
use trellis::builtins::scripted::Turn;
use trellis::patterns::{dice::dice, notes::notes, todo::todo};
use trellis::testing::TestSpace;

#[tokio::test]
async fn a_models_tool_call_reads_what_the_handler_returned() {
    let space = TestSpace::with_patterns([notes()]);
    let notes = space.charm("notes");
    let script = vec![Turn::tool_call("Notes.add", json!({"title": "milk"})), Turn::text("Added note 1.")];
    let conversation = space.run_dialog(&[&notes], script, "note milk").await;
    let answer = conversation
        .iter()
        .flat_map(|message| &message.content)
        .find_map(|part| match part {
            Part::ToolResult { output: ToolOutput::Json(answer), .. } => Some(answer.clone()),
            _ => None,
        })
        .expect("the tool's result is in the conversation the model reads next");
    assert_eq!(answer["returned"], json!({"id": 1, "title": "milk", "body": ""}));
    assert!(answer["summary"].as_str().unwrap().contains("count: 0 → 1"), "{answer}");
    assert_eq!(answer["result"]["count"], 1, "a small charm's data comes whole");
}

#[tokio::test]
async fn the_reference_charms_answer_and_declare_what() {
    let space = TestSpace::with_patterns([notes(), todo(), dice()]);
    let (notes, todo, dice) = (space.charm("notes"), space.charm("todo"), space.charm("dice"));
    for title in ["milk", "oat milk", "bread"] {
        space.call_tool(&[&notes], "Notes.add", json!({"title": title})).await;
    }
    let found = space.call_tool(&[&notes], "Notes.search", json!({"query": "MILK"})).await;
    let titles: Vec<&str> =
        found["returned"].as_array().unwrap().iter().map(|n| n["title"].as_str().unwrap()).collect();
    assert_eq!(titles, ["milk", "oat milk"]);

    space.call_tool(&[&todo], "Todo.add", json!({"title": "walk"})).await;
    let added = space.call_tool(&[&todo], "Todo.add", json!({"title": "read"})).await;
    assert_eq!(added["returned"], json!({"index": 1, "title": "read", "done": false}));

    let rolled = space.call_tool(&[&dice], "Dice.roll", json!({"count": 3, "sides": 6})).await;
    let rolls: u64 = rolled["returned"]["rolls"].as_array().unwrap().iter().map(|r| r.as_u64().unwrap()).sum();
    assert_eq!(rolled["returned"]["total"], rolls, "{rolled}");
    assert_eq!(rolled["result"]["last"], rolled["returned"], "what it returned is what it kept");

    let tools = space.tools_of(&[&notes, &todo]);
    let search = tools.get("Notes.search").output_schema.as_ref().expect("search answers");
    assert_eq!(search["type"], "array");
    assert_eq!(search["items"]["properties"]["id"]["type"], "integer", "references are inlined: {search}");
    assert!(tools.get("Todo.add").output_schema.is_some());
    assert!(tools.get("Todo.complete").output_schema.is_none(), "complete answers nothing");
}

#[tokio::test]
async fn a_large_charm_answers_with_the_fields_that_changed() {
    let space = TestSpace::with_patterns([notes()]);
    let notes = space.charm("notes");
    let body = "x".repeat(100);
    for n in 0..30 {
        space.call_tool(&[&notes], "Notes.add", json!({"title": format!("note {n}"), "body": body})).await;
    }
    let answer = space.call_tool(&[&notes], "Notes.edit", json!({"id": 3, "title": "third"})).await;
    assert!(answer.get("result").is_none(), "30 notes are more than the limit: {answer}");
    assert_eq!(answer["changed"]["notes"][2]["title"], "third", "{answer}");
    assert!(answer["changed"].get("count").is_none(), "only what changed");
    assert!(answer["note"].as_str().unwrap().contains("read tool"), "{answer}");
    assert!(answer.to_string().len() < 8_000, "the answer stays near the size of what changed");
}

#[test]
fn charm_send_prints_what_the_handler_returned() {
    let s = common::space();
    let sent: Value = serde_json::from_str(&common::ok(
        &s.path,
        &["--json", "charm", "send", "Notes", "add", r#"{"title": "milk"}"#],
    ))
    .unwrap();
    assert_eq!(sent["returned"], json!({"id": 1, "title": "milk", "body": ""}));
    assert_eq!(sent["result"]["count"], 1, "beside what it printed before");
    let text = common::ok(&s.path, &["charm", "send", "Todo", "add", r#"{"title": "walk"}"#]);
    assert!(text.contains("returned: {\"done\":false,\"index\":0,\"title\":\"walk\"}"), "{text}");
    let counted = common::ok(&s.path, &["--json", "charm", "send", "Counter", "increment", r#"{"amount": 1}"#]);
    assert!(serde_json::from_str::<Value>(&counted).unwrap().get("returned").is_none(), "increment answers nothing");

    let tools = common::ok(&s.path, &["tools", "Notes"]);
    assert!(tools.contains("returns (object) One note. Its `id` is stable"), "{tools}");
    assert!(tools.contains("deleted: body (string), id (integer), title (string)"), "{tools}");
    let listed: Value = serde_json::from_str(&common::ok(&s.path, &["--json", "tools", "Dice"])).unwrap();
    assert_eq!(listed[0]["output_schema"]["properties"]["total"]["type"], "integer", "{listed}");
}

#[test]
fn the_http_api_answers_with_what_the_handler_returned() {
    let s = common::space();
    let made = common::trellis(&s.path).args(["--json", "token", "new", "--name", "tests"]).finish();
    let token: Value = serde_json::from_slice(&made.stdout).unwrap();
    let auth = format!("Authorization: Bearer {}", token["token"].as_str().unwrap());
    let served = Served::start(&s.path, &[], &[]);
    let rolled = served.request("POST", "/api/charms/Dice/handlers/roll", &[&auth], Some(r#"{"sides": 20}"#));
    assert_eq!(rolled.status, 200, "{}", rolled.body);
    let total = rolled.json()["returned"]["total"].as_u64().unwrap();
    assert!((1..=20).contains(&total), "{}", rolled.body);
    let dice = served.request("GET", "/api/charms/Dice", &[&auth], None).json();
    assert_eq!(dice["returns"]["roll"]["properties"]["total"]["type"], "integer", "{dice}");
    // `charm get` through the server shows the same handlers as without it.
    let got = common::trellis(&s.path).args(["--json", "charm", "get", "Dice"]).finish();
    let got: Value = serde_json::from_slice(&got.stdout).unwrap();
    assert!(got["roll"]["$stream"]["result"].is_object(), "{got}");
}
