//! Structured output through a dialog, against the provider adapters and a real HTTP
//! server on loopback: the Anthropic way (the recorded `json` tool stream) and the
//! OpenAI-compatible way (`response_format`, the value as text), each with a first answer
//! that does not fit and goes back to the model.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use trellis_builtins::dialog::{DialogHandle, DialogInputs, LlmDialog};
use trellis_builtins::model::{Model, ModelError};
use trellis_builtins::structured::RESULT_TOOL;
use trellis_runner::{Pattern, Read, Runtime};

use crate::providers::{anthropic_sse, Canned, Server};

const WAIT: Duration = Duration::from_secs(20);

/// The schema the recorded `json` tool stream's value fits.
fn weather() -> Value {
    json!({
        "type": "object",
        "properties": {
            "elements": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"location": {"type": "string"}, "temperature": {"type": "number"}},
                    "required": ["location", "temperature"]
                }
            }
        },
        "required": ["elements"]
    })
}

/// A dialog asking `model` for a value of [`weather`]; what it ended with, and the error.
async fn ask(model: Arc<dyn Model>) -> (Value, Option<String>) {
    let rt = Runtime::in_memory();
    let resolver = move |_: &str| -> Result<Arc<dyn Model>, ModelError> { Ok(model.clone()) };
    rt.register_builtin(Arc::new(LlmDialog::with_resolver(Arc::new(resolver))));
    let inputs = DialogInputs::new().model("loopback").result_schema(weather()).to_json();
    rt.register_pattern(Pattern::new("ask", move |b, _: Value| {
        b.builtin("dialog", "llm_dialog", inputs.clone())?;
        Ok(())
    }));
    let id = rt.charms().create("ask", json!({})).unwrap();
    let base = rt.charms().result(&id).child("dialog");
    let dialog = DialogHandle::new(rt.clone(), base.clone());
    let said = dialog.say("What is the weather in San Francisco?", WAIT).await;
    let error = rt.read(&base.child("error")).unwrap().to_json();
    assert!(said.is_ok() || error.is_string(), "{said:?}");
    (rt.read(&base.child("result")).unwrap().to_json(), error.as_str().map(str::to_string))
}

/// The recorded stream with its value changed to `value` (the API's event framing kept).
fn anthropic_answering(value: &Value) -> String {
    let recorded = anthropic_sse("anthropic-json-tool.jsonl");
    let fragment =
        r#"{\"elements\": [{\"location\": \"San Francisco\", \"temperature\": 58, \"condition\": \"sunny\"}]"#;
    assert!(recorded.contains(fragment), "the recording holds the value in one fragment");
    let escaped = serde_json::to_string(&value.to_string()).unwrap();
    // The recording's last fragment is the closing brace: the value goes in the first one.
    let value_without_brace = &escaped[1..escaped.len() - 2];
    recorded.replace(fragment, value_without_brace)
}

#[tokio::test]
async fn anthropic_ends_with_the_json_tool_and_a_wrong_value_is_corrected() {
    let wrong = json!({"elements": [{"location": "San Francisco"}]});
    let server = Server::start(vec![
        Canned::sse(anthropic_answering(&wrong)),
        Canned::sse(anthropic_sse("anthropic-json-tool.jsonl")),
    ])
    .await;
    let (result, error) = ask(Arc::new(server.anthropic())).await;
    assert_eq!(error, None);
    assert_eq!(result, json!({"elements": [{"location": "San Francisco", "temperature": 58, "condition": "sunny"}]}));

    let received = server.received();
    assert_eq!(received.len(), 2, "one correction");
    let first = &received[0].body;
    let tool = first["tools"].as_array().unwrap().iter().find(|t| t["name"] == RESULT_TOOL).unwrap();
    assert_eq!(tool["input_schema"], weather(), "an object schema goes as it is");
    assert_eq!(first["tool_choice"], json!({"type": "any"}), "the model must end with a call");
    let correction = received[1].body["messages"].to_string();
    assert!(
        correction.contains("does not fit the result schema") && correction.contains("temperature"),
        "{correction}"
    );
    // The model reads the value it sent, as its own words, before what is wrong with it.
    let turns = received[1].body["messages"].as_array().unwrap();
    let said = &turns[turns.len() - 2];
    assert_eq!(said["role"], "assistant", "{turns:?}");
    assert!(said["content"].to_string().contains(&wrong.to_string().replace('"', "\\\"")), "{said}");
}

/// An OpenAI-compatible stream answering `text` (in two deltas), framed as the recorded
/// `openai-compatible-tool-call.sse` is.
pub(crate) fn openai_answering(text: &str) -> String {
    let chunk = |delta: Value, finish: Value| {
        let choice = json!({"index": 0, "delta": delta, "finish_reason": finish});
        let chunk = json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [choice]});
        format!("data: {chunk}\n\n")
    };
    let half = text.char_indices().nth(text.chars().count() / 2).map_or(0, |(at, _)| at);
    [
        chunk(json!({"role": "assistant"}), Value::Null),
        chunk(json!({"content": &text[..half]}), Value::Null),
        chunk(json!({"content": &text[half..]}), Value::Null),
        chunk(json!({}), json!("stop")),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat()
}

#[tokio::test]
async fn openai_compatible_answers_in_the_response_format_and_prose_is_sent_back() {
    let value = json!({"elements": [{"location": "Oslo", "temperature": -3}]});
    let server = Server::start(vec![
        Canned::sse(openai_answering("It is cold in Oslo.")),
        Canned::sse(openai_answering(&format!("```json\n{value}\n```"))),
    ])
    .await;
    let (result, error) = ask(Arc::new(server.openai())).await;
    assert_eq!(error, None);
    assert_eq!(result, value);
    let received = server.received();
    let format = &received[0].body["response_format"];
    assert_eq!(format["type"], "json_schema");
    assert_eq!(format["json_schema"]["schema"], weather());
    assert!(received[1].body["messages"].to_string().contains("the answer is not JSON"));
}

#[tokio::test]
async fn a_model_that_never_fits_ends_the_request_with_a_clear_error() {
    let prose = || Canned::sse(openai_answering("Sunny."));
    let server = Server::start(vec![prose(), prose(), prose(), prose()]).await;
    let (result, error) = ask(Arc::new(server.openai())).await;
    assert_eq!(result, Value::Null);
    let error = error.expect("the request failed");
    assert!(error.contains("gave no value that fits the result schema in 3 tries"), "{error}");
    assert_eq!(server.received().len(), 3, "twice sent back, then given up");
}

/// llama-cpp-python's server knows only `json_object` (with the schema beside it), and
/// refuses `json_schema` with a validation error naming `response_format`.
#[tokio::test]
async fn a_server_that_refuses_json_schema_is_asked_with_json_object_from_then_on() {
    let refusal = json!({"error": {"message": "Input should be 'text' or 'json_object' at body.response_format.type"}});
    let value = json!({"elements": []});
    let server = Server::start(vec![
        Canned::json(400, refusal),
        Canned::sse(openai_answering(&value.to_string())),
        Canned::sse(openai_answering(&value.to_string())),
    ])
    .await;
    let model: Arc<dyn Model> = Arc::new(server.openai());
    assert_eq!(ask(model.clone()).await, (value.clone(), None));
    assert_eq!(ask(model).await, (value, None), "the same model again");
    let formats: Vec<Value> = server.received().iter().map(|r| r.body["response_format"].clone()).collect();
    assert_eq!(formats[0]["type"], "json_schema");
    assert_eq!(formats[1], json!({"type": "json_object", "schema": weather()}));
    assert_eq!(formats[2]["type"], "json_object", "not refused a second time: {formats:?}");
}
