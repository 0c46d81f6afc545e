//! A program built with `App` offers its own Rust tools (`App::tools`): a server tool with
//! a client effect runs, and the command line, as the client, runs the effect.

#![allow(clippy::unwrap_used)] // a failing unwrap is a failing test

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
