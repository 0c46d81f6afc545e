//! Who changed what in a charm: each field with its last recorded writer (see
//! `Runtime::provenance`), for `trellis charm get NAME --provenance` and the server's
//! `GET /api/charms/{charm}/provenance`.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use trellis_runner::{DocId, Link, Path, Runtime, Writer, Written};

/// A charm's fields with their last recorded writers.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Provenance {
    /// The charm's id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its values, as `charm get` shows them.
    pub result: Value,
    /// Per field (and per path inside one written since by another), newest first.
    pub provenance: Vec<FieldWriter>,
}

/// The last recorded writer of a field, or of a path inside it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct FieldWriter {
    /// The field.
    pub field: String,
    /// Where: the field, or a path inside it (`notes[0].title`).
    pub path: String,
    /// No writer recorded, and a computation writes it.
    pub derived: bool,
    /// Who wrote it last (none recorded: set when the charm was made, or by code that
    /// names no writer).
    pub by: Option<Writer>,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: Option<u64>,
}

/// Each field of charm `id` (its handlers aside) with its last recorded writer; a path
/// inside a field written since by another (`notes[0].title`) as an entry of its own;
/// a field with no writer recorded says whether a computation derives it.
pub fn provenance(rt: &Runtime, id: &DocId) -> trellis_runner::Result<Provenance> {
    let charms = rt.charms();
    // Its computations are known only while it runs here (a space only read cannot run
    // it: its derived fields then show no writer).
    if !charms.is_running(id) && charms.start(id).is_err() {
        tracing::debug!(charm = %id, "not started: its derived fields are not known");
    }
    let result = charms.get(id)?;
    let at = charms.result(id);
    let written = rt.provenance(&at.doc)?;
    let root: Vec<String> = at.path.segments().iter().map(|s| s.to_string()).collect();
    let mut fields = Vec::new();
    for (field, value) in result.as_object().into_iter().flatten() {
        // Handlers, and the charm's own keys (`$NAME`).
        if trellis_runner::link::stream_schema(value).is_some() || field.starts_with('$') {
            continue;
        }
        let path: Vec<String> = root.iter().cloned().chain([field.clone()]).collect();
        // Newest first: kept in the order written.
        let by: Vec<&Written> = written.iter().rev().filter(|w| w.overlaps(&path)).collect();
        if by.is_empty() {
            let derived = rt.is_derived(&Link::new(at.doc.clone(), Path::new(path.iter().map(String::as_str))));
            fields.push(FieldWriter { field: field.clone(), path: field.clone(), derived, by: None, at_ms: None });
        }
        for w in by {
            let inside = dotted(w.path.get(root.len()..).unwrap_or_default());
            let (by, at_ms) = (Some(w.by.clone()), Some(w.at_ms));
            fields.push(FieldWriter { field: field.clone(), path: inside, derived: false, by, at_ms });
        }
    }
    Ok(Provenance { id: id.to_string(), name: charms.name(id), result, provenance: fields })
}

/// `notes[0].title` of the segments `notes`, `0`, `title`.
fn dotted(path: &[String]) -> String {
    let mut out = String::new();
    for segment in path {
        match (segment.parse::<usize>().is_ok(), out.is_empty()) {
            (true, _) => out.push_str(&format!("[{segment}]")),
            (false, true) => out.push_str(segment),
            (false, false) => out.push_str(&format!(".{segment}")),
        }
    }
    out
}
