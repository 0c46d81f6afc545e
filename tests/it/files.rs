//! Images and files in the chat, through the binary: `--attach` sends a file with the
//! message and the provider (a real HTTP server on loopback) receives it as an image part;
//! an image an MCP tool returns (`server-everything`'s `get-tiny-image`) reaches the
//! provider too; a file over the limit is refused before anything is sent; the offline
//! model says it cannot see.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{json, Value};

use crate::common;
use crate::common::mcp_tools as tools;
use crate::common::provider::{Provider, Reply};
use common::Finish;

/// Bytes that begin like a PNG; the provider is not shown them as anything but bytes.
const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR tiny";

/// `trellis ARGS` on `space` with its OpenAI-compatible provider at `provider`.
fn chat(space: &Path, provider: &Provider, args: &[&str]) -> Output {
    provider.trellis(space).args(args).finish()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A file of `bytes` named `name` beside the space.
fn file(space: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = space.with_file_name(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// The content parts of the user messages of a request body.
fn user_parts(body: &Value) -> Vec<Value> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let users = messages.into_iter().filter(|m| m["role"] == "user");
    users.flat_map(|m| m["content"].as_array().cloned().unwrap_or_default()).collect()
}

/// The data URLs of the image parts among `parts`.
fn image_urls(parts: &[Value]) -> Vec<String> {
    let images = parts.iter().filter(|p| p["type"] == "image_url");
    images.filter_map(|p| p["image_url"]["url"].as_str().map(str::to_string)).collect()
}

#[test]
fn an_attached_png_reaches_the_provider_as_an_image_and_stays_apart_from_the_conversation() {
    let s = common::space();
    let dot = file(&s.path, "dot.png", PNG);
    let provider = Provider::start(vec![Reply::Text("A tiny PNG.".into())]);
    let args = ["--json", "chat", "--model", "openai:loopback", "--attach", dot.to_str().unwrap(), "-m", "what is it?"];
    let out = chat(&s.path, &provider, &args);
    assert!(out.status.success(), "{}", text(&out));

    let received = provider.received();
    let parts = user_parts(&received[0]);
    assert_eq!(parts[0], json!({"type": "text", "text": "what is it?"}), "{parts:?}");
    let base64 = trellis_builtins::message::FilePart::from_bytes("image/png", None, PNG).data.unwrap();
    let sent = format!("data:image/png;base64,{base64}");
    assert_eq!(image_urls(&parts), vec![sent], "{parts:?}");

    // The conversation names the file's document; its bytes are not in the message.
    let messages: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let part = &messages[0]["content"][1];
    assert_eq!(part["type"], "file", "{messages:?}");
    assert_eq!(
        (part["media_type"].as_str(), part["name"].as_str(), part["size"].as_u64()),
        (Some("image/png"), Some("dot.png"), Some(PNG.len() as u64))
    );
    assert!(part["doc"].is_string() && part.get("data").is_none(), "{part}");

    // The next turn sends the image again, loaded from its document.
    let out = chat(&s.path, &provider, &["chat", "--model", "openai:loopback", "-m", "and now?"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(image_urls(&user_parts(&provider.received()[1])).len(), 1);
}

#[test]
fn a_file_over_the_limit_is_refused_before_anything_is_sent() {
    let s = common::space();
    let big = file(&s.path, "big.bin", &vec![0u8; 6_000_000]);
    let provider = Provider::start(vec![Reply::Text("never".into())]);
    let out = chat(
        &s.path,
        &provider,
        &["chat", "--model", "openai:loopback", "--attach", big.to_str().unwrap(), "-m", "hi"],
    );
    assert!(!out.status.success());
    let said = text(&out);
    assert!(said.contains("big.bin: it is 5.7 MB, and a file may be at most 5.0 MB; send a smaller one"), "{said}");
    assert!(provider.received().is_empty(), "nothing was sent");
    let missing = s.path.with_file_name("nope.png");
    let out = chat(&s.path, &provider, &["chat", "--attach", missing.to_str().unwrap(), "-m", "hi"]);
    assert!(text(&out).contains("cannot attach") && text(&out).contains("nope.png"), "{}", text(&out));
}

#[test]
fn an_image_an_mcp_tool_returns_reaches_the_provider() {
    let s = common::space();
    let provider = Provider::start(vec![
        Reply::Call("ev_get_tiny_image".into(), json!({})),
        Reply::Text("It is the MCP logo.".into()),
    ]);
    let everything = tools::flag("ev", &tools::everything());
    let out = chat(&s.path, &provider, &["chat", "--model", "openai:loopback", "--mcp", &everything, "-m", "show me"]);
    assert!(out.status.success(), "{}", text(&out));
    let received = provider.received();
    let offered: Vec<&str> =
        received[0]["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    assert!(offered.contains(&"ev_get_tiny_image"), "{offered:?}");

    // The tool's words in its result; its image in the user message after it.
    let messages = received[1]["messages"].as_array().unwrap();
    let result = messages.iter().find(|m| m["role"] == "tool").expect("the tool's result");
    assert!(result["content"].as_str().unwrap().contains("Here's the image you requested:"), "{result}");
    let images = image_urls(&user_parts(&received[1]));
    assert_eq!(images.len(), 1, "{messages:?}");
    assert!(images[0].starts_with("data:image/png;base64,iVBORw0KGgo"), "{}", &images[0][..40]);
    assert!(text(&out).contains("assistant: It is the MCP logo."), "{}", text(&out));
}

#[test]
fn a_provider_that_refuses_images_is_sent_a_placeholder_and_the_person_is_told_once() {
    let s = common::space();
    let dot = file(&s.path, "dot.png", PNG);
    let provider = Provider::start(vec![
        Reply::Blind("I see a note of a PNG.".into()),
        Reply::Blind("I see a note of a PNG.".into()),
        Reply::Blind("Still a note.".into()),
    ]);
    let out = chat(
        &s.path,
        &provider,
        &[
            "chat",
            "--model",
            "openai:loopback",
            "--attach",
            dot.to_str().unwrap(),
            "-m",
            "what is it?",
            "-m",
            "and now?",
        ],
    );
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    let told = "⋯ openai:loopback does not take images or documents (it said: image input is not supported";
    assert_eq!(said.matches(told).count(), 1, "told once: {said}");
    assert!(said.contains("it reads a note of each instead (dot.png)"), "{said}");
    assert!(said.contains("assistant: Still a note."), "{said}");
    let received = provider.received();
    assert_eq!(received.len(), 3, "refused once, then a placeholder each time");
    let note = json!({"type": "text", "text": "[dot.png (image/png, 21 bytes): not shown, this model cannot read it]"});
    for body in &received[1..] {
        let parts = user_parts(body);
        assert!(image_urls(&parts).is_empty() && parts.contains(&note), "{parts:?}");
    }
}

#[test]
fn the_offline_model_says_it_cannot_see_an_image() {
    let s = common::space();
    let dot = file(&s.path, "dot.png", PNG);
    let said = common::ok(&s.path, &["chat", "--attach", dot.to_str().unwrap(), "-m", ""]);
    assert!(said.contains("you attached dot.png (image/png, 21 bytes)"), "{said}");
    assert!(said.contains("I cannot see images or read files"), "{said}");
}
