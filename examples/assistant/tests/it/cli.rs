//! The `assistant` binary, run as a user runs it.

use std::process::Command;

fn assistant(space: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_assistant"))
        .arg("--space")
        .arg(space)
        .args(args)
        .env_remove("TRELLIS_SPACE")
        .output()
        .expect("the assistant binary runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn add_milk_without_a_mention_then_see_it_on_the_list() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let space = dir.path().join("space.sqlite");
    let (ok, out, err) = assistant(&space, &["chat", "-m", "add milk to my shopping list"]);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("Shopping.add"), "{out}");

    let (ok, out, err) = assistant(&space, &["charm", "get", "Shopping", "--json"]);
    assert!(ok, "{err}");
    let shopping: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(shopping["items"], serde_json::json!([{"name": "milk", "checked": false}]), "{out}");
    assert_eq!(shopping["left"], 1);
}

#[test]
fn the_whole_command_is_there_with_its_own_name_and_patterns() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let space = dir.path().join("space.sqlite");
    let (ok, out, _) = assistant(&space, &["--help"]);
    assert!(ok && out.contains("Usage: assistant") && out.contains("chat") && out.contains("charm"), "{out}");
    let (ok, out, err) = assistant(&space, &["patterns"]);
    assert!(ok, "{err}");
    for pattern in ["shopping", "assistant", "counter", "chatbot"] {
        assert!(out.contains(pattern), "{pattern} missing from {out}");
    }
    // Only the Shopping list is seeded, as main.rs chose.
    let (ok, out, err) = assistant(&space, &["charm", "list"]);
    assert!(ok, "{err}");
    assert!(out.contains("Shopping") && !out.contains("Counter"), "{out}");
}

/// The library's errors say what to do; the command adds how, under its own name.
#[test]
fn errors_name_the_assistants_own_commands_never_trellis() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let space = dir.path().join("space.sqlite");
    let (ok, _, err) = assistant(&space, &["charm", "get", "Nobody"]);
    assert!(!ok);
    assert!(err.contains("list the charms (`assistant charm list`)"), "{err}");
    let (ok, _, err) = assistant(&space, &["charm", "new", "no-such-pattern"]);
    assert!(!ok);
    assert!(err.contains("(`assistant patterns`)"), "{err}");
    let (ok, _, err) = assistant(&space, &["token", "revoke", "nope"]);
    assert!(!ok);
    assert!(err.contains("`assistant token list`") && !err.contains("trellis "), "{err}");
}
