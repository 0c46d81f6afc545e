//! Structured output: a request that asks the model to end with one value of a JSON
//! Schema (a dialog's `result_schema`).
//!
//! Providers take only object schemas for this (OpenAI-compatible `response_format`, an
//! Anthropic tool's `input_schema`), so a schema of any other type is asked for wrapped:
//! `{"value": ...}`. [`ResultFormat`] keeps both and unwraps what the model answered.
//! Each provider asks in its own way: OpenAI-compatible servers with `response_format`
//! (the answer's text is the value), Anthropic with a tool named [`RESULT_TOOL`] that the
//! model must call (its input is the value). Either way the dialog checks the value
//! against the schema.
//!
//! ```
//! use trellis_builtins::structured::ResultFormat;
//!
//! let list = ResultFormat::new(serde_json::json!({"type": "array", "items": {"type": "integer"}})).unwrap();
//! assert_eq!(list.object_schema()["required"], serde_json::json!(["value"]));
//! assert_eq!(list.value_of(serde_json::json!({"value": [1, 2]})), serde_json::json!([1, 2]));
//! assert!(list.violations(&serde_json::json!(["one"])).is_some());
//! ```

use std::sync::Arc;

use serde_json::{json, Value};

use crate::validation::{compile, violations};

/// The name of the tool an Anthropic model ends with when a result is asked for.
pub const RESULT_TOOL: &str = "json";

/// The property a schema that is not an object's is wrapped in.
const WRAPPED: &str = "value";

/// What a request asks the model to end with.
#[derive(Debug, Clone)]
pub struct ResultFormat {
    schema: Arc<Value>,
    object_schema: Arc<Value>,
    /// Whether the object schema wraps the schema in `value`.
    wrapped: bool,
    validator: Arc<jsonschema::Validator>,
}

impl PartialEq for ResultFormat {
    fn eq(&self, other: &Self) -> bool {
        self.schema == other.schema
    }
}

impl ResultFormat {
    /// The format of values of `schema`, or why `schema` cannot be one.
    pub fn new(schema: Value) -> Result<ResultFormat, String> {
        let validator = compile(&schema).map_err(|e| format!("the result schema is not a usable JSON Schema: {e}"))?;
        let wrapped = !is_object_schema(&schema);
        let object_schema = if wrapped {
            json!({"type": "object", "properties": {WRAPPED: schema.clone()}, "required": [WRAPPED]})
        } else {
            schema.clone()
        };
        Ok(ResultFormat {
            schema: Arc::new(schema),
            object_schema: Arc::new(object_schema),
            wrapped,
            validator: Arc::new(validator),
        })
    }

    /// The schema of the value.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// The object schema a provider is given: the schema, or it wrapped in `value`.
    pub fn object_schema(&self) -> &Arc<Value> {
        &self.object_schema
    }

    /// The value in what the model answered in the object schema's shape.
    pub fn value_of(&self, answered: Value) -> Value {
        match answered {
            Value::Object(mut map) if self.wrapped && map.len() == 1 => {
                map.remove(WRAPPED).unwrap_or(Value::Object(map))
            }
            other => other,
        }
    }

    /// What is wrong with `value` for the schema, if anything.
    pub fn violations(&self, value: &Value) -> Option<String> {
        violations(&self.validator, value)
    }
}

/// Whether `schema` describes objects only (then it is sent as it is).
fn is_object_schema(schema: &Value) -> bool {
    match schema.get("type") {
        Some(Value::String(kind)) => kind == "object",
        Some(_) => false,
        None => schema.get("properties").is_some(),
    }
}
