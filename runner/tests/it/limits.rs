//! Limits on what enters the runtime, and that a space stays loadable whatever it holds:
//! deep values, deep data read through links, charm names.

use std::path::Path as FsPath;

use serde_json::{json, Value as Json};
use trellis_runner::prelude::*;
use trellis_runner::{Error, MAX_DEPTH};

/// `levels` arrays nested in each other around a number.
fn nested(levels: usize) -> Json {
    (0..levels).fold(json!(1), |inner, _| json!([inner]))
}

/// A pattern with a `put` stream that stores whatever event it gets under `stored`.
fn keeper() -> Pattern {
    Pattern::new("keeper", |b, _: Json| {
        b.name("Keeper")?;
        let stored = b.state("stored", Json::Null)?;
        b.handler_json(
            "put",
            None,
            std::sync::Arc::new(move |tx, event| {
                stored.set(tx, event)?;
                Ok(None)
            }),
        )?;
        Ok(())
    })
}

fn open(path: &FsPath) -> Runtime {
    let rt = Runtime::open(path).unwrap();
    rt.register_pattern(keeper());
    rt
}

#[test]
fn a_space_that_already_holds_a_125_deep_value_still_opens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("space.sqlite");
    drop(open(&path)); // creates the file and its table
                       // What a space written before the limit could hold: `charm new keeper --arg
                       // items=<125 levels>` stored its argument inside its record in the `charms` document.
    let text = json!({"c1": {"pattern": "keeper", "argument": {"items": nested(125)}}}).to_string();
    assert!(serde_json::from_str::<Json>(&text).is_err(), "the document is past serde_json's recursion limit");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(trellis_runner::storage::UPSERT, rusqlite::params!["charms", 1, text]).unwrap();
    drop(conn);

    let rt = open(&path);
    let argument = rt.read(&Link::new("charms", trellis_runner::Path::new(["c1", "argument", "items"]))).unwrap();
    assert_eq!(argument.to_json(), nested(125));
    // The space is usable, not merely loaded.
    let id = rt.charms().create("keeper", json!({})).unwrap();
    assert_eq!(rt.charms().get(&id).unwrap()["$NAME"], "Keeper");
}

#[tokio::test]
async fn a_too_deep_event_is_refused_and_changes_nothing_and_the_deepest_allowed_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("space.sqlite");
    let id = {
        let rt = open(&path);
        let id = rt.charms().create("keeper", json!({})).unwrap();
        let put = rt.charms().result(&id).child("put");
        let err = rt.send(&put, nested(MAX_DEPTH + 1)).await.unwrap_err();
        assert!(matches!(&err, Error::TooDeep { limit: MAX_DEPTH, .. }), "{err}");
        assert!(err.to_string().contains(&format!("the event for {put}")), "{err}");
        assert_eq!(rt.charms().get(&id).unwrap()["stored"], Json::Null, "nothing was written");
        let err = rt.send_and_forget(&put, nested(MAX_DEPTH + 1)).unwrap_err();
        assert!(matches!(&err, Error::TooDeep { .. }), "{err}");
        rt.send(&put, nested(MAX_DEPTH)).await.unwrap();
        id
    };
    // Written at its path inside the charm's document, the deepest event allowed is still
    // loaded back by the next open.
    let rt = open(&path);
    assert_eq!(rt.charms().get(&id).unwrap()["stored"], nested(MAX_DEPTH));
}

#[test]
fn a_too_deep_argument_is_refused_and_leaves_no_charm() {
    let rt = Runtime::in_memory();
    rt.register_pattern(keeper());
    let err = rt.charms().create("keeper", json!({"x": nested(MAX_DEPTH)})).unwrap_err();
    assert!(matches!(&err, Error::TooDeep { .. }), "{err}");
    assert!(err.to_string().contains("the argument for pattern `keeper`"), "{err}");
    assert!(rt.charms().list().is_empty());
}

#[test]
fn deep_plain_data_reads_and_a_real_link_loop_is_still_a_loop() {
    let rt = Runtime::in_memory();
    let deep = (0..100).fold(json!("bottom"), |inner, _| json!({ "next": inner }));
    let cell = rt.new_cell("deep", deep.clone()).unwrap();
    assert_eq!(rt.read_deep(cell.link()).unwrap().to_json(), deep, "100 levels of data, no links at all");

    let a = Link::new("a", trellis_runner::Path::root());
    let b = Link::new("b", trellis_runner::Path::root());
    rt.transact(|tx| {
        tx.write(&a, json!({"to_b": b.to_json()}).into())?;
        tx.write(&b, json!({"to_a": a.to_json()}).into())
    })
    .unwrap();
    let err = rt.read_deep(&a).unwrap_err();
    assert!(matches!(err, Error::LinkLoop(_)), "{err}");
}

#[test]
fn a_write_that_would_make_a_document_unloadable_is_refused() {
    let rt = Runtime::in_memory();
    let cell = rt.new_cell("doc", json!({})).unwrap();
    let far = cell.link().child("a");
    let too_deep = Value::from(nested(trellis_runner::depth::MAX_DOC_DEPTH));
    let err = rt.transact(|tx| tx.write(&far, too_deep.clone())).unwrap_err();
    assert!(matches!(err, Error::TooDeep { .. }), "{err}");
    assert_eq!(cell.get(&rt).unwrap(), json!({}));
}

#[test]
fn charm_names_are_checked_where_they_are_given() {
    let rt = Runtime::in_memory();
    rt.register_pattern(keeper());
    let long = "n".repeat(trellis_runner::charm::MAX_NAME_CHARS + 1);
    for bad in ["", "   ", "clear\u{1b}[2J", "two\nlines", long.as_str()] {
        let err = rt.charms().create_named("keeper", json!({}), Some(bad)).unwrap_err();
        assert!(matches!(err, Error::BadName { .. }), "{bad:?}: {err}");
        assert!(!err.to_string().contains('\u{1b}'), "the message escapes what it shows: {err}");
    }
    assert!(rt.charms().list().is_empty(), "no charm was made with a bad name");

    let id = rt.charms().create_named("keeper", json!({}), Some("  Shelf  ")).unwrap();
    assert_eq!(rt.charms().name(&id), "Shelf", "surrounding white space is dropped");
    let err = rt.charms().rename(&id, "\u{7}bell").unwrap_err();
    assert!(matches!(err, Error::BadName { reason: "it contains control characters", .. }), "{err}");
    assert_eq!(rt.charms().name(&id), "Shelf", "a refused rename changes nothing");
    rt.charms().rename(&id, &"m".repeat(trellis_runner::charm::MAX_NAME_CHARS)).unwrap();

    // A pattern's own name goes through the same check, and its error is not swallowed.
    rt.register_pattern(Pattern::new("nameless", |b, _: Json| {
        b.name(" ")?;
        Ok(())
    }));
    let err = rt.charms().create("nameless", json!({})).unwrap_err();
    assert!(err.to_string().contains("it is empty"), "{err}");
}
