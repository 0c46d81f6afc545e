//! A conversation past its `context_budget`, against the OpenAI-compatible adapter and a
//! real HTTP server on loopback: the model itself is asked for a summary of the oldest
//! turns, and the next request carries the summary in their place.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use trellis_builtins::dialog::{DialogHandle, DialogInputs, LlmDialog};
use trellis_builtins::model::{Model, ModelError};
use trellis_runner::{Pattern, Runtime};

use crate::providers::{Canned, Server};
use crate::structured::openai_answering;

const WAIT: Duration = Duration::from_secs(20);

/// Tokens: the third turn's request passes it, the second's does not.
const BUDGET: usize = 400;

#[tokio::test]
async fn a_conversation_past_its_budget_is_summarised_by_the_model_itself() {
    let long = "many words ".repeat(60);
    let server = Server::start(vec![
        Canned::sse(openai_answering(&long)),
        Canned::sse(openai_answering(&long)),
        Canned::sse(openai_answering("SUMMARY: the user greeted twice.")),
        Canned::sse(openai_answering("Third answer.")),
    ])
    .await;
    let model: Arc<dyn Model> = Arc::new(server.openai());
    let rt = Runtime::in_memory();
    let resolver = move |_: &str| -> Result<Arc<dyn Model>, ModelError> { Ok(model.clone()) };
    rt.register_builtin(Arc::new(LlmDialog::with_resolver(Arc::new(resolver))));
    let inputs = DialogInputs::new().model("loopback").context_budget(BUDGET).to_json();
    rt.register_pattern(Pattern::new("talk", move |b, _: Value| {
        b.builtin("dialog", "llm_dialog", inputs.clone())?;
        Ok(())
    }));
    let id = rt.charms().create("talk", json!({})).unwrap();
    let dialog = DialogHandle::new(rt.clone(), rt.charms().result(&id).child("dialog"));
    for text in ["first hello", "second hello", "third question"] {
        dialog.say(text, WAIT).await.unwrap();
    }

    let received = server.received();
    assert_eq!(received.len(), 4, "three turns and one summary");
    let summary_request = received[2].body["messages"].to_string();
    assert!(summary_request.contains("You compact a conversation"), "{summary_request}");
    // What the summariser reads keeps within the budget, the newest turns first.
    assert!(summary_request.contains("second hello"), "{summary_request}");
    assert!(summary_request.len() < BUDGET * 4, "{} bytes", summary_request.len());
    let third = &received[3].body["messages"];
    assert_eq!(third[0]["role"], "system");
    assert!(third[0]["content"].as_str().unwrap().contains("SUMMARY: the user greeted twice."), "{third}");
    assert!(!third.to_string().contains("first hello"), "the summarised turns are left out: {third}");
    assert!(third.to_string().contains("third question"));
    assert_eq!(dialog.compacted(), 4, "the first two turns (4 messages) are summarised");
    assert_eq!(dialog.messages().len(), 6, "and kept in the space");
}
