//! A request that ends with a value: the dialog's `result_schema` input asks the model
//! for one value of that schema (see [`crate::structured`]), checked here whichever way
//! the provider gave it, and stored in the dialog's `result` output.
//!
//! A value that does not fit goes back to the model with what is wrong, at most
//! [`MAX_CORRECTIONS`] times; then the request ends with an error.

use serde_json::Value;

use crate::message::{Message, Part};
use crate::structured::{ResultFormat, RESULT_TOOL};

/// How many times a value that does not fit goes back to the model.
pub(super) const MAX_CORRECTIONS: u32 = 2;

/// What an answer means for a request that asks for a result.
#[derive(Debug, PartialEq)]
pub(super) enum Ending {
    /// It calls tools: the request goes on.
    NotYet,
    /// It gives a value that fits.
    Value(Value),
    /// It gives something that is not a fitting value, and why.
    Wrong(String),
}

/// What an answer of `text` and tool `calls` (by name and input) ends with.
///
/// A call of [`RESULT_TOOL`] (the Anthropic way) gives the value; else an answer without
/// calls gives it as its text (the OpenAI-compatible way, a Markdown code fence around it
/// allowed), in the shape of the format's object schema.
pub(super) fn ending(format: &ResultFormat, text: &str, calls: &[(&str, &Value)]) -> Ending {
    let answered = match calls.iter().find(|(name, _)| *name == RESULT_TOOL) {
        Some((_, input)) => Value::clone(input),
        None if !calls.is_empty() => return Ending::NotYet,
        None => match serde_json::from_str(unfenced(text)) {
            Ok(value) => value,
            Err(error) => return Ending::Wrong(format!("the answer is not JSON ({error})")),
        },
    };
    let value = format.value_of(answered);
    match format.violations(&value) {
        None => Ending::Value(value),
        Some(why) => Ending::Wrong(format!("the value does not fit the result schema: {why}")),
    }
}

/// The message that sends a value that did not fit back to the model.
pub(super) fn correction(why: &str) -> Message {
    Message::user(format!(
        "That answer cannot be used: {why}. Answer again with only a JSON value that fits the result schema."
    ))
}

/// The assistant message a request that ended with `value` keeps: its text, and the value
/// as text in place of a call of [`RESULT_TOOL`] (which no tool answers).
pub(super) fn kept(text: String, value: &Value) -> Message {
    let mut content = Vec::new();
    let is_the_value = serde_json::from_str::<Value>(unfenced(&text)).is_ok_and(|said| said == *value);
    if !text.trim().is_empty() && !is_the_value {
        content.push(Part::Text { text });
    }
    content.push(Part::Text { text: value.to_string() });
    Message::new(crate::message::Role::Assistant, content)
}

/// The assistant message an answer whose value did not fit keeps: its text, and the value
/// a call of [`RESULT_TOOL`] gave, as text (no tool answers that call), so that the model
/// sees what it sent beside what is wrong with it.
pub(super) fn kept_wrong(text: String, calls: &[(&str, &Value)]) -> Message {
    match calls.iter().find(|(name, _)| *name == RESULT_TOOL) {
        Some((_, value)) => kept(text, value),
        None => Message::assistant(text),
    }
}

/// `text` without surrounding white space and a Markdown code fence (```json ... ```).
fn unfenced(text: &str) -> &str {
    let text = text.trim();
    let Some(inner) = text.strip_prefix("```").and_then(|t| t.strip_suffix("```")) else { return text };
    inner.strip_prefix("json").unwrap_or(inner).trim()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn weather() -> ResultFormat {
        ResultFormat::new(json!({
            "type": "object",
            "properties": {"elements": {"type": "array", "items": {"type": "object", "required": ["location"]}}},
            "required": ["elements"]
        }))
        .unwrap()
    }

    #[test]
    fn a_value_comes_as_text_or_as_the_result_tool_and_is_checked() {
        let value = json!({"elements": [{"location": "SF"}]});
        assert_eq!(ending(&weather(), &value.to_string(), &[]), Ending::Value(value.clone()));
        let fenced = format!("```json\n{value}\n```");
        assert_eq!(ending(&weather(), &fenced, &[]), Ending::Value(value.clone()));
        let calls = [("Counter_increment", &json!({})), (RESULT_TOOL, &value)];
        assert_eq!(ending(&weather(), "", &calls), Ending::Value(value.clone()));
        let other = [("Counter_increment", &json!({}))];
        assert_eq!(ending(&weather(), "", &other), Ending::NotYet);

        let Ending::Wrong(why) = ending(&weather(), "It is sunny.", &[]) else { panic!("wrong") };
        assert!(why.starts_with("the answer is not JSON"), "{why}");
        let Ending::Wrong(why) = ending(&weather(), r#"{"elements": [{}]}"#, &[]) else { panic!("wrong") };
        assert!(why.contains("location"), "{why}");

        let list = ResultFormat::new(json!({"type": "array"})).unwrap();
        assert_eq!(ending(&list, r#"{"value": [1]}"#, &[]), Ending::Value(json!([1])), "unwrapped");
    }
}
