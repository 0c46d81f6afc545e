//! The `notes` and `dice` reference charms, driven the way a user (or a model) drives them.

use serde_json::{json, Value as Json};
use trellis::patterns::{dice::dice, notes::notes};
use trellis::prelude::*;

fn runtime() -> Runtime {
    let rt = Runtime::in_memory();
    rt.register_pattern(notes());
    rt.register_pattern(dice());
    rt
}

async fn send(rt: &Runtime, id: &str, handler: &str, event: Json) -> Result<(), String> {
    let at = rt.charms().result(&id.into()).child(handler);
    rt.send(&at, event).await.map(|_| ()).map_err(|e| e.to_string())
}

fn titles(snapshot: &Json, key: &str) -> Vec<String> {
    snapshot[key].as_array().unwrap().iter().map(|n| n["title"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn notes_add_edit_delete_and_search() {
    let rt = runtime();
    let id = rt.charms().create("notes", json!({})).unwrap();
    for (title, body) in [("Shopping", "milk, eggs"), ("Ideas", "a Rust MILK parser"), ("Call", "dentist")] {
        send(&rt, &id, "add", json!({"title": title, "body": body})).await.unwrap();
    }
    let snapshot = rt.charms().get(&id).unwrap();
    assert_eq!(snapshot["$NAME"], "Notes");
    assert_eq!(snapshot["count"], 3);
    assert_eq!(snapshot["notes"][1], json!({"id": 2, "title": "Ideas", "body": "a Rust MILK parser"}));

    // Only the given fields change.
    send(&rt, &id, "edit", json!({"id": 3, "body": "dentist at 4"})).await.unwrap();
    send(&rt, &id, "edit", json!({"id": 1, "title": "Groceries"})).await.unwrap();
    let snapshot = rt.charms().get(&id).unwrap();
    assert_eq!(snapshot["notes"][2], json!({"id": 3, "title": "Call", "body": "dentist at 4"}));
    assert_eq!(snapshot["notes"][0], json!({"id": 1, "title": "Groceries", "body": "milk, eggs"}));

    // Search is a case-insensitive substring of the title or the body.
    send(&rt, &id, "search", json!({"query": "Milk"})).await.unwrap();
    assert_eq!(titles(&rt.charms().get(&id).unwrap(), "results"), ["Groceries", "Ideas"]);
    send(&rt, &id, "search", json!({"query": "CALL"})).await.unwrap();
    assert_eq!(titles(&rt.charms().get(&id).unwrap(), "results"), ["Call"]);
    send(&rt, &id, "search", json!({"query": "nothing like this"})).await.unwrap();
    assert_eq!(rt.charms().get(&id).unwrap()["results"], json!([]));

    // Deleted ids are never given out again.
    send(&rt, &id, "delete", json!({"id": 3})).await.unwrap();
    send(&rt, &id, "add", json!({"title": "Later"})).await.unwrap();
    let snapshot = rt.charms().get(&id).unwrap();
    let ids: Vec<u64> = snapshot["notes"].as_array().unwrap().iter().map(|n| n["id"].as_u64().unwrap()).collect();
    assert_eq!(ids, [1, 2, 4]);
    assert_eq!(snapshot["notes"][2]["body"], "", "body defaults to empty");
    assert_eq!(snapshot["count"], 3);
}

#[tokio::test]
async fn notes_errors_are_clear_and_change_nothing() {
    let rt = runtime();
    let id = rt.charms().create("notes", json!({"title": "Journal"})).unwrap();
    let err = send(&rt, &id, "delete", json!({"id": 1})).await.unwrap_err();
    assert!(err.contains("no note with id 1; there are no notes"), "{err}");
    send(&rt, &id, "add", json!({"title": "a", "body": "x"})).await.unwrap();
    send(&rt, &id, "add", json!({"title": "b", "body": "y"})).await.unwrap();
    let before = rt.charms().get(&id).unwrap();
    assert_eq!(before["$NAME"], "Journal");

    let err = send(&rt, &id, "edit", json!({"id": 7, "title": "z"})).await.unwrap_err();
    assert!(err.contains("no note with id 7; ids are 1, 2"), "{err}");
    let err = send(&rt, &id, "delete", json!({"id": 7})).await.unwrap_err();
    assert!(err.contains("no note with id 7; ids are 1, 2"), "{err}");
    let err = send(&rt, &id, "edit", json!({"id": 1})).await.unwrap_err();
    assert!(err.contains("nothing to change"), "{err}");
    let err = send(&rt, &id, "add", json!({"body": "no title"})).await.unwrap_err();
    assert!(err.contains("title"), "{err}");
    assert_eq!(rt.charms().get(&id).unwrap(), before);
}

#[tokio::test]
async fn notes_event_schemas_carry_their_doc_comments() {
    let rt = runtime();
    let id = rt.charms().create("notes", json!({})).unwrap();
    let snapshot = rt.charms().get(&id).unwrap();
    let search = &snapshot["search"]["$stream"]["schema"];
    assert!(
        search["description"].as_str().unwrap().contains("Returns the\nmatches")
            || search["description"].as_str().unwrap().contains("Returns the matches"),
        "{search}"
    );
    assert_eq!(search["properties"]["query"]["description"], "The text to look for.");
    let edit = &snapshot["edit"]["$stream"]["schema"];
    assert_eq!(edit["required"], json!(["id"]), "title and body are optional: {edit}");
}

fn last(rt: &Runtime, id: &str) -> Json {
    rt.charms().get(id).unwrap()["last"].clone()
}

fn rolls(outcome: &Json) -> Vec<u64> {
    outcome["rolls"].as_array().unwrap().iter().map(|r| r.as_u64().unwrap()).collect()
}

#[tokio::test]
async fn dice_with_a_seed_are_repeatable_and_totals_add_up() {
    let rt = runtime();
    let a = rt.charms().create("dice", json!({"seed": 42})).unwrap();
    let b = rt.charms().create("dice", json!({"seed": 42})).unwrap();
    let c = rt.charms().create("dice", json!({"seed": 43})).unwrap();
    assert_eq!(rt.charms().get(&a).unwrap()["$NAME"], "Dice");
    for id in [&a, &b, &c] {
        send(&rt, id, "roll", json!({"count": 10, "sides": 20})).await.unwrap();
    }
    let outcome = last(&rt, &a);
    assert_eq!(outcome, last(&rt, &b), "same seed, same rolls");
    assert_ne!(rolls(&outcome), rolls(&last(&rt, &c)), "another seed, other rolls");
    assert_eq!((outcome["count"].clone(), outcome["sides"].clone()), (json!(10), json!(20)));
    let faces = rolls(&outcome);
    assert_eq!(faces.len(), 10);
    assert!(faces.iter().all(|f| (1..=20).contains(f)), "{faces:?}");
    assert_eq!(outcome["total"].as_u64().unwrap(), faces.iter().sum::<u64>());

    // Defaults: one six-sided die.
    send(&rt, &a, "roll", json!({})).await.unwrap();
    let outcome = last(&rt, &a);
    assert_eq!((outcome["count"].clone(), outcome["sides"].clone()), (json!(1), json!(6)));
    assert!((1..=6).contains(&outcome["total"].as_u64().unwrap()));
    assert_eq!(rt.charms().get(&a).unwrap()["history"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn dice_refuse_out_of_range_rolls_and_change_nothing() {
    let rt = runtime();
    let id = rt.charms().create("dice", json!({"seed": 1})).unwrap();
    send(&rt, &id, "roll", json!({"count": 2})).await.unwrap();
    let before = rt.charms().get(&id).unwrap();
    for (event, message) in [
        (json!({"count": 0}), "count must be from 1 to 100, got 0"),
        (json!({"count": 101}), "count must be from 1 to 100, got 101"),
        (json!({"sides": 1}), "sides must be from 2 to 1000, got 1"),
        (json!({"sides": 1001}), "sides must be from 2 to 1000, got 1001"),
    ] {
        let err = send(&rt, &id, "roll", event).await.unwrap_err();
        assert!(err.contains(message), "{err}");
    }
    let err = send(&rt, &id, "roll", json!({"count": -1})).await.unwrap_err();
    assert!(err.contains("does not fit the handler's event type"), "{err}");
    assert_eq!(rt.charms().get(&id).unwrap(), before, "rng, last and history unchanged");
    // The extremes are allowed.
    send(&rt, &id, "roll", json!({"count": 100, "sides": 1000})).await.unwrap();
    send(&rt, &id, "roll", json!({"count": 1, "sides": 2})).await.unwrap();
}

#[tokio::test]
async fn dice_history_keeps_the_last_20_totals() {
    let rt = runtime();
    let id = rt.charms().create("dice", json!({"seed": 7})).unwrap();
    let mut totals = Vec::new();
    for _ in 0..25 {
        send(&rt, &id, "roll", json!({"count": 3})).await.unwrap();
        totals.push(last(&rt, &id)["total"].clone());
    }
    let history = rt.charms().get(&id).unwrap()["history"].clone();
    assert_eq!(history, Json::Array(totals[5..].to_vec()));
}

#[tokio::test]
async fn dice_event_schema_carries_doc_comments_and_ranges() {
    let rt = runtime();
    let id = rt.charms().create("dice", json!({})).unwrap();
    let roll = rt.charms().get(&id).unwrap()["roll"]["$stream"]["schema"].clone();
    assert!(roll["description"].as_str().unwrap().starts_with("Roll `count` dice"), "{roll}");
    let count = &roll["properties"]["count"];
    assert_eq!(
        (count["minimum"].clone(), count["maximum"].clone(), count["default"].clone()),
        (json!(1), json!(100), json!(1))
    );
    assert!(count["description"].as_str().unwrap().contains("How many dice"), "{count}");
    let sides = &roll["properties"]["sides"];
    assert_eq!(
        (sides["minimum"].clone(), sides["maximum"].clone(), sides["default"].clone()),
        (json!(2), json!(1000), json!(6))
    );
}

#[tokio::test]
async fn dice_without_a_seed_differ_between_charms() {
    let rt = runtime();
    let a = rt.charms().create("dice", json!({})).unwrap();
    let b = rt.charms().create("dice", json!({})).unwrap();
    assert_ne!(rt.charms().get(&a).unwrap()["$rng"], rt.charms().get(&b).unwrap()["$rng"]);
}

#[tokio::test]
async fn dice_continue_their_sequence_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("space.sqlite");
    let open = || {
        let rt = Runtime::open(&path).unwrap();
        rt.register_pattern(dice());
        rt
    };
    let roll = json!({"count": 20, "sides": 1000});
    let (id, first) = {
        let rt = open();
        let id = rt.charms().create("dice", json!({"seed": 99})).unwrap();
        send(&rt, &id, "roll", roll.clone()).await.unwrap();
        let first = last(&rt, &id);
        (id, first)
    }; // clean shutdown

    let rt = open();
    assert_eq!(last(&rt, &id), first, "the last roll is stored");
    send(&rt, &id, "roll", roll.clone()).await.unwrap();
    let after = last(&rt, &id);
    assert_ne!(rolls(&after), rolls(&first), "the rng state continued instead of restarting from the seed");
    assert_eq!(rt.charms().get(&id).unwrap()["history"], json!([first["total"], after["total"]]));

    // The same two rolls, without a restart in between, give the same numbers.
    let fresh = runtime();
    let twin = fresh.charms().create("dice", json!({"seed": 99})).unwrap();
    send(&fresh, &twin, "roll", roll.clone()).await.unwrap();
    assert_eq!(last(&fresh, &twin), first);
    send(&fresh, &twin, "roll", roll).await.unwrap();
    assert_eq!(last(&fresh, &twin), after);
}
