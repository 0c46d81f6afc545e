//! The web chat of `trellis serve`, end to end in headless Chromium from Debian's packages,
//! driven by Playwright (PyPI) pointed at that Chromium: the @-popup, a tool call inline
//! and the counter changing in the panel, an approval answered in the page and seen
//! resolved in a second tab, a question answered, Stop cancelling a slow reply; approvals
//! with edited arguments, "always allow" and "ask again", and a message sent while a reply
//! streams waiting for it (until Stop); an
//! installed plugin's tool run by the page, in a Web Worker, its result inline; and files:
//! a PNG attached in the page reaching the model server, an MCP tool's image, where the
//! conversation was compacted, the value a reply ended with; who wrote each field, the tool
//! results whose values changed since, and Undo turn; a watch firing in the server; an MCP
//! server's form filled in while its call runs, a task's stages shown as it runs, and a URL
//! to visit.
//! Screenshots of each step land in `target/tmp/serve-screenshots/SCRIPT`, made anew each run.

#![cfg(unix)]

use crate::bundles;
use crate::common;
use crate::common::example_plugin;
use crate::common::mcp_tools;
use crate::common::provider::{Provider, Reply};
use crate::common::python;
use crate::common::server;
use crate::common::slow_model;
use crate::serve_files::RED_PNG;

use common::Finish;
use serde_json::{json, Value};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The Playwright release that drives the browser (never `playwright install`: it uses
/// Debian's Chromium).
const PLAYWRIGHT: &str = "playwright==1.65.2";

/// Debian's Chromium.
const CHROMIUM: &str = "/usr/bin/chromium";

/// How long the whole browser session may take.
const DEADLINE: Duration = Duration::from_secs(240);

/// [`browse_at`] `served`'s sign-in link.
fn browse(script: &str, served: &server::Served, extra: &[&str]) -> PathBuf {
    browse_at(script, &served.sign_in, extra)
}

/// Runs `tests/browser/SCRIPT SIGN_IN SHOTS CHROMIUM EXTRA...` and fails the test when it
/// fails or outlives the deadline; returns the screenshot folder.
pub(crate) fn browse_at(script: &str, sign_in: &str, extra: &[&str]) -> PathBuf {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing; install it with: apt-get update && apt-get install -y --no-install-recommends \
         chromium chromium-driver fonts-liberation"
    );
    let python = python::venv("playwright-venv", &[PLAYWRIGHT]);
    // A folder of this run's own: a screenshot left by an earlier run proves nothing.
    let stem = script.trim_end_matches(".py");
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-screenshots").join(stem);
    let _ = std::fs::remove_dir_all(&shots);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser").join(script);
    let child = Command::new(python)
        .arg(script)
        .args([sign_in, shots.to_str().unwrap(), CHROMIUM])
        .args(extra)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("PYTHONDONTWRITEBYTECODE", "1") // nothing written beside the scripts
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The browser must never hang the suite: past the deadline, the session is killed.
    let out =
        common::output_within(child, DEADLINE, &format!("the browser session (screenshots in {})", shots.display()));
    assert!(
        out.status.success(),
        "the browser session failed (screenshots in {}):\n{}\n{}",
        shots.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.lines().last() == Some(r#"{"ok": true}"#), "the session did not run to its end: {said}");
    shots
}

#[test]
fn the_web_chat_in_a_real_browser() {
    let s = common::space();
    let slow = slow_model::server();
    let served = server::Served::start(&s.path, &[], &[("OLLAMA_BASE_URL", &slow)]);
    let shots = browse("chat.py", &served, &[]);
    for step in ["01-mention-popup", "03-tool-call-and-panel", "06-second-tab-resolved", "09-stopped"] {
        assert!(shots.join(format!("{step}.png")).exists(), "screenshot {step}");
    }
}

#[test]
fn approvals_and_messages_while_a_reply_runs_in_a_real_browser() {
    let s = common::space();
    let slow = slow_model::server();
    let served = server::Served::start(&s.path, &[], &[("OLLAMA_BASE_URL", &slow)]);
    let shots = browse("approvals.py", &served, &[]);
    for step in [
        "30-approval-preview",
        "31-arguments-refused",
        "33-allowed-ran-without-asking",
        "34-asks-again",
        "35-message-waits-for-the-reply",
    ] {
        assert!(shots.join(format!("{step}.png")).exists(), "screenshot {step}");
    }
}

#[test]
fn who_wrote_each_field_what_changed_since_and_undo_in_a_real_browser() {
    let s = common::space();
    let served = server::Served::start(&s.path, &[], &[]);
    let shots = browse("history.py", &served, &[]);
    for step in ["40-writers", "41-changed-since", "42-undo-refused", "43-undone"] {
        assert!(shots.join(format!("{step}.png")).exists(), "screenshot {step}");
    }
}

#[test]
fn a_watch_set_in_the_terminal_fires_in_the_server_and_the_page_shows_it() {
    let s = common::space();
    let provider = Provider::start(vec![
        Reply::Call("watch".into(), json!({"charm": "Counter", "condition": "count > 3", "note": "say so"})),
        Reply::Text("Watching.".into()),
        Reply::Text("It passed 3.".into()),
    ]);
    let model_env =
        [("OPENAI_API_KEY", "not-checked"), ("OPENAI_BASE_URL", provider.url.as_str()), ("NO_PROXY", "127.0.0.1")];
    let chat = ["chat", "--model", "openai:loopback", "-m", "@Counter tell me when it passes 3"];
    let out = common::trellis(&s.path).envs(model_env).args(chat).finish();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let served = server::Served::start(&s.path, &[], &model_env);
    let shots = browse("watches.py", &served, &[]);
    for step in ["50-watch-listed", "51-watch-fired", "52-watch-removed"] {
        assert!(shots.join(format!("{step}.png")).exists(), "screenshot {step}");
    }
}

/// A plugin whose `spin` loops forever and whose `crash` traps.
const FAULTY_MANIFEST: &str = r#"{"name": "faulty", "version": "0.1.0", "tools": [
    {"name": "spin", "description": "Never ends", "parameters": {"type": "object"}},
    {"name": "crash", "description": "Traps", "parameters": {"type": "object"}}]}"#;
const FAULTY_ITEMS: &str = r#"(func (export "spin") (param i32 i32) (result i64) (loop $forever (br $forever)) (i64.const 0))
    (func (export "crash") (param i32 i32) (result i64) unreachable)"#;

#[test]
fn installed_plugins_run_in_the_page() {
    let s = common::space();
    let author = example_plugin::Author::new(&s.path);
    author.install_example(&s.path);
    let faulty = author.bundle_dir("faulty");
    bundles::write_bundle(&faulty, FAULTY_MANIFEST.as_bytes(), &bundles::module("", FAULTY_ITEMS));
    author.install(&s.path, &faulty, &[]);
    let script = s.path.with_file_name("script.json");
    let turns = serde_json::json!([
        {"tool_calls": [{"name": "count_words", "arguments": {"text": "the quick brown fox jumps"}}]},
        {"text": "Your text has five words."},
        {"tool_calls": [{"name": "spin"}, {"name": "crash"}]},
        {"text": "Both plugins failed, and we go on."}
    ]);
    std::fs::write(&script, turns.to_string()).unwrap();
    // Modules the server would refuse to load, handed to the page's worker directly: it
    // refuses them too (an import from elsewhere; a `trellis` import not granted).
    let hex = |imports: &str, items: &str| -> String {
        wat::parse_str(bundles::module(imports, items)).unwrap().iter().map(|b| format!("{b:02x}")).collect()
    };
    let refused: Vec<String> =
        [r#"(import "env" "x" (func))"#, r#"(import "trellis" "random" (func (param i32 i32)))"#]
            .iter()
            .map(|import| hex(import, ""))
            .collect();
    let scripts = s.path.parent().unwrap().display().to_string();
    // Grows its memory by 64 pages (4 MiB) and traps if it cannot.
    let grow = r#"(func (export "run") (param i32 i32) (result i64)
        (if (i32.eq (memory.grow (i32.const 64)) (i32.const -1)) (then unreachable))
        (i64.const 0))"#;
    let grower = hex("", grow);
    let served = server::Served::start(&s.path, &["--scripts", &scripts], &[]);
    let model = format!("scripted:{}", script.display());
    let shots = browse("plugins.py", &served, &[&model, &grower, &refused[0], &refused[1]]);
    for step in ["10-plugin-ran-in-the-page", "12-plugin-stopped-and-trapped"] {
        assert!(shots.join(format!("{step}.png")).exists(), "screenshot {step}");
    }
}

/// The summary the model server writes when the conversation is compacted.
const SUMMARY: &str = "The user asked for the tiny image, then for a long text.";

#[test]
fn files_in_the_web_chat() {
    let s = common::space();
    let provider = Provider::start(vec![
        Reply::Call("ev_get_tiny_image".into(), json!({})),
        Reply::Text("It is the MCP logo.".into()),
        // About 112,000 estimated tokens: the next request is past the budget of 100,000.
        Reply::Text("word ".repeat(90_000)),
        Reply::Text(SUMMARY.into()),
        Reply::Text("We go on from the summary.".into()),
        Reply::Text(r#"{"colour": "blue"}"#.into()),
        Reply::Text(r#"{"colour": "red"}"#.into()),
    ]);
    let model_env = [
        ("OPENAI_API_KEY", "not-checked"),
        ("OPENAI_BASE_URL", provider.url.as_str()),
        ("NO_PROXY", "127.0.0.1"),
        ("TRELLIS_MCP_CONFIG", ""),
    ];
    // The conversation begins in the terminal: an MCP tool's image, turns long enough to
    // be compacted, then a reply that ends with a value of a result schema (which stays set).
    let chat = |args: &[&str]| {
        let out = common::trellis(&s.path).envs(model_env).env_remove("http_proxy").args(args).finish();
        assert!(out.status.success(), "trellis {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let everything = mcp_tools::flag("ev", &mcp_tools::everything());
    let model = ["chat", "--model", "openai:loopback"];
    let turns = ["-m", "show me the tiny image", "-m", "tell me everything", "-m", "and now?"];
    chat(&[&model[..], &["--mcp", &everything], &turns].concat());
    let schema = s.path.with_file_name("colour.json");
    let colour = json!({"type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]});
    std::fs::write(&schema, colour.to_string()).unwrap();
    chat(&[&model[..], &["--result-schema", schema.to_str().unwrap(), "-m", "what colour was it?"]].concat());
    let received = provider.received();
    assert!(received[4]["messages"].to_string().contains(SUMMARY), "compacted before the page opens");

    let png = s.path.with_file_name("red.png");
    std::fs::write(&png, RED_PNG).unwrap();
    let served = server::Served::start(&s.path, &[], &model_env);
    let shots = browse("files.py", &served, &[png.to_str().unwrap()]);
    for step in ["20-tool-result-image", "21-compacted", "22-attached", "23-sent"] {
        assert!(shots.join(format!("{step}.png")).exists(), "screenshot {step}");
    }

    // The model server received the page's PNG as an image part of the user's message,
    // and the dropped text file as text.
    let received = provider.received();
    let asked = received.last().unwrap();
    let users = asked["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "user");
    let parts: Vec<&Value> = users.flat_map(|m| m["content"].as_array().into_iter().flatten()).collect();
    let base64 = trellis_builtins::message::FilePart::from_bytes("image/png", None, RED_PNG).data.unwrap();
    let images: Vec<&Value> =
        parts.iter().filter(|p| p["type"] == "image_url").map(|p| &p["image_url"]["url"]).collect();
    assert_eq!(images, [&json!(format!("data:image/png;base64,{base64}"))], "{parts:?}");
    assert!(parts.iter().any(|part| part["text"].as_str().is_some_and(|t| t.contains("milk and eggs"))), "{parts:?}");
    assert!(parts.iter().any(|part| part["text"] == "what colour is it?"), "{parts:?}");
    assert!(!asked.to_string().contains("not sent"), "the removed file stayed behind");
}

#[test]
fn an_mcp_servers_form_is_filled_in_on_the_page_while_its_call_runs() {
    let s = common::space();
    let research = json!({"name": "ev.simulate-research-query", "arguments": {"topic": "python", "ambiguous": true}});
    let visit = json!({"name": "ev.trigger-url-elicitation",
                       "arguments": {"url": "https://example.test/sign-in", "message": "Sign in"}});
    let turns = json!([{"tool_calls": [{"name": "py.book_table", "arguments": {"date": "Friday"}}]}, {"text": "Booked."},
                       {"tool_calls": [research]}, {"text": "Here is the report."},
                       {"tool_calls": [visit]}, {"text": "Signed in."}]);
    let script = s.path.with_file_name("book.json");
    std::fs::write(&script, turns.to_string()).unwrap();
    let scripts = s.path.parent().unwrap().display().to_string();
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/elicit_server.py");
    let py = mcp_tools::flag("py", &[mcp_tools::python().display().to_string(), server.display().to_string()]);
    let words = mcp_tools::everything();
    let config = s.path.with_file_name("mcp.json");
    let servers = json!({"mcpServers": {"ev": {"command": words[0], "args": words[1..], "trusted": true}}});
    std::fs::write(&config, servers.to_string()).unwrap();
    let config = config.display().to_string();
    let flags = ["--scripts", &scripts, "--mcp", &py, "--mcp-config", &config];
    let served = server::Served::start(&s.path, &flags, &[("TRELLIS_MCP_CONFIG", "")]);
    let model = format!("scripted:{}", script.display());
    let shots = browse("elicitation.py", &served, &[&model]);
    assert!(shots.join("64-task-answered.png").exists(), "screenshot 64");
}
