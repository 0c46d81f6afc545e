//! Catalog tests against real runtimes, with small patterns defined here (the reference
//! patterns live in `trellis-patterns`, which depends on this crate).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};
use trellis_runner::{Pattern, Runtime};

use super::*;
use crate::invoke::Invocation;
use crate::message::ToolOutput;
use crate::naming::{is_valid_wire_name, MAX_WIRE_LEN};

const TIMEOUT: Duration = Duration::from_secs(5);

/// Increase the count by `amount`.
#[derive(Deserialize, JsonSchema)]
struct Increment {
    /// How much to add.
    amount: i64,
}

#[derive(Deserialize, JsonSchema)]
struct Reset {}

/// Add a note.
#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct AddNote {
    /// The note's text.
    text: String,
    /// How urgent it is.
    priority: Priority,
}

/// How urgent a note is.
#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
enum Priority {
    Low,
    High,
}

/// Wait a while.
#[derive(Deserialize, JsonSchema)]
struct Wait {
    /// Milliseconds.
    ms: u64,
}

#[derive(Deserialize, JsonSchema, Default)]
#[serde(default)]
struct CounterArgs {
    name: Option<String>,
}

/// A counter with `increment`, `reset` (no doc comment), `boom` (panics) and `wait`
/// (sleeps), named by its argument (default "Counter").
fn counter() -> Pattern {
    Pattern::new("counter", |b, args: CounterArgs| {
        b.name(args.name.unwrap_or_else(|| "Counter".into()))?;
        let count = b.state("count", 0i64)?;
        b.lift("label", count, |n: i64| format!("Count: {n}"))?;
        b.handler("increment", move |tx, e: Increment| count.update(tx, |n| n + e.amount))?;
        b.handler("reset", move |tx, _: Reset| count.set(tx, 0))?;
        b.handler("boom", move |tx, _: Reset| -> trellis_runner::Result<()> {
            count.set(tx, -1)?;
            panic!("boom")
        })?;
        b.handler("wait", move |tx, e: Wait| {
            std::thread::sleep(Duration::from_millis(e.ms));
            count.update(tx, |n| n + 100)
        })?;
        Ok(())
    })
}

fn runtime() -> Runtime {
    let rt = Runtime::in_memory();
    rt.register_pattern(counter());
    rt
}

fn charm_entry(rt: &Runtime, id: &str) -> Value {
    json!({ "charm": rt.charms().result(&id.into()).to_json() })
}

fn count(rt: &Runtime, id: &str) -> Value {
    rt.charms().get(id).expect("charm exists")["count"].clone()
}

fn displays(catalog: &Catalog) -> Vec<&str> {
    catalog.tools().iter().map(|t| t.display.as_str()).collect()
}

fn error_text(invocation: &Invocation) -> &str {
    match &invocation.output {
        ToolOutput::ErrorText(text) => text,
        other => panic!("expected an error text, got {other:?}"),
    }
}

fn json_output(invocation: &Invocation) -> &Value {
    match &invocation.output {
        ToolOutput::Json(value) => value,
        other => panic!("expected JSON, got {other:?}"),
    }
}

#[test]
fn a_charm_gives_one_tool_per_handler_and_no_data_tools() {
    let rt = runtime();
    let id = rt.charms().create("counter", json!({})).expect("created");
    let catalog = Catalog::build(&rt, &json!({ "c": charm_entry(&rt, &id) }));
    assert_eq!(displays(&catalog), ["Counter.boom", "Counter.increment", "Counter.reset", "Counter.wait"]);
    assert!(catalog.problems().is_empty(), "{:?}", catalog.problems());
    let tool = catalog.get("Counter_increment").expect("by wire name");
    assert_eq!(tool.charm.as_deref(), Some(&*id));
    assert_eq!(&*tool.entry, "c");
    assert!(!tool.suffixed && !tool.unchecked);
    assert_eq!(tool.target, ToolTarget::Handler { stream: rt.charms().result(&id).child("increment") });
    assert_eq!(
        catalog.specs()[1],
        crate::model::ToolSpec {
            name: "Counter_increment".into(),
            display_name: "Counter.increment".into(),
            description: "Increase the count by `amount`.".into(),
            input_schema: json!({
                "type": "object", "description": "Increase the count by `amount`.",
                "properties": { "amount": { "type": "integer", "format": "int64", "description": "How much to add." } },
                "required": ["amount"], "title": "Increment",
            })
            .into(),
        }
    );
}

#[test]
fn a_charm_listed_twice_gives_its_tools_once_and_a_handler_under_two_keys_gives_two() {
    let rt = runtime();
    let id = rt.charms().create("counter", json!({})).expect("created");
    let increment = rt.charms().result(&id).child("increment").to_json();
    let tools = json!({
        "a": charm_entry(&rt, &id),
        "b": charm_entry(&rt, &id),
        "x": { "handler": increment },
        "y": { "handler": increment },
    });
    let catalog = Catalog::build(&rt, &tools);
    assert_eq!(displays(&catalog), ["Counter.boom", "Counter.increment", "Counter.reset", "Counter.wait", "x", "y"]);
    assert!(catalog.tools().iter().take(4).all(|t| &*t.entry == "a"), "the first listing is kept");
    let wires: Vec<&str> = catalog.tools().iter().map(|t| t.wire.as_str()).collect();
    assert_eq!(wires, ["Counter_boom", "Counter_increment", "Counter_reset", "Counter_wait", "x", "y"]);
    for (index, tool) in catalog.tools().iter().enumerate() {
        assert!(std::ptr::eq(catalog.get(&tool.wire).expect("by wire"), &catalog.tools()[index]));
        assert!(std::ptr::eq(catalog.get(&tool.display).expect("by display"), &catalog.tools()[index]));
    }
}

#[test]
fn a_charm_with_one_handler_and_one_with_only_data() {
    let rt = runtime();
    rt.register_pattern(Pattern::new("one", |b, _: Value| {
        b.name("One")?;
        b.state("n", 1)?;
        b.handler("only", |_, _: Reset| Ok(()))?;
        Ok(())
    }));
    rt.register_pattern(Pattern::new("data", |b, _: Value| {
        b.name("Data")?;
        b.state("n", 1)?;
        b.state("text", "hello".to_string())?;
        b.ui(json!({ "type": "text" }))?;
        Ok(())
    }));
    let one = rt.charms().create("one", json!({})).expect("created");
    let data = rt.charms().create("data", json!({})).expect("created");
    let catalog = Catalog::build(&rt, &json!({ "a": charm_entry(&rt, &one), "b": charm_entry(&rt, &data) }));
    assert_eq!(displays(&catalog), ["One.only"]);
    assert!(catalog.problems().is_empty());
}

#[test]
fn dollar_keys_are_skipped_even_when_they_are_streams() {
    let rt = runtime();
    rt.register_pattern(Pattern::new("hidden", |b, _: Value| {
        b.name("Hidden")?;
        b.handler("$internal", |_, _: Reset| Ok(()))?;
        b.handler("$ID", |_, _: Reset| Ok(()))?;
        b.handler("visible", |_, _: Reset| Ok(()))?;
        Ok(())
    }));
    let id = rt.charms().create("hidden", json!({})).expect("created");
    let catalog = Catalog::build(&rt, &json!({ "h": charm_entry(&rt, &id) }));
    assert_eq!(displays(&catalog), ["Hidden.visible"]);
}

#[test]
fn a_charm_without_name_is_named_by_its_entry_and_ids_work_too() {
    let rt = runtime();
    rt.register_pattern(Pattern::new("anon", |b, _: Value| {
        b.handler("go", |_, _: Reset| Ok(()))?;
        Ok(())
    }));
    let id = rt.charms().create("anon", json!({})).expect("created");
    let catalog = Catalog::build(&rt, &json!({ "Thing": { "charm": &*id } }));
    assert_eq!(displays(&catalog), ["Thing.go"]);
    assert_eq!(catalog.tools()[0].description, "go handler from Thing");
}

#[tokio::test]
async fn two_charms_with_the_same_name_stay_distinct_and_each_changes_only_itself() {
    let rt = runtime();
    let a = rt.charms().create("counter", json!({})).expect("created");
    let b = rt.charms().create("counter", json!({})).expect("created");
    let catalog = Catalog::build(&rt, &json!({ "a": charm_entry(&rt, &a), "b": charm_entry(&rt, &b) }));
    assert_eq!(catalog.len(), 8);
    let increments: Vec<&Tool> = catalog.tools().iter().filter(|t| t.display == "Counter.increment").collect();
    assert_eq!(increments.len(), 2);
    assert_ne!(increments[0].wire, increments[1].wire);
    for tool in &increments {
        assert!(tool.suffixed && tool.wire.starts_with("Counter_increment-"), "{}", tool.wire);
    }
    // The display name is ambiguous now: it finds nothing, and says so.
    assert!(catalog.get("Counter.increment").is_none());
    let ambiguous = catalog.invoke(&rt, "Counter.increment", json!({ "amount": 1 }), TIMEOUT).await;
    assert!(error_text(&ambiguous).contains("names several tools"), "{ambiguous:?}");

    let (wire_a, wire_b) = (increments[0].wire.clone(), increments[1].wire.clone());
    let charm_a = increments[0].charm.clone().expect("charm a");
    let charm_b = increments[1].charm.clone().expect("charm b");
    assert!(!catalog.invoke(&rt, &wire_a, json!({ "amount": 2 }), TIMEOUT).await.is_error());
    assert_eq!((count(&rt, &charm_a), count(&rt, &charm_b)), (json!(2), json!(0)));
    assert!(!catalog.invoke(&rt, &wire_b, json!({ "amount": 7 }), TIMEOUT).await.is_error());
    assert_eq!((count(&rt, &charm_a), count(&rt, &charm_b)), (json!(2), json!(7)));

    // Same names whatever the order of the entries.
    let swapped = Catalog::build(&rt, &json!({ "a": charm_entry(&rt, &b), "b": charm_entry(&rt, &a) }));
    for tool in swapped.tools() {
        assert_eq!(catalog.get(&tool.wire).map(|t| &t.target), Some(&tool.target));
    }
}

#[tokio::test]
async fn names_longer_than_the_limit_get_a_valid_wire_name() {
    let rt = runtime();
    let long = "Very long charm name ".repeat(4); // over the wire limit (64), within the name limit (100)
    let id = rt.charms().create("counter", json!({ "name": long })).expect("created");
    let catalog = Catalog::build(&rt, &json!({ "c": charm_entry(&rt, &id) }));
    let tool = catalog.get(&format!("{}.increment", long.trim())).expect("by display name (names are trimmed)");
    assert!(tool.wire.len() <= MAX_WIRE_LEN && is_valid_wire_name(&tool.wire), "{}", tool.wire);
    assert!(tool.suffixed);
    let wires: std::collections::HashSet<&str> = catalog.tools().iter().map(|t| t.wire.as_str()).collect();
    assert_eq!(wires.len(), 4);
    let wire = tool.wire.clone();
    assert!(!catalog.invoke(&rt, &wire, json!({ "amount": 3 }), TIMEOUT).await.is_error());
    assert_eq!(count(&rt, &id), 3);
}

#[test]
fn schemas_are_prepared_end_to_end() {
    let rt = runtime();
    rt.register_pattern(Pattern::new("notes", |b, _: Value| {
        b.name("Notes")?;
        b.handler("add", |_, _: AddNote| Ok(()))?;
        Ok(())
    }));
    let id = rt.charms().create("notes", json!({})).expect("created");
    let catalog = Catalog::build(&rt, &json!({ "n": charm_entry(&rt, &id) }));
    let tool = catalog.get("Notes.add").expect("tool");
    let text = tool.input_schema.to_string();
    for gone in ["$ref", "$defs", "$schema"] {
        assert!(!text.contains(gone), "{gone} in {text}");
    }
    assert_eq!(tool.description, "Add a note.");
    let priority = &tool.input_schema["properties"]["priority"];
    assert_eq!(priority["description"], "How urgent it is.");
    assert_eq!(priority["enum"], json!(["Low", "High"]), "{priority}");
    assert_eq!(tool.input_schema["required"], json!(["text", "priority"]));
}

#[tokio::test]
async fn descriptions_fall_back_from_entry_to_schema_to_generic() {
    let rt = runtime();
    let id = rt.charms().create("counter", json!({})).expect("created");
    let mut described = charm_entry(&rt, &id);
    described["description"] = json!("Counter tools");
    let catalog = Catalog::build(&rt, &json!({ "c": described }));
    assert_eq!(catalog.get("Counter.increment").map(|t| t.description.as_str()), Some("Counter tools - increment"));

    let catalog = Catalog::build(&rt, &json!({ "c": charm_entry(&rt, &id) }));
    let description = |name: &str| catalog.get(name).map(|t| t.description.clone());
    assert_eq!(description("Counter.increment").as_deref(), Some("Increase the count by `amount`."));
    assert_eq!(description("Counter.reset").as_deref(), Some("reset handler from Counter"));

    // A `{handler}` entry: named by its key, described by the entry, else the schema.
    let stream = rt.charms().result(&id).child("reset").to_json();
    let catalog = Catalog::build(
        &rt,
        &json!({
            "zero": { "handler": stream, "description": "Start over." },
            "zero_again": { "handler": stream },
            "bump": { "handler": rt.charms().result(&id).child("increment").to_json() },
        }),
    );
    assert_eq!(displays(&catalog), ["bump", "zero", "zero_again"]);
    assert_eq!(catalog.tools()[0].description, "Increase the count by `amount`.");
    assert_eq!(catalog.tools()[1].description, "Start over.");
    assert_eq!(catalog.tools()[2].description, "reset handler from Counter");
    assert!(!catalog.invoke(&rt, "bump", json!({ "amount": 4 }), TIMEOUT).await.is_error());
    assert_eq!(count(&rt, &id), 4);
}

#[tokio::test]
async fn a_handler_without_schema_is_a_flagged_tool_that_passes_arguments_through() {
    let rt = runtime();
    let seen = Arc::new(parking_lot_free::Slot::default());
    let slot = seen.clone();
    rt.register_pattern(Pattern::new("raw", move |b, _: Value| {
        b.name("Raw")?;
        let slot = slot.clone();
        b.handler_json(
            "poke",
            None,
            Arc::new(move |_, event| {
                slot.set(event);
                Ok(None)
            }),
        )?;
        Ok(())
    }));
    let id = rt.charms().create("raw", json!({})).expect("created");
    let catalog = Catalog::build(&rt, &json!({ "r": charm_entry(&rt, &id) }));
    let tool = catalog.get("Raw.poke").expect("a tool without schema");
    assert!(tool.unchecked);
    assert_eq!(tool.description, format!("poke handler from Raw {UNCHECKED_NOTE}"));
    assert_eq!(tool.input_schema, json!({ "type": "object", "properties": {} }).into());
    let done = catalog.invoke(&rt, "Raw_poke", json!({ "anything": [1, 2] }), TIMEOUT).await;
    assert!(!done.is_error(), "{done:?}");
    assert_eq!(seen.get(), Some(json!({ "anything": [1, 2] })));
}

#[test]
fn schemas_that_cannot_be_prepared_are_problems_that_spare_the_other_tools() {
    let rt = runtime();
    let mut deep = json!({ "type": "string" });
    for _ in 0..200 {
        deep = json!({ "type": "array", "items": deep });
    }
    rt.register_pattern(Pattern::new("deep", move |b, _: Value| {
        b.name("Deep")?;
        b.handler_json("abyss", Some(deep.clone()), Arc::new(|_, _| Ok(None)))?;
        b.handler("fine", |_, _: Reset| Ok(()))?;
        Ok(())
    }));
    let id = rt.charms().create("deep", json!({})).expect("created");
    let counter = rt.charms().create("counter", json!({})).expect("created");
    let catalog = Catalog::build(
        &rt,
        &json!({
            "d": charm_entry(&rt, &id),
            "e": 5,
            "f": {},
            "g": { "handler": rt.charms().result(&counter).child("count").to_json() },
            "h": { "pattern": "no-such-pattern" },
            "i": { "charm": { "count": 1 } },
            "j": { "handler": "x", "charm": "y" },
            "k": charm_entry(&rt, &counter),
        }),
    );
    assert_eq!(catalog.tools().iter().filter(|t| &*t.entry == "d").count(), 1);
    assert_eq!(catalog.tools().iter().filter(|t| &*t.entry == "k").count(), 4);
    let problems: Vec<(String, String)> = catalog.problems().iter().map(|p| (p.entry.clone(), p.to_string())).collect();
    let entries: Vec<&str> = problems.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(entries, ["d", "e", "f", "g", "h", "i", "j"], "{problems:#?}");
    assert!(problems[0].1.contains("Deep.abyss") && problems[0].1.contains("deeper"), "{}", problems[0].1);
    assert!(problems[3].1.contains("is not a stream"), "{}", problems[3].1);
    assert!(problems[4].1.contains("unknown pattern `no-such-pattern`"), "{}", problems[4].1);
    assert!(problems[5].1.contains("links resolved"), "{}", problems[5].1);
    assert!(problems[6].1.contains("handler and charm"), "{}", problems[6].1);

    let not_a_map = Catalog::build(&rt, &json!([1]));
    assert!(not_a_map.is_empty() && not_a_map.problems().len() == 1);
    assert!(Catalog::build(&rt, &Value::Null).problems().is_empty());
}

#[derive(Deserialize, JsonSchema)]
struct AdderArgs {
    /// First number.
    a: i64,
    /// Second number.
    b: i64,
    /// A label for the sum.
    label: String,
    /// Where the sum goes (a real argument, not the injected handler field).
    #[serde(default)]
    result: Option<String>,
}

fn adder() -> Pattern {
    Pattern::new("adder", |b, args: AdderArgs| {
        b.name("Adder")?;
        let sum = b.state("sum_input", (args.a, args.b))?;
        b.state("label", args.label)?;
        b.state("result_name", args.result)?;
        b.lift("sum", sum, |(a, b): (i64, i64)| a + b)?;
        b.handler("noop", |_, _: Reset| Ok(()))?;
        Ok(())
    })
    .description("Adds two numbers")
}

#[tokio::test]
async fn pattern_tools_hide_prefilled_parameters_and_apply_them() {
    let rt = runtime();
    rt.register_pattern(adder());
    let catalog = Catalog::build(
        &rt,
        &json!({
            "add": { "pattern": { "id": "adder", "extraParams": { "label": "fixed" } } },
            "add_plain": { "pattern": "adder", "description": "Sum two numbers." },
        }),
    );
    assert!(catalog.problems().is_empty(), "{:?}", catalog.problems());
    let add = catalog.get("add").expect("pattern tool");
    assert_eq!(add.description, "Adds two numbers");
    let properties = add.input_schema["properties"].as_object().expect("properties");
    let mut names: Vec<&String> = properties.keys().collect();
    names.sort();
    assert_eq!(names, ["a", "b", "result"]);
    assert_eq!(add.input_schema["required"], json!(["a", "b"]));
    let plain = catalog.get("add_plain").expect("pattern tool");
    assert_eq!(plain.description, "Sum two numbers.");
    assert_eq!(plain.input_schema["required"], json!(["a", "b", "label"]));

    let before = rt.charms().list().len();
    let done = catalog.invoke(&rt, "add", json!({ "a": 2, "b": 3, "result": "total" }), TIMEOUT).await;
    let result = &json_output(&done)["result"];
    assert_eq!(result["sum"], 5);
    assert_eq!(result["label"], "fixed");
    assert_eq!(result["result_name"], "total");
    assert!(result.get("noop").is_none(), "streams are not part of a snapshot: {result}");
    assert_eq!(rt.charms().list().len(), before, "the instance was stopped and removed");

    let bad = catalog.invoke(&rt, "add", json!({ "a": 2 }), TIMEOUT).await;
    assert!(error_text(&bad).contains("\"b\" is a required property"), "{bad:?}");
    assert_eq!(rt.charms().list().len(), before, "an invalid call creates nothing");
}

#[tokio::test]
async fn a_pattern_whose_result_never_settles_times_out_and_is_stopped() {
    let rt = runtime();
    rt.register_pattern(Pattern::new("forever", |b, _: Value| {
        b.name("Forever")?;
        let doc = b.charm_id().clone();
        b.on_start(move |rt| {
            rt.spawn_tracked(doc, tokio::time::sleep(Duration::from_secs(3600)));
        });
        Ok(())
    }));
    let catalog = Catalog::build(&rt, &json!({ "wait": { "pattern": "forever" } }));
    let started = Instant::now();
    let out = catalog.invoke(&rt, "wait", json!({}), Duration::from_millis(50)).await;
    assert!(error_text(&out).contains("timed out after 50ms"), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(rt.charms().list().iter().all(|c| !c.running));
}

#[tokio::test]
async fn a_successful_call_returns_a_snapshot_and_a_summary() {
    let rt = runtime();
    let id = rt.charms().create("counter", json!({})).expect("created");
    let catalog = Catalog::build(&rt, &json!({ "c": charm_entry(&rt, &id) }));
    let done = catalog.invoke(&rt, "Counter_increment", json!({ "amount": 5 }), TIMEOUT).await;
    let summary = done.summary.clone().expect("a summary");
    assert!(summary.starts_with("count: 0 → 5"), "{summary}");
    assert_eq!(summary, r#"count: 0 → 5, label: "Count: 0" → "Count: 5""#);
    assert_eq!(
        json_output(&done),
        &json!({
            "result": { "$NAME": "Counter", "count": 5, "label": "Count: 5" },
            "summary": summary,
        })
    );
    // Arguments as a JSON string (as some providers send them) work too.
    let done = catalog.invoke(&rt, "Counter.increment", json!("{\"amount\": 1}"), TIMEOUT).await;
    assert_eq!(done.summary.as_deref(), Some(r#"count: 5 → 6, label: "Count: 5" → "Count: 6""#));
    let done = catalog.invoke(&rt, "Counter.reset", json!(""), TIMEOUT).await;
    assert!(done.summary.as_deref().is_some_and(|s| s.starts_with("count: 6 → 0")), "{done:?}");
    let again = catalog.invoke(&rt, "Counter.reset", Value::Null, TIMEOUT).await;
    assert_eq!(again.summary.as_deref(), Some("no changes"));
}

#[tokio::test]
async fn unknown_tools_and_invalid_json_are_error_texts() {
    let rt = runtime();
    let id = rt.charms().create("counter", json!({})).expect("created");
    let catalog = Catalog::build(&rt, &json!({ "c": charm_entry(&rt, &id) }));
    let unknown = catalog.invoke(&rt, "Counter.explode", json!({}), TIMEOUT).await;
    let text = error_text(&unknown);
    assert!(text.starts_with("unknown tool `Counter.explode`"), "{text}");
    assert!(text.contains("`Counter_increment` (Counter.increment)"), "{text}");

    let empty = Catalog::default().invoke(&rt, "x", json!({}), TIMEOUT).await;
    assert!(error_text(&empty).contains("no tools are available"));

    let invalid = catalog.invoke(&rt, "Counter_increment", json!("{amount: 5"), TIMEOUT).await;
    assert!(error_text(&invalid).starts_with("invalid JSON in the arguments of `Counter.increment`"), "{invalid:?}");
    assert_eq!(count(&rt, &id), 0);
}

#[tokio::test]
async fn schema_violations_name_each_path_and_leave_the_charm_unchanged() {
    let rt = runtime();
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = ran.clone();
    rt.register_pattern(Pattern::new("notes", move |b, _: Value| {
        b.name("Notes")?;
        let counted = counted.clone();
        b.handler("add", move |_, _: AddNote| {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })?;
        Ok(())
    }));
    let notes = rt.charms().create("notes", json!({})).expect("created");
    let id = rt.charms().create("counter", json!({})).expect("created");
    let catalog = Catalog::build(&rt, &json!({ "c": charm_entry(&rt, &id), "n": charm_entry(&rt, &notes) }));

    let bad = catalog.invoke(&rt, "Counter_increment", json!({ "amount": "lots" }), TIMEOUT).await;
    let text = error_text(&bad);
    assert!(text.contains("at /amount: \"lots\" is not of type \"integer\""), "{text}");
    assert!(text.contains("Nothing was run"), "{text}");
    assert_eq!(count(&rt, &id), 0);

    let bad = catalog.invoke(&rt, "Notes_add", json!({ "text": 3, "priority": "Urgent" }), TIMEOUT).await;
    let text = error_text(&bad);
    assert!(text.contains("at /text:") && text.contains("at /priority:"), "{text}");
    let bad = catalog.invoke(&rt, "Notes_add", json!([1]), TIMEOUT).await;
    assert!(error_text(&bad).contains("at the top level"), "{bad:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the handler never ran");

    let good = catalog.invoke(&rt, "Notes_add", json!({ "text": "hi", "priority": "High" }), TIMEOUT).await;
    assert!(!good.is_error(), "{good:?}");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_panicking_handler_is_an_error_text_and_the_next_call_works() {
    let rt = runtime();
    let id = rt.charms().create("counter", json!({})).expect("created");
    let catalog = Catalog::build(&rt, &json!({ "c": charm_entry(&rt, &id) }));
    let boom = catalog.invoke(&rt, "Counter_boom", json!({}), TIMEOUT).await;
    let text = error_text(&boom);
    assert!(text.starts_with("`Counter.boom` failed:") && text.contains("panicked: boom"), "{text}");
    assert_eq!(count(&rt, &id), 0, "rolled back");
    let next = catalog.invoke(&rt, "Counter_increment", json!({ "amount": 1 }), TIMEOUT).await;
    assert!(!next.is_error(), "{next:?}");
    assert_eq!(count(&rt, &id), 1);
}

#[tokio::test]
async fn a_slow_handler_times_out_but_cannot_be_interrupted() {
    let rt = runtime();
    let id = rt.charms().create("counter", json!({})).expect("created");
    let catalog = Catalog::build(&rt, &json!({ "c": charm_entry(&rt, &id) }));
    let started = Instant::now();
    // The handler runs 2 s; the call must come back long before, even on a loaded machine.
    let slow = catalog.invoke(&rt, "Counter_wait", json!({ "ms": 2000 }), Duration::from_millis(50)).await;
    let elapsed = started.elapsed();
    let text = error_text(&slow);
    assert!(text.starts_with("`Counter.wait` timed out after 50ms"), "{text}");
    assert!(elapsed < Duration::from_millis(1500), "the timeout fired while the handler ran: {elapsed:?}");
    // The next call queues behind the slow handler, which still completes its change.
    let next = catalog.invoke(&rt, "Counter_increment", json!({ "amount": 1 }), TIMEOUT).await;
    assert!(!next.is_error(), "{next:?}");
    assert_eq!(count(&rt, &id), 101);
}

#[tokio::test]
async fn a_stopped_charm_is_started_by_a_call() {
    let rt = runtime();
    let id = rt.charms().create("counter", json!({})).expect("created");
    rt.charms().stop(&id).expect("stopped");
    let catalog = Catalog::build(&rt, &json!({ "c": charm_entry(&rt, &id) }));
    assert_eq!(catalog.len(), 4, "tools come from the stored result, running or not");
    let done = catalog.invoke(&rt, "Counter_increment", json!({ "amount": 2 }), TIMEOUT).await;
    assert!(!done.is_error(), "{done:?}");
    assert!(rt.charms().is_running(&id));
    assert_eq!(rt.charms().get(&id).expect("charm")["label"], "Count: 2");
}

#[test]
fn flattened_lists_what_a_ui_shows() {
    let rt = runtime();
    rt.register_pattern(adder());
    let id = rt.charms().create("counter", json!({})).expect("created");
    let catalog = Catalog::build(&rt, &json!({ "c": charm_entry(&rt, &id), "sum": { "pattern": "adder" } }));
    let flat = catalog.flattened();
    let items = flat.as_array().expect("a list");
    assert_eq!(items.len(), 5);
    assert_eq!(items[1]["display"], "Counter.increment");
    assert_eq!(items[1]["wire"], "Counter_increment");
    assert_eq!(items[1]["charm"], json!(&*id));
    assert_eq!(items[1]["entry"], "c");
    assert!(items[1]["input_schema"]["properties"]["amount"].is_object());
    assert_eq!(items[4]["display"], "sum");
    assert!(items[4].get("charm").is_none());
    assert!(!flat.to_string().contains("$link"), "no live links: {flat}");
}

/// A tiny thread-safe slot (the crate does not depend on parking_lot).
mod parking_lot_free {
    use std::sync::Mutex;

    #[derive(Default)]
    pub struct Slot(Mutex<Option<serde_json::Value>>);

    impl Slot {
        pub fn set(&self, value: serde_json::Value) {
            if let Ok(mut slot) = self.0.lock() {
                *slot = Some(value);
            }
        }

        pub fn get(&self) -> Option<serde_json::Value> {
            self.0.lock().ok().and_then(|slot| slot.clone())
        }
    }
}

#[tokio::test]
async fn inline_handlers_work_but_cannot_time_out_a_running_handler() {
    let rt = runtime();
    let id = rt.charms().create("counter", json!({})).expect("created");
    let catalog = Catalog::build(&rt, &json!({ "c": charm_entry(&rt, &id) })).inline_handlers(true);
    let done = catalog.invoke(&rt, "Counter_increment", json!({ "amount": 2 }), TIMEOUT).await;
    assert_eq!(done.summary.as_deref(), Some(r#"count: 0 → 2, label: "Count: 0" → "Count: 2""#));
    // Inline, the handler runs inside the timed future's first poll: it completes.
    let slow = catalog.invoke(&rt, "Counter_wait", json!({ "ms": 100 }), Duration::from_millis(10)).await;
    assert!(!slow.is_error(), "{slow:?}");
    assert_eq!(count(&rt, &id), 102);
}

#[tokio::test]
async fn entries_and_handlers_may_be_reached_through_links() {
    let rt = runtime();
    let id = rt.charms().create("counter", json!({})).expect("created");
    let increment = rt.charms().result(&id).child("increment");
    rt.register_pattern(Pattern::new("proxy", move |b, _: Value| {
        b.name("Proxy")?;
        b.alias("bump", &increment)?;
        b.state("entry", json!({ "handler": increment.to_json(), "description": "Bump it." }))?;
        Ok(())
    }));
    let proxy = rt.charms().create("proxy", json!({})).expect("created");
    let result = rt.charms().result(&proxy);
    let catalog = Catalog::build(
        &rt,
        &json!({
            "p": charm_entry(&rt, &proxy),
            "via_alias": { "handler": result.child("bump").to_json() },
            "linked_entry": result.child("entry").to_json(),
        }),
    );
    assert_eq!(displays(&catalog), ["linked_entry", "via_alias"], "aliases are not charm tools");
    assert_eq!(catalog.tools()[0].description, "Bump it.");
    let stream = ToolTarget::Handler { stream: rt.charms().result(&id).child("increment") };
    assert!(catalog.tools().iter().all(|t| t.target == stream));
    assert!(!catalog.invoke(&rt, "via_alias", json!({ "amount": 2 }), TIMEOUT).await.is_error());
    let done = catalog.invoke(&rt, "linked_entry", json!({ "amount": 3 }), TIMEOUT).await;
    assert_eq!(json_output(&done)["result"]["count"], 5);
}

/// A catalog is shared between threads and its calls are spawned as tasks (the dialog
/// runs the calls of one round concurrently): both must work from other threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalogs_and_calls_can_cross_threads() {
    let rt = runtime();
    let id = rt.charms().create("counter", json!({})).expect("create");
    let catalog = Arc::new(Catalog::build(&rt, &json!({ "Counter": charm_entry(&rt, &id) })));
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let (catalog, rt) = (Arc::clone(&catalog), rt.clone());
            tokio::spawn(async move { catalog.invoke(&rt, "Counter_increment", json!({ "amount": 1 }), TIMEOUT).await })
        })
        .collect();
    for call in calls {
        let invocation = call.await.expect("the call's task ran");
        assert!(!invocation.is_error(), "{invocation:?}");
    }
    assert_eq!(count(&rt, &id), json!(4));
}

#[tokio::test]
async fn read_tools_are_offered_on_request_and_read_without_changing_anything() {
    let rt = runtime();
    let id = rt.charms().create("counter", json!({})).expect("create");
    let plain = Catalog::build(&rt, &json!({ "c": charm_entry(&rt, &id) }));
    assert!(!displays(&plain).contains(&"Counter.read"), "no read tool unless asked for");

    let entry = json!({ "charm": rt.charms().result(&id.clone()).to_json(), "read": true });
    let catalog = Catalog::build(&rt, &json!({ "c": entry }));
    let tool = catalog.get("Counter.read").expect("a read tool");
    assert!(tool.description.contains("count, label"), "{}", tool.description);

    let all = tool.invoke(&rt, json!({}), Duration::from_secs(5)).await;
    assert_eq!(json_output(&all)["value"], json!({"$NAME": "Counter", "count": 0, "label": "Count: 0"}));
    let one = tool.invoke(&rt, json!({"path": "label"}), Duration::from_secs(5)).await;
    assert_eq!(json_output(&one)["value"], "Count: 0");
    let missing = tool.invoke(&rt, json!({"path": "nothing/here"}), Duration::from_secs(5)).await;
    assert!(error_text(&missing).contains("nothing at `nothing/here`"), "{missing:?}");
    assert_eq!(count(&rt, &id), json!(0));
}

#[test]
fn a_handler_called_read_moves_the_read_tool_aside() {
    #[derive(Deserialize, JsonSchema)]
    struct Nothing {}
    let rt = Runtime::in_memory();
    rt.register_pattern(Pattern::new("reader", |b, _: Value| {
        b.name("Book")?;
        b.handler("read", |_, _: Nothing| Ok(()))?;
        Ok(())
    }));
    let id = rt.charms().create("reader", json!({})).expect("create");
    let entry = json!({ "charm": rt.charms().result(&id).to_json(), "read": true });
    let catalog = Catalog::build(&rt, &json!({ "b": entry }));
    let mut names = displays(&catalog);
    names.sort();
    assert_eq!(names, ["Book.read", "Book.read_data"]);
}
