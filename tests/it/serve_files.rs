//! Files in the chat of `trellis serve`, over its API: a message with files (or files
//! only), refused files answered 422 with nothing added, the larger body a message may
//! have, and `GET /api/chat/files/{doc}`: only the conversation's files, with their media
//! type, `nosniff` and a sandbox, raster images inline and anything else a download. And
//! what the chat's state says of a compacted conversation and of a result schema's value.

use crate::common;
use crate::serve::{client, Client};

use serde_json::{json, Value};
use trellis_builtins::message::FilePart;

/// A PNG of 8×8 red pixels.
pub(crate) const RED_PNG: &[u8] = b"\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00\x00\x08\
    \x00\x00\x00\x08\x08\x02\x00\x00\x00\x4b\x6d\x29\xdc\x00\x00\x00\x12\x49\x44\x41\x54\x78\x9c\x63\xf8\xcf\xc0\x80\
    \x15\x61\x17\x1d\xb4\x12\x00\x28\xff\x3f\xc1\x6e\xec\xdf\x61\x00\x00\x00\x00\x49\x45\x4e\x44\xae\x42\x60\x82";

/// A file part as a client sends it: media type, name, bytes as base64.
fn file(media_type: &str, name: &str, bytes: &[u8]) -> Value {
    let data = FilePart::from_bytes(media_type, None, bytes).data.unwrap();
    json!({"media_type": media_type, "name": name, "data": data})
}

/// The file parts of the conversation now, in order.
fn files_of(c: &Client) -> Vec<Value> {
    let chat = c.ok("GET", "/api/chat", None, 200);
    let parts = chat["messages"].as_array().unwrap().iter().flat_map(|m| m["content"].as_array().unwrap().clone());
    parts.filter(|p| p["type"] == "file").collect()
}

#[test]
fn files_go_with_a_message_and_only_the_conversations_are_served() {
    let s = common::space();
    let c = client(&s.path, &[]);
    let files = json!([
        file("image/png", "red.png", RED_PNG),
        file("text/plain", "notes \"1\".txt", b"milk"),
        file("image/svg+xml", "logo.svg", b"<svg onload=\"alert(1)\"/>")
    ]);
    let mut events = c.served.events("/api/chat/events", &[&c.auth]);
    c.ok("POST", "/api/chat/messages", Some(json!({"text": "what are these?", "files": files})), 202);
    let done = events.until("chat", |s| s["messages"].as_array().unwrap().len() == 2 && s["pending"] == false);
    // The offline model reads their names and sizes; the conversation keeps no bytes.
    assert!(done["messages"][1].to_string().contains("red.png (image/png, 75 bytes)"), "{}", done["messages"]);
    assert_eq!(done["file_limits"], json!({"per_file": 5 << 20, "per_message": 20 << 20}));
    assert!(done["compaction"].is_null() && done["result"].is_null(), "neither compacted nor asked for a value");
    let kept = files_of(&c);
    assert_eq!(kept.len(), 3, "{kept:?}");
    assert!(kept.iter().all(|f| f.get("data").is_none() && f["doc"].is_string()), "{kept:?}");
    let path = |part: &Value| format!("/api/chat/files/{}", part["doc"].as_str().unwrap());

    let png = c.call("GET", &path(&kept[0]), None);
    assert_eq!(png.status, 200, "{}", png.body);
    assert_eq!(png.bytes, RED_PNG);
    assert_eq!(png.header("content-type"), Some("image/png"));
    assert_eq!(png.header("x-content-type-options"), Some("nosniff"));
    let policy = png.header("content-security-policy").unwrap();
    assert!(policy.contains("sandbox") && policy.contains("default-src 'none'"), "{policy}");
    assert!(png.header("content-disposition").unwrap().starts_with("inline"), "{:?}", png.headers);
    // Anything but a raster image is a download, SVG (which can hold script) too.
    let text = c.call("GET", &path(&kept[1]), None);
    assert_eq!((text.status, text.body.as_str()), (200, "milk"));
    assert_eq!(text.header("content-type"), Some("text/plain"));
    assert_eq!(
        text.header("content-disposition"),
        Some("attachment; filename=\"notes _1_.txt\"; filename*=UTF-8''notes%20%221%22.txt")
    );
    let svg = c.call("GET", &path(&kept[2]), None);
    assert_eq!(svg.header("content-type"), Some("image/svg+xml"));
    assert!(svg.header("content-disposition").unwrap().starts_with("attachment;"), "{:?}", svg.headers);
    assert!(svg.header("content-security-policy").unwrap().contains("sandbox"));

    // Only a document a file of the conversation names: not a charm's, nor any other.
    let counter = c.ok("GET", "/api/charms/Counter", None, 200)["id"].as_str().unwrap().to_string();
    for doc in [counter.as_str(), "file-0", "nope"] {
        let refused = c.call("GET", &format!("/api/chat/files/{doc}"), None);
        assert_eq!(refused.status, 404, "{doc}: {}", refused.body);
        assert!(refused.json()["error"].as_str().unwrap().contains("GET /api/chat"), "{}", refused.body);
    }
    let bare = c.served.request("GET", &path(&kept[0]), &[], None);
    assert_eq!(bare.status, 401, "signed in only: {}", bare.body);
    assert!(bare.bytes.len() < 1000 && bare.json()["error"].is_string());

    // Files alone are a message; nothing at all is not.
    c.ok("POST", "/api/chat/messages", Some(json!({"files": [file("image/png", "again.png", RED_PNG)]})), 202);
    events.until("chat", |s| s["messages"].as_array().unwrap().len() == 4 && s["pending"] == false);
    let user = &c.ok("GET", "/api/chat", None, 200)["messages"][2];
    assert_eq!(user["content"].as_array().unwrap().len(), 1, "no empty text beside the file: {user}");
    for empty in [json!({}), json!({"text": "  ", "files": []})] {
        let refused = c.call("POST", "/api/chat/messages", Some(empty));
        assert_eq!(refused.status, 422, "{}", refused.body);
        assert!(refused.body.contains("send `text`, `files`, or both"), "{}", refused.body);
    }
}

#[test]
fn refused_files_are_422_saying_what_to_do_and_add_nothing() {
    let s = common::space();
    let c = client(&s.path, &[]);
    let big = file("image/png", "big.png", &vec![0u8; 6_000_000]);
    let forged = json!({"media_type": "image/png", "data": "AA==", "doc": "charm-secret"});
    let refusals = [
        (json!([big]), "`big.png` is larger than the 5.0 MB limit for one file: send a smaller one"),
        (json!([{"media_type": "image/png", "name": "a.png", "data": "not base64!"}]), "is not base64"),
        (json!([forged]), "names a document (`doc`); send its bytes in `data` instead"),
        (json!([{"media_type": "png", "data": "AA=="}]), "needs a media type such as image/png"),
        (json!(vec![file("text/plain", "a.txt", b"a"); 33]), "the limit is 32: send the others with the next message"),
    ];
    for (files, why) in refusals {
        let refused = c.call("POST", "/api/chat/messages", Some(json!({"text": "look", "files": files})));
        assert_eq!(refused.status, 422, "{}", &refused.body[..refused.body.len().min(300)]);
        assert!(refused.json()["error"].as_str().unwrap().contains(why), "{}", refused.body);
    }
    assert_eq!(c.ok("GET", "/api/chat", None, 200)["messages"], json!([]), "nothing was added");

    // The 6 MB file's body (8 MB of base64) was read; a body past a message's limit is not,
    // and every other route keeps its 64 KB.
    let declared = c.served.raw(&format!(
        "POST /api/chat/messages HTTP/1.1\r\nHost: {}\r\n{}\r\nContent-Type: application/json\r\n\
         Content-Length: 30000000\r\nConnection: close\r\n\r\n",
        c.served.authority, c.auth
    ));
    assert_eq!(declared.status, 413, "{}", declared.body);
    assert!(declared.json()["error"].as_str().unwrap().contains(&(28 << 20).to_string()), "{}", declared.body);
    let other = c.call("POST", "/api/charms/Notes/handlers/add", Some(json!({"title": "x".repeat(70_000)})));
    assert_eq!(other.status, 413, "{}", other.body);
}

/// Turns of a scripted model, written beside the space as `NAME`; the model string.
fn script(space: &std::path::Path, name: &str, turns: Value) -> String {
    let path = space.with_file_name(name);
    std::fs::write(&path, turns.to_string()).unwrap();
    format!("scripted:{}", path.display())
}

#[test]
fn the_chat_says_where_it_was_compacted_and_the_value_a_reply_ended_with() {
    let s = common::space();
    // A reply of 450 KB (over 110,000 estimated tokens) puts the next request past the
    // default budget of 100,000: the turns before it are compacted (the scripted model
    // lists them, it writes no summary).
    let long = "word ".repeat(90_000);
    let model = script(&s.path, "long.json", json!([{"text": "first"}, {"text": long}, {"text": "third"}]));
    common::ok(&s.path, &["chat", "--model", &model, "-m", "one", "-m", "two", "-m", "three"]);
    let schema = s.path.with_file_name("schema.json");
    std::fs::write(&schema, json!({"type": "object", "required": ["n"]}).to_string()).unwrap();
    let model = script(&s.path, "value.json", json!([{}, {}, {}, {"text": "{\"n\": 4}"}]));
    common::ok(&s.path, &["chat", "--model", &model, "--result-schema", schema.to_str().unwrap(), "-m", "four"]);

    let scripts = s.path.parent().unwrap().display().to_string();
    let c = client(&s.path, &["--scripts", &scripts]);
    let chat = c.ok("GET", "/api/chat", None, 200);
    assert_eq!(chat["compaction"]["upto"], 4, "the turns before `three`: {}", chat["compaction"]);
    assert_eq!(chat["messages"][4]["content"][0]["text"], "three");
    assert!(chat["compaction"]["summary"].as_str().unwrap().contains("one"), "{}", chat["compaction"]);
    assert_eq!(chat["result"], json!({"n": 4}));

    // The next reply's value comes as a change of the chat (the schema stays set).
    let mut events = c.served.events("/api/chat/events", &[&c.auth]);
    events.until("chat", |s| s["result"] == json!({"n": 4}));
    let model = script(&s.path, "next.json", json!([{}, {}, {}, {}, {"text": "{\"n\": 5}"}]));
    c.ok("PUT", "/api/chat/model", Some(json!({ "model": model })), 204);
    c.ok("POST", "/api/chat/messages", Some(json!({"text": "five"})), 202);
    let done = events.until("chat", |s| s["result"] == json!({"n": 5}));
    assert_eq!(done["compaction"]["upto"], 4, "still compacted where it was");
}
