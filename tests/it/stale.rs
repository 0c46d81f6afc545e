//! The model is told what changed behind its back: a field it read, changed by someone
//! else (here `trellis charm send`), is one note in the next request's instructions, once;
//! its own calls' writes, and a conversation where nothing moved, carry none. The model is
//! an OpenAI-compatible server on loopback that records each request.

use crate::common::provider::{Provider, Reply};

use crate::common::{ok, space};
use serde_json::{json, Value};

/// The instructions of request `n` (from 0) the model received.
fn system(provider: &Provider, n: usize) -> String {
    let received = provider.received();
    let messages = received[n]["messages"].as_array().cloned().unwrap_or_default();
    messages.iter().filter(|m| m["role"] == "system").map(|m| m["content"].to_string()).collect::<Vec<_>>().join("\n")
}

#[test]
fn a_field_changed_by_someone_else_is_told_once_and_the_models_own_writes_never() {
    let s = space();
    let provider = Provider::start(vec![
        Reply::Call("Counter_increment".into(), json!({"amount": 1})),
        Reply::Text("Added one.".into()),
        Reply::Text("It is 6 now.".into()),
        Reply::Text("Still 6.".into()),
    ]);
    provider.chat(&s.path, "@Counter add one");
    assert!(!system(&provider, 1).contains("Changed outside"), "its own write is no news: {}", system(&provider, 1));

    ok(&s.path, &["charm", "send", "Counter", "increment", r#"{"amount": 5}"#]);
    provider.chat(&s.path, "@Counter what is it now?");
    let told = system(&provider, 2);
    assert!(told.contains("Counter.count is now 6 (it was 1 when you last read it; changed by charm send)"), "{told}");

    provider.chat(&s.path, "@Counter and now?");
    let again: Value = system(&provider, 3).into();
    assert!(!again.to_string().contains("Changed outside"), "told once: {again}");
}
