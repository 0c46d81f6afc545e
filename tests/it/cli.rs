//! The `trellis` binary, run as a user runs it, against temporary spaces.

use crate::common;

use common::Finish;
use std::path::Path;

use common::{fails, json_of, ok, run as trellis, space};
use serde_json::{json, Value};

fn count(space: &Path, charm: &str) -> i64 {
    json_of(space, &["charm", "get", charm])["count"].as_i64().unwrap()
}

#[test]
fn a_fresh_space_is_seeded_and_charms_can_be_managed() {
    let s = space();
    let names: Vec<String> = json_of(&s.path, &["charm", "list"])
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    for expected in ["Counter", "Todo"] {
        assert!(names.iter().any(|n| n == expected), "{names:?}");
    }
    let patterns = ok(&s.path, &["patterns"]);
    assert!(patterns.contains("counter") && patterns.contains("chatbot"), "{patterns}");

    let id =
        ok(&s.path, &["charm", "new", "counter", "--name", "Steps", "--arg", r#"{"start": 3}"#]).trim().to_string();
    assert_eq!(count(&s.path, &id), 3);
    let sent = ok(&s.path, &["charm", "send", "Steps", "increment", r#"{"amount": 2}"#]);
    assert!(sent.contains("count: 3 → 5"), "{sent}");
    let shown = ok(&s.path, &["charm", "get", "Steps"]);
    assert!(shown.contains("increment: handler(amount)"), "{shown}");
    let tools = json_of(&s.path, &["tools", "Steps"]);
    let displays: Vec<&str> = tools.as_array().unwrap().iter().map(|t| t["display"].as_str().unwrap()).collect();
    assert!(displays.contains(&"Steps.increment"), "{displays:?}");
}

/// A space whose list of charms was lost is not taken for a fresh one: it is not seeded
/// over (new charms beside the lost ones' documents), and the user is told.
#[test]
fn a_space_that_lost_its_list_of_charms_is_not_seeded_over() {
    let s = space();
    let before = json_of(&s.path, &["charm", "list"]).as_array().unwrap().len();
    assert!(before > 0);
    {
        let rt = trellis_runner::Runtime::open(&s.path).unwrap();
        let list = trellis_runner::Link::new(trellis_runner::DocId::from("charms"), trellis_runner::Path::root());
        rt.transact(|tx| tx.write(&list, trellis_runner::Value::Null)).unwrap();
    }
    let out = trellis(&s.path, &["--json", "charm", "list"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("charm document(s) but no list of its charms: it may be damaged"), "{err}");
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed, serde_json::json!([]), "nothing seeded over the lost charms");
}

#[test]
fn bad_input_is_refused_clearly_and_changes_nothing() {
    let s = space();
    ok(&s.path, &["charm", "list"]);
    let before = json_of(&s.path, &["charm", "get", "Counter"]);
    let err = fails(&s.path, &["charm", "send", "Counter", "explode", "{}"]);
    assert!(err.contains("no handler `explode`") && err.contains("increment"), "{err}");
    let err = fails(&s.path, &["charm", "send", "Counter", "increment", "{not json"]);
    assert!(err.contains("not valid JSON"), "{err}");
    let err = fails(&s.path, &["charm", "send", "Counter", "increment", r#"{"amount": "lots"}"#]);
    assert!(err.contains("amount"), "{err}");
    let err = fails(&s.path, &["charm", "get", "Nobody"]);
    assert!(err.contains("unknown charm"), "{err}");
    let err = fails(&s.path, &["charm", "new", "no-such-pattern"]);
    assert!(err.contains("unknown pattern"), "{err}");
    assert_eq!(json_of(&s.path, &["charm", "get", "Counter"]), before);
}

#[test]
fn chat_with_a_scripted_model_changes_the_counter_and_prints_the_transcript() {
    let s = space();
    let script = s.path.with_file_name("script.json");
    std::fs::write(
        &script,
        json!([{"tool_calls": [{"name": "Counter.increment", "arguments": {"amount": 4}}]}, {"text": "I added 4."}])
            .to_string(),
    )
    .unwrap();
    let model = format!("scripted:{}", script.display());
    let out = ok(&s.path, &["chat", "--model", &model, "--message", "@Counter please add 4"]);
    assert!(out.contains("you: @Counter please add 4"), "{out}");
    assert!(out.contains("→ Counter.increment {\"amount\":4}"), "{out}");
    assert!(out.contains("← count: 0 → 4"), "{out}");
    assert!(out.contains("assistant: I added 4."), "{out}");
    assert_eq!(count(&s.path, "Counter"), 4);
}

#[test]
fn chat_offline_adds_five_and_works_again_after_a_restart() {
    let s = space();
    let out = ok(&s.path, &["chat", "--message", "@Counter add 5"]);
    assert!(out.contains("Counter.increment"), "{out}");
    assert_eq!(count(&s.path, "Counter"), 5);
    // A second process: the charm is restarted from the space, its tools still work.
    let messages = json_of(&s.path, &["chat", "--message", "@Counter add 2"]);
    assert!(messages.as_array().unwrap().len() >= 3, "{messages}");
    assert_eq!(count(&s.path, "Counter"), 7);
}

#[test]
fn chat_reads_turns_from_piped_stdin() {
    use std::io::Write;
    let s = space();
    ok(&s.path, &["charm", "list"]);
    let piped_chat = || {
        let piped = std::process::Stdio::piped;
        common::trellis(&s.path).arg("chat").stdin(piped()).stdout(piped()).spawn().unwrap()
    };
    let mut child = piped_chat();
    child.stdin.take().unwrap().write_all(b"@Counter add 1\n\n@Counter add 2\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(count(&s.path, "Counter"), 3);

    // A program that writes a line and waits for the answer gets it before it writes the
    // next: each line is a turn as it arrives, not once standard input closes.
    let mut child = piped_chat();
    let mut stdin = child.stdin.take().unwrap();
    let (lines, answers) = std::sync::mpsc::channel();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || std::io::BufRead::lines(stdout).map_while(Result::ok).for_each(|l| drop(lines.send(l))));
    for amount in [5, 6] {
        writeln!(stdin, "@Counter add {amount}").unwrap();
        let answered = loop {
            let line = answers
                .recv_timeout(std::time::Duration::from_secs(30))
                .unwrap_or_else(|_| panic!("no answer to `add {amount}` while standard input stays open"));
            if line.starts_with("assistant: Done") {
                break line;
            }
        };
        assert!(answered.contains(&format!("→ {},", if amount == 5 { 8 } else { 14 })), "{answered}");
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

#[test]
fn chat_errors_exit_non_zero_with_a_clear_message() {
    let s = space();
    let err = fails(&s.path, &["chat", "--model", "gpt-9", "--message", "hi"]);
    assert!(err.contains("unknown model `gpt-9`"), "{err}");
    let err = fails(&s.path, &["chat", "--model", "openai:gpt-4o-mini", "--message", "hi"]);
    assert!(err.contains("OPENAI_API_KEY"), "{err}");
    let err = fails(&s.path, &["chat", "--message", "@Nobody do it"]);
    assert!(err.contains("unknown charm @Nobody"), "{err}");
    let err = fails(&s.path, &["chat", "--model", "scripted:/no/such/script.json", "--message", "hi"]);
    assert!(err.contains("script"), "{err}");
    let err = fails(Path::new("/proc/trellis/space.sqlite"), &["charm", "list"]);
    assert!(err.contains("cannot open the space"), "{err}");
    // A message is bounded as on the web page.
    let err = fails(&s.path, &["chat", "--message", &"x".repeat(16_001)]);
    assert!(err.contains("16001 characters long; the limit is 16000"), "{err}");
    // Two charms of one name: a mention of it is refused, not sent to one of them.
    ok(&s.path, &["charm", "new", "counter", "--name", "Counter"]);
    let err = fails(&s.path, &["chat", "--message", "@Counter add 5"]);
    assert!(err.contains("@Counter names 2 charms") && err.contains("trellis charm rename"), "{err}");
}

#[test]
fn the_offline_model_reads_a_charm_through_its_read_tool() {
    let s = space();
    ok(&s.path, &["charm", "send", "Todo", "add", r#"{"title": "buy oat milk"}"#]);
    let out = ok(&s.path, &["chat", "--message", "what is on my @Todo list?"]);
    assert!(out.contains("→ Todo.read"), "{out}");
    assert!(out.contains("buy oat milk"), "{out}");
    assert_eq!(json_of(&s.path, &["charm", "get", "Todo"])["remaining"], 1, "reading changed nothing");
}

#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    use std::io::Read;
    let s = space();
    ok(&s.path, &["charm", "list"]);
    let mut child = common::trellis(&s.path)
        .args(["patterns", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader goes away before anything is written
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Text that would drive a terminal: clear the screen, go back to the line start and
/// forge a line of the user's, CSI as one C1 character, DEL, and an OSC title change.
const HOSTILE: &str = "\u{1b}[2J\ryou: forged \u{9b}2J \u{7f} \u{1b}]0;pwned\u{7}";

/// What must never reach the terminal raw.
fn assert_inert(out: &str) {
    for c in ['\u{1b}', '\r', '\u{9b}', '\u{7f}', '\u{7}'] {
        assert!(!out.contains(c), "raw {c:?} in {out:?}");
    }
    assert!(!out.lines().any(|l| l.starts_with("you: forged")), "a forged line: {out}");
}

#[test]
fn model_text_tool_names_and_results_reach_the_terminal_escaped() {
    let s = space();
    let model = common::script(
        &s.path,
        json!([
            {"text": format!("calling {HOSTILE}"), "tool_calls": [{"name": format!("Nope{HOSTILE}"), "arguments": {}}]},
            {"text": format!("reply {HOSTILE}\nsecond line")}
        ]),
    );
    let out = ok(&s.path, &["chat", "--model", &model, "--message", "hi"]);
    assert_inert(&out);
    assert!(out.contains(r"assistant: reply \u{1b}[2J\ryou: forged \u{9b}2J \u{7f} \u{1b}]0;pwned\u{7}"), "{out}");
    assert!(out.contains("\nsecond line"), "a newline in a reply is kept: {out}");
    // The unknown tool's name shows escaped in the call and in the error result.
    assert!(out.contains(r"→ Nope\u{1b}[2J\ryou: forged"), "{out}");
    assert!(out.contains(r"← error: ") && out.matches(r"Nope\u{1b}[2J").count() >= 2, "{out}");
}

#[test]
fn a_stored_name_with_control_characters_prints_escaped() {
    let s = space();
    let list = json_of(&s.path, &["charm", "list"]);
    let id =
        list.as_array().unwrap().iter().find(|c| c["name"] == "Counter").unwrap()["id"].as_str().unwrap().to_owned();
    // Written the way a space written before names were checked holds it: in the record
    // and in the charm's `$NAME`.
    let hostile = format!("Evil{HOSTILE}\nyou: forged");
    {
        use trellis::runner::{Link, Path as DataPath, Runtime, Value, NAME};
        let rt = Runtime::open(&s.path).unwrap();
        rt.transact(|tx| {
            tx.write(&Link::new("charms", DataPath::new([id.as_str(), "name"])), Value::from(hostile.as_str()))?;
            tx.write(&Link::new(id.as_str(), DataPath::new([NAME])), Value::from(hostile.as_str()))
        })
        .unwrap();
    } // closed: its writes are on disk
    assert_eq!(json_of(&s.path, &["charm", "get", &id])["$NAME"], hostile.as_str(), "the name is stored");
    let escaped = r"Evil\u{1b}[2J\ryou: forged";
    let err = fails(&s.path, &["charm", "send", &id, "explode"]);
    assert_inert(&err);
    assert!(err.contains(escaped) && err.contains(r"\nyou: forged"), "{err}");
    for args in [vec!["charm", "list"], vec!["tools", &id]] {
        let out = ok(&s.path, &args);
        assert_inert(&out);
        assert!(out.contains(escaped), "{args:?}: {out}");
    }
    // JSON output stays valid JSON, with DEL and C1 escaped too.
    let raw = ok(&s.path, &["--json", "charm", "list"]);
    assert_inert(&raw);
    let listed: Value = serde_json::from_str(&raw).unwrap();
    assert!(listed.as_array().unwrap().iter().any(|c| c["name"] == hostile.as_str()), "{raw}");
    // `charm get` shows values as JSON, whose escapes serde writes.
    let out = ok(&s.path, &["charm", "get", &id]);
    assert_inert(&out);
    assert!(out.contains(r"Evil\u001b[2J\ryou: forged"), "{out}");
}

#[test]
fn a_space_file_that_comes_back_empty_is_reported() {
    let s = space();
    let out = trellis(&s.path, &["charm", "list"]);
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning"), "a new space is no surprise");
    ok(&s.path, &["charm", "send", "Counter", "increment", r#"{"amount": 2}"#]);
    std::fs::write(&s.path, b"").unwrap(); // truncated to 0 bytes

    let out = trellis(&s.path, &["charm", "list"]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("warning: the space") && err.contains("existed but held no data (0 bytes)"), "{err}");
    assert!(err.contains(&s.path.display().to_string()), "{err}");
    // Reseeded: the next run finds data and says nothing.
    let out = trellis(&s.path, &["charm", "list"]);
    assert!(out.status.success() && out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(count(&s.path, "Counter"), 0);
}

#[test]
fn a_reply_that_never_ends_times_out_naming_the_model() {
    use std::io::Read;
    // A model server that takes requests and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for mut stream in listener.incoming().flatten() {
            let _ = stream.read(&mut [0; 4096]);
            held.push(stream);
        }
    });
    let s = space();
    ok(&s.path, &["charm", "list"]);
    let chat_id = json_of(&s.path, &["charm", "list"])
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["pattern"] == "chatbot")
        .map(|c| c["id"].as_str().unwrap().to_owned());
    let mut command = common::trellis(&s.path);
    command.args(["chat", "--model", "ollama:silent", "--timeout", "1", "--message", "hi"]);
    command.env("OLLAMA_BASE_URL", &url).env("NO_PROXY", "127.0.0.1").env_remove("http_proxy").env_remove("HTTP_PROXY");
    // The command's own timeout ends it; this one only keeps a broken build from hanging.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(command.output()));
    let out = finished.recv_timeout(std::time::Duration::from_secs(120)).expect("trellis chat ends").unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("the model ollama:silent did not finish its answer within 1 s"), "{err}");
    assert!(err.contains("--timeout") && err.contains("--model"), "what to do instead: {err}");
    assert!(!err.contains("settle"), "{err}");
    if let Some(id) = chat_id {
        assert!(!err.contains(&id), "no internal document: {err}");
    }
    let chat = json_of(&s.path, &["charm", "list"]);
    let id =
        chat.as_array().unwrap().iter().find(|c| c["pattern"] == "chatbot").unwrap()["id"].as_str().unwrap().to_owned();
    assert!(!err.contains(&id), "no internal document: {err}");
}

#[test]
fn the_tool_choice_decides_whether_and_which_tool_is_called() {
    let s = space();
    let out = ok(&s.path, &["chat", "--tool-choice", "none", "-m", "@Counter add 5"]);
    assert!(out.contains("tool choice `none`"), "{out}");
    assert_eq!(count(&s.path, "Counter"), 0);

    ok(&s.path, &["chat", "-m", "@Counter add 5"]);
    let out = ok(&s.path, &["chat", "--tool-choice", "Counter.reset", "-m", "@Counter add 5"]);
    assert!(out.contains("Counter.reset"), "{out}");
    assert_eq!(count(&s.path, "Counter"), 0, "the forced tool ran instead of increment");

    let err = fails(&s.path, &["chat", "--tool-choice", "Counter.nope", "-m", "@Counter add 5"]);
    assert!(err.contains("Counter.nope") && err.contains("Counter.increment"), "{err}");
}

#[test]
fn chat_runs_the_chatbot_pattern_asked_for() {
    let s = space();
    let err = fails(&s.path, &["chat", "--chatbot", "counter", "-m", "hi"]);
    assert!(err.contains("is not a chatbot") && err.contains("stream attach"), "{err}");
    let err = fails(&s.path, &["chat", "--chatbot", "nope", "-m", "hi"]);
    assert!(err.contains("no pattern `nope`"), "{err}");
    let out = ok(&s.path, &["chat", "--chatbot", "chatbot", "-m", "@Counter add 2"]);
    assert!(out.contains("Counter.increment"), "{out}");
}

/// A call that needs approval stops `chat` with exit status 3; a later process lists and
/// answers it, and the conversation goes on.
#[test]
fn a_call_waiting_for_approval_is_answered_by_a_later_process() {
    let s = space();
    ok(&s.path, &["charm", "send", "Notes", "add", r#"{"title": "milk", "body": "buy"}"#]);
    ok(&s.path, &["charm", "send", "Notes", "add", r#"{"title": "eggs", "body": "buy"}"#]);
    let out = trellis(&s.path, &["chat", "-m", "@Notes delete note 1"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let waiting = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        waiting.contains("waiting for your approval: Notes.delete") && waiting.contains("cannot be undone"),
        "{waiting}"
    );
    assert_eq!(json_of(&s.path, &["charm", "get", "Notes"])["count"], 2, "nothing deleted yet");

    let pending = json_of(&s.path, &["pending"])["waiting"].clone();
    let call = pending[0]["call_id"].as_str().unwrap().to_string();
    assert_eq!(pending[0]["tool"], "Notes.delete");
    let busy = fails(&s.path, &["chat", "-m", "hello"]);
    assert!(busy.contains("waiting for your answer"), "{busy}");

    let wrong = fails(&s.path, &["resolve", "no_such_call", "--approve"]);
    assert!(wrong.contains("not waiting"), "{wrong}");
    // An answer or an output is no approval, and no denial either: the call still waits.
    for reply in [["--answer", "yes"], ["--output", r#"{"approved": true}"#]] {
        let refused = fails(&s.path, &["resolve", reply[0], reply[1]]);
        assert!(refused.contains("asks for an approval or a denial, not an answer"), "{refused}");
    }
    assert_eq!(json_of(&s.path, &["pending"])["waiting"][0]["call_id"], call.as_str(), "still waiting");
    let done = ok(&s.path, &["resolve", &call, "--approve"]);
    assert!(done.contains("Done: Notes.delete"), "{done}");
    assert_eq!(json_of(&s.path, &["charm", "get", "Notes"])["count"], 1);
    assert!(ok(&s.path, &["pending"]).contains("nothing is waiting"));

    // Denied: the model is told why, and nothing changes. The message after the one that
    // waits is not sent, and the user is told.
    let out = trellis(&s.path, &["chat", "-m", "@Notes delete note 2", "-m", "@Notes delete note 3"]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("1 more message(s) not sent: the chat waits for your answer first"), "{err}");
    let denied = ok(&s.path, &["resolve", "--deny", "I still need eggs"]);
    assert!(denied.contains("denied") && denied.contains("I still need eggs"), "{denied}");
    assert_eq!(json_of(&s.path, &["charm", "get", "Notes"])["count"], 1);
    let usage = fails(&s.path, &["resolve"]);
    assert!(usage.contains("--approve") || usage.contains("required"), "{usage}");
}

/// The chatbot offers `request_human_input`: the offline model asks, a later process
/// answers, and the model reads the answer.
#[test]
fn the_model_asks_and_a_later_process_answers() {
    let s = space();
    let out = trellis(&s.path, &["chat", "-m", "ask me what my favourite colour is"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the model asks (call "));
    let pending = json_of(&s.path, &["pending"])["waiting"].clone();
    assert_eq!(
        (pending[0]["kind"].as_str(), pending[0]["tool"].as_str()),
        (Some("question"), Some("request_human_input"))
    );
    let approved = fails(&s.path, &["resolve", "--approve"]);
    assert!(approved.contains("asks for an answer (a question)") && !approved.contains("charm-"), "{approved}");
    let done = ok(&s.path, &["resolve", "--answer", "blue"]);
    assert!(done.contains(r#"{"answer":"blue"}"#), "{done}");
}

/// A scripted model goes on where its script left off when a second process answers the
/// call the first one left waiting.
#[test]
fn a_scripted_conversation_resumes_in_a_second_process() {
    let s = space();
    ok(&s.path, &["charm", "send", "Notes", "add", r#"{"title": "milk", "body": "buy"}"#]);
    let script = s.path.with_file_name("script.json");
    let turns = json!([
        {"tool_calls": [{"name": "Notes.delete", "arguments": {"id": 1}}]},
        {"text": "Deleted the milk note."}
    ]);
    std::fs::write(&script, turns.to_string()).unwrap();
    let model = format!("scripted:{}", script.display());
    let out = trellis(&s.path, &["chat", "--model", &model, "-m", "@Notes delete the milk note"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let done = ok(&s.path, &["resolve", "--approve"]);
    assert!(done.contains("Deleted the milk note."), "{done}");
    assert_eq!(json_of(&s.path, &["charm", "get", "Notes"])["count"], 0);
}

#[test]
fn the_log_goes_to_standard_error_escaped_at_the_level_trellis_log_names() {
    // A model calling a tool whose name holds a terminal escape: info logs the call.
    let chat = |level: &str| {
        let s = space();
        let script = s.path.with_file_name("script.json");
        let turns = json!([{"tool_calls": [{"name": "evil\u{1b}[2J", "arguments": {}}]}, {"text": "done"}]);
        std::fs::write(&script, turns.to_string()).unwrap();
        let model = format!("scripted:{}", script.display());
        let mut command = common::trellis(&s.path);
        let out = command.env("TRELLIS_LOG", level).args(["chat", "--model", &model, "-m", "hi"]).finish();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let logged = chat("info");
    assert!(logged.contains("unknown tool"), "info logs each call: {logged}");
    assert!(!logged.contains('\u{1b}') && logged.contains("\\u{1b}[2J"), "escaped: {logged}");
    assert_eq!(chat("off"), "", "off logs nothing");

    let s = space();
    let bogus = common::trellis(&s.path).env("TRELLIS_LOG", "loud").args(["patterns"]).finish();
    let stderr = String::from_utf8_lossy(&bogus.stderr);
    assert!(bogus.status.success() && stderr.contains("TRELLIS_LOG=loud is not a level"), "{stderr}");
}

#[test]
fn the_demo_shows_an_event_and_its_label_and_uses_its_counter_again() {
    let s = space();
    let first = ok(&s.path, &["demo"]);
    assert!(first.starts_with("created charm") && first.contains("label: \"Count: 42\""), "{first}");
    let again = json_of(&s.path, &["demo"]);
    assert_eq!((&again["before"]["label"], &again["after"]["label"]), (&json!("Count: 42"), &json!("Count: 83")));
    let demos = json_of(&s.path, &["charm", "list"]);
    let demos: Vec<&Value> = demos.as_array().unwrap().iter().filter(|c| c["name"] == "Demo counter").collect();
    assert_eq!(demos.len(), 1, "one demo counter however often the demo runs: {demos:?}");
    assert_eq!(demos[0]["id"], again["id"]);
}

/// Makes the stored JSON of document `id` unreadable (a torn copy of the file).
fn tear(space: &Path, id: &str) {
    let script = "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\n\
                  n = c.execute(\"UPDATE documents SET value = '{\\\"torn' WHERE id = ?\", (sys.argv[2],)).rowcount\n\
                  c.commit()\nsys.exit(0 if n == 1 else 1)";
    let status = std::process::Command::new("python3").args(["-c", script]).arg(space).arg(id).status().unwrap();
    assert!(status.success(), "document {id} torn");
}

/// A document that cannot be read is not shown as empty: the commands that read the space
/// fail, saying it is damaged, where they printed a blank list or "unknown charm".
#[test]
fn a_damaged_space_is_said_to_be_damaged_not_shown_as_empty() {
    let s = space();
    ok(&s.path, &["token", "new", "--name", "t"]);
    tear(&s.path, "charms");
    for args in [&["charm", "list"][..], &["charm", "send", "Counter", "increment", "{}"], &["charm", "get", "Counter"]]
    {
        let err = fails(&s.path, args);
        assert!(err.contains("could not be read whole") && err.contains("document charms"), "{args:?}: {err}");
    }
    tear(&s.path, "trellis-serve-tokens");
    let err = fails(&s.path, &["token", "list"]);
    assert!(err.contains("document trellis-serve-tokens"), "not \"no tokens\": {err}");
}

/// A space named by a URL is refused, and nothing is made in the current directory.
#[test]
fn a_space_given_as_a_url_is_refused_and_no_folder_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_trellis"))
        .args(["--space", "file:///tmp/trellis.sqlite", "charm", "list"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("is a URL (file://)"), "{err}");
    assert!(err.contains("postgres://USER@HOST/DB?space=NAME"), "says what a URL may be: {err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no file: folder");
}
