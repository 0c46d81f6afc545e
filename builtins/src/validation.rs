//! Checking JSON against a schema, the one way tool arguments (the catalog's, and client
//! tools' in `trellis-plugins`) and client outputs are checked: the schema compiled once,
//! on first use, and what is wrong listed briefly.

use std::sync::{Arc, OnceLock};

use jsonschema::Validator;
use serde_json::Value;

/// How many violations an error text lists.
const MAX_VIOLATIONS: usize = 10;

/// A schema's validator, compiled when first needed (building a catalog stays cheap) and
/// shared by the clones.
///
/// It is asked with its schema every time, and answers for the first one. In debug builds
/// it keeps that schema too and checks each later one against it, so a caller that
/// shares one validator between two schemas fails the check.
#[derive(Clone, Default)]
pub(crate) struct LazyValidator(Arc<OnceLock<Compiled>>);

/// What a [`LazyValidator`] compiled, and in debug builds from which schema.
struct Compiled {
    validator: Result<Validator, String>,
    #[cfg(debug_assertions)]
    schema: Value,
}

impl std::fmt::Debug for LazyValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LazyValidator")
    }
}

impl LazyValidator {
    /// The validator of `schema` (the same schema every call), or why it cannot be one.
    pub(crate) fn get(&self, schema: &Value) -> Result<&Validator, &str> {
        let compiled = self.0.get_or_init(|| Compiled {
            validator: compile(schema),
            #[cfg(debug_assertions)]
            schema: schema.clone(),
        });
        #[cfg(debug_assertions)]
        assert!(compiled.schema == *schema, "a validator compiled for one schema was asked to check against another");
        compiled.validator.as_ref().map_err(|e| &**e)
    }
}

/// Compiles a schema from outside (a charm, an MCP server, a client, a plugin) into a
/// validator, or says why it cannot be one. Its `pattern`s run on the `regex` engine,
/// which matches in linear time: a pattern that backtracks (`^(a|aa)*c$`) against a long
/// argument would otherwise hold a call for minutes before any timeout applies. A pattern
/// that needs backreferences or lookaround is therefore refused.
///
/// ```
/// use trellis_builtins::validation::{compile, violations};
///
/// let schema = serde_json::json!({"type": "string", "pattern": "^(a|aa)*c$"});
/// let validator = compile(&schema).unwrap();
/// assert!(violations(&validator, &serde_json::json!("a".repeat(100_000))).is_some());
/// assert!(compile(&serde_json::json!({"pattern": "(a)\\1"})).is_err(), "no backreferences");
/// ```
pub fn compile(schema: &Value) -> Result<Validator, String> {
    jsonschema::options()
        .with_pattern_options(jsonschema::PatternOptions::regex())
        .build(schema)
        .map_err(|e| e.to_string())
}

/// What is wrong with `value`, as "at PATH: what" items joined by `; ` (the first
/// ten, then "and more"); `None` when it is valid.
///
/// ```
/// use trellis_builtins::validation::violations;
///
/// let schema = serde_json::json!({"type": "object", "properties": {"n": {"type": "integer"}}});
/// let validator = trellis_builtins::validation::compile(&schema).unwrap();
/// assert_eq!(violations(&validator, &serde_json::json!({"n": 1})), None);
/// let wrong = violations(&validator, &serde_json::json!({"n": "one"})).unwrap();
/// assert!(wrong.starts_with("at /n: "), "{wrong}");
/// ```
pub fn violations(validator: &Validator, value: &Value) -> Option<String> {
    if validator.is_valid(value) {
        return None;
    }
    let mut listed: Vec<String> = validator
        .iter_errors(value)
        .take(MAX_VIOLATIONS + 1)
        .map(|error| {
            let at = error.instance_path().as_str();
            format!("at {}: {error}", if at.is_empty() { "the top level" } else { at })
        })
        .collect();
    if listed.len() > MAX_VIOLATIONS {
        listed.truncate(MAX_VIOLATIONS);
        listed.push("and more".into());
    }
    (!listed.is_empty()).then(|| listed.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn violations_are_listed_briefly_with_where_they_are() {
        let lazy = LazyValidator::default();
        let schema = json!({"type": "object", "additionalProperties": {"type": "integer"}});
        let validator = lazy.get(&schema).unwrap();
        assert_eq!(violations(validator, &json!({"a": 1})), None);
        let one = violations(validator, &json!({"a": "x"})).unwrap();
        assert!(one.starts_with("at /a: ") && !one.contains(';'), "{one}");
        let many: serde_json::Map<String, Value> = (0..20).map(|i| (format!("k{i}"), json!("x"))).collect();
        let listed = violations(validator, &Value::Object(many)).unwrap();
        assert_eq!(listed.matches("; ").count(), MAX_VIOLATIONS, "{listed}");
        assert!(listed.ends_with("; and more"), "{listed}");
        let broken = LazyValidator::default();
        assert!(broken.get(&json!({"type": 7})).is_err());
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "asked to check against another")]
    fn a_validator_shared_by_two_schemas_trips_the_check() {
        let lazy = LazyValidator::default();
        assert!(lazy.get(&json!({"type": "integer"})).is_ok());
        let _ = lazy.get(&json!({"type": "string"}));
    }
}
