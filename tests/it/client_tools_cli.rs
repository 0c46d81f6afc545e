//! The tool protocol through the `trellis` binary: a call waiting for the client is left
//! by one process and resolved with `--output` by another.

use crate::common;

use common::Finish;
use std::path::Path;
use std::process::Output;

use serde_json::{json, Value};

fn trellis(space: &Path, args: &[&str]) -> Output {
    common::trellis(space).args(args).finish()
}

fn text(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).to_string())
}

/// A chatbot whose static tools hold a client tool: the server never runs it.
fn chatbot_with_a_client_tool(space: &Path) {
    let tools = json!({"tools": {"lookup": {"client": {
        "description": "Looks a word up in the user's dictionary",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}
    }}}});
    let out = trellis(space, &["charm", "new", "chatbot", "--arg", &tools.to_string()]);
    assert!(out.status.success(), "{:?}", text(&out));
}

#[test]
fn a_client_call_left_waiting_is_resolved_with_output_by_a_second_process() {
    let s = common::space();
    chatbot_with_a_client_tool(&s.path);
    let model = common::script(
        &s.path,
        json!([
            {"tool_calls": [{"name": "lookup", "arguments": {"word": "trellis"}}]},
            {"text": "It is a frame for climbing plants."}
        ]),
    );
    let out = trellis(&s.path, &["chat", "--model", &model, "-m", "what is a trellis?"]);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(3), "waits for the client: {stdout}\n{stderr}");
    assert!(stderr.contains("waiting for the client to run lookup") && stderr.contains("--output JSON"), "{stderr}");

    let pending = trellis(&s.path, &["--json", "pending"]);
    let pending: Value = serde_json::from_slice(&pending.stdout).unwrap();
    assert_eq!((&pending["interrupted"], &pending["allowed"]), (&json!(false), &json!([])));
    let pending = &pending["waiting"];
    assert_eq!(pending[0]["kind"], "client_execution");
    assert_eq!(pending[0]["phase"], "client");
    assert_eq!(pending[0]["input"], json!({"word": "trellis"}));
    let call = pending[0]["call_id"].as_str().unwrap().to_string();

    let bad = trellis(&s.path, &["resolve", &call, "--output", "{not json"]);
    assert!(!bad.status.success() && text(&bad).1.contains("--output takes the client's output as JSON"));
    let done = trellis(&s.path, &["resolve", &call, "--output", r#"{"definition": "a frame for plants"}"#]);
    let (stdout, stderr) = text(&done);
    assert!(done.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("a frame for plants") && stdout.contains("It is a frame for climbing plants."), "{stdout}");
    let after = trellis(&s.path, &["pending"]);
    assert!(text(&after).0.contains("nothing is waiting"));
}

#[test]
fn a_question_of_request_human_input_takes_its_answer_as_output_too() {
    let s = common::space();
    let out = trellis(&s.path, &["chat", "-m", "ask me which colour I like"]);
    assert_eq!(out.status.code(), Some(3), "{:?}", text(&out));
    let done = trellis(&s.path, &["resolve", "--output", r#""green""#]);
    let (stdout, stderr) = text(&done);
    assert!(done.status.success() && stdout.contains(r#"{"answer":"green"}"#), "{stdout}\n{stderr}");
}
