//! Prepared schemas by content: the charms of one pattern share their handlers' schemas,
//! so a catalog of many such charms prepares each schema once, and its tools share one
//! prepared schema. One cache holds event schemas prepared as input schemas
//! ([`StreamSchema`]), another result schemas prepared as output schemas
//! ([`OutputSchema`]).

use std::sync::Arc;

use serde_json::Value;
use trellis_runner::{Link, Value as Stored};

use super::reads::Reader;
use crate::naming::FastMap;
use crate::schema::{description_of, prepare_input_schema, prepare_output_schema, InputShape, SchemaError};

/// A stream's event schema, prepared as an input schema.
#[derive(Debug, PartialEq)]
pub(super) struct StreamSchema {
    /// The prepared schema (shared by every tool with this schema) and its shape.
    pub(super) prepared: Result<(Arc<Value>, InputShape), SchemaError>,
    /// The schema's own description.
    pub(super) description: Option<String>,
    /// The handler declares no schema.
    pub(super) unchecked: bool,
}

impl StreamSchema {
    pub(super) fn of(raw: &Value) -> StreamSchema {
        StreamSchema {
            prepared: prepare_input_schema(raw).map(|p| (Arc::new(p.schema), p.shape)),
            description: description_of(raw),
            unchecked: raw.is_null(),
        }
    }
}

/// What a stream's handler returns, its schema prepared as an output schema.
pub(super) type OutputSchema = Result<Arc<Value>, SchemaError>;

/// Prepared schemas by content, grouped by the key of the stream they were found at.
///
/// The key is what the charms of one pattern have in common, and comparing a schema with
/// the few others seen under its key is cheaper than hashing it: the comparison stops at
/// the first difference, and schemas shared within one document compare by pointer.
pub(super) struct SchemaCache<T>(FastMap<Arc<str>, Vec<(Stored, Arc<T>)>>);

impl<T> Default for SchemaCache<T> {
    fn default() -> Self {
        SchemaCache(FastMap::default())
    }
}

/// What a [`SchemaCache`] keeps: a schema prepared one way.
pub(super) trait Prepared: PartialEq + std::fmt::Debug {
    fn prepare(raw: &Value) -> Self;
}

impl Prepared for StreamSchema {
    fn prepare(raw: &Value) -> Self {
        StreamSchema::of(raw)
    }
}

impl Prepared for OutputSchema {
    fn prepare(raw: &Value) -> Self {
        prepare_output_schema(raw).map(Arc::new)
    }
}

/// How many different schemas are kept under one key: past that, a schema is prepared
/// without looking (many patterns with a handler of the same name must not make every
/// lookup compare with all of them).
const PER_KEY: usize = 8;

impl SchemaCache<StreamSchema> {
    /// The schema of the stream at `stream`, whose marker has the schema `stored`: that
    /// one, else the running handler's, else none (an unchecked tool).
    pub(super) fn of_stream(
        &mut self,
        reader: &mut Reader<'_>,
        stream: &Link,
        stored: Option<&Stored>,
    ) -> Arc<StreamSchema> {
        match stored {
            Some(schema) => self.prepare(stream, schema),
            None => Arc::new(StreamSchema::of(&reader.handler(stream).flatten().unwrap_or(Value::Null))),
        }
    }
}

impl<T: Prepared> SchemaCache<T> {
    /// `schema`, found at `stream`, prepared (once for each schema seen under the key).
    pub(super) fn prepare(&mut self, stream: &Link, schema: &Stored) -> Arc<T> {
        let key = stream.path.segments().last();
        let known = self.0.get(key.map_or("", |k| &**k));
        if let Some((_, prepared)) = known.and_then(|known| known.iter().find(|(seen, _)| same(seen, schema))) {
            #[cfg(debug_assertions)]
            check(&**prepared, schema);
            return prepared.clone();
        }
        let prepared = Arc::new(T::prepare(&schema.to_json()));
        let known = self.0.entry(key.cloned().unwrap_or_else(|| Arc::from(""))).or_default();
        if known.len() < PER_KEY {
            known.push((schema.clone(), prepared.clone()));
        }
        prepared
    }
}

/// Panics unless `kept`, the schema the cache answered for `schema`, is what preparing
/// `schema` afresh gives (debug builds check every answer of the cache).
#[cfg(debug_assertions)]
fn check<T: Prepared>(kept: &T, schema: &Stored) {
    let agrees = *kept == T::prepare(&schema.to_json());
    assert!(agrees, "the schema cache answered a schema that preparing {schema:?} afresh does not give");
}

/// Whether two stored values are equal. The same as `==`, which compares maps with imbl's
/// diff iterator: on the small maps schemas are made of, setting that up costs more than
/// the comparison itself.
fn same(a: &Stored, b: &Stored) -> bool {
    let same = same_by_parts(a, b);
    debug_assert_eq!(same, a == b, "`same` and `==` disagree on {a:?} and {b:?}");
    same
}

fn same_by_parts(a: &Stored, b: &Stored) -> bool {
    match (a, b) {
        (Stored::Object(x), Stored::Object(y)) => {
            x.ptr_eq(y)
                || (x.len() == y.len()
                    && x.iter().zip(y.iter()).all(|((ka, va), (kb, vb))| ka == kb && same_by_parts(va, vb)))
        }
        (Stored::Array(x), Stored::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(a, b)| same_by_parts(a, b))
        }
        _ => a == b,
    }
}
