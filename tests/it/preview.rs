//! Approve by diff: a call waiting for approval shows what it would change, value by
//! value (`trellis pending`, `--json`'s `preview`); approving commits exactly that; a
//! change made in between refuses the approval and a fresh preview waits.

use crate::common;

use common::{json_of, ok, run as trellis, space};
use serde_json::json;

#[test]
fn an_approval_commits_what_it_showed_and_a_change_in_between_asks_again() {
    let s = space();
    for title in ["milk", "eggs"] {
        ok(&s.path, &["charm", "send", "Notes", "add", &json!({"title": title, "body": "buy"}).to_string()]);
    }
    let out = trellis(&s.path, &["chat", "-m", "@Notes delete note 1"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stderr).to_string();
    let milk = r#"Notes.notes[0]: {"body":"buy","id":1,"title":"milk"} → removed"#;
    assert!(said.contains(milk), "the chat shows what the call would change: {said}");

    let waiting = json_of(&s.path, &["pending"])["waiting"][0].clone();
    let preview = &waiting["preview"];
    let removed = json!({"charm": "Notes", "path": "notes[0]", "before": {"body": "buy", "id": 1, "title": "milk"}, "after": null});
    assert!(preview["changes"].as_array().is_some_and(|c| c.contains(&removed)), "{preview}");
    assert!(ok(&s.path, &["pending"]).contains(milk));
    let notes = |s: &common::Space| json_of(&s.path, &["charm", "get", "Notes"])["notes"].clone();
    assert_eq!(notes(&s).as_array().map(Vec::len), Some(2), "a preview writes nothing");

    ok(&s.path, &["resolve", waiting["call_id"].as_str().unwrap(), "--approve"]);
    assert_eq!(notes(&s), json!([{"body": "buy", "id": 2, "title": "eggs"}]), "what was shown, and only that");

    // Someone else edits the note between the preview and the approval.
    let out = trellis(&s.path, &["chat", "-m", "@Notes delete note 2"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let edit = json!({"id": 2, "title": "free-range eggs", "body": "buy"}).to_string();
    ok(&s.path, &["charm", "send", "Notes", "edit", &edit]);
    let again = trellis(&s.path, &["resolve", "--approve"]);
    assert_eq!(again.status.code(), Some(3), "waits again: {}", String::from_utf8_lossy(&again.stderr));
    let said = String::from_utf8_lossy(&again.stderr).to_string();
    assert!(said.contains("the state changed since you saw it") && said.contains("free-range eggs"), "{said}");
    assert_eq!(notes(&s).as_array().map(Vec::len), Some(1), "nothing deleted on the old preview");

    ok(&s.path, &["resolve", "--approve"]);
    assert_eq!(notes(&s), json!([]));
}

/// A call whose handler fails with its arguments says so in the question; the person can
/// still deny it.
#[test]
fn a_call_that_would_fail_says_so_and_can_be_denied() {
    let s = space();
    let out = trellis(&s.path, &["chat", "-m", "@Notes delete note 7"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    let preview = json_of(&s.path, &["pending"])["waiting"][0]["preview"].clone();
    assert!(preview["error"].as_str().is_some_and(|e| e.contains("7")), "{preview}");
    let said = ok(&s.path, &["pending"]);
    assert!(said.contains("the handler fails with these arguments"), "{said}");
    assert!(ok(&s.path, &["resolve", "--deny", "no such note"]).contains("denied"));
}
