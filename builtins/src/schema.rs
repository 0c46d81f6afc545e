//! Turning a handler's event schema into a tool's input schema.
//!
//! Handler event schemas come from schemars (JSON Schema 2020-12) and may carry things
//! providers reject or that only the runtime understands. [`prepare_input_schema`]:
//!
//! - inlines local `$ref`s (`#/$defs/X`, `#/definitions/X`, any `#/...` pointer), merging
//!   keywords written beside the `$ref`; a reference already being expanded (recursion) is
//!   cut to `{}` with a description saying so; non-local references become `{}` too;
//! - drops `$schema`, `$defs`, `definitions`, `$id` and `$comment`, and the runtime-only
//!   markers `asCell`, `asStream`, `$stream`, `$link` and `ifc`;
//! - maps boolean schemas to objects: `true` → `{}`, `false` → `{"not": {}}`, except as
//!   the value of `additionalProperties`/`unevaluatedProperties`, where providers (OpenAI's
//!   strict mode) expect the literal `false`;
//! - removes the injected top-level `result` property (and its `required` entry);
//! - makes the top level an object schema. A missing or empty schema becomes
//!   `{"type":"object","properties":{}}`. Any other non-object event schema is wrapped as
//!   `{"type":"object","properties":{"value": …},"required":["value"]}` and the result's
//!   [`InputShape::Wrapped`] tells the catalog to unwrap `value` before sending the event
//!   (see [`InputShape::event_from_arguments`]).
//!
//! Hostile input is bounded: nesting deeper than [`MAX_DEPTH`] or more than [`MAX_NODES`]
//! nodes (counted after inlining, so reference bombs are caught) is a [`SchemaError`].

use serde_json::{json, Map, Value};

/// Deepest schema nesting accepted.
pub const MAX_DEPTH: usize = 64;

/// Most JSON nodes a prepared schema may have.
pub const MAX_NODES: usize = 20_000;

/// The property a non-object event is wrapped in.
pub const WRAPPED_PROPERTY: &str = "value";

/// Keywords dropped everywhere: document plumbing and runtime-only markers.
const DROPPED: &[&str] =
    &["$schema", "$defs", "definitions", "$id", "$comment", "asCell", "asStream", "$stream", "$link", "ifc"];
/// Keywords whose value is one schema.
const ONE_SCHEMA: &[&str] = &[
    "items",
    "additionalProperties",
    "additionalItems",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
];
/// Schema keywords whose boolean form providers expect literally.
const KEEP_BOOLEAN: &[&str] = &["additionalProperties", "unevaluatedProperties"];
/// Keywords whose value is an array of schemas.
const SCHEMA_LIST: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems"];
/// Keywords whose value maps names to schemas.
const SCHEMA_MAP: &[&str] = &["properties", "patternProperties", "dependentSchemas"];
/// Keywords that only annotate: a schema with nothing else accepts anything.
const ANNOTATIONS: &[&str] = &["title", "description", "default", "examples"];

/// How the tool's arguments relate to the handler's event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputShape {
    /// The arguments object is the event.
    Object,
    /// The event was not an object schema; it is the arguments' `value` property.
    Wrapped,
}

impl InputShape {
    /// The event to send for the model's `arguments`.
    pub fn event_from_arguments(self, arguments: Value) -> Value {
        match (self, arguments) {
            (InputShape::Object, arguments) => arguments,
            (InputShape::Wrapped, Value::Object(mut map)) => map.remove(WRAPPED_PROPERTY).unwrap_or(Value::Null),
            (InputShape::Wrapped, _) => Value::Null,
        }
    }
}

/// A tool input schema, ready for providers.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedSchema {
    /// The object schema to send.
    pub schema: Value,
    /// Whether the catalog must unwrap the arguments before sending the event.
    pub shape: InputShape,
}

/// Why a schema could not be prepared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The schema nests too deeply.
    #[error("schema nests deeper than {limit} levels at {path}")]
    TooDeep {
        /// The depth limit.
        limit: usize,
        /// Where, as a JSON pointer into the input.
        path: String,
    },
    /// The schema, with references inlined, is too large.
    #[error("schema has more than {limit} nodes once references are inlined")]
    TooLarge {
        /// The node limit.
        limit: usize,
    },
    /// Something other than an object or boolean stands where a schema must be.
    #[error("expected a schema (object or boolean) at {path}, found {found}")]
    NotASchema {
        /// Where, as a JSON pointer into the input.
        path: String,
        /// The JSON type found.
        found: &'static str,
    },
}

/// Prepares a handler's event schema as a tool input schema (see the module docs).
///
/// `null` counts as "no schema" and gives an empty object schema.
pub fn prepare_input_schema(schema: &Value) -> Result<PreparedSchema, SchemaError> {
    let prepared = match schema {
        Value::Null => Map::new(),
        _ => {
            let mut inliner = Inliner { root: schema, nodes: 0, expanding: vec!["#".into()] };
            inliner.schema(schema, 0, &mut Vec::new())?
        }
    };
    Ok(into_object_schema(prepared))
}

/// Prepares the schema of what a handler returns for a tool's output: references inlined
/// and plumbing dropped as for an input schema, bounded the same way, but of any type
/// (a handler may return a number or a list).
///
/// ```
/// use trellis_builtins::schema::prepare_output_schema;
///
/// let schema = serde_json::json!({
///     "$ref": "#/$defs/Note",
///     "$defs": {"Note": {"type": "object", "properties": {"id": {"type": "integer"}}}}
/// });
/// let prepared = prepare_output_schema(&schema).unwrap();
/// assert_eq!(prepared["properties"]["id"]["type"], "integer");
/// assert!(prepared.get("$defs").is_none());
/// ```
pub fn prepare_output_schema(schema: &Value) -> Result<Value, SchemaError> {
    let mut inliner = Inliner { root: schema, nodes: 0, expanding: vec!["#".into()] };
    Ok(Value::Object(inliner.schema(schema, 0, &mut Vec::new())?))
}

/// The schema's top-level description, if it has a non-blank one (following a top-level
/// local `$ref` when the schema itself has none).
pub fn description_of(schema: &Value) -> Option<String> {
    let own = |s: &Value| {
        s.get("description").and_then(Value::as_str).map(str::trim).filter(|d| !d.is_empty()).map(str::to_owned)
    };
    own(schema).or_else(|| {
        let pointer = schema.get("$ref")?.as_str()?.strip_prefix('#')?;
        own(schema.pointer(pointer)?)
    })
}

/// Walks one schema document, inlining references and dropping what providers must not see.
struct Inliner<'a> {
    root: &'a Value,
    nodes: usize,
    expanding: Vec<String>,
}

impl Inliner<'_> {
    fn schema(
        &mut self,
        node: &Value,
        depth: usize,
        path: &mut Vec<String>,
    ) -> Result<Map<String, Value>, SchemaError> {
        if depth > MAX_DEPTH {
            return Err(SchemaError::TooDeep { limit: MAX_DEPTH, path: pointer(path) });
        }
        self.count(1)?;
        let map = match node {
            Value::Bool(true) => return Ok(Map::new()),
            Value::Bool(false) => return Ok(not_anything()),
            Value::Object(map) => map,
            other => return Err(SchemaError::NotASchema { path: pointer(path), found: crate::text::json_kind(other) }),
        };
        let mut out = match map.get("$ref") {
            Some(Value::String(reference)) => self.reference(reference, depth, path)?,
            _ => Map::new(),
        };
        for (key, value) in map {
            if key == "$ref" || DROPPED.contains(&key.as_str()) {
                continue;
            }
            path.push(key.clone());
            let prepared = self.keyword(key, value, depth, path)?;
            path.pop();
            out.insert(key.clone(), prepared);
        }
        Ok(out)
    }

    fn keyword(
        &mut self,
        key: &str,
        value: &Value,
        depth: usize,
        path: &mut Vec<String>,
    ) -> Result<Value, SchemaError> {
        let is_list = SCHEMA_LIST.contains(&key) || (key == "items" && value.is_array());
        let is_map = SCHEMA_MAP.contains(&key) || (key == "dependencies" && value.is_object());
        match value {
            Value::Array(items) if is_list => {
                let mut out = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    path.push(i.to_string());
                    out.push(Value::Object(self.schema(item, depth + 1, path)?));
                    path.pop();
                }
                Ok(Value::Array(out))
            }
            Value::Object(entries) if is_map => {
                let mut out = Map::new();
                for (name, item) in entries {
                    path.push(name.clone());
                    // `dependencies` may map to a list of property names (plain data).
                    let prepared = if item.is_array() {
                        self.data(item, depth + 1, path)?
                    } else {
                        Value::Object(self.schema(item, depth + 1, path)?)
                    };
                    path.pop();
                    out.insert(name.clone(), prepared);
                }
                Ok(Value::Object(out))
            }
            // `additionalProperties: false` stays literal: providers (OpenAI strict mode)
            // look for exactly that, and it means the same as `{"not": {}}`.
            Value::Bool(_) if KEEP_BOOLEAN.contains(&key) => Ok(value.clone()),
            _ if ONE_SCHEMA.contains(&key) => Ok(Value::Object(self.schema(value, depth + 1, path)?)),
            _ => self.data(value, depth + 1, path),
        }
    }

    /// The inlined target of `reference`, or a placeholder when it cannot be inlined.
    fn reference(
        &mut self,
        reference: &str,
        depth: usize,
        path: &mut Vec<String>,
    ) -> Result<Map<String, Value>, SchemaError> {
        let target = reference.strip_prefix('#').and_then(|p| self.root.pointer(p));
        let Some(target) = target else {
            return Ok(described(format!("unresolved reference `{reference}`; any value")));
        };
        if self.expanding.iter().any(|r| r == reference) {
            let name = reference.rsplit('/').next().unwrap_or(reference);
            return Ok(described(format!("recursive reference to `{name}`, not expanded")));
        }
        // Each hop counts as a level: a chain of references nests as deeply as the schema
        // it expands to, and must not recurse (or loop over `expanding`) without bound.
        self.expanding.push(reference.to_owned());
        let inlined = self.schema(target, depth + 1, path);
        self.expanding.pop();
        inlined
    }

    /// A copy of plain data (defaults, enums, ...), counted against the limits.
    fn data(&mut self, value: &Value, depth: usize, path: &[String]) -> Result<Value, SchemaError> {
        // Walk iteratively first so hostile nesting is rejected before a recursive clone.
        let mut stack = vec![(value, depth)];
        while let Some((node, level)) = stack.pop() {
            if level > MAX_DEPTH {
                return Err(SchemaError::TooDeep { limit: MAX_DEPTH, path: pointer(path) });
            }
            self.count(1)?;
            match node {
                Value::Array(items) => stack.extend(items.iter().map(|v| (v, level + 1))),
                Value::Object(map) => stack.extend(map.values().map(|v| (v, level + 1))),
                _ => {}
            }
        }
        Ok(value.clone())
    }

    fn count(&mut self, nodes: usize) -> Result<(), SchemaError> {
        self.nodes += nodes;
        if self.nodes > MAX_NODES {
            return Err(SchemaError::TooLarge { limit: MAX_NODES });
        }
        Ok(())
    }
}

/// Makes the prepared top level an object schema, wrapping it when it is not one.
fn into_object_schema(mut map: Map<String, Value>) -> PreparedSchema {
    let declared_object = match map.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(types)) => types.len() == 1 && types[0] == "object",
        Some(_) => false,
        None => {
            let has_properties = map.contains_key("properties") || map.contains_key("required");
            let has_alternatives =
                ["anyOf", "oneOf", "allOf", "not", "enum", "const"].iter().any(|k| map.contains_key(*k));
            has_properties && !has_alternatives
        }
    };
    let accepts_anything = map.keys().all(|k| ANNOTATIONS.contains(&k.as_str()));
    if !(declared_object || accepts_anything) {
        let mut wrapper = Map::new();
        wrapper.insert("type".into(), json!("object"));
        if let Some(description) = map.get("description") {
            wrapper.insert("description".into(), description.clone());
        }
        wrapper.insert("properties".into(), json!({ WRAPPED_PROPERTY: Value::Object(map) }));
        wrapper.insert("required".into(), json!([WRAPPED_PROPERTY]));
        return PreparedSchema { schema: Value::Object(wrapper), shape: InputShape::Wrapped };
    }
    map.insert("type".into(), json!("object"));
    match map.entry("properties").or_insert_with(|| json!({})) {
        Value::Object(properties) => {
            properties.remove("result");
        }
        other => *other = json!({}),
    }
    if let Some(Value::Array(required)) = map.get_mut("required") {
        required.retain(|r| r != "result");
        if required.is_empty() {
            map.remove("required");
        }
    }
    PreparedSchema { schema: Value::Object(map), shape: InputShape::Object }
}

fn not_anything() -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("not".into(), json!({}));
    map
}

fn described(description: String) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("description".into(), Value::String(description));
    map
}

fn pointer(path: &[String]) -> String {
    if path.is_empty() {
        return "/".into();
    }
    path.iter().map(|p| format!("/{}", p.replace('~', "~0").replace('/', "~1"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepare(schema: Value) -> PreparedSchema {
        prepare_input_schema(&schema).expect("schema prepares")
    }

    #[test]
    fn removes_the_injected_result_field() {
        let prepared = prepare(json!({
            "type": "object",
            "properties": { "amount": { "type": "integer" }, "result": { "type": "integer" } },
            "required": ["amount", "result"]
        }));
        assert_eq!(prepared.shape, InputShape::Object);
        assert_eq!(
            prepared.schema,
            json!({ "type": "object", "properties": { "amount": { "type": "integer" } }, "required": ["amount"] })
        );
        let only_result = prepare(json!({ "type": "object", "properties": { "result": {} }, "required": ["result"] }));
        assert_eq!(only_result.schema, json!({ "type": "object", "properties": {} }));
    }

    #[test]
    fn inlines_defs_and_definitions_merging_sibling_keywords() {
        let prepared = prepare(json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "a": { "$ref": "#/$defs/Kind", "description": "Which kind." },
                "b": { "$ref": "#/definitions/Num" }
            },
            "$defs": { "Kind": { "type": "string", "enum": ["x", "y"], "description": "A kind." } },
            "definitions": { "Num": { "type": "number" } }
        }));
        assert_eq!(
            prepared.schema,
            json!({ "type": "object", "properties": {
                "a": { "type": "string", "enum": ["x", "y"], "description": "Which kind." },
                "b": { "type": "number" }
            }})
        );
    }

    #[test]
    fn cuts_recursive_references() {
        let prepared = prepare(json!({
            "type": "object",
            "properties": { "root": { "$ref": "#/$defs/Node" }, "again": { "$ref": "#" } },
            "$defs": { "Node": { "type": "object", "properties": { "next": { "$ref": "#/$defs/Node" } } } }
        }));
        let props = &prepared.schema["properties"];
        let next = &props["root"]["properties"]["next"];
        assert!(next["description"].as_str().is_some_and(|d| d.contains("recursive")), "{next}");
        // `#` is the root, which is being expanded.
        assert!(props["again"]["description"].as_str().is_some_and(|d| d.contains("recursive")));
    }

    #[test]
    fn unresolvable_references_accept_anything() {
        let prepared = prepare(json!({ "type": "object", "properties": {
            "remote": { "$ref": "https://example.com/schema.json" },
            "missing": { "$ref": "#/$defs/Nope" }
        }}));
        for key in ["remote", "missing"] {
            let d = &prepared.schema["properties"][key]["description"];
            assert!(d.as_str().is_some_and(|d| d.starts_with("unresolved reference")), "{d}");
        }
    }

    #[test]
    fn strips_runtime_markers_but_not_data_or_property_names() {
        let prepared = prepare(json!({
            "type": "object",
            "asCell": true,
            "properties": {
                "items": { "type": "array", "asCell": true, "items": { "$link": "x", "ifc": {}, "type": "string" } },
                "asCell": { "type": "boolean", "asStream": true, "$stream": true },
                "opts": { "type": "object", "default": { "asCell": 1 } }
            }
        }));
        assert_eq!(
            prepared.schema,
            json!({ "type": "object", "properties": {
                "items": { "type": "array", "items": { "type": "string" } },
                "asCell": { "type": "boolean" },
                "opts": { "type": "object", "default": { "asCell": 1 } }
            }})
        );
    }

    #[test]
    fn maps_boolean_schemas_to_objects() {
        let prepared = prepare(json!({
            "type": "object",
            "properties": { "any": true, "none": false, "list": { "type": "array", "items": false } },
            "additionalProperties": false
        }));
        assert_eq!(
            prepared.schema,
            json!({ "type": "object", "properties": {
                "any": {}, "none": { "not": {} }, "list": { "type": "array", "items": { "not": {} } }
            }, "additionalProperties": false })
        );
        assert_eq!(prepare(json!(true)).schema, json!({ "type": "object", "properties": {} }));
        let never = prepare(json!(false));
        assert_eq!(never.shape, InputShape::Wrapped);
        assert_eq!(never.schema["properties"]["value"], json!({ "not": {} }));
    }

    #[test]
    fn missing_or_empty_schemas_become_empty_objects() {
        let empty = json!({ "type": "object", "properties": {} });
        assert_eq!(prepare(Value::Null), PreparedSchema { schema: empty.clone(), shape: InputShape::Object });
        assert_eq!(prepare(json!({})).schema, empty);
        assert_eq!(
            prepare(json!({ "title": "Ping", "description": "Pings." })).schema,
            json!({ "type": "object", "properties": {}, "title": "Ping", "description": "Pings." })
        );
        assert_eq!(
            prepare(json!({ "properties": { "n": { "type": "integer" } } })).schema,
            json!({ "type": "object", "properties": { "n": { "type": "integer" } } })
        );
    }

    #[test]
    fn wraps_non_object_events() {
        let prepared = prepare(json!({ "type": "string", "description": "A name." }));
        assert_eq!(prepared.shape, InputShape::Wrapped);
        assert_eq!(
            prepared.schema,
            json!({ "type": "object", "description": "A name.",
                    "properties": { "value": { "type": "string", "description": "A name." } },
                    "required": ["value"] })
        );
        assert_eq!(InputShape::Wrapped.event_from_arguments(json!({ "value": "Ada" })), json!("Ada"));
        assert_eq!(InputShape::Wrapped.event_from_arguments(json!("junk")), Value::Null);
        assert_eq!(InputShape::Object.event_from_arguments(json!({ "n": 1 })), json!({ "n": 1 }));
        // An optional object (`Option<T>`) is not plainly an object either.
        assert_eq!(prepare(json!({ "type": ["object", "null"] })).shape, InputShape::Wrapped);
        assert_eq!(prepare(json!({ "oneOf": [{ "type": "integer" }] })).shape, InputShape::Wrapped);
    }

    #[test]
    fn describes_from_the_top_level() {
        assert_eq!(description_of(&json!({ "description": " Adds. " })), Some("Adds.".into()));
        assert_eq!(description_of(&json!({ "description": "  " })), None);
        assert_eq!(description_of(&json!(true)), None);
        let via_ref = json!({ "$ref": "#/$defs/E", "$defs": { "E": { "description": "From def." } } });
        assert_eq!(description_of(&via_ref), Some("From def.".into()));
    }

    #[test]
    fn rejects_hostile_schemas() {
        let mut deep = json!({ "type": "string" });
        for _ in 0..200 {
            deep = json!({ "type": "array", "items": deep });
        }
        assert!(matches!(prepare_input_schema(&deep), Err(SchemaError::TooDeep { .. })));

        let mut deep_data = json!(1);
        for _ in 0..100 {
            deep_data = json!([deep_data]);
        }
        let schema = json!({ "type": "object", "properties": { "x": { "default": deep_data } } });
        assert!(matches!(prepare_input_schema(&schema), Err(SchemaError::TooDeep { .. })));

        // Each level references the next one twice: 2^30 nodes once inlined.
        let mut defs = Map::new();
        for i in 0..30 {
            let next = format!("#/$defs/d{}", i + 1);
            defs.insert(format!("d{i}"), json!({ "anyOf": [{ "$ref": next }, { "$ref": next }] }));
        }
        defs.insert("d30".into(), json!({ "type": "string" }));
        let bomb = json!({ "type": "object", "properties": { "x": { "$ref": "#/$defs/d0" } }, "$defs": defs });
        assert_eq!(prepare_input_schema(&bomb), Err(SchemaError::TooLarge { limit: MAX_NODES }));

        let not_schema = json!({ "type": "object", "properties": { "a/b": 3 } });
        let err = prepare_input_schema(&not_schema).expect_err("a number is not a schema");
        assert_eq!(err, SchemaError::NotASchema { path: "/properties/a~1b".into(), found: "a number" });
        assert!(prepare_input_schema(&json!("string")).is_err());
    }

    /// Defect: a chain of `$ref`s was not counted as depth, so 19,000 hops overflowed the
    /// stack (SIGABRT in `trellis tools`). On a small stack it must end in `TooDeep`.
    #[test]
    fn a_long_reference_chain_is_too_deep_not_a_stack_overflow() {
        let mut defs = Map::new();
        for i in 0..20_000 {
            defs.insert(format!("d{i}"), json!({ "$ref": format!("#/$defs/d{}", i + 1) }));
        }
        defs.insert("d20000".into(), json!({ "type": "string" }));
        let chain = json!({ "type": "object", "properties": { "x": { "$ref": "#/$defs/d0" } }, "$defs": defs });
        let prepared = std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || prepare_input_schema(&chain))
            .expect("spawn")
            .join()
            .expect("no stack overflow");
        assert!(matches!(prepared, Err(SchemaError::TooDeep { limit: MAX_DEPTH, .. })), "{prepared:?}");

        // A short chain still inlines.
        let short = json!({
            "type": "object",
            "properties": { "x": { "$ref": "#/$defs/a" } },
            "$defs": { "a": { "$ref": "#/$defs/b" }, "b": { "type": "integer" } }
        });
        assert_eq!(prepare(short).schema["properties"]["x"], json!({ "type": "integer" }));
    }

    #[test]
    fn random_schemas_never_panic() {
        let mut random = crate::test_rng::xorshift(0x9e37_79b9_7f4a_7c15);
        let mut next = move |n: u64| random() % n;
        let keys = [
            "type",
            "properties",
            "items",
            "$ref",
            "$defs",
            "anyOf",
            "result",
            "required",
            "not",
            "asCell",
            "default",
            "x",
        ];
        let refs = ["#", "#/$defs/a", "#/$defs/b", "#/properties", "#/nope", "http://x"];
        fn build(next: &mut dyn FnMut(u64) -> u64, depth: u32, keys: &[&str], refs: &[&str]) -> Value {
            match if depth > 6 { next(4) } else { next(8) } {
                0 => json!(next(2) == 0),
                1 => json!(next(100)),
                2 => json!(refs[next(refs.len() as u64) as usize]),
                3 => Value::Null,
                4 | 5 => Value::Array((0..next(4)).map(|_| build(next, depth + 1, keys, refs)).collect()),
                _ => {
                    let mut map = Map::new();
                    for _ in 0..next(5) {
                        let key = keys[next(keys.len() as u64) as usize];
                        let value = if key == "$ref" {
                            json!(refs[next(refs.len() as u64) as usize])
                        } else {
                            build(next, depth + 1, keys, refs)
                        };
                        map.insert(key.into(), value);
                    }
                    Value::Object(map)
                }
            }
        }
        for _ in 0..3000 {
            let schema = build(&mut next, 0, &keys, &refs);
            if let Ok(prepared) = prepare_input_schema(&schema) {
                assert_eq!(prepared.schema["type"], "object", "{schema}");
                assert!(prepared.schema["properties"].is_object(), "{schema}");
                assert!(prepared.schema["properties"].get("result").is_none() || prepared.shape == InputShape::Wrapped);
            }
            let _ = description_of(&schema);
        }
    }

    /// Add a note to the list.
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct AddNote {
        /// The note's text.
        text: String,
        /// How urgent it is.
        priority: Option<Priority>,
        /// Tags, which may nest.
        tags: Vec<Tag>,
        /// Filled in by the runtime.
        result: Option<i64>,
    }

    /// How urgent a note is.
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    enum Priority {
        Low,
        High,
        Custom { level: u8 },
    }

    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Tag {
        name: String,
        children: Vec<Tag>,
    }

    #[test]
    fn prepares_a_real_schemars_schema() {
        let raw = serde_json::to_value(schemars::schema_for!(AddNote)).expect("schema serialises");
        assert!(raw.get("$defs").is_some(), "schemars should emit $defs: {raw}");
        assert_eq!(description_of(&raw), Some("Add a note to the list.".into()));

        let prepared = prepare(raw);
        assert_eq!(prepared.shape, InputShape::Object);
        let text = serde_json::to_string(&prepared.schema).expect("serialises");
        for gone in ["$ref", "$defs", "$schema", "\"result\""] {
            assert!(!text.contains(gone), "{gone} left in {text}");
        }
        let props = &prepared.schema["properties"];
        assert_eq!(props["text"], json!({ "type": "string", "description": "The note's text." }));
        assert_eq!(props["priority"]["description"], "How urgent it is.");
        let variants = props["priority"]["anyOf"][0]["oneOf"].as_array().expect("enum variants inlined");
        assert_eq!(variants[0]["enum"], json!(["Low", "High"]));
        assert_eq!(props["tags"]["items"]["properties"]["name"], json!({ "type": "string" }));
        let cut = &props["tags"]["items"]["properties"]["children"]["items"]["description"];
        assert!(cut.as_str().is_some_and(|d| d.contains("recursive")), "{cut}");
        assert_eq!(prepared.schema["required"], json!(["text", "tags"]));
        assert_eq!(prepared.schema["description"], "Add a note to the list.");
    }
}
