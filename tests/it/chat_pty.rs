//! `trellis chat` in a real pseudo-terminal, typed at the way a person types: Tab
//! completes an `@` mention, the tool call and its result show up inline, `/tools`
//! lists the tools, Ctrl-C cancels a streaming reply, Ctrl-D leaves with status 0.
//!
//! The screen is matched after stripping ANSI escapes (the line editor redraws the line
//! with cursor movements), with generous timeouts for a loaded machine.
#![cfg(unix)]

use crate::common;
use crate::common::provider::{Provider, Reply};
use crate::common::slow_model;

use common::Finish;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::wait::WaitStatus;
use rexpect::session::{spawn_command, PtySession};
use serde_json::json;

/// How long any one expected text may take to show up.
const TIMEOUT: Duration = Duration::from_secs(60);

fn trellis(space: &Path) -> Command {
    let mut command = common::trellis(space);
    command.env("TERM", "xterm").env_remove("TRELLIS_SPACE");
    // The fake model server is local: keep any proxy out of the way.
    for var in ["http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"] {
        command.env_remove(var);
    }
    command.env("NO_PROXY", "127.0.0.1,localhost");
    command
}

/// The chat running in a pseudo-terminal, and everything it has written.
struct Terminal {
    session: PtySession,
    bytes: Vec<u8>,
    /// How much of the (stripped) screen text earlier expectations consumed.
    consumed: usize,
}

impl Terminal {
    fn chat(space: &Path, args: &[&str], env: &[(&str, &str)]) -> Terminal {
        let mut command = trellis(space);
        command.arg("chat").args(args);
        for (k, v) in env {
            command.env(k, v);
        }
        let session = spawn_command(command, Some(TIMEOUT.as_millis() as u64)).unwrap();
        Terminal { session, bytes: Vec::new(), consumed: 0 }
    }

    /// Moves what the program wrote so far into `bytes`.
    fn pump(&mut self) {
        // The reader hands out each byte as a char (U+0000..U+00FF); put the bytes back
        // together so that UTF-8 text (→, ←) survives.
        while let Some(c) = self.session.try_read() {
            match u8::try_from(u32::from(c)) {
                Ok(b) => self.bytes.push(b),
                Err(_) => self.bytes.extend_from_slice(c.to_string().as_bytes()),
            }
        }
    }

    /// The screen's text so far, without escape sequences.
    fn text(&self) -> String {
        strip_ansi(&String::from_utf8_lossy(&self.bytes))
    }

    /// Waits until `needle` appears after what earlier expectations matched.
    fn expect(&mut self, needle: &str) {
        let start = Instant::now();
        loop {
            self.pump();
            let text = self.text();
            if let Some(at) = text.get(self.consumed..).and_then(|rest| rest.find(needle)) {
                self.consumed += at + needle.len();
                return;
            }
            if start.elapsed() > TIMEOUT {
                panic!(
                    "`{needle}` did not show up within {TIMEOUT:?}; the screen after the last match:\n{}",
                    &text[self.consumed.min(text.len())..]
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn send(&mut self, keys: &str) {
        self.session.send(keys).unwrap();
        self.session.flush().unwrap();
    }

    /// Waits for the process to end and returns its exit code.
    fn exit_code(mut self) -> i32 {
        let start = Instant::now();
        loop {
            self.pump();
            match self.session.process().status() {
                Some(WaitStatus::Exited(_, code)) => return code,
                Some(WaitStatus::StillAlive) | None => {}
                Some(other) => panic!("trellis chat ended with {other:?}; screen:\n{}", self.text()),
            }
            if start.elapsed() > TIMEOUT {
                panic!("trellis chat did not exit within {TIMEOUT:?}; screen:\n{}", self.text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Drops CSI (`ESC [ … final`), OSC (`ESC ] … BEL|ESC \`) and two-byte escapes.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('[') => {
                for c in chars.by_ref() {
                    if ('\u{40}'..='\u{7e}').contains(&c) {
                        break;
                    }
                }
            }
            Some(']') => {
                while let Some(c) = chars.next() {
                    if c == '\u{7}' || (c == '\u{1b}' && chars.next_if_eq(&'\\').is_some()) {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn count(space: &Path) -> i64 {
    let out = trellis(space).args(["--json", "charm", "get", "Counter"]).finish();
    assert!(out.status.success(), "charm get failed: {}", String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    json["count"].as_i64().unwrap()
}

#[test]
fn tab_completes_a_mention_and_the_tool_call_shows_inline() {
    let s = common::space();
    let mut t = Terminal::chat(&s.path, &[], &[]);
    t.expect("/help");
    t.expect("> ");
    t.send("@Cou");
    t.expect("@Cou");
    t.send("\t");
    t.expect("@Counter");
    t.send(" add 5\r");
    t.expect("[@Counter]");
    t.expect("Counter.increment");
    t.expect("count: 0 → 5");
    t.expect("Done:");
    t.expect("> ");

    t.send("/tools\r");
    t.expect("Counter.increment  (wire name Counter_increment)");
    t.expect("> ");
    t.send("/usage\r");
    t.expect("no answer reported token usage");
    t.expect("> ");

    // Errors are shown and the chat goes on.
    t.send("@Nope hi\r");
    t.expect("unknown charm @Nope");
    t.expect("> ");
    t.send("/model bogus\r");
    t.expect("unknown model `bogus`");
    t.expect("> ");

    t.send("\u{4}"); // Ctrl-D
    assert_eq!(t.exit_code(), 0);
    assert_eq!(count(&s.path), 5);
}

#[test]
fn calls_waiting_for_the_user_are_asked_about_at_the_prompt() {
    let s = common::space();
    let mut t = Terminal::chat(&s.path, &[], &[]);
    t.expect("> ");
    // An approval, answered at its own prompt.
    t.send("@Notes delete note 1\r");
    t.expect("waiting for your approval: Notes.delete");
    t.expect("approve Notes.delete? [y/N, a = always in this chat, or why not] ");
    t.send("not that one\r");
    t.expect("the user denied this call: not that one");
    t.expect("> ");
    // The model's question: request_human_input's client phase runs at this terminal and
    // asks; an empty answer is refused by its server phase and asked again.
    t.send("ask me what my favourite colour is\r");
    t.expect("the model asks (call ");
    t.expect("request_human_input asks: ");
    t.send("\r");
    t.expect("the answer to a question is some text");
    t.expect("request_human_input asks: ");
    t.send("blue\r");
    t.expect(r#"{"answer":"blue"}"#);
    t.expect("> ");
    // Ctrl-C at the question leaves the call waiting for a command.
    t.send("@Notes delete note 1\r");
    t.expect("approve Notes.delete? [y/N, a = always in this chat, or why not] ");
    t.send("\u{3}");
    t.expect("(left waiting");
    t.expect("> ");
    t.send("/deny keep it\r");
    t.expect("the user denied this call: keep it");
    t.expect("> ");
    // `a` allows the tool always: its next call runs without a question, until /disallow.
    t.send("@Notes delete note 1\r");
    t.expect("approve Notes.delete? [y/N, a = always in this chat, or why not] ");
    t.send("a\r");
    t.expect("> ");
    let before = t.consumed;
    t.send("@Notes delete note 2\r");
    t.expect("← ");
    t.expect("> ");
    assert!(!t.text()[before..t.consumed].contains("approve Notes.delete?"), "it asked: {}", t.text());
    t.send("/disallow Notes.delete\r");
    t.expect("(Notes.delete asks for approval again)");
    t.send("@Notes delete note 3\r");
    t.expect("approve Notes.delete? [y/N, a = always in this chat, or why not] ");
    t.send("\r");
    t.expect("> ");
    t.send("\u{4}"); // Ctrl-D
    assert_eq!(t.exit_code(), 0);
}

/// A client tool (a definition only) has no client phase here: the terminal asks for its
/// output as JSON, refuses what is not JSON, and the conversation goes on with it.
#[test]
fn a_client_tool_asks_for_its_output_at_the_prompt() {
    let s = common::space();
    let tools = serde_json::json!({"tools": {"lookup": {"client": {
        "description": "Looks a word up",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}
    }}}});
    let created = trellis(&s.path).args(["charm", "new", "chatbot", "--arg", &tools.to_string()]).finish();
    assert!(created.status.success());
    let script = s.path.with_file_name("script.json");
    let turns = serde_json::json!([
        {"tool_calls": [{"name": "lookup", "arguments": {"word": "trellis"}}]},
        {"text": "So it is a frame."}
    ]);
    std::fs::write(&script, turns.to_string()).unwrap();
    let model = format!("scripted:{}", script.display());
    let mut t = Terminal::chat(&s.path, &["--model", &model], &[]);
    t.expect("> ");
    t.send("what is a trellis?\r");
    t.expect("waiting for the client to run lookup");
    t.expect("output of lookup (JSON): ");
    t.send("a frame\r");
    t.expect("that is not JSON");
    t.send("{\"definition\": \"a frame\"}\r");
    t.expect("So it is a frame.");
    t.expect("> ");
    t.send("\u{4}"); // Ctrl-D
    assert_eq!(t.exit_code(), 0);
}

#[test]
fn ctrl_c_twice_at_an_empty_prompt_leaves() {
    let s = common::space();
    let mut t = Terminal::chat(&s.path, &[], &[]);
    t.expect("> ");
    t.send("some text");
    t.expect("some text");
    t.send("\u{3}"); // clears the line, does not count
    t.send("\u{3}");
    t.expect("Ctrl-C again");
    // Between lines the terminal is in cooked mode; the prompt shows once the editor
    // reads keys again.
    t.expect("> ");
    t.send("\u{3}");
    assert_eq!(t.exit_code(), 0);
}

#[test]
fn ctrl_c_cancels_a_streaming_reply_and_the_chat_goes_on() {
    let s = common::space();
    let url = slow_model::server();
    let mut t = Terminal::chat(&s.path, &["--model", "ollama:slow"], &[("OLLAMA_BASE_URL", &url)]);
    t.expect("> ");
    t.send("tell me a long story\r");
    t.expect("assistant: word0 word1 word2");
    t.send("\u{3}"); // the terminal is in cooked mode now: this is SIGINT
    t.expect("(cancelled)");
    t.expect("> ");
    assert!(!t.text().contains("WARN"), "a cancel is no failure to log: {}", t.text());
    t.send("/help\r");
    t.expect("/tools");
    t.expect("> ");
    t.send("\u{4}");
    assert_eq!(t.exit_code(), 0);
}

#[test]
fn a_line_typed_while_a_reply_streams_is_queued_and_sent_when_it_ends() {
    let s = common::space();
    let provider = Provider::start(vec![Reply::Words(40), Reply::Text("Heard the second one.".into())]);
    let env = [("OPENAI_API_KEY", "not-checked"), ("OPENAI_BASE_URL", provider.url.as_str())];
    let mut t = Terminal::chat(&s.path, &["--model", "openai:loopback"], &env);
    t.expect("> ");
    t.send("tell me a long story\r");
    t.expect("assistant: word0 word1");
    // The terminal is in cooked mode while the reply streams: the line reaches the chat
    // when Enter ends it.
    t.send("and one more thing\r");
    t.expect("(queued: and one more thing; it is sent after the running step)");
    t.send("/tools\r");
    t.expect("(commands wait for the reply to end: type /tools again then)");
    t.expect("word39");
    t.expect("assistant: Heard the second one.");
    t.expect("> ");
    t.send("\u{4}");
    assert_eq!(t.exit_code(), 0);
    let received = provider.received();
    assert_eq!(received.len(), 2, "the queued message was sent once, after the reply");
    let messages = received[1]["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    assert_eq!((&last["role"], &last["content"]), (&json!("user"), &json!("and one more thing")), "{messages:?}");
    assert!(messages[messages.len() - 2]["content"].as_str().unwrap().contains("word39"), "after the whole reply");
}

#[test]
fn a_streamed_reply_cannot_drive_the_terminal() {
    let s = common::space();
    let script = s.path.with_file_name("script.json");
    let hostile = "before \u{1b}[2J\ryou: forged \u{9b}2J \u{1b}]0;pwned\u{7} after";
    std::fs::write(&script, serde_json::json!([{ "text": hostile }]).to_string()).unwrap();
    let model = format!("scripted:{}", script.display());
    let mut t = Terminal::chat(&s.path, &["--model", &model], &[]);
    t.expect("> ");
    t.send("hi\r");
    t.expect(r"before \u{1b}[2J\ryou: forged \u{9b}2J \u{1b}]0;pwned\u{7} after");
    t.expect("> ");
    t.send("\u{4}");
    let contains = |bytes: &[u8], needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    let bytes = t.bytes.clone();
    assert_eq!(t.exit_code(), 0);
    for raw in [&b"\x1b[2J"[..], b"\ryou: forged", "\u{9b}".as_bytes(), b"\x1b]0;pwned"] {
        assert!(!contains(&bytes, raw), "{raw:?} reached the terminal: {:?}", String::from_utf8_lossy(&bytes));
    }
}

#[test]
fn an_mcp_servers_form_is_filled_in_a_field_per_line_at_the_prompt() {
    use crate::common::mcp_tools as tools;
    let s = common::space();
    let turns =
        json!([{"tool_calls": [{"name": "py.book_table", "arguments": {"date": "Friday"}}]}, {"text": "Booked."}]);
    let script = s.path.with_file_name("book.json");
    std::fs::write(&script, turns.to_string()).unwrap();
    let model = format!("scripted:{}", script.display());
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/elicit_server.py");
    let py = tools::flag("py", &[tools::python().display().to_string(), server.display().to_string()]);
    let mut t = Terminal::chat(&s.path, &["--model", &model, "--mcp", &py], &[("TRELLIS_MCP_CONFIG", "")]);
    t.expect("> ");
    t.send("book a table on Friday\r");
    // The server asks while its call runs: the form, a line per field.
    t.expect("py.book_table asks: Who is the table on Friday for?");
    t.expect("name (string, required): Whose name the table is under: ");
    t.send("Ada\r");
    t.expect("seats (integer, required): How many seats: ");
    t.send("four\r");
    t.expect("seats takes a whole number");
    t.send("4\r");
    t.expect("booked on Friday for Ada, 4 seats");
    t.expect("assistant: Booked.");
    t.expect("> ");
    t.send("\u{4}");
    assert_eq!(t.exit_code(), 0);
}
