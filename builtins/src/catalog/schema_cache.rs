//! Prepared input schemas by content: the charms of one pattern share their handlers'
//! schemas, so a catalog of many such charms prepares each schema once.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use serde_json::Value;
use trellis_runner::link::STREAM_KEY;
use trellis_runner::{Link, Runtime, Value as Stored};

use super::naming::StableHasher;
use super::schema::{self, description_of, prepare_input_schema, PreparedSchema, SchemaError};

/// A stream's event schema, prepared as an input schema.
#[derive(Clone)]
pub(super) struct StreamSchema {
    pub(super) prepared: Result<PreparedSchema, SchemaError>,
    /// The schema's own description.
    pub(super) description: Option<String>,
    /// The handler declares no schema.
    pub(super) unchecked: bool,
}

impl StreamSchema {
    pub(super) fn of(raw: &Value) -> StreamSchema {
        StreamSchema { prepared: prepare_input_schema(raw), description: description_of(raw), unchecked: raw.is_null() }
    }
}

/// Prepared schemas by content. The charms of one pattern share their handlers' schemas,
/// so a catalog of many such charms prepares each schema once.
#[derive(Default)]
pub(super) struct SchemaCache(HashMap<u64, Vec<(Stored, StreamSchema)>>);

impl SchemaCache {
    /// The schema of the stream at `stream`, whose stored value is `marker`: the schema
    /// in the marker, else the running handler's, else none (an unchecked tool).
    pub(super) fn of_stream(&mut self, rt: &Runtime, stream: &Link, marker: &Stored) -> StreamSchema {
        let stored = marker
            .as_object()
            .and_then(|m| m.get(STREAM_KEY))
            .and_then(Stored::as_object)
            .and_then(|inner| inner.get("schema"))
            .filter(|schema| !matches!(schema, Stored::Null));
        match stored {
            Some(schema) => self.prepare(schema),
            None => StreamSchema::of(&rt.handler(stream).and_then(|h| h.schema).unwrap_or(Value::Null)),
        }
    }

    fn prepare(&mut self, schema: &Stored) -> StreamSchema {
        let mut hasher = StableHasher::default();
        hash_stored(schema, &mut hasher, 0);
        let bucket = self.0.entry(hasher.finish()).or_default();
        if let Some((_, prepared)) = bucket.iter().find(|(known, _)| known == schema) {
            return prepared.clone();
        }
        let prepared = StreamSchema::of(&schema.to_json());
        bucket.push((schema.clone(), prepared.clone()));
        prepared
    }
}

/// Hashes a stored value (down to a bounded depth: equal values still hash alike).
fn hash_stored(value: &Stored, hasher: &mut impl Hasher, depth: usize) {
    if depth > schema::MAX_DEPTH {
        return;
    }
    match value {
        Stored::Null => 0u8.hash(hasher),
        Stored::Bool(b) => (1u8, b).hash(hasher),
        Stored::Number(n) => (2u8, n).hash(hasher),
        Stored::String(s) => (3u8, s).hash(hasher),
        Stored::Array(items) => {
            (4u8, items.len()).hash(hasher);
            items.iter().for_each(|item| hash_stored(item, hasher, depth + 1));
        }
        Stored::Object(map) => {
            (5u8, map.len()).hash(hasher);
            for (key, item) in map {
                key.hash(hasher);
                hash_stored(item, hasher, depth + 1);
            }
        }
    }
}
