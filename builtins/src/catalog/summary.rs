//! What a successful tool call returns besides "done": a plain JSON snapshot of the charm's
//! result and a one-line summary of what changed (`count: 3 → 5`).
//!
//! A handler tool's call answers with [`handler_answer`]: what the handler returned, the
//! summary, and the charm's data whole only while it is small ([`SNAPSHOT_LIMIT`]): past
//! that, only the fields that changed, so a notebook of a thousand notes is not sent back
//! to the model on every call.
//!
//! Snapshots drop every stream marker (the model reaches handlers through tools, and a
//! marker's event schema would only repeat the tool's input schema) and the `$UI` tree
//! (presentation, often large, meaningless to a model); a marker inside an array becomes
//! the string `"(handler)"` so indices stay right. Links are followed, so a tool result
//! never carries a live link.

use serde_json::{Map, Value};
use trellis_runner::link::{stream_schema, LINK_KEY, STREAM_KEY};
use trellis_runner::value::Segment;
use trellis_runner::{DocId, Link, Path, Read, Runtime, Value as Stored, UI};

/// What a stream marker inside an array becomes in a snapshot.
const HANDLER: &str = "(handler)";

/// How many bytes of JSON a charm's data may take for a handler tool's answer to carry it
/// whole (see `Catalog::snapshot_limit`).
pub const SNAPSHOT_LIMIT: usize = 2048;

/// How many changed fields a summary names before it says "and N more".
const MAX_CHANGES: usize = 6;
/// How long one rendered value in a summary may be.
const MAX_VALUE_CHARS: usize = 40;

/// The plain JSON snapshot of the value at `link` that a tool call returns (see the
/// module docs). Links are followed wherever they appear; stream markers are skipped
/// without converting their schemas, which keeps a snapshot cheap.
pub(crate) fn snapshot(rt: &Runtime, link: &Link) -> Result<Value, trellis_runner::Error> {
    let (at, value) = rt.resolve(link)?;
    let mut path = at.path.segments().to_vec();
    Ok(plain(rt, &at.doc, &mut path, &value)?.unwrap_or(Value::Null))
}

/// `None` for a stream marker: dropped from objects, `"(handler)"` in arrays (so indices
/// stay right).
fn plain(
    rt: &Runtime,
    doc: &DocId,
    path: &mut Vec<Segment>,
    value: &Stored,
) -> Result<Option<Value>, trellis_runner::Error> {
    Ok(Some(match value {
        Stored::Object(map) if map.contains_key(STREAM_KEY) => return Ok(None),
        Stored::Object(map) if map.contains_key(LINK_KEY) => {
            let target = rt.read_deep(&Link::new(doc.clone(), Path::new(path.iter().cloned())))?;
            clean(target.to_json())
        }
        Stored::Object(map) => {
            let mut out = Map::new();
            for (key, item) in map {
                if &**key == UI {
                    continue;
                }
                path.push(key.clone());
                let item = plain(rt, doc, path, item);
                path.pop();
                if let Some(item) = item? {
                    out.insert(key.to_string(), item);
                }
            }
            Value::Object(out)
        }
        Stored::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (index, item) in items.iter().enumerate() {
                path.push(Segment::from(index.to_string()));
                let item = plain(rt, doc, path, item);
                path.pop();
                out.push(item?.unwrap_or_else(|| Value::String(HANDLER.into())));
            }
            Value::Array(out)
        }
        other => other.to_json(),
    }))
}

/// [`snapshot`]'s cleaning, for JSON that is already plain (a deep read of a link target).
pub(crate) fn clean(value: Value) -> Value {
    clean_inner(value).unwrap_or(Value::Null)
}

fn clean_inner(value: Value) -> Option<Value> {
    Some(match value {
        Value::Object(map) if map.contains_key(STREAM_KEY) => return None,
        Value::Object(map) if map.contains_key(LINK_KEY) => Value::String("(link)".into()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(key, _)| key != UI)
                .filter_map(|(key, value)| Some((key, clean_inner(value)?)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items.into_iter().map(|v| clean_inner(v).unwrap_or_else(|| Value::String(HANDLER.into()))).collect(),
        ),
        other => other,
    })
}

/// What a handler tool's call gives the model, and the summary line in it:
/// `{"returned": ..., "summary": ..., "result": ...}`, where `returned` is what the
/// handler answered (absent when it answers nothing) and `result` the charm's data
/// `after` the call while its JSON takes at most `limit` bytes. Past that, `changed`
/// holds the data fields that differ from `before` (`null` for one removed), and `note`
/// says where the rest is.
pub(crate) fn handler_answer(before: &Value, after: Value, returned: Option<Value>, limit: usize) -> (Value, String) {
    let summary = changes(before, &after);
    let mut answer = Map::new();
    if let Some(returned) = returned {
        answer.insert("returned".into(), returned);
    }
    answer.insert("summary".into(), Value::String(summary.clone()));
    if fits(&after, limit) {
        answer.insert("result".into(), after);
    } else {
        let changed =
            changed_fields(before, &after).map(|(key, _, new)| (key.clone(), new.cloned().unwrap_or_default()));
        answer.insert("changed".into(), Value::Object(changed.collect()));
        let note = format!(
            "the charm's data is larger than {limit} bytes of JSON, so only the fields that changed are here; \
             read the others with the charm's read tool"
        );
        answer.insert("note".into(), Value::String(note));
    }
    (Value::Object(answer), summary)
}

/// The JSON Schema of what [`handler_answer`] gives for a handler that returns values of
/// `returned` (a prepared output schema): an object schema, as MCP's `outputSchema` must
/// be.
pub(crate) fn answer_schema(returned: &Value) -> Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "returned": returned,
            "summary": {"type": "string", "description": "What changed, in one line (`count: 3 → 5`)."},
            "result": {"description": "The charm's data after the call, while it is small."},
            "changed": {
                "type": "object",
                "description": "The data fields that changed (null: removed), when the charm's data is too large to send whole."
            },
            "note": {"type": "string", "description": "Where the rest of the charm's data is."}
        },
        "required": ["returned", "summary"]
    })
}

/// Whether `value` as JSON text takes at most `limit` bytes (written until it passes).
fn fits(value: &Value, limit: usize) -> bool {
    struct Within(usize);
    impl std::io::Write for Within {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.checked_sub(bytes.len()).ok_or(std::io::ErrorKind::FileTooLarge)?;
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    serde_json::to_writer(Within(limit), value).is_ok()
}

/// The top-level data fields that differ between `before` and `after`, in key order,
/// with their old and new values (`None`: absent). `$` keys and streams are not data.
fn changed_fields<'a>(
    before: &'a Value,
    after: &'a Value,
) -> impl Iterator<Item = (&'a String, Option<&'a Value>, Option<&'a Value>)> {
    static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
    let before = before.as_object().unwrap_or(&EMPTY);
    let after = after.as_object().unwrap_or(&EMPTY);
    let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    let is_data = |v: Option<&Value>| v.is_none_or(|v| stream_schema(v).is_none());
    keys.into_iter().filter(|key| !key.starts_with('$')).filter_map(move |key| {
        let (old, new) = (before.get(key), after.get(key));
        (old != new && is_data(old) && is_data(new)).then_some((key, old, new))
    })
}

/// `key: old → new` for each top-level data field that differs, in key order; `no
/// changes` when none does. `$` keys and streams are not data and are ignored.
pub(crate) fn changes(before: &Value, after: &Value) -> String {
    let show = |v: Option<&Value>| v.map_or_else(|| "(none)".to_string(), |v| compact(v, MAX_VALUE_CHARS));
    let changed: Vec<String> =
        changed_fields(before, after).map(|(key, old, new)| format!("{key}: {} → {}", show(old), show(new))).collect();
    if changed.is_empty() {
        return "no changes".to_string();
    }
    let mut line = changed.iter().take(MAX_CHANGES).cloned().collect::<Vec<_>>().join(", ");
    if changed.len() > MAX_CHANGES {
        line.push_str(&format!(", and {} more", changed.len() - MAX_CHANGES));
    }
    line
}

/// Compact JSON of at most about `max` characters: long arrays and objects are counted
/// (`[12 items]`, `{3 fields}`), other long values are cut with `…`.
pub(crate) fn compact(value: &Value, max: usize) -> String {
    let text = serde_json::to_string(value).unwrap_or_default();
    if text.chars().count() <= max {
        return text;
    }
    match value {
        Value::Array(items) => format!("[{} items]", items.len()),
        Value::Object(map) => format!("{{{} fields}}", map.len()),
        _ => crate::text::truncate(&text, max.saturating_sub(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn summarises_changed_data_fields_only() {
        let before = json!({ "$NAME": "Counter", "count": 0, "label": "Count: 0", "inc": { "$stream": {} } });
        let after =
            json!({ "$NAME": "Renamed", "count": 5, "label": "Count: 5", "inc": { "$stream": { "schema": {} } } });
        assert_eq!(changes(&before, &after), r#"count: 0 → 5, label: "Count: 0" → "Count: 5""#);
        assert_eq!(changes(&before, &before), "no changes");
        assert_eq!(changes(&json!({}), &json!({ "a": [1] })), "a: (none) → [1]");
        assert_eq!(changes(&json!({ "a": 1 }), &json!({})), "a: 1 → (none)");
        assert_eq!(changes(&json!(null), &json!({ "a": 1 })), "a: (none) → 1");
    }

    #[test]
    fn a_large_charm_answers_with_the_fields_that_changed() {
        let before = json!({ "notes": ["a"], "count": 1, "title": "t" });
        let after = json!({ "notes": ["a", "b"], "count": 2, "title": "t" });
        let (small, summary) = handler_answer(&before, after.clone(), Some(json!({"id": 1})), SNAPSHOT_LIMIT);
        assert_eq!(small, json!({ "returned": {"id": 1}, "summary": summary, "result": after }));
        let (large, _) = handler_answer(&before, after.clone(), None, 20);
        assert_eq!(large["changed"], json!({ "notes": ["a", "b"], "count": 2 }));
        assert!(large.get("result").is_none() && large.get("returned").is_none(), "{large}");
        assert!(large["note"].as_str().unwrap().contains("read tool"), "{large}");
        let (gone, _) = handler_answer(&before, json!({ "count": 1, "title": "t" }), None, 0);
        assert_eq!(gone["changed"], json!({ "notes": null }), "a removed field is null");
        let schema = crate::validation::compile(&answer_schema(&json!({"type": "object"}))).unwrap();
        assert_eq!(crate::validation::violations(&schema, &small), None, "what a call answers fits its schema");
        assert!(fits(&after, serde_json::to_string(&after).unwrap().len()));
        assert!(!fits(&after, serde_json::to_string(&after).unwrap().len() - 1));
    }

    #[test]
    fn long_values_and_many_fields_are_elided() {
        let items: Vec<u32> = (0..50).collect();
        let text = "x".repeat(100);
        let summary = changes(&json!({}), &json!({ "items": items, "text": text }));
        assert!(summary.starts_with("items: (none) → [50 items], text: (none) → \"xxx"), "{summary}");
        assert!(summary.ends_with('…'), "{summary}");
        let many: Map<String, Value> = (0..10).map(|i| (format!("k{i}"), json!(i))).collect();
        let summary = changes(&json!({}), &Value::Object(many));
        assert!(summary.ends_with(", and 4 more"), "{summary}");
        assert_eq!(compact(&json!({ "a": "y".repeat(80) }), 40), "{1 fields}");
        assert_eq!(compact(&json!("é".repeat(50)), 5).chars().count(), 5);
    }

    #[test]
    fn snapshots_follow_links_and_drop_streams_and_ui() {
        let rt = Runtime::in_memory();
        let other = Link::new("other", Path::root());
        rt.transact(|tx| {
            tx.write(&other, Stored::from(json!({ "x": 1, "s": { "$stream": {} } })))?;
            let root = Link::new("doc", Path::root());
            tx.write(
                &root,
                Stored::from(json!({
                    "$NAME": "N", "$UI": { "big": true }, "n": 2,
                    "inc": { "$stream": { "schema": { "type": "object" } } },
                    "list": [1, { "$stream": {} }, other.to_json()],
                    "alias": other.to_json(),
                })),
            )
        })
        .expect("written");
        let snap = snapshot(&rt, &Link::new("doc", Path::root())).expect("readable");
        assert_eq!(snap, json!({ "$NAME": "N", "n": 2, "list": [1, "(handler)", { "x": 1 }], "alias": { "x": 1 } }));
        let nested = snapshot(&rt, &Link::new("doc", Path::new(["alias"]))).expect("readable");
        assert_eq!(nested, json!({ "x": 1 }));
    }

    #[test]
    fn snapshots_drop_streams_ui_and_links() {
        let raw = json!({
            "$NAME": "Counter", "$UI": { "type": "button" }, "count": 1,
            "inc": { "$stream": { "schema": {} } },
            "nested": { "inner": { "$stream": {} }, "other": { "$link": { "doc": "d", "path": [] } } },
            "list": [{ "$stream": {} }, 2],
        });
        assert_eq!(
            clean(raw),
            json!({ "$NAME": "Counter", "count": 1, "nested": { "other": "(link)" }, "list": ["(handler)", 2] })
        );
    }
}
