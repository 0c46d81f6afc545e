//! `trellis chat --result-schema FILE`: the reply ends with one value of the schema,
//! printed; a value that does not fit goes back to the model; a bad schema file is
//! refused before anything runs.

use crate::common;

use serde_json::{json, Value};

fn schema_file(space: &std::path::Path, schema: &Value) -> String {
    let path = space.with_file_name("schema.json");
    std::fs::write(&path, schema.to_string()).unwrap();
    path.display().to_string()
}

#[test]
fn chat_prints_the_value_the_reply_ended_with() {
    let s = common::space();
    let schema =
        schema_file(&s.path, &json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}));
    // The first answer is prose: it goes back to the model with why, and the second fits.
    let model = common::script(&s.path, json!([{"text": "About three."}, {"text": "{\"n\": 3}"}]));
    let text = common::ok(&s.path, &["chat", "--model", &model, "--result-schema", &schema, "-m", "how many?"]);
    assert!(text.contains("result: {\n  \"n\": 3\n}"), "{text}");
    assert!(text.contains("the answer is not JSON"), "the correction is in the transcript: {text}");

    // The scripted model answers by the conversation's length: it goes on from there.
    let model = common::script(&s.path, json!([{}, {}, {"text": "{\"n\": 4}"}]));
    let json = common::ok(&s.path, &["--json", "chat", "--model", &model, "--result-schema", &schema, "-m", "again"]);
    assert_eq!(serde_json::from_str::<Value>(&json).unwrap(), json!({"n": 4}));

    // Without the flag the chat is as before: the schema does not stay behind.
    let model = common::script(&s.path, json!([{}, {}, {}, {"text": "plain words"}]));
    let text = common::ok(&s.path, &["chat", "--model", &model, "-m", "hello"]);
    assert!(text.contains("plain words") && !text.contains("result:"), "{text}");
}

#[test]
fn a_bad_schema_file_is_refused_before_the_chat() {
    let s = common::space();
    let not_json = s.path.with_file_name("broken.json");
    std::fs::write(&not_json, "{nope").unwrap();
    let err = common::fails(&s.path, &["chat", "--result-schema", &not_json.display().to_string(), "-m", "hi"]);
    assert!(err.contains("is not JSON"), "{err}");
    let bad = schema_file(&s.path, &json!({"type": 7}));
    let err = common::fails(&s.path, &["chat", "--result-schema", &bad, "-m", "hi"]);
    assert!(err.contains("not a usable JSON Schema"), "{err}");
    let err = common::fails(&s.path, &["chat", "--result-schema", "/no/such/schema.json", "-m", "hi"]);
    assert!(err.contains("cannot read the result schema"), "{err}");
}

#[test]
fn the_offline_model_says_it_cannot_answer_with_a_value() {
    let s = common::space();
    let schema = schema_file(&s.path, &json!({"type": "object"}));
    let err = common::fails(&s.path, &["chat", "--result-schema", &schema, "-m", "how many?"]);
    assert!(err.contains("the offline model cannot answer with a value of a result schema"), "{err}");
}

#[test]
fn a_model_that_never_answers_with_a_fitting_value_fails_the_chat_clearly() {
    let s = common::space();
    let schema = schema_file(&s.path, &json!({"type": "array"}));
    let model = common::script(&s.path, json!([{"text": "one"}, {"text": "two"}, {"text": "three"}]));
    let err = common::fails(&s.path, &["chat", "--model", &model, "--result-schema", &schema, "-m", "list"]);
    assert!(err.contains("gave no value that fits the result schema in 3 tries"), "{err}");
}
