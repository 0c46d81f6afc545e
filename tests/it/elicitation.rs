//! An MCP server that asks the person something mid-call (elicitation), through the binary:
//! `trellis chat --mcp` keeps the call running, the question waits as an interaction
//! (`trellis pending`), and `trellis resolve` in a second process answers it (`--output`
//! checked against the form's schema, `--answer`, `--decline`, `--cancel`); the answer
//! goes back to the server and the call goes on. The servers are nobody's here: a Python
//! SDK server (`tests/mcp/elicit_server.py`, protocol 2026-07-28: the question comes as
//! an `input_required` round) and `server-everything` (the question as a request of the
//! server's own, also from inside a task, whose stages are shown as it runs).

use crate::common;
use crate::common::mcp_tools as tools;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::Finish;
use serde_json::{json, Value};

/// A `trellis chat` running in the background, with what it says on standard error;
/// killed if the test ends before it does.
struct Chat {
    child: common::Reaped,
    said: mpsc::Receiver<String>,
}

impl Chat {
    /// `trellis chat --model MODEL -m MESSAGE` with `mcp` (the arguments naming servers).
    fn start(space: &Path, model: &str, mcp: &[&str], message: &str) -> Chat {
        let mut child = common::trellis(space)
            .env("TRELLIS_MCP_CONFIG", "")
            .args(["chat", "--model", model])
            .args(mcp)
            .args(["-m", message])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (lines, said) = mpsc::channel();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || stderr.lines().map_while(Result::ok).for_each(|l| drop(lines.send(l))));
        Chat { child: common::Reaped::new(child), said }
    }

    /// Waits until the chat says a line containing `text`; everything it said until then.
    fn until(&self, text: &str) -> String {
        let mut all = String::new();
        loop {
            let line =
                self.said.recv_timeout(Duration::from_secs(60)).unwrap_or_else(|_| panic!("no `{text}` in: {all}"));
            all.push_str(&line);
            all.push('\n');
            if line.contains(text) {
                return all;
            }
        }
    }

    /// Its transcript, once it ended (successfully).
    fn finished(mut self) -> String {
        let out = self.child.take().wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{text}");
        text
    }
}

fn script(space: &Path, name: &str, turns: Value) -> String {
    let path = space.with_file_name(name);
    std::fs::write(&path, turns.to_string()).unwrap();
    format!("scripted:{}", path.display())
}

fn trellis(space: &Path, args: &[&str]) -> Output {
    common::trellis(space).env("TRELLIS_MCP_CONFIG", "").args(args).finish()
}

fn elicit_server() -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/elicit_server.py");
    tools::flag("py", &[tools::python().display().to_string(), script.display().to_string()])
}

/// An mcpServers file beside `space` trusting server-everything as `ev`; its path.
fn everything(space: &Path) -> String {
    let words = tools::everything();
    let config = space.with_file_name("mcp.json");
    let servers = json!({"mcpServers": {"ev": {"command": words[0], "args": words[1..], "trusted": true}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    config.display().to_string()
}

fn book(space: &Path) -> String {
    let turns =
        json!([{"tool_calls": [{"name": "py.book_table", "arguments": {"date": "Friday"}}]}, {"text": "Done."}]);
    script(space, "book.json", turns)
}

#[test]
fn a_servers_form_is_answered_from_a_second_process_checked_against_its_schema() {
    let s = common::space();
    let mcp = elicit_server();
    let chat = Chat::start(&s.path, &book(&s.path), &["--mcp", &mcp], "book a table on Friday");
    let said = chat.until("answer from another shell");
    assert!(said.contains("py.book_table asks you to fill in a form (call call_1): Who is the table on Friday for?"));
    assert!(said.contains("seats (integer, required): How many seats"), "{said}");

    // The question waits as an interaction of the call, which runs on meanwhile.
    let pending = trellis(&s.path, &["--json", "pending"]);
    let waiting: Value = serde_json::from_slice(&pending.stdout).unwrap();
    let question = &waiting["waiting"][0];
    assert_eq!(question["kind"], "elicitation", "{waiting}");
    assert_eq!(question["tool"], "py.book_table");
    assert_eq!(question["input"]["schema"]["properties"]["seats"]["type"], "integer", "{question}");

    // An answer that does not fit the form is refused, and the question waits on.
    let refused = trellis(&s.path, &["resolve", "call_1", "--output", r#"{"name": "Ada", "seats": "four"}"#]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(err.contains("does not fit the form") && err.contains("seats"), "{err}");
    let approval = trellis(&s.path, &["resolve", "call_1", "--approve"]);
    assert!(String::from_utf8_lossy(&approval.stderr).contains("asks you to fill in a form, not for an approval"));

    let answered = trellis(&s.path, &["resolve", "call_1", "--output", r#"{"name": "Ada", "seats": 4}"#]);
    let text = String::from_utf8_lossy(&answered.stdout);
    assert!(answered.status.success(), "{text}{}", String::from_utf8_lossy(&answered.stderr));
    assert!(text.contains("booked on Friday for Ada, 4 seats"), "the answering command follows the reply: {text}");
    let transcript = chat.finished();
    assert!(transcript.contains("← {\"result\":\"booked on Friday for Ada, 4 seats\"}"), "{transcript}");
    assert!(transcript.contains("assistant: Done."), "{transcript}");
    let after = trellis(&s.path, &["pending"]);
    assert!(String::from_utf8_lossy(&after.stdout).contains("nothing is waiting"), "the question went with its answer");
    let handoff = PathBuf::from(format!("{}.serve", s.path.display()));
    assert!(!handoff.exists(), "the hand-off file goes once nothing is asked");
}

#[test]
fn a_declined_or_cancelled_question_tells_the_server_so_and_the_call_goes_on() {
    for (flag, told) in [("--decline", "the person chose decline"), ("--cancel", "the person chose cancel")] {
        let s = common::space();
        let mcp = elicit_server();
        let chat = Chat::start(&s.path, &book(&s.path), &["--mcp", &mcp], "book a table on Friday");
        chat.until("answer from another shell");
        let out = trellis(&s.path, &["resolve", flag]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let transcript = chat.finished();
        assert!(transcript.contains(&format!("not booked: {told}")), "{flag}: {transcript}");
    }
}

#[test]
fn server_everythings_form_and_url_questions_are_answered_through_resolve() {
    let s = common::space();
    let config = everything(&s.path);

    let form =
        json!([{"tool_calls": [{"name": "ev.trigger-elicitation-request", "arguments": {}}]}, {"text": "Thanks."}]);
    let chat = Chat::start(&s.path, &script(&s.path, "form.json", form), &["--mcp-config", &config], "ask me");
    let said = chat.until("answer from another shell");
    assert!(said.contains("name (string, required)"), "{said}");
    assert!(said.contains("untitledSingleSelectEnum (string)") && said.contains("[Monica | Rachel"), "{said}");
    let out = trellis(&s.path, &["resolve", "--output", r#"{"name": "Ada", "check": true, "integer": 3}"#]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let transcript = chat.finished();
    assert!(transcript.contains("User provided the requested information") && transcript.contains("Name: Ada"));

    let url = json!([{"tool_calls": [{"name": "ev.trigger-url-elicitation",
                                      "arguments": {"url": "https://example.test/sign-in", "message": "Sign in"}}]},
                     {"text": "Signed in."}]);
    // A conversation of its own: the scripted model answers by the turns of its conversation.
    let s = common::space();
    let chat = Chat::start(&s.path, &script(&s.path, "url.json", url), &["--mcp-config", &config], "sign in");
    let said = chat.until("answer from another shell");
    assert!(said.contains("asks you to visit a URL") && said.contains("https://example.test/sign-in"), "{said}");
    let out = trellis(&s.path, &["resolve", "--answer", "done"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let transcript = chat.finished();
    assert!(transcript.contains("User completed the URL elicitation flow"), "{transcript}");
    assert!(transcript.contains("assistant: Signed in."), "{transcript}");
}

#[test]
fn a_task_of_server_everything_shows_its_stages_and_its_question_is_answered_from_a_second_process() {
    let s = common::space();
    let config = everything(&s.path);
    let research = json!([{"tool_calls": [{"name": "ev.simulate-research-query",
                                           "arguments": {"topic": "python", "ambiguous": true}}]},
                          {"text": "Here is the report."}]);
    let chat = Chat::start(&s.path, &script(&s.path, "research.json", research), &["--mcp-config", &config], "go");
    // It runs as a task: its stages are shown while it runs, then it asks which python.
    let said = chat.until("answer from another shell");
    assert!(said.contains("  ⋯ ev.simulate-research-query: ") && said.contains("..."), "{said}");
    assert!(said.contains("interpretation (string, required)") && said.contains("[programming | snake | comedy]"));
    // An answer that is not one of the options is refused; one of them goes on.
    let refused = trellis(&s.path, &["resolve", "--answer", "lizard"]);
    assert_eq!(refused.status.code(), Some(1), "{}", String::from_utf8_lossy(&refused.stderr));
    let out = trellis(&s.path, &["resolve", "--answer", "snake"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = chat.until("Generating report");
    assert!(said.contains("Continuing with interpretation: \"snake\""), "{said}");
    let transcript = chat.finished();
    assert!(transcript.contains("# Research Report: python (snake)"), "{transcript}");
    assert!(transcript.contains("assistant: Here is the report."), "{transcript}");
}
