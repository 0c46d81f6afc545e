//! Limits on client tools: definitions (name, description, JSON-Schema parameters) that a
//! client sends with a request. The server never executes them; it checks them, checks
//! the model's arguments against them, and lets the client execute.
//!
//! Each rule a definition breaks is refused with the rule named ([`LimitError`]): only the
//! JSON-Schema types and keywords the catalog supports, no `$ref` (local or remote), a
//! bounded depth, a bounded number of properties per object, a bounded number of client
//! tools per request.
//!
//! ```
//! use trellis_builtins::tool::limits::{ClientToolLimits, LimitError};
//!
//! let limits = ClientToolLimits::default();
//! let ok = serde_json::json!({"description": "Looks a word up", "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}});
//! assert!(limits.check("lookup", &ok).is_ok());
//! let remote = serde_json::json!({"parameters": {"$ref": "https://example.com/schema.json"}});
//! assert!(matches!(limits.check("lookup", &remote), Err(LimitError::Reference { .. })));
//! ```

use serde_json::{json, Map, Value};

use crate::naming::is_valid_wire_name;

/// The limits on client-sent tool definitions (all configurable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientToolLimits {
    /// How deeply schemas may nest (default 5; the parameters object is level 1).
    pub max_depth: usize,
    /// The most properties one object schema may have (default 20).
    pub max_properties: usize,
    /// The most client tools one request may carry (default 10).
    pub max_tools: usize,
    /// The longest description, in bytes (default 2 KiB).
    pub max_description: usize,
    /// The most bytes one definition may take as JSON (default 64 KiB): with the bounds
    /// above it keeps `enum`s, `anyOf`s and texts from growing without end.
    pub max_bytes: usize,
}

impl ClientToolLimits {
    /// The default limits, usable in constants (plugins are held to them at install).
    pub const DEFAULT: ClientToolLimits = ClientToolLimits {
        max_depth: 5,
        max_properties: 20,
        max_tools: 10,
        max_description: 2048,
        max_bytes: 64 << 10,
    };
}

impl Default for ClientToolLimits {
    fn default() -> Self {
        ClientToolLimits::DEFAULT
    }
}

/// The JSON-Schema keywords a client tool's schema may use.
const KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "items",
    "enum",
    "const",
    "description",
    "title",
    "default",
    "examples",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minItems",
    "maxItems",
    "uniqueItems",
    "additionalProperties",
    "anyOf",
    "oneOf",
    "allOf",
];

/// The JSON-Schema types.
const TYPES: &[&str] = &["object", "array", "string", "number", "integer", "boolean", "null"];

/// A client tool definition that breaks a rule; the message names the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// Rule: tool names are 1 to 64 letters, digits, `_` or `-`.
    #[error("rule `name`: `{0}` is not a valid tool name (1 to 64 letters, digits, `_` or `-`)")]
    Name(String),
    /// Rule: a definition is an object with `description` and `parameters`.
    #[error("rule `shape`: {0}")]
    Shape(String),
    /// Rule: no `$ref`, local or remote.
    #[error("rule `no-ref`: `$ref` at {at} is not allowed in a client tool's schema; write the schema out")]
    Reference {
        /// Where, as a JSON pointer.
        at: String,
    },
    /// Rule: only the supported keywords.
    #[error("rule `keywords`: `{keyword}` at {at} is not a supported keyword (supported: {})", KEYWORDS.join(", "))]
    Keyword {
        /// The keyword.
        keyword: String,
        /// Where, as a JSON pointer.
        at: String,
    },
    /// Rule: only the JSON-Schema types.
    #[error("rule `types`: {found} at {at} is not a JSON-Schema type (one of: {})", TYPES.join(", "))]
    Type {
        /// What was there.
        found: String,
        /// Where, as a JSON pointer.
        at: String,
    },
    /// Rule: bounded depth.
    #[error("rule `max-depth`: the schema nests deeper than {limit} levels at {at}")]
    Depth {
        /// The limit.
        limit: usize,
        /// Where, as a JSON pointer.
        at: String,
    },
    /// Rule: bounded properties per object.
    #[error("rule `max-properties`: {count} properties at {at}, more than {limit}")]
    Properties {
        /// How many there were.
        count: usize,
        /// The limit.
        limit: usize,
        /// Where, as a JSON pointer.
        at: String,
    },
    /// Rule: bounded number of client tools per request.
    #[error("rule `max-tools`: more than {0} client tools in one request")]
    Tools(usize),
    /// Rule: bounded size.
    #[error("rule `max-bytes`: the definition takes more than {0} bytes as JSON")]
    Bytes(usize),
    /// Rule: bounded description.
    #[error("rule `max-description`: the description is longer than {0} bytes")]
    Description(usize),
}

impl ClientToolLimits {
    /// Checks one definition (`{"description", "parameters"}`) of the tool `name`;
    /// returns its description and parameters schema (an object schema).
    pub fn check(&self, name: &str, definition: &Value) -> Result<(String, Value), LimitError> {
        if !is_valid_wire_name(name) {
            return Err(LimitError::Name(name.to_string()));
        }
        if serde_json::to_vec(definition).map_or(true, |json| json.len() > self.max_bytes) {
            return Err(LimitError::Bytes(self.max_bytes));
        }
        let Value::Object(fields) = definition else {
            return Err(LimitError::Shape("a definition is an object with `description` and `parameters`".into()));
        };
        if let Some(other) = fields.keys().find(|k| !matches!(k.as_str(), "description" | "parameters")) {
            return Err(LimitError::Shape(format!(
                "unknown field `{other}` (a definition has `description` and `parameters`)"
            )));
        }
        let description = match fields.get("description") {
            None | Some(Value::Null) => format!("`{name}`, run by the client"),
            Some(Value::String(text)) if text.len() <= self.max_description => text.clone(),
            Some(Value::String(_)) => return Err(LimitError::Description(self.max_description)),
            Some(_) => return Err(LimitError::Shape("`description` is text".into())),
        };
        let parameters = fields.get("parameters").cloned().unwrap_or_else(|| json!({"type": "object"}));
        self.schema(&parameters, 1, "")?;
        if parameters.get("type").and_then(Value::as_str) != Some("object") {
            return Err(LimitError::Shape("`parameters` is an object schema (`\"type\": \"object\"`)".into()));
        }
        Ok((description, parameters))
    }

    fn schema(&self, schema: &Value, depth: usize, at: &str) -> Result<(), LimitError> {
        let here = || if at.is_empty() { "/".to_string() } else { at.to_string() };
        if depth > self.max_depth {
            return Err(LimitError::Depth { limit: self.max_depth, at: here() });
        }
        let map: &Map<String, Value> = match schema {
            Value::Object(map) => map,
            Value::Bool(_) => return Ok(()),
            other => return Err(LimitError::Shape(format!("a schema is an object, found {other} at {}", here()))),
        };
        for (keyword, value) in map {
            let inner = format!("{at}/{keyword}");
            match keyword.as_str() {
                "$ref" => return Err(LimitError::Reference { at: here() }),
                k if !KEYWORDS.contains(&k) => return Err(LimitError::Keyword { keyword: k.into(), at: here() }),
                "type" => check_type(value, &inner)?,
                "properties" => {
                    let Value::Object(properties) = value else {
                        return Err(LimitError::Shape(format!("`properties` is an object at {inner}")));
                    };
                    if properties.len() > self.max_properties {
                        let (count, limit) = (properties.len(), self.max_properties);
                        return Err(LimitError::Properties { count, limit, at: here() });
                    }
                    for (name, property) in properties {
                        self.schema(property, depth + 1, &format!("{inner}/{name}"))?;
                    }
                }
                "items" | "additionalProperties" => self.schema(value, depth + 1, &inner)?,
                "anyOf" | "oneOf" | "allOf" => match value {
                    Value::Array(options) => {
                        for (i, option) in options.iter().enumerate() {
                            self.schema(option, depth + 1, &format!("{inner}/{i}"))?;
                        }
                    }
                    _ => return Err(LimitError::Shape(format!("`{keyword}` is a list of schemas at {inner}"))),
                },
                _ => {}
            }
        }
        Ok(())
    }
}

fn check_type(value: &Value, at: &str) -> Result<(), LimitError> {
    let names: Vec<&Value> = match value {
        Value::Array(names) => names.iter().collect(),
        one => vec![one],
    };
    for name in names {
        if !name.as_str().is_some_and(|n| TYPES.contains(&n)) {
            return Err(LimitError::Type { found: name.to_string(), at: at.to_string() });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> Value {
        (1..depth).fold(json!({"type": "string"}), |inner, _| json!({"type": "object", "properties": {"x": inner}}))
    }

    #[test]
    fn each_rule_is_refused_by_name() {
        let limits = ClientToolLimits::default();
        let def = |parameters: Value| json!({"description": "d", "parameters": parameters});
        let refused = |name: &str, definition: Value| limits.check(name, &definition).unwrap_err().to_string();
        assert!(refused("a b", def(json!({"type": "object"}))).starts_with("rule `name`"));
        assert!(refused("t", json!("no")).starts_with("rule `shape`"));
        assert!(refused("t", def(json!({"type": "string"}))).starts_with("rule `shape`"));
        let local = def(json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}}));
        assert!(refused("t", local).starts_with("rule `no-ref`"));
        let keyword = def(json!({"type": "object", "if": {}}));
        assert!(refused("t", keyword).starts_with("rule `keywords`: `if`"));
        let kind = def(json!({"type": "object", "properties": {"a": {"type": "date"}}}));
        assert!(refused("t", kind).starts_with("rule `types`"));
        assert!(limits.check("t", &def(nested(5))).is_ok(), "depth 5 is allowed");
        assert!(refused("t", def(nested(6))).starts_with("rule `max-depth`"));
        let many: Map<String, Value> = (0..21).map(|i| (format!("p{i}"), json!({"type": "string"}))).collect();
        assert!(refused("t", def(json!({"type": "object", "properties": many}))).starts_with("rule `max-properties`"));
        let long = json!({"description": "x".repeat(3000), "parameters": {"type": "object"}});
        assert!(refused("t", long).starts_with("rule `max-description`"));
        let huge = def(json!({"type": "object", "properties": {"a": {"enum": vec!["x".repeat(100); 1000]}}}));
        assert!(refused("t", huge).starts_with("rule `max-bytes`"));
        let tight = ClientToolLimits { max_depth: 2, ..limits };
        assert!(tight.check("t", &def(nested(3))).is_err(), "limits are configurable");
    }
}
