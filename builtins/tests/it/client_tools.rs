//! Client tools: definitions that travel with the request, called by the (scripted) model,
//! executed by the client, the conversation going on in a new round; their limits.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use trellis_builtins::catalog::{Catalog, EntryError};
use trellis_builtins::dialog::{DialogHandle, DialogInputs, InteractionKind, LlmDialog, Resolve};
use trellis_builtins::message::{Message, Part, ToolOutput};
use trellis_builtins::model::{Model, ModelError};
use trellis_builtins::scripted::{ScriptedModel, Turn};
use trellis_runner::{Pattern, Runtime};

const WAIT: Duration = Duration::from_secs(10);

fn lookup() -> Value {
    json!({"client": {
        "description": "Looks a word up in the user's own dictionary",
        "parameters": {"type": "object", "properties": {"word": {"type": "string", "minLength": 1}}, "required": ["word"]}
    }})
}

fn dialog(turns: Vec<Turn>, max_tool_rounds: Option<u64>) -> (Runtime, DialogHandle) {
    let rt = Runtime::in_memory();
    let model: Arc<dyn Model> = Arc::new(ScriptedModel::from_turns(turns));
    let resolver = move |_: &str| -> Result<Arc<dyn Model>, ModelError> { Ok(model.clone()) };
    rt.register_builtin(Arc::new(LlmDialog::with_resolver(Arc::new(resolver))));
    rt.register_pattern(Pattern::new("chat", move |b, _: Value| {
        let messages = b.state::<Vec<Message>>("messages", Vec::new())?;
        let mut inputs = DialogInputs::new().messages(messages).model("test").tools(json!({"lookup": lookup()}));
        if let Some(limit) = max_tool_rounds {
            inputs = inputs.max_tool_rounds(limit);
        }
        b.builtin("dialog", "llm_dialog", inputs.to_json())?;
        Ok(())
    }));
    let chat = rt.charms().create("chat", json!({})).unwrap();
    let handle = DialogHandle::new(rt.clone(), rt.charms().result(&chat).child("dialog"));
    (rt, handle)
}

fn results(dialog: &DialogHandle) -> Vec<ToolOutput> {
    let messages = dialog.messages();
    messages
        .iter()
        .flat_map(|m| m.content.clone())
        .filter_map(|p| if let Part::ToolResult { output, .. } = p { Some(output) } else { None })
        .collect()
}

#[tokio::test]
async fn a_client_tool_call_ends_the_round_and_the_clients_output_continues_it() {
    let (_rt, dialog) = dialog(
        vec![
            Turn::tool_call("lookup", json!({"word": ""})),
            Turn::tool_call("lookup", json!({"word": "trellis"})),
            Turn::text("A trellis is a frame for climbing plants."),
        ],
        None,
    );
    dialog.say("what is a trellis?", WAIT).await.unwrap();
    // Bad arguments never reach the client: the model reads why, and tries again.
    let ToolOutput::ErrorText(why) = &results(&dialog)[0] else { panic!("{:?}", results(&dialog)) };
    assert!(why.contains("invalid arguments for `lookup`"), "{why}");
    let waiting = dialog.interactions();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(waiting[0].kind, InteractionKind::ClientExecution);
    assert_eq!(waiting[0].input, json!({"word": "trellis"}));
    assert_eq!(waiting[0].client_tool, None, "the server has no phase of its own to run");

    let out = json!({"definition": "a frame for climbing plants"});
    dialog.resolve(Resolve::output(waiting[0].call_id.clone(), out.clone())).await.unwrap();
    dialog.wait(WAIT).await.unwrap();
    assert_eq!(results(&dialog)[1], ToolOutput::Json(out));
    assert_eq!(dialog.messages().last().unwrap().text(), "A trellis is a frame for climbing plants.");
}

#[tokio::test]
async fn max_tool_rounds_stops_a_runaway_client_loop_with_a_message() {
    let again = || Turn::tool_call("lookup", json!({"word": "again"}));
    let (_rt, dialog) = dialog(vec![again(), again(), again(), Turn::text("unused")], Some(2));
    dialog.say("loop", WAIT).await.unwrap();
    for _ in 0..2 {
        let call = dialog.interactions()[0].call_id.clone();
        dialog.resolve(Resolve::output(call, json!("more"))).await.unwrap();
        dialog.wait(WAIT).await.unwrap();
    }
    assert!(dialog.interactions().is_empty(), "the third round does not wait");
    let last = dialog.messages().last().unwrap().text();
    assert!(last.contains("max_tool_rounds") && last.contains('2'), "{last}");
    let ToolOutput::ErrorText(why) = results(&dialog).last().unwrap().clone() else { panic!() };
    assert!(why.contains("max_tool_rounds"), "{why}");
}

#[test]
fn client_tools_past_the_count_limit_are_refused_by_rule() {
    let rt = Runtime::in_memory();
    let tools: serde_json::Map<String, Value> = (0..11).map(|i| (format!("t{i:02}"), lookup())).collect();
    let catalog = Catalog::build(&rt, &Value::Object(tools));
    assert_eq!(catalog.len(), 10);
    let problems = catalog.problems();
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].entry, "t10");
    assert!(matches!(problems[0].error, EntryError::ClientTool(_)));
    assert!(problems[0].to_string().contains("rule `max-tools`"), "{}", problems[0]);
    let remote =
        json!({"bad": {"client": {"parameters": {"type": "object", "properties": {"a": {"$ref": "http://x/y"}}}}}});
    let refused = Catalog::build(&rt, &remote);
    assert!(refused.is_empty() && refused.problems()[0].to_string().contains("rule `no-ref`"));
}
