//! A durable space survives the process: charms, their state and their handlers.

use serde_json::json;
use trellis::patterns::{counter::counter, todo::todo};
use trellis::prelude::*;

fn open(path: &std::path::Path) -> Runtime {
    let rt = Runtime::open(path).unwrap();
    rt.register_pattern(counter());
    rt.register_pattern(todo());
    rt
}

#[tokio::test]
async fn charms_and_their_handlers_work_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("space.sqlite");
    let (counter_id, todo_id) = {
        let rt = open(&path);
        let c = rt.charms().create("counter", json!({"start": 10})).unwrap();
        let t = rt.charms().create_named("todo", json!({}), Some("Chores")).unwrap();
        rt.send(&rt.charms().result(&c).child("increment"), json!({"amount": 5})).await.unwrap();
        rt.send(&rt.charms().result(&t).child("add"), json!({"title": "dishes"})).await.unwrap();
        (c, t)
    }; // the runtime and its SQLite writer are dropped here: a clean shutdown

    let rt = open(&path);
    assert!(!rt.charms().is_running(&counter_id), "nothing runs until needed");
    let listed: Vec<(String, String)> = rt.charms().list().into_iter().map(|c| (c.name, c.pattern)).collect();
    assert_eq!(listed, [("Chores".to_string(), "todo".to_string()), ("Counter".to_string(), "counter".to_string())]);
    assert_eq!(rt.charms().get(&counter_id).unwrap()["label"], "Count: 15");

    // The first event starts the charm from its stored record; state is kept, not reset.
    rt.send(&rt.charms().result(&counter_id).child("increment"), json!({"amount": 1})).await.unwrap();
    assert_eq!(rt.charms().get(&counter_id).unwrap()["label"], "Count: 16");
    rt.send(&rt.charms().result(&todo_id).child("add"), json!({"title": "laundry"})).await.unwrap();
    let todo = rt.charms().get(&todo_id).unwrap();
    assert_eq!(todo["remaining"], 2);
    assert_eq!(todo["$NAME"], "Chores", "a given name survives the rebuild");
}

#[tokio::test]
async fn a_charm_whose_pattern_is_gone_fails_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("space.sqlite");
    let id = open(&path).charms().create("counter", json!({})).unwrap();
    let rt = Runtime::open(&path).unwrap(); // no patterns registered
    let err = rt.send(&rt.charms().result(&id).child("increment"), json!({})).await.unwrap_err();
    assert!(err.to_string().contains("unknown pattern `counter`"), "{err}");
    assert_eq!(rt.charms().get(&id).unwrap()["count"], 0, "the data is still there");
}
