//! Telling the model what changed behind its back. After each round, the dialog keeps
//! the fields of each charm its calls read or wrote, as the model saw them (the call's
//! answer carries the charm's data). Before each request to the model, the fields someone
//! else changed since (another process, the page, a person's `charm send`, another
//! conversation) become one short note in that request's instructions: `Counter.count is
//! now 7 (it was 5 when you last read it; changed by charm send)`, naming the writer the
//! space recorded (see `undo.rs`). Each change is told once; the conversation's
//! own calls are no news, since what they left is kept as seen.

use std::hash::{DefaultHasher, Hash, Hasher};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use trellis_runner::{Cell, DocId, Link, Path, Runtime};

use super::DialogCells;
use crate::catalog::summary::snapshot;

/// The most fields a dialog keeps as seen; the oldest go first.
const MAX_SEEN: usize = 256;

/// The most notes one request carries; the rest are counted.
const MAX_NOTES: usize = 10;

/// The largest value (as JSON) kept as it is; a larger one is kept as a hash, and its
/// note says only that it changed.
const MAX_KEPT: usize = 1024;

/// One field as the model last saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Seen {
    charm: String,
    doc: String,
    field: String,
    /// The value, when it is small.
    value: Option<Value>,
    /// Its hash, when it is not.
    hash: u64,
    /// When it was kept as seen (milliseconds since the Unix epoch), so that only a later
    /// writer is named as the one who changed it.
    #[serde(default)]
    at_ms: u64,
}

impl Seen {
    fn of(charm: &str, doc: &str, field: &str, value: &Value) -> Seen {
        let text = value.to_string();
        let mut hasher = DefaultHasher::new();
        text.hash(&mut hasher);
        let value = (text.len() <= MAX_KEPT).then(|| value.clone());
        let at_ms = crate::dialog::interaction::now_ms();
        Seen {
            charm: charm.to_owned(),
            doc: doc.to_owned(),
            field: field.to_owned(),
            value,
            hash: hasher.finish(),
            at_ms,
        }
    }

    fn same(&self, other: &Seen) -> bool {
        self.hash == other.hash
    }
}

fn seen_cell(cells: &DialogCells) -> Cell<Vec<Seen>> {
    Cell::from_link(cells.beside("seen"))
}

/// The fields of the charm whose result is `doc`, named `charm`, as they are now: what
/// the model read of it.
fn fields(rt: &Runtime, charm: &str, doc: &DocId) -> Vec<Seen> {
    let Ok(Value::Object(data)) = snapshot(rt, &Link::new(doc.clone(), Path::root())) else { return Vec::new() };
    data.iter().map(|(field, value)| Seen::of(charm, doc.as_ref(), field, value)).collect()
}

/// Keeps the fields of the charms in `read` (name and result document) as the model saw
/// them after its calls.
pub(super) fn record(rt: &Runtime, cells: &DialogCells, read: &[(String, DocId)]) {
    if read.is_empty() {
        return;
    }
    let now: Vec<Seen> = read.iter().flat_map(|(charm, doc)| fields(rt, charm, doc)).collect();
    let kept = rt.transact(|tx| {
        let mut seen = seen_cell(cells).get(tx).unwrap_or_default();
        seen.retain(|old| !now.iter().any(|new| new.doc == old.doc && new.field == old.field));
        seen.extend(now.iter().cloned());
        let over = seen.len().saturating_sub(MAX_SEEN);
        seen.drain(..over);
        seen_cell(cells).set(tx, seen)
    });
    if let Err(error) = kept {
        tracing::warn!(%error, "could not keep what the model read");
    }
}

/// The note for the next request, if someone else changed what the model saw; what it
/// is told is kept as seen, so each change is told once.
pub(super) fn note(rt: &Runtime, cells: &DialogCells) -> Option<String> {
    let seen = seen_cell(cells).get(rt).unwrap_or_default();
    let mut changed = Vec::new();
    let now: Vec<Seen> = seen
        .iter()
        .map(|old| {
            let at = Link::new(DocId::from(old.doc.as_str()), Path::new([old.field.as_str()]));
            let new = Seen::of(&old.charm, &old.doc, &old.field, &snapshot(rt, &at).unwrap_or(Value::Null));
            if !new.same(old) {
                let by = rt.last_writer(&at).ok().flatten().filter(|w| w.at_ms >= old.at_ms).map(|w| w.by.name);
                changed.push(told(old, &new, by.as_deref()));
            }
            new
        })
        .collect();
    if changed.is_empty() {
        return None;
    }
    if let Err(error) = rt.transact(|tx| seen_cell(cells).set(tx, now.clone())) {
        tracing::warn!(%error, "could not keep what the model was told");
    }
    let more = changed.len().saturating_sub(MAX_NOTES);
    changed.truncate(MAX_NOTES);
    if more > 0 {
        changed.push(format!("and {more} more field(s) changed"));
    }
    Some(format!(
        "Changed outside this conversation since you last read it: {}. Read a charm again before relying on \
         anything else you saw of it.",
        changed.join("; ")
    ))
}

/// `Counter.count is now 7 (it was 5 when you last read it)`.
/// With `by`, the recorded writer of the change: `...; changed by charm send)`.
fn told(old: &Seen, new: &Seen, by: Option<&str>) -> String {
    let at = format!("{}.{}", old.charm, old.field);
    let by = by.map(|by| format!("; changed by {by}")).unwrap_or_default();
    match (&old.value, &new.value) {
        (Some(was), Some(now)) => format!("{at} is now {now} (it was {was} when you last read it{by})"),
        _ => format!("{at} changed (too large to show here; read it again{by})"),
    }
}
