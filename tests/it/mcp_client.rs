//! `trellis chat --mcp`, `--mcp-config` and `trellis mcp list` through the binary, with
//! MCP servers nobody here wrote (`mcp-server-time` from PyPI, `server-everything` from
//! npm; installed as `tests/mcp/tools.rs` says).

use crate::common;
use crate::common::mcp_tools as tools;

use common::Finish;
use std::path::Path;
use std::process::Output;

use serde_json::{json, Value};

/// `trellis` on `space`, ignoring any MCP configuration of the person running the tests.
fn trellis(space: &Path, args: &[&str]) -> Output {
    common::trellis(space).env("TRELLIS_MCP_CONFIG", "").args(args).finish()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn script(space: &Path, turns: Value) -> String {
    let path = space.with_file_name("script.json");
    std::fs::write(&path, turns.to_string()).unwrap();
    format!("scripted:{}", path.display())
}

#[test]
fn chat_calls_a_tool_of_an_mcp_server_given_with_mcp() {
    let s = common::space();
    let model = script(
        &s.path,
        json!([{"tool_calls": [{"name": "time.get_current_time", "arguments": {"timezone": "Europe/Paris"}}]},
               {"text": "It is late in Paris."}]),
    );
    let time = tools::flag("time", &tools::time_server());
    let out = trellis(&s.path, &["chat", "--model", &model, "--mcp", &time, "-m", "what time is it in Paris?"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("→ time.get_current_time {\"timezone\":\"Europe/Paris\"}"), "{text}");
    assert!(text.contains("\"timezone\":\"Europe/Paris\"") && text.contains("datetime"), "the server's answer: {text}");
    assert!(text.contains("assistant: It is late in Paris."), "{text}");
}

#[test]
fn an_untrusted_servers_tool_waits_for_approval_and_a_trusted_ones_runs() {
    let s = common::space();
    let toggle = json!([{"tool_calls": [{"name": "ev.toggle-simulated-logging"}]}, {"text": "Toggled."}]);
    let model = script(&s.path, toggle.clone());
    let everything = tools::flag("ev", &tools::everything());
    let out = trellis(&s.path, &["chat", "--model", &model, "--mcp", &everything, "-m", "toggle logging"]);
    assert_eq!(out.status.code(), Some(3), "not marked read-only: it waits: {}", stdout(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ev.toggle-simulated-logging") && err.contains("does not mark"), "{err}");
    // Approved without the server, the call could only fail: it is refused, and waits on.
    let out = trellis(&s.path, &["resolve", "--approve"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("is not among this chat's tools here") && err.contains("still waiting"), "{err}");
    assert!(stdout(&trellis(&s.path, &["pending"])).contains("ev.toggle-simulated-logging"));
    // The person approves; the server (given again) runs the call.
    let out = trellis(&s.path, &["resolve", "--approve", "--mcp", &everything]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("← ") && text.to_lowercase().contains("logging"), "{text}");

    // The same server trusted in an mcpServers file: no question.
    let s = common::space();
    let model = script(&s.path, toggle);
    let words = tools::everything();
    let config = s.path.with_file_name("mcp.json");
    let servers = json!({"mcpServers": {"ev": {"command": words[0], "args": words[1..], "trusted": true}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    let config = config.display().to_string();
    let out = trellis(&s.path, &["chat", "--model", &model, "--mcp-config", &config, "-m", "toggle logging"]);
    assert!(out.status.success(), "{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    assert!(stdout(&out).contains("assistant: Toggled."));
}

#[test]
fn a_stdio_server_gets_its_configured_environment_and_not_trelliss_secrets() {
    let s = common::space();
    let model = script(&s.path, json!([{"tool_calls": [{"name": "ev.get-env"}]}, {"text": "Done."}]));
    let words = tools::everything();
    let config = s.path.with_file_name("mcp.json");
    let servers = json!({"mcpServers": {"ev": {"command": words[0], "args": words[1..], "env": {"GREETING": "${TRELLIS_TEST_GREETING}"}}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    let out = common::trellis(&s.path)
        .env("TRELLIS_TEST_GREETING", "hello-from-the-config")
        .env("TRELLIS_TEST_SECRET", "do-not-leak")
        .args(["chat", "--model", &model, "--mcp-config", config.to_str().unwrap(), "-m", "env?"])
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("hello-from-the-config"), "the configured variable is there: {text}");
    assert!(text.contains("PATH"), "and what a program needs: {text}");
    assert!(!text.contains("do-not-leak"), "Trellis's other variables are not: {text}");
}

#[test]
fn chat_warns_of_the_tools_a_server_listed_that_were_left_out() {
    let s = common::space();
    let model = script(&s.path, json!([{"text": "Hello."}]));
    let script_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/long_name_server.py");
    let server = vec![tools::python().display().to_string(), script_path.display().to_string()];
    let out = trellis(&s.path, &["chat", "--model", &model, "--mcp", &tools::flag("py", &server), "-m", "hi"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}{err}", stdout(&out));
    assert!(err.contains("warning: the MCP server `py`: a tool named `nnnn") && err.contains("was left out"), "{err}");
}

#[test]
fn a_malformed_answer_fails_its_call_at_once_a_malformed_request_is_refused_and_the_server_goes_on() {
    let s = common::space();
    let calls = json!([{"name": "bad.broken"}, {"name": "bad.asks"}, {"name": "bad.deep"}, {"name": "bad.long"}, {"name": "bad.junk"}, {"name": "bad.fine"}]);
    let model = script(&s.path, json!([{"tool_calls": calls}, {"text": "Done."}]));
    let script_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/malformed_answer_server.py");
    let server = vec![tools::python().display().to_string(), script_path.display().to_string()];
    let out = trellis(&s.path, &["chat", "--model", &model, "--mcp", &tools::flag("bad", &server), "-m", "go"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    // Not "did not answer within 30s": the call's own answer, read for what it is.
    assert!(
        text.contains("← error: `bad.broken` failed: the server's answer is not a JSON-RPC response (its `error`: invalid type: string \"broken\""),
        "{text}"
    );
    // Too deep to read, or too long to keep: still an answer to its call, at once.
    assert!(text.contains("← error: `bad.deep` failed: the server's answer cannot be read (recursion limit"), "{text}");
    assert!(text.contains("← error: `bad.long` failed: the server's answer is longer than 16 MiB"), "{text}");
    assert!(text.contains("← after the junk"), "{text}");
    // 100,000 junk lines: a few warnings, not one a line.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warned = stderr.lines().filter(|line| line.contains("a line that is not JSON")).count();
    assert!((1..=10).contains(&warned), "{warned} warnings of junk lines");
    assert!(text.contains("← fine"), "the session outlives the bad answer: {text}");
    assert!(text.contains("← the client said -32600"), "a malformed request is answered as invalid: {text}");
    assert!(text.contains("assistant: Done."), "{text}");
}

#[test]
fn a_call_whose_server_exits_keeps_its_display_name_in_the_transcript() {
    let s = common::space();
    let model = script(&s.path, json!([{"tool_calls": [{"name": "bad.exits"}]}, {"text": "Gone."}]));
    let script_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/malformed_answer_server.py");
    let server = vec![tools::python().display().to_string(), script_path.display().to_string()];
    let out = trellis(&s.path, &["chat", "--model", &model, "--mcp", &tools::flag("bad", &server), "-m", "go"]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    // Printed once the turn is over, when the server and its tools are gone.
    assert!(text.contains("  → bad.exits {}"), "as the model saw it, not its wire name: {text}");
    assert!(text.contains("the MCP server `bad` is gone"), "{text}");
}

#[test]
fn mcp_list_shows_each_servers_state_and_tools() {
    let s = common::space();
    let time = tools::flag("time", &tools::time_server());
    let args = ["--json", "mcp", "list", "--mcp", &time, "--mcp", "gone=/no/such/server --stdio"];
    let out = trellis(&s.path, &args);
    // The list is printed, and the server that failed fails the command.
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("1 of 2 MCP servers could not be reached"), "{err}");
    let servers: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(servers[0]["name"], "time");
    assert_eq!(servers[0]["state"], "ready");
    assert!(servers[0]["server"].as_str().unwrap().contains("time"), "{servers}");
    let tool = &servers[0]["tools"][0];
    assert_eq!(tool["display"], "time.get_current_time");
    assert_eq!((&tool["read_only"], &tool["needs_approval"]), (&json!(true), &json!(false)), "{tool}");
    assert_eq!(servers[1]["name"], "gone");
    let state = servers[1]["state"].as_str().unwrap();
    assert!(state.starts_with("failed") && state.contains("/no/such/server"), "{state}");

    let out = trellis(&s.path, &["mcp", "list", "--mcp", &time]);
    let text = stdout(&out);
    assert!(text.starts_with("time  (ready)") && text.contains("    time.convert_time"), "{text}");
    let none = stdout(&trellis(&s.path, &["mcp", "list"]));
    assert!(none.contains("--mcp 'name=command args'"), "{none}");

    // A file's `tools` globs keep only the tools they name.
    let words = tools::everything();
    let config = s.path.with_file_name("mcp.json");
    let servers = json!({"mcpServers": {"ev": {"command": words[0], "args": words[1..], "tools": ["get-s*", "echo"]}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    let out = trellis(&s.path, &["--json", "mcp", "list", "--mcp-config", config.to_str().unwrap()]);
    let servers: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> =
        servers[0]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["echo", "get-structured-content", "get-sum"]);
}

#[test]
fn a_malformed_mcp_flag_or_file_is_refused_with_the_form_to_use() {
    let s = common::space();
    let out = trellis(&s.path, &["mcp", "list", "--mcp", "no-equals-sign"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--mcp 'name=command args'"));
    let config = s.path.with_file_name("bad.json");
    std::fs::write(&config, r#"{"mcpServers": {"x": {"url": "http://127.0.0.1:1/mcp", "command": "y"}}}"#).unwrap();
    let out = trellis(&s.path, &["chat", "--mcp-config", config.to_str().unwrap(), "-m", "hi"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.json") && err.contains("both `command` and `url`"), "{err}");

    // A file that $TRELLIS_MCP_CONFIG names must exist; the reason is given once.
    let missing = s.path.with_file_name("missing-mcp.json");
    let out = common::trellis(&s.path).env("TRELLIS_MCP_CONFIG", &missing).args(["mcp", "list"]).finish();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("$TRELLIS_MCP_CONFIG names") && err.contains("missing-mcp.json"), "{err}");
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

/// Four calls of a one-second tool in one answer run side by side: the model hears back in
/// well under the four seconds they would take one after another, with the results in the
/// order of the calls.
#[test]
fn an_answers_calls_to_an_mcp_server_run_side_by_side_with_results_in_call_order() {
    use crate::common::provider::{Provider, Reply};
    let s = common::space();
    let call = |steps: u64| ("ev_trigger_long_running_operation".to_string(), json!({"duration": 1, "steps": steps}));
    let provider = Provider::start(vec![Reply::Calls((1..=4).map(call).collect()), Reply::Text("All four.".into())]);
    let everything = tools::flag("ev", &tools::everything());
    let out = provider
        .trellis(&s.path)
        .args(["--json", "chat", "--model", "openai:loopback", "--mcp", &everything, "-m", "run four"])
        .finish();
    assert!(out.status.success(), "{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    let arrivals = provider.arrivals();
    let waited = arrivals[1] - arrivals[0];
    assert!(waited < std::time::Duration::from_millis(3000), "the four calls took {waited:?}: one after another?");
    let messages: Vec<Value> = serde_json::from_str(&stdout(&out)).unwrap();
    let results: Vec<String> = messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|p| p["type"] == "tool-result")
        .map(|p| p["output"].to_string())
        .collect();
    assert_eq!(results.len(), 4, "{results:?}");
    for (n, result) in results.iter().enumerate() {
        assert!(result.contains(&format!("Steps: {}", n + 1)), "result {n} is its call's: {results:?}");
    }
}
