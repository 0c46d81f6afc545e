//! Approve by diff: a call of a handler that waits for a person's approval is first run
//! in a transaction that is rolled back (`Runtime::preview`), and the person is shown
//! what it would change, value by value. Approving runs it with
//! `Runtime::send_as_previewed`: it commits only if it changes exactly what was shown;
//! if the state moved meanwhile, nothing is written and a fresh preview waits for a new
//! answer.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use trellis_runner::{Changed, DocId, Runtime};

/// The most changes a preview shows; the rest are counted.
const MAX_SHOWN: usize = 20;

/// The longest value shown, in characters, before it is cut.
const MAX_VALUE: usize = 200;

/// What a call waiting for approval would change, as the person is shown it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Preview {
    /// Each value it would change (at most 20; `more` counts the rest).
    pub changes: Vec<ShownChange>,
    /// How many more changes there are than shown.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more: usize,
    /// Why the handler failed in the preview; the person may still deny the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The same as lines a person reads (`Notes.notes[0]: {"id":1} → removed`), for
    /// every front end to show alike.
    #[serde(default)]
    pub lines: Vec<String>,
}

/// One value a call would change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ShownChange {
    /// The charm (its name; the document's id when it belongs to none).
    pub charm: String,
    /// Where in the charm (`notes[0].title`; empty for the whole).
    pub path: String,
    /// Its value now (`None`: there is none).
    pub before: Option<Value>,
    /// Its value after the call (`None`: removed).
    pub after: Option<Value>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Preview {
    /// The preview of a handler that failed.
    pub(crate) fn failed(error: String) -> Preview {
        Preview { error: Some(error), ..Preview::default() }.with_lines()
    }

    /// What `changed` (the paths a handler writes) means, value by value, naming each
    /// document by its charm in `rt`.
    pub(crate) fn of(rt: &Runtime, changed: &[Changed]) -> Preview {
        let charms = rt.charms().list();
        let mut all = Vec::new();
        for change in changed {
            let charm = name_in(rt, &charms, &change.doc);
            let path = dotted(&change.path);
            diff(&charm, path, some(&change.before), some(&change.after), &mut all);
        }
        let more = all.len().saturating_sub(MAX_SHOWN);
        all.truncate(MAX_SHOWN);
        Preview { changes: all, more, error: None, lines: Vec::new() }.with_lines()
    }

    fn with_lines(mut self) -> Preview {
        self.lines = self.render();
        self
    }

    /// One line per change (`Notes.notes[0]: {"id":1} → removed`), then what failed or
    /// how many more there are.
    fn render(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .changes
            .iter()
            .map(|c| {
                let at = if c.path.is_empty() { c.charm.clone() } else { format!("{}.{}", c.charm, c.path) };
                let before = c.before.as_ref().map_or_else(|| "added".to_owned(), shown);
                let after = c.after.as_ref().map_or_else(|| "removed".to_owned(), shown);
                match (&c.before, &c.after) {
                    (None, Some(_)) => format!("{at}: added {after}"),
                    _ => format!("{at}: {before} → {after}"),
                }
            })
            .collect();
        if self.more > 0 {
            lines.push(format!("and {} more change(s)", self.more));
        }
        if let Some(error) = &self.error {
            lines.push(format!("the handler fails with these arguments: {error}"));
        } else if self.changes.is_empty() {
            lines.push("it changes nothing".to_owned());
        }
        lines
    }
}

/// The name of the charm whose result is `doc` among `charms`; the document's id when it
/// belongs to none.
pub(crate) fn name_in(rt: &Runtime, charms: &[trellis_runner::CharmInfo], doc: &str) -> String {
    charms
        .iter()
        .find(|c| *rt.charms().result(&DocId::from(c.id.as_str())).doc == *doc)
        .map_or_else(|| doc.to_owned(), |c| c.name.clone())
}

/// `Notes.notes[0]`: where `path` of `doc` is, named by its charm.
pub(crate) fn place(rt: &Runtime, doc: &str, path: &[String]) -> String {
    let charm = name_in(rt, &rt.charms().list(), doc);
    match dotted(path) {
        path if path.is_empty() => charm,
        path if path.starts_with('[') => format!("{charm}{path}"),
        path => format!("{charm}.{path}"),
    }
}

/// `null` as no value: a path a handler writes for the first time, or removes.
fn some(value: &Value) -> Option<&Value> {
    (!value.is_null()).then_some(value)
}

/// `notes[0].title` of the segments `notes`, `0`, `title`.
fn dotted(path: &[String]) -> String {
    let mut out = String::new();
    for segment in path {
        push(&mut out, segment, segment.parse::<usize>().is_ok());
    }
    out
}

fn push(path: &mut String, segment: &str, index: bool) {
    match (index, path.is_empty()) {
        (true, _) => path.push_str(&format!("[{segment}]")),
        (false, true) => path.push_str(segment),
        (false, false) => path.push_str(&format!(".{segment}")),
    }
}

/// The changes from `before` to `after` at `path` of `charm`, as small as a person reads
/// them: into objects key by key, into arrays as one element removed or some appended
/// when that is what happened, else whole.
fn diff(charm: &str, path: String, before: Option<&Value>, after: Option<&Value>, out: &mut Vec<ShownChange>) {
    if before == after || out.len() > MAX_SHOWN {
        return;
    }
    let change = |out: &mut Vec<ShownChange>, path: String, before: Option<&Value>, after: Option<&Value>| {
        out.push(ShownChange { charm: charm.to_owned(), path, before: before.cloned(), after: after.cloned() });
    };
    let at = |key: &str, index: bool| {
        let mut inner = path.clone();
        push(&mut inner, key, index);
        inner
    };
    match (before, after) {
        (Some(Value::Object(was)), Some(Value::Object(now))) => {
            let keys: std::collections::BTreeSet<&String> = was.keys().chain(now.keys()).collect();
            for key in keys {
                diff(charm, at(key, false), was.get(key), now.get(key), out);
            }
        }
        (Some(Value::Array(was)), Some(Value::Array(now))) if was.len() == now.len() + 1 => {
            // One element removed: the first place they differ.
            let gone = was.iter().zip(now).position(|(a, b)| a != b).unwrap_or(now.len());
            if was[..gone] == now[..gone] && was[gone + 1..] == now[gone..] {
                change(out, at(&gone.to_string(), true), Some(&was[gone]), None);
            } else {
                change(out, path, before, after);
            }
        }
        (Some(Value::Array(was)), Some(Value::Array(now))) if now.len() > was.len() && now.starts_with(was) => {
            for (i, added) in now.iter().enumerate().skip(was.len()) {
                change(out, at(&i.to_string(), true), None, Some(added));
            }
        }
        (Some(Value::Array(was)), Some(Value::Array(now))) if was.len() == now.len() => {
            for (i, (a, b)) in was.iter().zip(now).enumerate() {
                diff(charm, at(&i.to_string(), true), Some(a), Some(b), out);
            }
        }
        _ => change(out, path, before, after),
    }
}

/// A value as JSON, cut to [`MAX_VALUE`] characters.
fn shown(value: &Value) -> String {
    crate::text::truncate(&value.to_string(), MAX_VALUE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn of(before: Value, after: Value) -> Vec<String> {
        let mut out = Vec::new();
        diff("Notes", String::new(), some(&before), some(&after), &mut out);
        Preview { changes: out, more: 0, error: None, lines: Vec::new() }.with_lines().lines
    }

    #[test]
    fn a_change_reads_as_small_as_it_is() {
        let milk = json!({"id": 1, "title": "milk"});
        let eggs = json!({"id": 2, "title": "eggs"});
        let removed = of(json!({"notes": [milk, eggs], "count": 2}), json!({"notes": [eggs], "count": 1}));
        assert_eq!(removed, vec!["Notes.count: 2 → 1", r#"Notes.notes[0]: {"id":1,"title":"milk"} → removed"#]);
        let added = of(json!({"notes": [milk]}), json!({"notes": [milk, eggs]}));
        assert_eq!(added, vec![r#"Notes.notes[1]: added {"id":2,"title":"eggs"}"#]);
        let edited = of(json!({"notes": [milk]}), json!({"notes": [{"id": 1, "title": "oat milk"}]}));
        assert_eq!(edited, vec![r#"Notes.notes[0].title: "milk" → "oat milk""#]);
        assert_eq!(of(json!({"a": 1}), json!({"a": 1})), vec!["it changes nothing"]);
        let long = of(json!({"a": "x".repeat(5000)}), json!({"a": 1}));
        assert!(long[0].len() < 300, "{}", long[0]);
    }
}
