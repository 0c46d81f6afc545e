//! A conversation survives `kill -9` in the middle of a request: `trellis chat` is killed
//! while the model streams, after a call arrived and before its handler ran, after a
//! handler's commit, in a second round, and during an MCP call; the next
//! `trellis chat --resume` goes on, and every handler's effect is in the space exactly once
//! with one result per call. The model is an OpenAI-compatible server on loopback that
//! lives across the processes and counts their requests.

use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common;
use crate::common::mcp_tools as tools;
use crate::common::provider::{Provider, Reply};
use common::Finish;

/// How long a request may take to reach the model server.
const ARRIVAL: Duration = Duration::from_secs(60);

/// `trellis ARGS` on `space`, its model at `provider`.
fn trellis(space: &Path, provider: &Provider, args: &[&str]) -> std::process::Command {
    let mut command = provider.trellis(space);
    command.args(args);
    command
}

/// Starts `trellis chat` and kills it (SIGKILL) once the model server has `requests`
/// requests and `then` has passed.
fn kill_at(space: &Path, provider: &Provider, args: &[&str], requests: usize, then: Duration) {
    let mut child: Child = trellis(space, provider, args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run trellis chat");
    let started = Instant::now();
    while provider.received().len() < requests {
        assert!(started.elapsed() < ARRIVAL, "request {requests} never reached the model");
        assert!(child.try_wait().expect("the chat's state").is_none(), "the chat ended before it was killed");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(then);
    child.kill().expect("kill -9");
    child.wait().expect("reap the chat");
}

fn said(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The parts of the conversation `--json` printed, of type `kind`.
fn parts(space: &Path, kind: &str) -> Vec<Value> {
    let chat = common::json_of(space, &["charm", "get", "Chat"]);
    let messages = chat["messages"].as_array().cloned().unwrap_or_default();
    let all = messages.iter().flat_map(|m| m["content"].as_array().cloned().unwrap_or_default());
    all.filter(|p| p["type"] == kind).collect()
}

#[test]
fn a_reply_cut_off_while_it_streams_is_kept_and_the_model_asked_again() {
    let s = common::space();
    let provider = Provider::start(vec![Reply::Slow, Reply::Text("Back again.".into())]);
    kill_at(&s.path, &provider, &["chat", "--model", "openai:loopback", "-m", "hello"], 1, Duration::from_millis(800));

    let pending = common::ok(&s.path, &["pending"]);
    assert!(pending.contains("interrupted: a reply was cut off") && pending.contains("chat --resume"), "{pending}");
    let listed: serde_json::Value = serde_json::from_str(&common::ok(&s.path, &["--json", "pending"])).expect("JSON");
    assert_eq!((&listed["interrupted"], &listed["waiting"]), (&serde_json::json!(true), &serde_json::json!([])));
    let out = trellis(&s.path, &provider, &["chat", "--model", "openai:loopback", "--resume"]).finish();
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("going on with the reply the stopped process left"), "{text}");
    assert!(text.contains("assistant: Back again."), "{text}");
    let received = provider.received();
    assert_eq!(received.len(), 2, "asked once more");
    let cut = received[1]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "assistant").cloned();
    let cut = cut.expect("the cut reply is in the next request");
    let cut = cut["content"].as_str().unwrap();
    assert!(cut.starts_with("word0 ") && cut.ends_with("[cut off: the process stopped here]"), "{cut}");
    let after = common::ok(&s.path, &["pending"]);
    assert!(after.contains("nothing is waiting"), "{after}");
}

#[test]
fn a_handler_that_ran_before_the_kill_is_applied_once() {
    let s = common::space();
    let provider = Provider::start(vec![
        Reply::Call("Counter_increment".into(), json!({"amount": 2})),
        Reply::Slow,
        Reply::Text("Added two.".into()),
    ]);
    let args = ["chat", "--model", "openai:loopback", "-m", "@Counter add 2"];
    kill_at(&s.path, &provider, &args, 2, Duration::from_millis(300));
    assert_eq!(common::json_of(&s.path, &["charm", "get", "Counter"])["count"], 2, "the handler committed");

    let out = trellis(&s.path, &provider, &["chat", "--model", "openai:loopback", "--resume"]).finish();
    let text = said(&out);
    assert!(out.status.success() && text.contains("assistant: Added two."), "{text}");
    assert_eq!(common::json_of(&s.path, &["charm", "get", "Counter"])["count"], 2, "applied once");
    assert_eq!(parts(&s.path, "tool-call").len(), 1);
    assert_eq!(parts(&s.path, "tool-result").len(), 1, "one result per call");
}

/// Killed after the model's answer brought a call and before its handler ran (the answer
/// had not ended): the call is asked for again and runs once.
#[test]
fn a_call_the_kill_came_before_runs_once_after_the_resume() {
    let s = common::space();
    let provider = Provider::start(vec![
        Reply::Stalled("Counter_increment".into(), json!({"amount": 2})),
        Reply::Call("Counter_increment".into(), json!({"amount": 2})),
        Reply::Text("Added two.".into()),
    ]);
    let args = ["chat", "--model", "openai:loopback", "-m", "@Counter add 2"];
    kill_at(&s.path, &provider, &args, 1, Duration::from_millis(800));
    assert_eq!(common::json_of(&s.path, &["charm", "get", "Counter"])["count"], 0, "nothing ran");

    let out = trellis(&s.path, &provider, &["chat", "--model", "openai:loopback", "--resume"]).finish();
    let text = said(&out);
    assert!(out.status.success() && text.contains("assistant: Added two."), "{text}");
    assert_eq!(common::json_of(&s.path, &["charm", "get", "Counter"])["count"], 2, "applied once");
    assert_eq!((parts(&s.path, "tool-call").len(), parts(&s.path, "tool-result").len()), (1, 1));
}

/// Killed during the model's third request, after two rounds of handler calls: both
/// effects stay, once each, and the reply goes on.
#[test]
fn a_second_round_cut_off_keeps_both_rounds_effects_once() {
    let s = common::space();
    let provider = Provider::start(vec![
        Reply::Call("Counter_increment".into(), json!({"amount": 2})),
        Reply::Call("Counter_increment".into(), json!({"amount": 3})),
        Reply::Slow,
        Reply::Text("Added five.".into()),
    ]);
    let args = ["chat", "--model", "openai:loopback", "-m", "@Counter add 2 then 3"];
    kill_at(&s.path, &provider, &args, 3, Duration::from_millis(300));
    assert_eq!(common::json_of(&s.path, &["charm", "get", "Counter"])["count"], 5, "both rounds committed");

    let out = trellis(&s.path, &provider, &["chat", "--model", "openai:loopback", "--resume"]).finish();
    let text = said(&out);
    assert!(out.status.success() && text.contains("assistant: Added five."), "{text}");
    assert_eq!(common::json_of(&s.path, &["charm", "get", "Counter"])["count"], 5, "each applied once");
    assert_eq!((parts(&s.path, "tool-call").len(), parts(&s.path, "tool-result").len()), (2, 2));
    let last = provider.received().pop().expect("the resumed request");
    let results = last["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "tool").count();
    assert_eq!(results, 2, "the model reads both results once: {last}");
}

#[test]
fn an_mcp_call_cut_off_by_the_kill_runs_again_when_its_tool_may_repeat() {
    let s = common::space();
    let provider = Provider::start(vec![
        Reply::Call("ev_trigger_long_running_operation".into(), json!({"duration": 3, "steps": 3})),
        Reply::Text("Finished.".into()),
    ]);
    let words = tools::everything();
    let config = s.path.with_file_name("mcp.json");
    let servers = json!({"mcpServers": {"ev": {"command": words[0], "args": words[1..], "trusted": true}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    let config = config.display().to_string();
    let args = ["chat", "--model", "openai:loopback", "--mcp-config", &config, "-m", "run it"];
    kill_at(&s.path, &provider, &args, 1, Duration::from_millis(1500));

    let out = trellis(&s.path, &provider, &["chat", "--model", "openai:loopback", "--mcp-config", &config, "--resume"])
        .finish();
    let text = said(&out);
    assert!(out.status.success() && text.contains("assistant: Finished."), "{text}");
    let results = parts(&s.path, "tool-result");
    assert_eq!(results.len(), 1, "{results:?}");
    let result = results[0]["output"].to_string();
    assert!(
        result.contains("Long running operation completed"),
        "marked read-only and idempotent: ran again: {result}"
    );
}

/// `trellis serve` killed while the model streams: the next `trellis serve` on the space
/// goes on with the reply as it starts, and the page's state shows the cut reply and the
/// answer after it.
#[test]
fn a_server_goes_on_with_the_reply_its_killed_predecessor_left() {
    let s = common::space();
    let provider = Provider::start(vec![Reply::Slow, Reply::Text("Served again.".into())]);
    let env =
        [("OPENAI_API_KEY", "not-checked"), ("OPENAI_BASE_URL", provider.url.as_str()), ("NO_PROXY", "127.0.0.1")];
    {
        let c = crate::serve::client_with(&s.path, &[], &env);
        c.ok("PUT", "/api/chat/model", Some(json!({"model": "openai:loopback"})), 204);
        c.ok("POST", "/api/chat/messages", Some(json!({"text": "hello"})), 202);
        let started = Instant::now();
        while provider.received().is_empty() {
            assert!(started.elapsed() < ARRIVAL, "the request never reached the model");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(800));
    } // dropped: killed (SIGKILL)
    let c = crate::serve::client_with(&s.path, &[], &env);
    let started = Instant::now();
    let chat = loop {
        let chat = c.ok("GET", "/api/chat", None, 200);
        if chat["pending"] == false && chat["messages"].as_array().is_some_and(|m| m.len() >= 3) {
            break chat;
        }
        assert!(started.elapsed() < ARRIVAL, "the reply did not go on: {chat}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_resumed(&chat, "Served again.");
    assert_eq!(provider.received().len(), 2);
}

/// That the page's state `chat` holds `hello`, the reply a stop cut off (marked), and
/// `answer`, the model's answer once the request went on.
pub(crate) fn assert_resumed(chat: &Value, answer: &str) {
    let texts: Vec<String> = chat["messages"]
        .as_array()
        .expect("the conversation")
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["text"].as_str().map(str::to_string))
        .collect();
    assert_eq!(texts[0], "hello");
    assert!(texts[1].ends_with("[cut off: the process stopped here]"), "{texts:?}");
    assert_eq!(texts[2], answer);
}
