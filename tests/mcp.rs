//! `trellis mcp serve` driven by the official MCP Python SDK (PyPI `mcp`), as an MCP host
//! drives it: initialize, list the tools, call them.

#![allow(clippy::unwrap_used)] // a failing unwrap is a failing test

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The MCP Python SDK release the test uses.
const SDK: &str = "mcp==2.3.0";

/// A Python with the SDK: a virtual environment made once under the target directory.
fn python_with_sdk() -> PathBuf {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-sdk-venv");
    let python = venv.join("bin/python");
    let ready = venv.join(".installed");
    if std::fs::read_to_string(&ready).is_ok_and(|installed| installed == SDK) {
        return python;
    }
    let run = |command: &mut Command, what: &str| {
        let out = command.output().unwrap_or_else(|e| panic!("cannot {what}: {e}; the MCP test needs python3"));
        assert!(out.status.success(), "cannot {what}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv), "make a Python virtual environment");
    run(
        Command::new(&python).args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", SDK]),
        &format!("install {SDK} from PyPI"),
    );
    std::fs::write(&ready, SDK).unwrap();
    python
}

#[test]
fn an_mcp_host_lists_and_calls_the_charms_handlers() {
    let python = python_with_sdk();
    let s = common::space();
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    let out = Command::new(python)
        .arg(client)
        .arg(env!("CARGO_BIN_EXE_trellis"))
        .arg(&s.path)
        .env_remove("TRELLIS_SPACE")
        .output()
        .unwrap();
    assert!(out.status.success(), "the client failed: {}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();

    assert_eq!(seen["server"], "trellis");
    assert_eq!(seen["tools"]["Counter_increment"], "Counter.increment", "wire names, titled by display name");
    assert_eq!(seen["tools"]["Todo_add"], "Todo.add");
    assert!(seen["tools"].as_object().unwrap().keys().all(|name| !name.starts_with("Chat")), "no chatbot streams");

    assert_eq!(seen["added_error"], false);
    assert_eq!(seen["added"]["result"]["count"], 2);
    assert!(seen["added"]["summary"].as_str().unwrap().contains("count: 0 → 2"), "{seen}");
    assert_eq!(seen["refused_error"], true, "arguments are validated like a model's");
    assert!(seen["refused_text"].as_str().unwrap().contains("/amount"), "{seen}");
    assert_eq!(seen["approval_error"], true, "a handler that needs approval does not run");
    assert!(seen["unknown"].as_str().unwrap().contains("Nope_nothing"), "{seen}");

    // Each charm's data is a resource; reading it shows the change, without the streams.
    let resources: Vec<&str> = seen["resources"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    assert_eq!(resources, ["Counter", "Dice", "Notes", "Todo"]);
    assert!(seen["counter_uri"].as_str().unwrap().starts_with("trellis://charm/"), "{seen}");
    assert_eq!(seen["counter_mime"], "application/json");
    assert_eq!(seen["counter"]["count"], 2);
    assert!(seen["counter"].get("increment").is_none(), "streams are tools, not data: {seen}");
    // The client subscribed to the counter before calling increment: it heard of the change.
    assert_eq!(seen["updated"][0], seen["counter_uri"], "{seen}");

    // A new charm (created through the server) announces itself: its tools are listed.
    assert_eq!(seen["created"]["data"]["$NAME"], "Steps", "{seen}");
    assert!(seen["relisted"].as_array().unwrap().iter().any(|t| t == "Steps_increment"), "{seen}");
    assert_eq!(seen["stepped"]["result"]["count"], 3);

    // The change is in the space, for every other front end.
    let counter = common::trellis(&s.path).args(["--json", "charm", "get", "Counter"]).output().unwrap();
    let counter: Value = serde_json::from_slice(&counter.stdout).unwrap();
    assert_eq!(counter["count"], 2);
}
