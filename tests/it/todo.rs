//! A todo list: pushes, nested keys and links.

use serde_json::json;
use trellis::patterns::todo::{todo, Task};
use trellis::prelude::*;

#[tokio::test]
async fn add_complete_rename_remove() {
    let rt = Runtime::in_memory();
    rt.register_pattern(todo());
    let id = rt.charms().create("todo", json!({"title": "Groceries"})).unwrap();
    let at = rt.charms().result(&id);
    for title in ["milk", "eggs", "bread"] {
        rt.send(&at.child("add"), json!({ "title": title })).await.unwrap();
    }
    rt.send(&at.child("complete"), json!({"index": 1})).await.unwrap();
    rt.send(&at.child("rename"), json!({"index": 0, "title": "oat milk"})).await.unwrap();
    let snapshot = rt.charms().get(&id).unwrap();
    assert_eq!(snapshot["$NAME"], "Groceries");
    assert_eq!(snapshot["remaining"], 2);
    assert_eq!(snapshot["items"][1], json!({"title": "eggs", "done": true}));

    rt.send(&at.child("remove"), json!({"index": 1})).await.unwrap();
    let items: Cell<Vec<Task>> = Cell::from_link(at.child("items"));
    let titles: Vec<String> = items.get(&rt).unwrap().into_iter().map(|t| t.title).collect();
    assert_eq!(titles, ["oat milk", "bread"]);
    assert_eq!(rt.charms().get(&id).unwrap()["remaining"], 2);

    let err = rt.send(&at.child("complete"), json!({"index": 9})).await.unwrap_err();
    assert!(err.to_string().contains("there is no task 9"), "{err}");
}

#[test]
fn push_and_nested_keys_on_plain_cells() {
    let rt = Runtime::in_memory();
    let list = rt.new_cell::<Vec<Task>>("list", vec![]).unwrap();
    rt.transact(|tx| {
        list.push(tx, Task { title: "a".into(), done: false })?;
        list.push(tx, Task { title: "b".into(), done: false })
    })
    .unwrap();
    rt.transact(|tx| list.item(1).key::<bool>("done").set(tx, true)).unwrap();
    assert_eq!(list.get(&rt).unwrap()[1], Task { title: "b".into(), done: true });
    assert!(!list.item(0).key::<bool>("done").get(&rt).unwrap());
}

#[test]
fn reads_and_writes_follow_links() {
    let rt = Runtime::in_memory();
    let target = rt.new_cell("target", json!({"name": "first", "inner": {"n": 1}})).unwrap();
    // A document that holds a link to `target`, as a charm argument would.
    let holder = rt.new_cell("holder", json!({"ref": target.link().to_json()})).unwrap();
    let through: Cell<i64> = holder.key::<serde_json::Value>("ref").key::<serde_json::Value>("inner").key("n");
    assert_eq!(through.get(&rt).unwrap(), 1);
    rt.transact(|tx| through.set(tx, 2)).unwrap();
    assert_eq!(target.get(&rt).unwrap()["inner"]["n"], 2, "the write went through the link");

    let snapshot = rt.read_deep(holder.link()).unwrap().to_json();
    assert_eq!(snapshot, json!({"ref": {"name": "first", "inner": {"n": 2}}}), "deep reads resolve links");

    // A derived value that reads through the link re-runs when the target changes.
    let name: Cell<String> = holder.key::<serde_json::Value>("ref").key("name");
    let shout = rt.computed("shout", move |tx| Ok(name.get(tx)?.to_uppercase())).unwrap();
    assert_eq!(shout.get(&rt).unwrap(), "FIRST");
    rt.transact(|tx| target.key::<String>("name").set(tx, "second".into())).unwrap();
    assert_eq!(shout.get(&rt).unwrap(), "SECOND");
}

#[test]
fn cells_hold_cells() {
    #[derive(Clone, Serialize, Deserialize)]
    struct Board {
        title: String,
        tasks: Cell<Vec<Task>>,
    }
    let rt = Runtime::in_memory();
    let tasks = rt.new_cell::<Vec<Task>>("tasks", vec![]).unwrap();
    let board = rt.new_cell("board", Board { title: "b".into(), tasks }).unwrap();
    let read = board.get(&rt).unwrap();
    rt.transact(|tx| read.tasks.push(tx, Task { title: "x".into(), done: false })).unwrap();
    assert_eq!(tasks.get(&rt).unwrap().len(), 1);
}

#[test]
fn schemas_give_defaults_and_references() {
    let rt = Runtime::in_memory();
    let doc = rt.new_cell("doc", json!({"items": [1, 2]})).unwrap();
    let shaped: Cell<serde_json::Value> = doc.cast().with_schema(Schema::new(json!({
        "type": "object",
        "properties": {
            "items": {"asCell": true},
            "limit": {"type": "integer", "default": 10}
        }
    })));
    let value = shaped.get(&rt).unwrap();
    assert_eq!(value["limit"], 10);
    let items: Cell<Vec<i64>> = serde_json::from_value(value["items"].clone()).unwrap();
    assert_eq!(items.get(&rt).unwrap(), vec![1, 2]);
}
