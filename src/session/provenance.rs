//! Who changed what in a charm: each field with its last recorded writer (see
//! `Runtime::provenance`), for `trellis charm get NAME --provenance` and the server's
//! `GET /api/charms/{charm}/provenance`.

use serde_json::{json, Value};
use trellis_runner::{DocId, Link, Path, Runtime, Written};

/// Each field of charm `id` (its handlers aside) with its last recorded writer; a path
/// inside a field written since by another (`notes[0].title`) as an entry of its own;
/// a field with no writer recorded says whether a computation derives it.
/// `{"id", "name", "result", "provenance": [{"field", "path", "derived", "by", "at_ms"}]}`.
pub fn provenance(rt: &Runtime, id: &DocId) -> trellis_runner::Result<Value> {
    let charms = rt.charms();
    // Its computations are known only while it runs here.
    if !charms.is_running(id) {
        charms.start(id)?;
    }
    let result = charms.get(id)?;
    let at = charms.result(id);
    let written = rt.provenance(&at.doc)?;
    let root: Vec<String> = at.path.segments().iter().map(|s| s.to_string()).collect();
    let mut fields = Vec::new();
    for (field, value) in result.as_object().into_iter().flatten() {
        if trellis_runner::link::stream_schema(value).is_some() {
            continue;
        }
        let path: Vec<String> = root.iter().cloned().chain([field.clone()]).collect();
        let mut by: Vec<&Written> = written.iter().filter(|w| w.overlaps(&path)).collect();
        by.sort_by_key(|w| std::cmp::Reverse(w.at_ms));
        if by.is_empty() {
            let derived = rt.is_derived(&Link::new(at.doc.clone(), Path::new(path.iter().map(String::as_str))));
            fields.push(json!({ "field": field, "path": field, "derived": derived, "by": null }));
        }
        for w in by {
            let inside = dotted(w.path.get(root.len()..).unwrap_or_default());
            fields.push(json!({ "field": field, "path": inside, "derived": false, "by": w.by, "at_ms": w.at_ms }));
        }
    }
    Ok(json!({ "id": &**id, "name": charms.name(id), "result": result, "provenance": fields }))
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
