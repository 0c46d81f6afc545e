//! Links and stream markers: the two special shapes a document value can hold.
//!
//! A **link** `{"$link": {"doc": ID, "path": [..]}}` points at another location; reads
//! follow it. A **stream marker** `{"$stream": {"schema": ..}}` marks a location whose
//! events go to a handler; the schema is the handler's event schema, so tools can be
//! described without running the charm.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;

use serde::{Deserialize, Serialize};

use crate::value::{Path, Segment, Value};

/// A document id inside a space.
pub type DocId = Arc<str>;

/// The key that marks a link object.
pub const LINK_KEY: &str = "$link";
/// The key that marks a stream object.
pub const STREAM_KEY: &str = "$stream";

/// A pointer to a location (document + path) in the same space.
#[derive(Clone, Eq, Serialize, Deserialize)]
pub struct Link {
    /// The document.
    pub doc: DocId,
    /// The path inside it.
    #[serde(with = "path_serde")]
    pub path: Path,
}

impl PartialEq for Link {
    fn eq(&self, other: &Self) -> bool {
        crate::value::same_text(&self.doc, &other.doc) && self.path == other.path
    }
}

// By content, as equality is (it only looks at the addresses first).
impl std::hash::Hash for Link {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.doc.hash(state);
        self.path.hash(state);
    }
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.doc, self.path)
    }
}

impl std::fmt::Display for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

mod path_serde {
    use super::*;

    pub fn serialize<S: serde::Serializer>(path: &Path, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(path.segments().iter().map(|s| &**s))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Path, D::Error> {
        let segments = Vec::<String>::deserialize(d)?;
        Ok(Path::new(segments))
    }
}

impl Link {
    /// A link to `path` inside `doc`.
    pub fn new(doc: impl Into<DocId>, path: Path) -> Self {
        Link { doc: doc.into(), path }
    }

    /// A link one key deeper.
    pub fn child(&self, segment: impl Into<Segment>) -> Self {
        Link { doc: self.doc.clone(), path: self.path.child(segment) }
    }

    /// The link as a document value (`{"$link": {...}}`).
    pub fn to_value(&self) -> Value {
        Value::from(self.to_json())
    }

    /// The link as JSON (`{"$link": {...}}`).
    pub fn to_json(&self) -> serde_json::Value {
        let segments: Vec<&str> = self.path.segments().iter().map(|s| &**s).collect();
        serde_json::json!({ LINK_KEY: { "doc": &*self.doc, "path": segments } })
    }

    /// Reads a link from a document value, if the value is one.
    pub fn from_value(value: &Value) -> Option<Link> {
        let inner = value.as_object()?.get(LINK_KEY)?.as_object()?;
        let doc = inner.get("doc")?.as_str()?;
        let path = match inner.get("path") {
            Some(Value::Array(items)) => {
                Path::new(items.iter().map(|s| s.as_str().map(Arc::<str>::from)).collect::<Option<Vec<_>>>()?)
            }
            None => Path::root(),
            Some(_) => return None,
        };
        Some(Link::new(doc, path))
    }

    /// Reads a link from JSON, if the JSON is one.
    pub fn from_json(json: &serde_json::Value) -> Option<Link> {
        // Deserialised in place: a catalog build reads one per charm.
        Link::deserialize(json.get(LINK_KEY)?).ok()
    }
}

/// Serialises a handle that points at `link` (a cell or stream) as the link itself.
pub(crate) fn serialize_as_link<S: serde::Serializer>(link: &Link, s: S) -> Result<S::Ok, S::Error> {
    link.to_json().serialize(s)
}

/// Reads the link a serialised handle (a cell or stream) points at; `what` names the
/// handle in the error.
pub(crate) fn deserialize_link<'de, D: serde::Deserializer<'de>>(d: D, what: &str) -> Result<Link, D::Error> {
    let json = serde_json::Value::deserialize(d)?;
    Link::from_json(&json)
        .ok_or_else(|| serde::de::Error::custom(format!("expected a link ({{\"$link\": ...}}) for a {what}")))
}

/// The document value that marks a stream whose handler takes events of `schema` and
/// returns values of `result` (`None`: it returns nothing).
///
/// Markers with the same schemas are one shared value (persistent values share
/// structure), so the charms of a pattern hold one copy of each handler's schemas between
/// them, and whoever compares two of them (the tool catalog) finds them identical at once.
pub fn stream_marker(schema: Option<&serde_json::Value>, result: Option<&serde_json::Value>) -> Value {
    static SHARED: LazyLock<Mutex<HashMap<String, Value>>> = LazyLock::new(Default::default);
    let mut inner = serde_json::Map::new();
    if let Some(schema) = schema {
        inner.insert("schema".into(), schema.clone());
    }
    if let Some(result) = result {
        inner.insert(RESULT_KEY.into(), result.clone());
    }
    let marker = serde_json::json!({ STREAM_KEY: inner });
    let key = marker.to_string();
    let mut shared = SHARED.lock();
    shared.entry(key).or_insert_with(|| Value::from(marker)).clone()
}

/// Whether a JSON value is a stream marker; returns the marker's event schema if it has one.
pub fn stream_schema(json: &serde_json::Value) -> Option<Option<&serde_json::Value>> {
    let inner = json.as_object()?.get(STREAM_KEY)?;
    Some(inner.get("schema"))
}

/// The key, inside a stream marker, of the schema of what the handler returns (see
/// [`Builder::handler`](crate::Builder::handler)).
pub const RESULT_KEY: &str = "result";

/// The schema of what a stream's handler returns, if the marker declares one.
pub fn stream_result_schema(json: &serde_json::Value) -> Option<&serde_json::Value> {
    json.as_object()?.get(STREAM_KEY)?.get(RESULT_KEY)
}

/// The key, inside a stream marker, of the reason a person must approve each event
/// sent on a model's behalf (see [`Builder::require_approval`](crate::Builder::require_approval)).
pub const APPROVAL_KEY: &str = "approval";

/// The approval reason a stream marker carries, if its events need a person's approval.
pub fn stream_approval(value: &Value) -> Option<&str> {
    value.as_object()?.get(STREAM_KEY)?.as_object()?.get(APPROVAL_KEY)?.as_str()
}

/// The key, inside a stream marker, of the fields of its event only a person may set
/// (see [`Builder::person_only`](crate::Builder::person_only)).
pub const PERSON_ONLY_KEY: &str = "person_only";

/// Whether a document value is a stream marker.
pub fn is_stream(value: &Value) -> bool {
    value.as_object().is_some_and(|m| m.contains_key(STREAM_KEY))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_round_trip_through_values_and_json() {
        let link = Link::new("doc1", Path::new(["a", "0"]));
        assert_eq!(Link::from_value(&link.to_value()), Some(link.clone()));
        assert_eq!(Link::from_json(&link.to_json()), Some(link.clone()));
        assert_eq!(link.to_string(), "doc1/a/0");
        assert_eq!(Link::from_value(&Value::from(5)), None);
    }

    #[test]
    fn markers_with_the_same_schema_are_one_value() {
        let schema = serde_json::json!({"type": "object", "title": "shared-marker-test"});
        let (Value::Object(a), Value::Object(b)) =
            (stream_marker(Some(&schema), None), stream_marker(Some(&schema), None))
        else {
            panic!("markers are objects")
        };
        assert!(a.ptr_eq(&b), "the second marker is the first one, not a copy");
        let other = serde_json::json!({"type": "object", "title": "another"});
        let Value::Object(c) = stream_marker(Some(&other), None) else { panic!("markers are objects") };
        assert!(!a.ptr_eq(&c));
    }

    #[test]
    fn stream_markers_carry_their_schema() {
        let schema = serde_json::json!({"type": "object"});
        let result = serde_json::json!({"type": "integer"});
        let marker = stream_marker(Some(&schema), Some(&result)).to_json();
        assert_eq!(stream_schema(&marker), Some(Some(&schema)));
        assert_eq!(stream_result_schema(&marker), Some(&result));
        assert!(is_stream(&stream_marker(None, None)));
        assert_eq!(stream_result_schema(&stream_marker(Some(&schema), None).to_json()), None);
        assert_eq!(stream_schema(&serde_json::json!({"a": 1})), None);
    }
}
