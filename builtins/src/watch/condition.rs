//! A watch's condition: an expression in CEL, the Common Expression Language, over the
//! fields of one charm (`count > 10`, `notes.exists(n, n.title == "milk")`,
//! `size(notes) >= 3 && label != ""`).
//!
//! CEL was chosen because it was made for this: conditions written by someone other than
//! the one who runs them, evaluated without side effects, without loops (only macros over
//! a list), without I/O, and with a well-kept Rust implementation. What it cannot bound on
//! its own is bounded here: the text's length and nesting (its parser recurses), the
//! depth of the parsed expression (so is its evaluation), macros inside macros, and the
//! size of the fields it reads (a macro's cost may still grow with its square).

use std::collections::BTreeMap;

use cel::common::ast::{EntryExpr, Expr, IdedExpr, MapExpr, StructExpr};
use cel::{Context, Program, Value as Cel};
use serde_json::Value;

/// The longest condition, in characters.
pub const MAX_CONDITION: usize = 500;

/// The most JSON the fields a condition names may hold: one macro over a list may test
/// each item against the whole list, so its cost grows with the square of this.
pub const MAX_FIELDS_SIZE: usize = 16 * 1024;

/// How deeply brackets may nest in a condition's text.
const MAX_NESTING: usize = 12;

/// How deep a parsed condition may be.
const MAX_DEPTH: usize = 32;

/// The stack of the thread that parses a condition: the parser recurses deeply per
/// bracket in debug builds, and a thread of its own keeps that off any caller's stack.
const PARSER_STACK: usize = 64 << 20;

/// A checked condition, ready to evaluate.
pub struct Condition {
    program: Program,
    /// The fields it names.
    fields: Vec<String>,
}

impl std::fmt::Debug for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Condition").field("fields", &self.fields).finish_non_exhaustive()
    }
}

/// Why a condition was refused, or could not be evaluated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConditionError {
    /// Too long, nested too deeply, or not CEL.
    #[error("the condition is not one a watch can take: {0}")]
    Refused(String),
    /// It names a field the charm does not have.
    #[error("the condition names `{field}`, which {charm} does not have; its fields are: {fields}")]
    NoSuchField {
        /// The field named.
        field: String,
        /// The charm.
        charm: String,
        /// Its fields.
        fields: String,
    },
    /// Evaluating it failed (a type mismatch, a missing key), or it is not true or false.
    #[error("the condition could not be evaluated: {0}")]
    Failed(String),
}

impl Condition {
    /// Checks and parses `text`.
    pub fn parse(text: &str) -> Result<Condition, ConditionError> {
        let refused = |why: String| Err(ConditionError::Refused(why));
        if text.trim().is_empty() {
            return refused("it is empty; write one such as `count > 10`".into());
        }
        if text.chars().count() > MAX_CONDITION {
            return refused(format!("it is longer than {MAX_CONDITION} characters"));
        }
        if nesting(text) > MAX_NESTING {
            return refused(format!("its brackets nest more than {MAX_NESTING} deep"));
        }
        let owned = text.to_string();
        let parsed = std::thread::Builder::new()
            .name("cel-parse".into())
            .stack_size(PARSER_STACK)
            .spawn(move || Program::compile(&owned).map_err(|e| e.to_string()))
            .map_err(|e| ConditionError::Refused(format!("no thread to parse it: {e}")))?
            .join()
            .map_err(|_| ConditionError::Refused("the parser failed on it".into()))?;
        let program = match parsed {
            Ok(program) => program,
            Err(why) => return refused(format!("it is not CEL: {}", why.lines().next().unwrap_or_default())),
        };
        let mut bound = Vec::new();
        check_shape(program.expression(), (0, 0), &mut bound).map_err(ConditionError::Refused)?;
        // A macro's own variables (`n` in `notes.exists(n, ...)`) are no fields.
        let mut fields: Vec<String> = program.references().variables().into_iter().map(str::to_string).collect();
        fields.retain(|f| !bound.contains(f));
        fields.sort();
        Ok(Condition { program, fields })
    }

    /// The fields it names.
    pub fn fields(&self) -> &[String] {
        &self.fields
    }

    /// Refuses a condition that names a field `data` (the charm `charm`'s) does not have.
    pub fn check_fields(&self, charm: &str, data: &serde_json::Map<String, Value>) -> Result<(), ConditionError> {
        match self.fields.iter().find(|f| !data.contains_key(*f)) {
            None => Ok(()),
            Some(field) => Err(ConditionError::NoSuchField {
                field: field.clone(),
                charm: charm.to_string(),
                fields: data.keys().cloned().collect::<Vec<_>>().join(", "),
            }),
        }
    }

    /// Whether it holds for the charm's fields `data`, and the values of the fields it
    /// names.
    pub fn holds(
        &self,
        data: &serde_json::Map<String, Value>,
    ) -> Result<(bool, BTreeMap<String, Value>), ConditionError> {
        let mut context = Context::default();
        let mut named = BTreeMap::new();
        let size: usize = self.fields.iter().filter_map(|f| data.get(f)).map(|v| v.to_string().len()).sum();
        if size > MAX_FIELDS_SIZE {
            return Err(ConditionError::Failed(format!(
                "the fields it names hold {size} bytes of JSON, more than {MAX_FIELDS_SIZE}; watch a smaller field"
            )));
        }
        for field in &self.fields {
            let value = data.get(field).cloned().unwrap_or(Value::Null);
            context.add_variable_from_value(field.clone(), to_cel(&value));
            named.insert(field.clone(), value);
        }
        match self.program.execute(&context) {
            Ok(Cel::Bool(holds)) => Ok((holds, named)),
            Ok(other) => Err(ConditionError::Failed(format!("it gives {other:?}, not true or false"))),
            Err(e) => Err(ConditionError::Failed(e.to_string())),
        }
    }
}

/// `value` as CEL sees it: a whole number as an `int` when it fits (so `count + 1` adds
/// two ints, where serde would make `count` a `uint`).
fn to_cel(value: &Value) -> Cel {
    match value {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Cel::Int(i),
            (None, Some(u)) => Cel::UInt(u),
            _ => Cel::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Cel::String(s.clone().into()),
        Value::Array(items) => items.iter().map(to_cel).collect::<Vec<_>>().into(),
        Value::Object(map) => {
            map.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect::<std::collections::HashMap<_, _>>().into()
        }
    }
}

/// How deeply brackets nest in `text` (those in string literals counted too: a condition
/// that needs them that deep is refused all the same).
fn nesting(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in text.chars() {
        match c {
            '(' | '[' | '{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Refuses an expression deeper than [`MAX_DEPTH`], or with a macro (`all`, `exists`,
/// `map`, `filter`) inside another; notes in `bound` the variables macros bind.
fn check_shape(e: &IdedExpr, (depth, macros): (usize, usize), bound: &mut Vec<String>) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!("it is nested more than {MAX_DEPTH} deep"));
    }
    let next = |e: &IdedExpr, bound: &mut Vec<String>| check_shape(e, (depth + 1, macros), bound);
    match &e.expr {
        Expr::Call(call) => {
            call.target.iter().try_for_each(|t| next(t, bound))?;
            call.args.iter().try_for_each(|a| next(a, bound))
        }
        Expr::Comprehension(c) => {
            if macros > 0 {
                return Err("it has a macro (all, exists, map, filter) inside another".into());
            }
            bound.extend([c.iter_var.clone(), c.accu_var.clone()].into_iter().chain(c.iter_var2.clone()));
            [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result]
                .into_iter()
                .try_for_each(|e| check_shape(e, (depth + 1, macros + 1), bound))
        }
        Expr::List(list) => list.elements.iter().try_for_each(|e| next(e, bound)),
        Expr::Map(MapExpr { entries }) | Expr::Struct(StructExpr { entries, .. }) => {
            entries.iter().try_for_each(|entry| match &entry.expr {
                EntryExpr::MapEntry(m) => next(&m.key, bound).and_then(|_| next(&m.value, bound)),
                EntryExpr::StructField(f) => next(&f.value, bound),
            })
        }
        Expr::Select(select) => next(&select.operand, bound),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn data(value: Value) -> serde_json::Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn a_condition_over_fields_holds_or_not() {
        let c = Condition::parse("count > 10 && label.startsWith(\"Count\")").expect("parsed");
        assert_eq!(c.fields(), ["count", "label"]);
        let (holds, named) = c.holds(&data(json!({"count": 11, "label": "Count: 11"}))).expect("evaluated");
        assert!(holds);
        assert_eq!(named["count"], 11);
        assert!(!c.holds(&data(json!({"count": 3, "label": "Count: 3"}))).expect("evaluated").0);
        let notes = Condition::parse(r#"notes.exists(n, n.title == "milk")"#).expect("parsed");
        assert_eq!(notes.fields(), ["notes"], "a macro's variable is no field");
        let list = data(json!({"notes": [{"title": "tea"}, {"title": "milk"}]}));
        notes.check_fields("Notes", &list).expect("its fields are the charm's");
        assert!(notes.holds(&list).expect("ran").0);
        let big = data(json!({"notes": vec!["x".repeat(100); 200]}));
        assert!(notes.holds(&big).expect_err("too big").to_string().contains("more than 16384"));
    }

    #[test]
    fn bad_conditions_are_refused_saying_why() {
        let refused = |text: &str| Condition::parse(text).expect_err(text).to_string();
        assert!(refused("").contains("empty"));
        assert!(refused("count >").contains("not CEL"));
        assert!(refused(&"x".repeat(501)).contains("longer than 500"));
        assert!(refused(&format!("{}1{}", "(".repeat(13), ")".repeat(13))).contains("nest more than 12"));
        assert!(refused(&format!("{}1", "1+".repeat(40))).contains("nested more than 32"));
        assert!(refused("l.all(a, l.all(b, a == b))").contains("inside another"));
        let counter = data(json!({"count": 1, "label": "x"}));
        let typo = Condition::parse("cont > 1").expect("parsed").check_fields("Counter", &counter);
        assert!(typo.expect_err("no such field").to_string().contains("`cont`, which Counter does not have"));
        assert!(Condition::parse("count + 1 == 2").expect("parsed").holds(&counter).expect("ints add").0);
        let number = Condition::parse("count + 1").expect("parsed").holds(&counter).expect_err("not a bool");
        assert!(number.to_string().contains("not true or false"), "{number}");
    }
}
