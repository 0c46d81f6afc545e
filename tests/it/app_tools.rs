//! A program built with `App` offers its own Rust tools (`App::tools`): a server tool with
//! a client effect runs, and the command line, as the client, runs the effect.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::{json, Value};
use trellis::builtins::dialog::{DialogHandle, Interaction};
use trellis::builtins::tool::{ClientContext, Server, ToolBuilder, ToolRegistry};
use trellis::runner::Runtime;

/// How many bars.
#[derive(Deserialize, schemars::JsonSchema)]
struct Bars {
    n: usize,
}

fn app(shown: &Arc<Mutex<Vec<String>>>) -> trellis::App {
    let tools = ToolRegistry::standard();
    let seen = shown.clone();
    let chart = ToolBuilder::<Bars>::new("chart", "Draws bars")
        .authority(Server)
        .server(|b: Bars| Ok("#".repeat(b.n.min(40))))
        .client(move |bars: String, client: &mut dyn ClientContext| {
            client.show(&bars);
            seen.lock().unwrap().push(bars);
            Ok(json!({"shown": true}))
        });
    tools.register(chart.build()).unwrap();
    trellis::App::new("charts").tools(tools)
}

fn run(app: trellis::App, space: &std::path::Path, args: &[&str]) -> ExitCode {
    let mut all = vec!["charts".to_string(), "--space".into(), space.display().to_string()];
    all.extend(args.iter().map(|a| a.to_string()));
    app.run_from(all)
}

#[test]
fn the_command_line_runs_a_server_tools_client_effect() {
    let dir = tempfile::tempdir().unwrap();
    let space = dir.path().join("space.sqlite");
    let shown = Arc::new(Mutex::new(Vec::new()));
    let chatbot = json!({"tools": {"chart": {"tool": "chart"}}}).to_string();
    assert_eq!(run(app(&shown), &space, &["charm", "new", "chatbot", "--arg", &chatbot]), ExitCode::SUCCESS);
    let script = dir.path().join("script.json");
    let turns = json!([{"tool_calls": [{"name": "chart", "arguments": {"n": 3}}]}, {"text": "Drawn."}]);
    std::fs::write(&script, turns.to_string()).unwrap();
    let model = format!("scripted:{}", script.display());
    assert_eq!(run(app(&shown), &space, &["chat", "--model", &model, "-m", "draw 3"]), ExitCode::SUCCESS);
    assert_eq!(*shown.lock().unwrap(), ["###"], "the client effect ran once, with the server's output");

    // The effect was acknowledged, and the model read the server's output.
    let rt = Runtime::open(&space).unwrap();
    let chat = rt.charms().list().into_iter().find(|c| c.pattern == "chatbot").unwrap();
    let result = rt.charms().result(&chat.id.into());
    let dialog = DialogHandle::new(rt.clone(), result.child("dialog"));
    let waiting: Vec<Interaction> = dialog.interactions();
    assert!(waiting.is_empty(), "{waiting:?}");
    let messages = serde_json::to_value(dialog.messages()).unwrap();
    assert!(messages.to_string().contains("\"###\""), "{messages}");
    assert_eq!(
        messages.as_array().and_then(|m| m.last()).map(|m| m["content"][0]["text"].clone()),
        Some(Value::from("Drawn."))
    );
}

/// What the plugin's hooks saw.
#[derive(Default)]
struct Seen {
    requests: Vec<String>,
    responses: Vec<(String, Vec<String>)>,
    calls: Vec<Value>,
}

/// A Rust plugin with a `shout` tool and hooks that record what they see; its
/// `before_request` marks the message.
fn shouting(seen: &Arc<Mutex<Seen>>) -> trellis::plugins::Plugin {
    use trellis::plugins::{sync_executor, Plugin, ToolDefinition};
    let (requests, responses, calls) = (seen.clone(), seen.clone(), seen.clone());
    let parameters = json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]});
    Plugin::builder("shouting", "1.0.0")
        .tool(
            ToolDefinition::new("shout", "Upper-cases a text", parameters),
            sync_executor(move |args| {
                calls.lock().unwrap().calls.push(args.clone());
                Ok(json!({"shouted": args["text"].as_str().unwrap_or_default().to_uppercase()}))
            }),
        )
        .before_request(move |request| {
            requests.lock().unwrap().requests.push(request.message.clone());
            request.message.push_str(" (politely)");
            Ok(())
        })
        .after_response(move |response| {
            responses.lock().unwrap().responses.push((response.text.clone(), response.tools_called.clone()));
            Ok(())
        })
        .build()
}

#[test]
fn a_programs_rust_plugin_runs_in_the_chat_with_its_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let space = dir.path().join("space.sqlite");
    let seen = Arc::new(Mutex::new(Seen::default()));
    let app = || trellis::App::new("shouter").plugin(shouting(&seen));
    let script = dir.path().join("script.json");
    let turns = json!([{"tool_calls": [{"name": "shout", "arguments": {"text": "hi"}}]}, {"text": "Shouted."}]);
    std::fs::write(&script, turns.to_string()).unwrap();
    let model = format!("scripted:{}", script.display());
    assert_eq!(run(app(), &space, &["chat", "--model", &model, "-m", "shout hi"]), ExitCode::SUCCESS);

    let seen = seen.lock().unwrap();
    assert_eq!(seen.calls, [json!({"text": "hi"})], "the terminal ran the plugin's tool once");
    assert_eq!(seen.requests, ["shout hi"]);
    assert_eq!(seen.responses, [("Shouted.".to_string(), vec!["shout".to_string()])], "after the whole answer");
    let rt = Runtime::open(&space).unwrap();
    let chat = rt.charms().list().into_iter().find(|c| c.pattern == "chatbot").unwrap();
    let dialog = DialogHandle::new(rt.clone(), rt.charms().result(&chat.id.into()).child("dialog"));
    let messages = serde_json::to_value(dialog.messages()).unwrap().to_string();
    assert!(messages.contains("shout hi (politely)"), "before_request changed the message: {messages}");
    assert!(messages.contains(r#"{"shouted":"HI"}"#), "the model read the tool's result: {messages}");
}

#[test]
fn a_rust_plugin_whose_tool_name_is_taken_is_left_out_and_the_chat_goes_on() {
    use trellis::plugins::{sync_executor, Plugin, ToolDefinition};
    let dir = tempfile::tempdir().unwrap();
    let space = dir.path().join("space.sqlite");
    // The chatbot offers `request_human_input` (a server tool): a plugin may not take it.
    let clash = Plugin::builder("clash", "1.0.0")
        .tool(
            ToolDefinition::new("request_human_input", "Not the real one", json!({"type": "object"})),
            sync_executor(|_| Ok(json!("never"))),
        )
        .build();
    let out = run(trellis::App::new("clasher").plugin(clash), &space, &["chat", "--model", "offline", "-m", "hello"]);
    assert_eq!(out, ExitCode::SUCCESS);
    let rt = Runtime::open(&space).unwrap();
    let chat = rt.charms().list().into_iter().find(|c| c.pattern == "chatbot").unwrap();
    let offered = DialogHandle::new(rt.clone(), rt.charms().result(&chat.id.into()).child("dialog")).flattened_tools();
    let entries: Vec<&Value> = offered.as_array().unwrap().iter().collect();
    assert_eq!(entries.len(), 1, "{offered}");
    assert!(entries[0].get("client").is_none() && entries[0]["wire"] == "request_human_input", "{offered}");
}
