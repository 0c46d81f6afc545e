//! A counter charm driven the way a pattern author drives it.

use serde_json::json;
use trellis::patterns::counter::counter;
use trellis::prelude::*;
use trellis::runner::Error;

fn runtime() -> Runtime {
    let rt = Runtime::in_memory();
    rt.register_pattern(counter());
    rt
}

#[tokio::test]
async fn increment_updates_count_and_the_derived_label_follows() {
    let rt = runtime();
    let id = rt.charms().create("counter", json!({"start": 2})).unwrap();
    assert_eq!(rt.charms().get(&id).unwrap()["label"], "Count: 2");

    let result = rt.charms().result(&id);
    let sent = rt.send(&result.child("increment"), json!({"amount": 3})).await.unwrap();
    assert_eq!(sent.changes.len(), 1, "one document changed: {:?}", sent.changes);

    let snapshot = rt.charms().get(&id).unwrap();
    assert_eq!(snapshot["count"], 5);
    assert_eq!(snapshot["label"], "Count: 5", "derived label settled before send returned");
    assert_eq!(snapshot["$NAME"], "Counter");
    assert!(snapshot["increment"]["$stream"]["schema"]["properties"]["amount"].is_object());

    rt.send(&result.child("decrement"), json!({})).await.unwrap();
    rt.send(&result.child("reset"), json!({})).await.unwrap();
    assert_eq!(rt.charms().get(&id).unwrap()["label"], "Count: 0");
}

#[tokio::test]
async fn typed_streams_and_cells_work_from_outside() {
    let rt = runtime();
    let id = rt.charms().create("counter", json!(null)).unwrap();
    let result = rt.charms().result(&id);
    let increment: Stream<serde_json::Value> = Stream::from_link(result.child("increment"));
    increment.send(&rt, json!({"amount": 7})).await.unwrap();
    let count: Cell<i64> = Cell::from_link(result.child("count"));
    assert_eq!(count.get(&rt).unwrap(), 7);
}

#[tokio::test]
async fn a_bad_event_is_refused_and_changes_nothing() {
    let rt = runtime();
    let id = rt.charms().create("counter", json!({})).unwrap();
    let result = rt.charms().result(&id);
    let err = rt.send(&result.child("increment"), json!({"amount": "lots"})).await.unwrap_err();
    assert!(matches!(err, Error::BadEvent { .. }), "{err}");
    assert_eq!(rt.charms().get(&id).unwrap()["count"], 0);
}

#[tokio::test]
async fn an_event_to_a_stream_without_a_charm_fails_loudly() {
    let rt = runtime();
    let nowhere = Link::new("no-such-doc", Path::new(["increment"]));
    let err = rt.send(&nowhere, json!({})).await.unwrap_err();
    assert!(matches!(err, Error::NoHandler(_)), "{err}");
}

#[tokio::test]
async fn a_stopped_charm_is_started_by_its_next_event() {
    let rt = runtime();
    let id = rt.charms().create("counter", json!({})).unwrap();
    rt.charms().stop(&id).unwrap();
    assert!(!rt.charms().is_running(&id));
    rt.send(&rt.charms().result(&id).child("increment"), json!({"amount": 2})).await.unwrap();
    assert!(rt.charms().is_running(&id));
    assert_eq!(rt.charms().get(&id).unwrap()["label"], "Count: 2");
}

#[tokio::test]
async fn charms_are_listed_found_and_renamed() {
    let rt = runtime();
    let a = rt.charms().create("counter", json!({})).unwrap();
    let b = rt.charms().create_named("counter", json!({}), Some("Score")).unwrap();
    assert_eq!(rt.charms().find("Score").unwrap(), b);
    assert_eq!(rt.charms().find(&a).unwrap(), a);
    rt.charms().rename(&a, "Steps").unwrap();
    let names: Vec<String> = rt.charms().list().into_iter().map(|c| c.name).collect();
    assert_eq!(names, ["Score", "Steps"]);
    // Renaming survives a rebuild of the charm.
    rt.charms().stop(&a).unwrap();
    rt.charms().start(&a).unwrap();
    assert_eq!(rt.charms().name(&a), "Steps");
    assert!(matches!(rt.charms().create("nope", json!({})), Err(Error::UnknownPattern(_))));
    assert!(matches!(rt.charms().create("counter", json!({"start": "x"})), Err(Error::BadArgument { .. })));
    assert_eq!(rt.charms().list().len(), 2, "a rejected argument leaves no charm behind");
}

#[tokio::test]
async fn two_charms_with_the_same_name_make_find_ambiguous() {
    let rt = runtime();
    rt.charms().create("counter", json!({})).unwrap();
    rt.charms().create("counter", json!({})).unwrap();
    let err = rt.charms().find("Counter").unwrap_err();
    assert!(matches!(&err, Error::AmbiguousCharm { ids, .. } if ids.len() == 2), "{err}");
    assert!(err.to_string().contains("use one of their ids"), "{err}");
}

#[tokio::test]
async fn signals_follow_committed_values() {
    use futures::StreamExt;
    use futures_signals::signal::SignalExt;

    let rt = runtime();
    let id = rt.charms().create("counter", json!({})).unwrap();
    let label: Cell<String> = Cell::from_link(rt.charms().result(&id).child("label"));
    let mut values = label.signal(&rt).to_stream();
    assert_eq!(values.next().await, Some(Some("Count: 0".to_string())));
    rt.send(&rt.charms().result(&id).child("increment"), json!({"amount": 4})).await.unwrap();
    assert_eq!(values.next().await, Some(Some("Count: 4".to_string())));
}
