//! JSON schemas that shape what a cell reads: defaults for missing values, and
//! `asCell` / `asStream` properties that come back as links (so a Rust field of type
//! `Cell<T>` or `Stream<E>` receives a live reference, not a copy).

use schemars::JsonSchema;

use crate::link::Link;
use crate::value::Value;

/// A JSON schema used to shape reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Schema(serde_json::Value);

impl Schema {
    /// Wraps a JSON schema.
    pub fn new(json: serde_json::Value) -> Self {
        Schema(json)
    }

    /// The schema schemars derives for `T` (doc comments become descriptions).
    pub fn of<T: JsonSchema>() -> Self {
        Schema(schemars::schema_for!(T).to_value())
    }

    /// The schema as JSON.
    pub fn as_json(&self) -> &serde_json::Value {
        &self.0
    }

    /// The schema of one property (or of array items when `key` is an index).
    pub fn property(&self, key: &str) -> Option<Schema> {
        if let Some(p) = self.0.get("properties").and_then(|p| p.get(key)) {
            return Some(Schema(p.clone()));
        }
        if key.parse::<usize>().is_ok() {
            return self.0.get("items").map(|i| Schema(i.clone()));
        }
        None
    }

    fn flag(&self, name: &str) -> bool {
        self.0.get(name).and_then(serde_json::Value::as_bool).unwrap_or(false)
    }

    /// Whether this location should be handed out as a reference rather than a value.
    pub fn is_reference(&self) -> bool {
        self.flag("asCell") || self.flag("asStream")
    }

    /// Applies the schema to a value read at `at`: fills defaults, replaces `asCell` and
    /// `asStream` properties with links to their location.
    pub fn shape(&self, at: &Link, value: Value) -> Value {
        let mut value = match (value, self.0.get("default")) {
            (Value::Null, Some(default)) => Value::from(default.clone()),
            (value, _) => value,
        };
        if let Some(props) = self.0.get("properties").and_then(|p| p.as_object()) {
            if let Value::Object(map) = &mut value {
                for (key, prop) in props {
                    let prop = Schema(prop.clone());
                    let child = at.child(key.as_str());
                    let current = map.get(key.as_str()).cloned().unwrap_or(Value::Null);
                    let shaped = if prop.is_reference() { child.to_value() } else { prop.shape(&child, current) };
                    if shaped != Value::Null {
                        map.insert(key.as_str().into(), shaped);
                    }
                }
            }
        }
        if let (Some(items), Value::Array(list)) = (self.0.get("items"), &mut value) {
            let items = Schema(items.clone());
            let list = std::sync::Arc::make_mut(list);
            for i in 0..list.len() {
                let shaped = items.shape(&at.child(i.to_string()), list[i].clone());
                list.set(i, shaped);
            }
        }
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Path;
    use serde_json::json;

    #[test]
    fn fills_defaults_and_hands_out_references() {
        let schema = Schema::new(json!({
            "type": "object",
            "properties": {
                "count": {"type": "integer", "default": 0},
                "tags": {"type": "array", "default": []},
                "nested": {"type": "object", "properties": {"on": {"default": true}}, "default": {}},
                "items": {"asCell": true},
                "increment": {"asStream": true}
            }
        }));
        let at = Link::new("d", Path::root());
        let shaped = schema.shape(&at, Value::from(json!({"tags": ["x"]}))).to_json();
        assert_eq!(shaped["count"], json!(0));
        assert_eq!(shaped["tags"], json!(["x"]));
        assert_eq!(shaped["nested"], json!({"on": true}));
        assert_eq!(Link::from_json(&shaped["items"]), Some(at.child("items")));
        assert_eq!(Link::from_json(&shaped["increment"]), Some(at.child("increment")));
    }

    #[test]
    fn missing_value_reads_the_default() {
        let schema = Schema::new(json!({"default": 7}));
        assert_eq!(schema.shape(&Link::new("d", Path::root()), Value::Null), Value::from(7));
    }
}
