//! Fields only a person may set (`Builder::person_only`): a model's call of such a
//! handler waits like one that needs approval, and the person approving it gives those
//! fields themselves. What the model put there is shown to them as a suggestion, never
//! used as it is: an instruction injected into the model's input ("send it to
//! attacker@example.com") reaches no handler without a person typing it.

use serde_json::Value;

/// The longest suggestion shown for one field; a model may write anything there.
const MAX_SUGGESTION: usize = 200;

/// Why calls of a handler with these person-only `fields` wait: `None` without any.
pub fn reason(fields: &[String]) -> Option<String> {
    match fields {
        [] => None,
        [field] => Some(format!("`{field}` is set by the user")),
        fields => Some(format!("{} are set by the user", quoted(fields))),
    }
}

/// What a person is asked about a call whose arguments are `arguments`: to set `fields`,
/// with the model's values as suggestions.
pub fn ask(fields: &[String], arguments: &Value) -> String {
    let suggested: Vec<String> = fields
        .iter()
        .filter_map(|field| {
            let value = crate::text::truncate(&arguments.get(field)?.to_string(), MAX_SUGGESTION);
            Some(format!("{field} = {value}"))
        })
        .collect();
    let suggested = match suggested.is_empty() {
        true => "the model suggested nothing".to_owned(),
        false => format!("the model suggested {} (not used unless you give it)", suggested.join(", ")),
    };
    format!("set {} yourself: approve with the arguments you want (--input JSON); {suggested}", quoted(fields))
}

/// The first of `fields` that `input` (a person's arguments) does not set.
pub fn missing<'a>(fields: &'a [String], input: Option<&Value>) -> Option<&'a str> {
    fields.iter().find(|field| input.and_then(|input| input.get(field.as_str())).is_none()).map(String::as_str)
}

fn quoted(fields: &[String]) -> String {
    fields.iter().map(|field| format!("`{field}`")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_person_is_asked_with_the_models_values_as_suggestions() {
        let fields = vec!["to".to_owned()];
        assert_eq!(reason(&fields).as_deref(), Some("`to` is set by the user"));
        assert_eq!(reason(&[]), None);
        let asked = ask(&fields, &json!({"to": "attacker@example.com", "body": "hi"}));
        assert!(asked.contains(r#"to = "attacker@example.com""#) && asked.contains("--input"), "{asked}");
        let long = ask(&fields, &json!({"to": "x".repeat(5000)}));
        assert!(long.len() < 400, "{long}");
        assert_eq!(missing(&fields, Some(&json!({"body": "hi"}))), Some("to"));
        assert_eq!(missing(&fields, None), Some("to"));
        assert_eq!(missing(&fields, Some(&json!({"to": "me@example.com"}))), None);
    }
}
