//! Handlers that answer: what a handler returns reaches whoever sent the event, once its
//! transaction committed and the computations it affected ran; its schema is stored with
//! the stream beside the event schema.

use serde_json::{json, Value as Json};
use trellis_runner::link::{stream_result_schema, stream_schema};
use trellis_runner::prelude::*;
use trellis_runner::{Error, MAX_DEPTH};

/// Add a note.
#[derive(Serialize, Deserialize, JsonSchema)]
struct Add {
    /// What the note says.
    text: String,
}

/// The note added.
#[derive(Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
struct Added {
    /// Its number, from 0.
    id: usize,
    /// How many notes there are now, as the derived count says after the change.
    count: usize,
}

/// Do nothing.
#[derive(Serialize, Deserialize, JsonSchema)]
struct Nothing {}

/// Notes with an `add` that answers with the new note, a `clear` that answers nothing,
/// and a `deep` that answers with a value nested past the limit.
fn notes() -> Pattern {
    Pattern::new("notes", |b, _: Json| {
        let notes = b.state("notes", Vec::<String>::new())?;
        let count = b.derive("count", move |tx| Ok(notes.get(tx)?.len()))?;
        b.handler("add", move |tx, e: Add| -> Result<Added> {
            let id = notes.get(tx)?.len();
            notes.push(tx, e.text)?;
            Ok(Added { id, count: count.get(tx)? + 1 })
        })?;
        b.handler("clear", move |tx, _: Nothing| notes.set(tx, Vec::new()))?;
        b.handler("deep", move |tx, _: Nothing| -> Result<Json> {
            notes.push(tx, "never kept".into())?;
            Ok((0..MAX_DEPTH + 10).fold(json!(1), |inner, _| json!([inner])))
        })?;
        Ok(())
    })
}

fn started() -> (Runtime, trellis_runner::DocId) {
    let rt = Runtime::in_memory();
    rt.register_pattern(notes());
    let id = rt.charms().create("notes", Json::Null).unwrap();
    (rt, id)
}

#[test]
fn a_sender_gets_what_the_handler_returned() {
    let (rt, id) = started();
    let add = rt.charms().result(&id).child("add");
    let sent = futures::executor::block_on(rt.send(&add, json!({"text": "milk"}))).unwrap();
    assert_eq!(sent.returned, Some(json!({"id": 0, "count": 1})));

    // Typed, through a stream handle of the handler's event and result types.
    let typed: Stream<Add, Added> = Stream::from_link(add);
    let added = futures::executor::block_on(typed.call(&rt, Add { text: "eggs".into() })).unwrap();
    assert_eq!(added, Added { id: 1, count: 2 });
    // The derived count ran before the answer came back.
    assert_eq!(rt.read(&rt.charms().result(&id).child("count")).unwrap(), Value::from(2));
}

#[test]
fn a_handler_that_returns_nothing_answers_none() {
    let (rt, id) = started();
    let clear = rt.charms().result(&id).child("clear");
    let sent = futures::executor::block_on(rt.send(&clear, json!({}))).unwrap();
    assert_eq!(sent.returned, None);
    let typed: Stream<Nothing> = Stream::from_link(clear);
    futures::executor::block_on(typed.call(&rt, Nothing {})).unwrap();
}

#[test]
fn the_result_schema_is_stored_with_the_stream_beside_the_event_schema() {
    let (rt, id) = started();
    let data = rt.read_deep(&rt.charms().result(&id)).unwrap().to_json();
    let result = stream_result_schema(&data["add"]).expect("add declares a result");
    assert_eq!(result["properties"]["id"]["description"], "Its number, from 0.");
    assert!(stream_schema(&data["add"]).unwrap().is_some(), "the event schema is still there");
    assert_eq!(stream_result_schema(&data["clear"]), None, "clear returns nothing");
    let handler = rt.handler(&rt.charms().result(&id).child("add")).unwrap();
    assert_eq!(handler.result_schema.as_ref(), Some(result));
}

#[test]
fn an_answer_nested_too_deep_fails_the_handler_and_keeps_nothing() {
    let (rt, id) = started();
    let deep = rt.charms().result(&id).child("deep");
    let error = futures::executor::block_on(rt.send(&deep, json!({}))).unwrap_err();
    assert!(matches!(error, Error::HandlerFailed { .. }), "{error}");
    assert!(error.to_string().contains("returned"), "{error}");
    let notes = rt.read(&rt.charms().result(&id).child("notes")).unwrap();
    assert_eq!(notes, Value::from(json!([])), "the push was rolled back");
}

#[test]
fn a_typed_call_whose_answer_does_not_fit_its_type_says_where() {
    let (rt, id) = started();
    let add: Stream<Add, String> = Stream::from_link(rt.charms().result(&id).child("add"));
    let error = futures::executor::block_on(add.call(&rt, Add { text: "milk".into() })).unwrap_err();
    assert!(matches!(error, Error::Shape { .. }), "{error}");
}
