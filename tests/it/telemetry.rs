//! OpenTelemetry traces of `trellis serve`, seen from outside: a server started with
//! `OTEL_EXPORTER_OTLP_ENDPOINT` naming a collector on loopback (`common::otlp`) and an
//! OpenTelemetry-compatible model on loopback (`common::provider`), driven through its API;
//! the spans are read as the collector decoded them, and the model's counters of
//! `/metrics` beside them (the others: `serve.rs` and `cluster.rs`). A command that goes
//! through the server holding its space carries its trace there.

use serde_json::json;

use crate::common;
use crate::common::otlp::{Collector, Span};
use crate::common::provider::{Provider, Reply};
use crate::serve::{client_with, Client};

/// What the person writes, and what the model puts in its call's arguments: neither may
/// reach a span unless the operator asks.
const SAID: &str = "pelican-5512";
const ARGUMENT: &str = "zebra-7431";

/// A trace a client began (W3C Trace Context), for a request to continue.
const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CLIENT_SPAN: &str = "b7ad6b7169203331";

/// A server of one space sending its spans to `collector`, its model a loopback provider
/// that calls `Notes.add`, then answers in words and counts its tokens; `env` added.
fn traced(space: &std::path::Path, collector: &Collector, env: &[(&str, &str)]) -> (Client, Provider) {
    let provider = Provider::start(vec![
        Reply::Call("Notes_add".into(), json!({"title": ARGUMENT})),
        Reply::Counted("Noted.".into(), 21, 5),
    ]);
    let mut all = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str()),
        ("OTEL_SERVICE_NAME", "trellis-test"),
        ("OPENAI_API_KEY", "not-checked"),
        ("OPENAI_BASE_URL", provider.url.as_str()),
        ("NO_PROXY", "127.0.0.1"),
    ];
    all.extend_from_slice(env);
    let c = client_with(space, &[], &all);
    c.ok("PUT", "/api/chat/model", Some(json!({"model": "openai:loopback-model"})), 204);
    (c, provider)
}

/// Sends a message that makes the model call a tool, and follows the chat to its end.
fn chat(c: &Client) {
    let mut chat = c.served.events("/api/chat/events", &[&c.auth]);
    c.ok("POST", "/api/chat/messages", Some(json!({"text": format!("@Notes remember the {SAID}")})), 202);
    let done = chat.until("chat", |s| s["pending"] == false && s["messages"].as_array().unwrap().len() >= 4);
    assert!(done["messages"].to_string().contains("Noted."), "{}", done["messages"]);
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

#[test]
fn a_chat_message_is_traced_as_the_genai_conventions_say_its_content_left_out() {
    let s = common::space();
    let collector = Collector::start();
    // Batches are sent every ten minutes: what arrives was sent when the server stopped.
    let (mut c, _provider) = traced(&s.path, &collector, &[("OTEL_BSP_SCHEDULE_DELAY", "600000")]);
    assert_eq!(c.served.request("GET", "/healthz", &[], None).status, 200);
    let traceparent = format!("traceparent: 00-{TRACE}-{CLIENT_SPAN}-01");
    let sent = c.served.request("POST", "/api/charms/Counter/handlers/increment", &[&c.auth, &traceparent], Some("{}"));
    assert_eq!(sent.status, 200, "{}", sent.body);
    chat(&c);
    // The counters of the same calls, by provider.
    let metric = |series: &str| c.served.metric(series);
    assert_eq!(metric(r#"trellis_model_requests_total{provider="openai",outcome="answered"}"#), 2.0);
    assert_eq!(metric(r#"trellis_model_tokens_total{provider="openai",kind="input"}"#), 21.0);
    assert_eq!(metric(r#"trellis_model_tokens_total{provider="openai",kind="output"}"#), 5.0);
    assert_eq!(metric(r#"trellis_tool_calls_total{outcome="done"}"#), 1.0);
    assert!(collector.spans().is_empty(), "nothing sent before the batch is due");
    c.served.terminate();
    let spans = collector.wait_for(|spans| !named(spans, "invoke_agent llm_dialog").is_empty());

    assert!(spans.iter().all(|s| s.service == "trellis-test"), "OTEL_SERVICE_NAME names the service");
    let [agent] = named(&spans, "invoke_agent llm_dialog")[..] else { panic!("one dialog request: {spans:#?}") };
    assert_eq!(agent.attr("gen_ai.operation.name"), Some("invoke_agent"));
    let chats = named(&spans, "chat loopback-model");
    assert_eq!(chats.len(), 2, "a model call per round: {spans:#?}");
    for chat in &chats {
        assert_eq!(chat.kind, 3, "a client span");
        assert_eq!(chat.attr("gen_ai.operation.name"), Some("chat"));
        assert_eq!(chat.attr("gen_ai.provider.name"), Some("openai"));
        assert_eq!(chat.attr("gen_ai.request.model"), Some("loopback-model"));
        assert_eq!((&chat.trace_id, &chat.parent_id), (&agent.trace_id, &agent.span_id), "inside the request");
    }
    let counted = chats.iter().find(|c| c.attr("gen_ai.usage.input_tokens").is_some()).expect("the tokens");
    assert_eq!(counted.attr("gen_ai.usage.input_tokens"), Some("21"));
    assert_eq!(counted.attr("gen_ai.usage.output_tokens"), Some("5"));
    let [tool] = named(&spans, "execute_tool Notes.add")[..] else { panic!("one tool call: {spans:#?}") };
    assert_eq!(tool.attr("gen_ai.operation.name"), Some("execute_tool"));
    assert_eq!(tool.attr("gen_ai.tool.name"), Some("Notes.add"));
    assert_eq!(tool.attr("gen_ai.tool.call.id"), Some("call_1"), "the provider's id of the call");
    assert_eq!(tool.attr("trellis.tool.outcome"), Some("done"));
    assert_eq!((&tool.trace_id, &tool.parent_id), (&agent.trace_id, &agent.span_id));

    // Requests: a server span each, named by its method; a client's trace goes on.
    let request = |path: &str| spans.iter().find(|s| s.kind == 2 && s.attr("url.path") == Some(path));
    let message = request("/api/chat/messages").expect("the message's request");
    assert_eq!(message.name, "POST");
    assert_eq!(message.attr("http.request.method"), Some("POST"));
    assert_eq!(message.attr("http.response.status_code"), Some("202"));
    let increment = request("/api/charms/Counter/handlers/increment").expect("the send's request");
    assert_eq!((increment.trace_id.as_str(), increment.parent_id.as_str()), (TRACE, CLIENT_SPAN));
    assert!(request("/healthz").is_none(), "the probes are not traced");

    for span in &spans {
        for (key, value) in &span.attributes {
            assert!(!value.contains(SAID) && !value.contains(ARGUMENT), "{} {key} holds content: {value}", span.name);
        }
        assert!(!span.attributes.contains_key("gen_ai.input.messages"), "{span:?}");
    }
}

#[test]
fn content_goes_into_spans_when_the_operator_asks_for_it() {
    let s = common::space();
    let collector = Collector::start();
    let capture = ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true");
    let (c, _provider) = traced(&s.path, &collector, &[capture, ("OTEL_BSP_SCHEDULE_DELAY", "100")]);
    chat(&c);
    // Sent as the batches fall due, while the server runs.
    let spans = collector.wait_for(|spans| named(spans, "chat loopback-model").len() == 2);
    let chats = named(&spans, "chat loopback-model");
    assert_eq!(chats.len(), 2, "{spans:#?}");
    let input = chats[0].attr("gen_ai.input.messages").expect("the messages sent");
    let asked: serde_json::Value = serde_json::from_str(input).expect("JSON");
    assert!(asked.as_array().unwrap().iter().any(|m| m["role"] == "user" && m.to_string().contains(SAID)), "{asked}");
    let answers: Vec<&str> = chats.iter().filter_map(|c| c.attr("gen_ai.output.messages")).collect();
    assert!(answers.iter().any(|a| a.contains("tool_call") && a.contains(ARGUMENT)), "{answers:?}");
    let [tool] = named(&spans, "execute_tool Notes.add")[..] else { panic!("one tool call: {spans:#?}") };
    assert!(tool.attr("gen_ai.tool.call.arguments").is_some_and(|a| a.contains(ARGUMENT)), "{tool:?}");
    assert!(tool.attr("gen_ai.tool.call.result").is_some(), "{tool:?}");
}

/// A request sent to a node that does not hold its space is one trace on both nodes: the
/// holder's span is a child of the forwarding node's.
#[test]
fn a_forwarded_request_is_one_trace_across_the_nodes() {
    use crate::cluster::{bearer, count, node_with};
    use crate::common::postgres as pg;
    let Some(s) = pg::space() else { return };
    let database = pg::database().expect("the database");
    let auth = bearer(&s);
    let collector = Collector::start();
    let env = |service| {
        [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str()),
            ("OTEL_SERVICE_NAME", service),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ]
    };
    let a = node_with(&database, &s.dir.join("a"), &env("node-a"));
    let b = node_with(&database, &s.dir.join("b"), &env("node-b"));
    assert_eq!(count(&a, &s, &auth), 0, "A holds the space");
    let path = format!("/spaces/{}/api/charms/Counter/handlers/increment", s.name);
    let sent = b.request("POST", &path, &[&auth], Some(r#"{"amount": 3}"#));
    assert_eq!(sent.status, 200, "forwarded: {}", sent.body);

    let on = |spans: &[Span], service: &str| {
        spans.iter().find(|s| s.service == service && s.kind == 2 && s.attr("url.path") == Some(path.as_str())).cloned()
    };
    let spans = collector.wait_for(|spans| on(spans, "node-a").is_some() && on(spans, "node-b").is_some());
    let (Some(at_a), Some(at_b)) = (on(&spans, "node-a"), on(&spans, "node-b")) else {
        panic!("the request's span on both nodes: {spans:#?}")
    };
    assert_eq!(at_a.trace_id, at_b.trace_id, "one trace");
    assert_eq!(at_a.parent_id, at_b.span_id, "the holder's span is a child of the forwarding node's");
    assert!(at_b.parent_id.is_empty(), "the client began no trace");
    assert_eq!(at_a.attr("trellis.space"), Some(s.name.as_str()), "{at_a:?}");
}

#[test]
fn a_command_through_the_server_holding_its_space_is_one_trace() {
    use common::Finish;
    let s = common::space();
    let collector = Collector::start();
    let env = |service| {
        [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str()),
            ("OTEL_SERVICE_NAME", service),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ]
    };
    let _server = client_with(&s.path, &[], &env("the-server"));
    let out = common::trellis(&s.path).args(["charm", "send", "Counter", "increment"]).envs(env("a-command")).finish();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let path = "/api/charms/Counter/handlers/increment";
    let command = |spans: &[Span]| spans.iter().find(|s| s.service == "a-command" && s.parent_id.is_empty()).cloned();
    let served = |spans: &[Span]| {
        spans.iter().find(|s| s.service == "the-server" && s.kind == 2 && s.attr("url.path") == Some(path)).cloned()
    };
    let spans = collector.wait_for(|spans| command(spans).is_some() && served(spans).is_some());
    let (Some(command), Some(served)) = (command(&spans), served(&spans)) else { panic!("both spans: {spans:#?}") };
    assert_eq!(command.name, "trellis charm send", "named after its subcommands, never an argument");
    assert_eq!(served.trace_id, command.trace_id, "one trace");
    assert_eq!(served.parent_id, command.span_id, "the server's span is a child of the command's");
}

#[test]
fn an_mcp_call_to_another_trellis_is_one_trace() {
    use common::Finish;
    let s = common::space();
    let tools = common::space();
    let collector = Collector::start();
    // The server is started by the chat, with the environment its entry gives it only.
    let config = s.path.with_file_name("mcp.json");
    let server_env = json!({
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
        "OTEL_SERVICE_NAME": "the-tools",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    });
    let args = ["--space", tools.path.to_str().unwrap(), "mcp", "serve"];
    let entry = json!({"command": env!("CARGO_BIN_EXE_trellis"), "args": args, "env": server_env, "trusted": true});
    std::fs::write(&config, json!({"mcpServers": {"tools": entry}}).to_string()).unwrap();
    let turns =
        json!([{"tool_calls": [{"name": "tools.Counter_increment", "arguments": {"amount": 2}}]}, {"text": "Done."}]);
    let script = s.path.with_file_name("script.json");
    std::fs::write(&script, turns.to_string()).unwrap();
    let model = format!("scripted:{}", script.display());
    let out = common::trellis(&s.path)
        .args(["chat", "--model", &model, "--mcp-config", config.to_str().unwrap(), "-m", "add two"])
        .env("TRELLIS_MCP_CONFIG", "")
        .envs([
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str()),
            ("OTEL_SERVICE_NAME", "the-chat"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ])
        .finish();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("assistant: Done."),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let called =
        |spans: &[Span]| spans.iter().find(|s| s.service == "the-chat" && s.name.starts_with("execute_tool")).cloned();
    let served = |spans: &[Span]| {
        spans.iter().find(|s| s.service == "the-tools" && s.name == "tools/call Counter_increment").cloned()
    };
    let spans = collector.wait_for(|spans| called(spans).is_some() && served(spans).is_some());
    let (Some(called), Some(served)) = (called(&spans), served(&spans)) else { panic!("both spans: {spans:#?}") };
    assert_eq!(served.trace_id, called.trace_id, "one trace");
    assert_eq!(served.parent_id, called.span_id, "the server's call is a child of the chat's tool call");
    assert_eq!(served.kind, 2, "a server span");
}
