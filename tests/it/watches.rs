//! Standing watches, driven as a user would: a model (an OpenAI-compatible server on
//! loopback that replays calls) sets a watch with its `watch` tool through `trellis chat`;
//! `trellis charm send`, each a process of its own, changes the charm; the watch fires once
//! when its condition turns true, the message waits (`trellis pending`), and the next
//! `trellis chat` starts a turn with it.

use crate::common::provider::{Provider, Reply};

use crate::common::{fails, json_of, ok, space};
use serde_json::json;

fn add(space: &std::path::Path, amount: i64) {
    ok(space, &["charm", "send", "Counter", "increment", &json!({ "amount": amount }).to_string()]);
}

#[test]
fn a_watch_fires_once_when_its_condition_turns_true_across_processes_and_starts_a_turn() {
    let s = space();
    assert_eq!(json_of(&s.path, &["charm", "get", "Counter"])["count"], 0);
    let provider = Provider::start(vec![
        Reply::Call("watch".into(), json!({"charm": "Counter", "condition": "count >", "note": "tell me"})),
        Reply::Call("watch".into(), json!({"charm": "Counter", "condition": "count > 10", "note": "tell me"})),
        Reply::Text("I will tell you when it passes 10.".into()),
        Reply::Text("The count passed 10: it is 12.".into()),
        Reply::Text("Nothing else.".into()),
    ]);
    provider.chat(&s.path, "@Counter tell me when the count passes 10");
    // The first condition was no CEL: the model was told why, and tried again.
    let received = provider.received();
    assert!(received[1]["messages"].to_string().contains("not CEL"), "{}", received[1]["messages"]);
    let watches = json_of(&s.path, &["watch", "list"]);
    assert_eq!(watches.as_array().map(Vec::len), Some(1), "{watches}");
    assert_eq!((watches[0]["id"].clone(), watches[0]["holds"].clone()), (json!("w1"), json!(false)));

    add(&s.path, 5);
    add(&s.path, 4);
    assert!(json_of(&s.path, &["pending"])["fired"].as_array().is_some_and(Vec::is_empty));
    add(&s.path, 3);
    let pending = json_of(&s.path, &["pending"]);
    let fired = pending["fired"].as_array().cloned().unwrap_or_default();
    assert_eq!(fired.len(), 1, "{pending}");
    let text = fired[0]["text"].as_str().unwrap_or_default().to_string();
    assert_eq!(text, "watch w1 on Counter: `count > 10` is now true (count is 12). Your note: tell me");
    assert!(ok(&s.path, &["pending"]).contains("the next `trellis chat` tells the model"));
    add(&s.path, 1); // still true: no second firing

    let said = provider.chat(&s.path, "anything new?");
    assert!(said.contains("your watches fired while no chat ran"), "{said}");
    assert!(said.contains("The count passed 10: it is 12."), "{said}");
    let received = provider.received();
    let told: Vec<usize> =
        (0..received.len()).filter(|n| received[*n]["messages"].to_string().contains("watch w1 on Counter")).collect();
    assert_eq!(told.first(), Some(&3), "the fired message started its own turn: {told:?}");
    assert!(json_of(&s.path, &["pending"])["fired"].as_array().is_some_and(Vec::is_empty), "told once");
    assert_eq!(json_of(&s.path, &["watch", "list"])[0]["fired"], 1);

    // False again, then true again: a second crossing, a second firing.
    ok(&s.path, &["charm", "send", "Counter", "reset", "{}"]);
    add(&s.path, 11);
    let fired = json_of(&s.path, &["pending"])["fired"].clone();
    assert_eq!(fired.as_array().map(Vec::len), Some(1), "{fired}");
    assert!(fired[0]["text"].as_str().is_some_and(|t| t.contains("(count is 11)")), "{fired}");
    assert_eq!(json_of(&s.path, &["watch", "list"])[0]["fired"], 2);

    let removed = json_of(&s.path, &["watch", "remove", "w1"]);
    assert_eq!(removed["removed"]["id"], "w1");
    assert_eq!(json_of(&s.path, &["watch", "list"]), json!([]));
    assert!(json_of(&s.path, &["pending"])["fired"].as_array().is_some_and(Vec::is_empty), "its message went with it");
    assert!(fails(&s.path, &["watch", "remove", "w1"]).contains("no watch w1"));
}
