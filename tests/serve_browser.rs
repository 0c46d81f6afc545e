//! The web chat of `trellis serve`, end to end in headless Chromium from Debian's packages,
//! driven by Playwright (PyPI) pointed at that Chromium: the @-popup, a tool call inline
//! and the counter changing in the panel, an approval answered in the page and seen
//! resolved in a second tab, a question answered, Stop cancelling a slow reply.
//! Screenshots of each step land in `target/tmp/serve-screenshots`.

#![cfg(unix)]
#![allow(clippy::unwrap_used)] // a failing unwrap is a failing test

mod common;
#[path = "common/python.rs"]
mod python;
#[path = "common/server.rs"]
mod server;
#[path = "common/slow_model.rs"]
mod slow_model;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The Playwright release that drives the browser (never `playwright install`: it uses
/// Debian's Chromium).
const PLAYWRIGHT: &str = "playwright==1.65.2";

/// Debian's Chromium.
const CHROMIUM: &str = "/usr/bin/chromium";

/// How long the whole browser session may take.
const DEADLINE: Duration = Duration::from_secs(240);

#[test]
fn the_web_chat_in_a_real_browser() {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing; install it with: apt-get update && apt-get install -y --no-install-recommends \
         chromium chromium-driver fonts-liberation"
    );
    let python = python::venv("playwright-venv", &[PLAYWRIGHT]);
    let s = common::space();
    let slow = slow_model::server();
    let served = server::Served::start(&s.path, &[], &[("OLLAMA_BASE_URL", &slow)]);
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("serve-screenshots");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/chat.py");
    let child = Command::new(python)
        .arg(script)
        .args([served.sign_in.as_str(), shots.to_str().unwrap(), CHROMIUM])
        .env("NO_PROXY", "127.0.0.1,localhost")
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
    for step in ["01-mention-popup", "03-tool-call-and-panel", "06-second-tab-resolved", "09-stopped"] {
        assert!(shots.join(format!("{step}.png")).exists(), "screenshot {step}");
    }
}
