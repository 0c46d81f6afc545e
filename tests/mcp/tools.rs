//! The third-party MCP parts the tests run, pinned, installed under the target directory
//! on first use (`.ci/run` installs them up front with the same commands): the official
//! Python SDK and `mcp-server-time` (PyPI, one virtual environment), and
//! `@modelcontextprotocol/server-everything` (npm).
//!
//! Shared by `tests/mcp.rs`, `tests/mcp_client.rs` and `mcp/tests/client.rs` (included
//! with `#[path]`).

#![allow(dead_code)] // each test file uses part of it

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The MCP Python SDK release the tests use.
pub const SDK: &str = "mcp==2.3.0";
/// The time server (PyPI).
pub const TIME_SERVER: &str = "mcp-server-time==2026.10.19";
/// The reference server of every MCP feature (npm).
pub const EVERYTHING: &str = "@modelcontextprotocol/server-everything@2026.8.31";

/// The shared directory: the workspace's `target/tmp`.
fn tools_dir() -> PathBuf {
    // Each package's CARGO_TARGET_TMPDIR is the workspace's target/tmp.
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// Runs an install step, or fails the test with the command that would do it.
fn install(command: &mut Command, what: &str, by_hand: &str) {
    let out = command.output().unwrap_or_else(|e| panic!("cannot {what}: {e}. Install it with: {by_hand}"));
    assert!(
        out.status.success(),
        "cannot {what}: {}. Install it with: {by_hand}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A Python with the SDK and the time server: a virtual environment made once under the
/// target directory.
pub fn python() -> PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(make_venv).clone()
}

fn make_venv() -> PathBuf {
    let venv = tools_dir().join("mcp-sdk-venv");
    let python = venv.join("bin/python");
    let ready = venv.join(".installed");
    let wanted = format!("{SDK} {TIME_SERVER}");
    if std::fs::read_to_string(&ready).is_ok_and(|installed| installed == wanted) {
        return python;
    }
    let by_hand = format!("python3 -m venv {0} && {0}/bin/pip install {SDK} {TIME_SERVER}", venv.display());
    install(Command::new("python3").args(["-m", "venv"]).arg(&venv), "make a Python virtual environment", &by_hand);
    install(
        Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            SDK,
            TIME_SERVER,
        ]),
        &format!("install {SDK} and {TIME_SERVER} from PyPI"),
        &by_hand,
    );
    std::fs::write(&ready, wanted).expect("mark the virtual environment as ready");
    python
}

/// The command line of `mcp-server-time` (stdio), with UTC as its local zone.
pub fn time_server() -> Vec<String> {
    let python = python().display().to_string();
    vec![python, "-m".into(), "mcp_server_time".into(), "--local-timezone".into(), "UTC".into()]
}

/// The command line of server-everything over stdio.
pub fn everything() -> Vec<String> {
    static SCRIPT: OnceLock<PathBuf> = OnceLock::new();
    let script = SCRIPT.get_or_init(|| {
        let dir = tools_dir().join("mcp-npm");
        let script = dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        let ready = dir.join(".installed");
        if std::fs::read_to_string(&ready).is_ok_and(|installed| installed == EVERYTHING) && script.exists() {
            return script;
        }
        std::fs::create_dir_all(&dir).expect("make the npm directory");
        let by_hand = format!("npm install --prefix {} {EVERYTHING}", dir.display());
        install(
            Command::new("npm")
                .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
                .arg(&dir)
                .arg(EVERYTHING),
            &format!("install {EVERYTHING} from npm"),
            &by_hand,
        );
        std::fs::write(&ready, EVERYTHING).expect("mark the npm directory as ready");
        script
    });
    vec!["node".into(), script.display().to_string(), "stdio".into()]
}

/// Quotes `words` for a `--mcp 'name=command args'` value.
pub fn flag(name: &str, words: &[String]) -> String {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    format!("{name}={}", quoted.join(" "))
}
