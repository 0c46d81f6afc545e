//! The web chat of `trellis serve`, end to end in headless Chromium from Debian's packages,
//! driven by Playwright (PyPI) pointed at that Chromium: the @-popup, a tool call inline
//! and the counter changing in the panel, an approval answered in the page and seen
//! resolved in a second tab, a question answered, Stop cancelling a slow reply; and an
//! installed plugin's tool run by the page, in a Web Worker, its result inline.
//! Screenshots of each step land in `target/tmp/serve-screenshots/SCRIPT`, made anew each run.

#![cfg(unix)]

use crate::bundles;
use crate::common;
use crate::common::example_plugin;
use crate::common::python;
use crate::common::server;
use crate::common::slow_model;

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

/// Runs `tests/browser/SCRIPT SIGN_IN SHOTS CHROMIUM EXTRA...` and fails the test when it
/// fails or outlives the deadline; returns the screenshot folder.
fn browse(script: &str, served: &server::Served, extra: &[&str]) -> PathBuf {
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
        .args([served.sign_in.as_str(), shots.to_str().unwrap(), CHROMIUM])
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
