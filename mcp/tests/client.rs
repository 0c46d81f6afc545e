//! Trellis as an MCP client, against servers nobody here wrote (`server-everything` from
//! npm, `mcp-server-time` and the Python SDK's server from PyPI) and a small in-repo rmcp
//! server for what those do not show on demand (list_changed, a cursor that never
//! advances, a crash in the middle of a call, a call that never ends).

#![allow(clippy::unwrap_used)] // a failing unwrap is a failing test

#[path = "../../tests/it/common/install.rs"]
mod install;
#[path = "../../tests/mcp/tools.rs"]
mod tools;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use trellis_builtins::catalog::{Catalog, CatalogCache};
use trellis_builtins::message::ToolOutput;
use trellis_builtins::sources::{self, ToolSource};
use trellis_mcp::client::{attach, detach, McpServer, ServerSpec, State, Transport};
use trellis_runner::{Link, Path, Runtime};

const CALL: Duration = Duration::from_secs(30);

/// Runs `test` with a deadline, so a hang fails instead of blocking the suite.
async fn within<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(120), test).await.expect("the test took longer than two minutes")
}

fn stdio(name: &str, words: Vec<String>, trusted: bool) -> ServerSpec {
    let mut words = words.into_iter();
    let command = words.next().unwrap();
    ServerSpec {
        name: name.into(),
        transport: Transport::Stdio { command, args: words.collect(), env: BTreeMap::new() },
        trusted,
        tools: Vec::new(),
    }
}

fn test_server(args: &[&str], trusted: bool) -> ServerSpec {
    let mut words = vec![env!("CARGO_BIN_EXE_trellis-mcp-test-server").to_string()];
    words.extend(args.iter().map(|a| a.to_string()));
    stdio("test", words, trusted)
}

async fn connect(spec: ServerSpec) -> (Runtime, McpServer) {
    let rt = Runtime::in_memory();
    let server = McpServer::connect(spec, CALL).await.unwrap();
    attach(&rt, &server).unwrap();
    (rt, server)
}

fn text(output: &ToolOutput) -> String {
    output.as_text()
}

async fn call(rt: &Runtime, tool: &str, arguments: Value) -> ToolOutput {
    Catalog::build(rt, &Value::Null).invoke(rt, tool, arguments, CALL).await.output
}

/// Whether the process is gone and reaped (no zombie left under our pid).
fn reaped(pid: u32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_tools_are_called_through_the_catalog_like_any_tool() {
    within(async {
        let (rt, server) = connect(stdio("everything", tools::everything(), false)).await;
        assert_eq!(server.state(), State::Ready);
        let catalog = Catalog::build(&rt, &Value::Null);
        let echo = catalog.get("everything.echo").expect("displayed server.tool");
        assert_eq!(echo.wire, "everything_echo");
        assert!(echo.approval.is_none(), "marked read-only: runs without asking");

        let echoed = call(&rt, "everything_echo", json!({"message": "hi there"})).await;
        assert!(matches!(&echoed, ToolOutput::Text(t) if t.contains("hi there")), "{echoed:?}");
        let sum = call(&rt, "everything.get-sum", json!({"a": 2, "b": 3.5})).await;
        assert!(!matches!(sum, ToolOutput::ErrorText(_)) && text(&sum).contains("5.5"), "{sum:?}");

        // Bad arguments stop at the schema, before the server.
        let bad = call(&rt, "everything.get-sum", json!({"a": "two", "b": 1})).await;
        assert!(
            matches!(&bad, ToolOutput::ErrorText(t) if t.contains("invalid arguments") && t.contains("/a")),
            "{bad:?}"
        );
        // ...and what gets past it is the server's to refuse, as an error the model reads.
        let refused = server.call("get-sum", json!({"a": "two"}), CALL).await;
        assert!(matches!(&refused, ToolOutput::ErrorText(t) if t.contains("everything.get-sum")), "{refused:?}");
        // A tool the server does not have.
        let unknown = server.call("no-such-tool", json!({}), CALL).await;
        assert!(matches!(&unknown, ToolOutput::ErrorText(t) if t.contains("no-such-tool")), "{unknown:?}");
        let unknown = call(&rt, "everything.nope", json!({})).await;
        assert!(matches!(&unknown, ToolOutput::ErrorText(t) if t.contains("unknown tool")), "{unknown:?}");

        // Not marked read-only by an untrusted server: the person approves each call.
        let toggle = catalog.get("everything.toggle-simulated-logging").unwrap();
        assert!(toggle.approval.as_deref().unwrap().contains("does not mark"), "{:?}", toggle.approval);
        let refused = call(&rt, "everything.toggle-simulated-logging", json!({})).await;
        assert!(matches!(&refused, ToolOutput::ErrorText(t) if t.contains("approval")), "{refused:?}");

        let pid = server.pid().unwrap();
        detach(&rt, &server).await;
        assert_eq!(server.state(), State::Detached);
        assert!(reaped(pid), "the child is shut down and reaped on detach");
        assert!(Catalog::build(&rt, &Value::Null).is_empty(), "its tools left with it");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_error_from_the_time_server_is_an_error_text() {
    within(async {
        let (rt, server) = connect(stdio("time", tools::time_server(), false)).await;
        let now = call(&rt, "time.get_current_time", json!({"timezone": "Europe/Paris"})).await;
        assert!(!matches!(now, ToolOutput::ErrorText(_)) && text(&now).contains("Europe/Paris"), "{now:?}");
        let error = call(&rt, "time.get_current_time", json!({"timezone": "Mars/Olympus_Mons"})).await;
        assert!(
            matches!(&error, ToolOutput::ErrorText(t) if t.starts_with("`time.get_current_time` failed") && t.contains("Mars")),
            "{error:?}"
        );
        detach(&rt, &server).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_in_the_middle_of_a_call_is_reported_reaped_and_its_tools_leave() {
    within(async {
        let (rt, server) = connect(stdio("everything", tools::everything(), false)).await;
        let seen = server.version();
        let pid = server.pid().unwrap();
        let long = tokio::spawn({
            let rt = rt.clone();
            async move { call(&rt, "everything.trigger-long-running-operation", json!({"duration": 60, "steps": 60})).await }
        });
        let killed = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap();
        assert!(killed.success());
        let output = long.await.unwrap();
        assert!(matches!(&output, ToolOutput::ErrorText(t) if t.contains("everything")), "{output:?}");
        server.changed_since(seen).await;
        assert!(matches!(server.state(), State::Stopped(why) if why.contains(&pid.to_string())), "{:?}", server.state());
        assert!(reaped(pid), "no zombie is left");
        assert!(Catalog::build(&rt, &Value::Null).is_empty(), "a stopped server offers nothing");
        let after = server.call("echo", json!({"message": "x"}), CALL).await;
        assert!(matches!(&after, ToolOutput::ErrorText(t) if t.contains("stopped")), "{after:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_lists_the_tools_again_and_the_cached_catalog_notices() {
    // Revision 2026-07-28: the change comes through a `subscriptions/listen` subscription.
    list_changed(&["--page-size", "2"], "2026-07-28").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_list_changed_notification_is_heard_too() {
    list_changed(&["--page-size", "2", "--plain-notifications"], "2026-07-28").await;
}

async fn list_changed(args: &[&str], protocol: &str) {
    within(async {
        let (rt, server) = connect(test_server(args, true)).await;
        assert_eq!(server.protocol(), Some(protocol));
        let cache = CatalogCache::default();
        let before = cache.get(&rt, &Value::Null);
        let names: Vec<&str> = before.tools().iter().map(|t| t.display.as_str()).collect();
        assert_eq!(names, ["test.echo", "test.grow", "test.crash", "test.hang"], "two pages of two");
        assert!(Arc::ptr_eq(&before, &cache.get(&rt, &Value::Null)), "unchanged: reused");

        // The space hears of the change too (what it derives from the catalog follows).
        let (announced, mut heard) = tokio::sync::watch::channel(());
        let changes = Link::new(sources::SOURCES_DOC, Path::new(["changes"]));
        let _announcing = rt.observe(&changes, move |_| announced.send(()).is_ok());
        let seen = server.version();
        let grown = before.invoke(&rt, "test.grow", json!({}), CALL).await;
        assert_eq!(grown.output, ToolOutput::Text("grown".into()), "trusted: runs without asking");
        server.changed_since(seen).await;
        let after = cache.get(&rt, &Value::Null);
        assert!(after.get("test.extra_0").is_some(), "re-listed after notifications/tools/list_changed");
        heard.changed().await.expect("the change was announced to the space");
        let echoed = after.invoke(&rt, "test_echo", json!({"text": "x"}), CALL).await;
        assert_eq!(echoed.output, ToolOutput::Text("echo: x".into()));
        detach(&rt, &server).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_that_never_advances_ends_the_listing() {
    within(async {
        let (_rt, server) = connect(test_server(&["--page-size", "2", "--stuck-cursor"], false)).await;
        let names: Vec<String> = server.tools().iter().map(|t| t.name.clone()).collect();
        assert_eq!(names, ["echo", "grow", "crash"], "pages until the cursor repeats, each tool once");
        assert!(server.notes().iter().any(|n| n.contains("cursor `1` again")), "{:?}", server.notes());
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_tools_weigh_too_much_gives_only_what_fits() {
    within(async {
        // 40 tools of about 64 KiB each: 2.5 MiB, past the 2 MiB a server may weigh.
        let (_rt, server) = connect(test_server(&["--heavy", "40", "--page-size", "7"], false)).await;
        let names: Vec<String> = server.tools().iter().map(|t| t.name.clone()).collect();
        let kept = names.iter().filter(|n| n.starts_with("heavy_")).count();
        assert_eq!(&names[..4], ["echo", "grow", "crash", "hang"], "the small tools listed first are all kept");
        assert!((28..=32).contains(&kept), "as many heavy tools as fit in 2 MiB, in order: {kept}");
        assert_eq!(names[4..], (0..kept).map(|n| format!("heavy_{n}")).collect::<Vec<_>>()[..]);
        let note = format!("come to more than 2 MiB (names, descriptions and input schemas); {} of them", 40 - kept);
        assert!(server.notes().iter().any(|n| n.contains(&note)), "{:?}", server.notes());
        server.shutdown().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_call_and_a_call_that_never_ends_are_errors_the_model_reads() {
    within(async {
        let (rt, server) = connect(test_server(&[], true)).await;
        let catalog = Catalog::build(&rt, &Value::Null);
        let hung = catalog.invoke(&rt, "test.hang", json!({}), Duration::from_millis(300)).await;
        assert!(matches!(&hung.output, ToolOutput::ErrorText(t) if t.contains("did not answer within")), "{hung:?}");
        let (pid, seen) = (server.pid().unwrap(), server.version());
        let crashed = catalog.invoke(&rt, "test.crash", json!({}), CALL).await;
        assert!(matches!(&crashed.output, ToolOutput::ErrorText(t) if t.contains("is gone")), "{crashed:?}");
        server.changed_since(seen).await;
        assert!(matches!(server.state(), State::Stopped(_)), "{:?}", server.state());
        assert!(reaped(pid));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_shared_with_a_charm_or_another_server_never_replaces_a_tool() {
    within(async {
        let (rt, server) = connect(test_server(&[], false)).await;
        // A charm named `test` with an `echo` handler: the same display name.
        rt.register_pattern(trellis_runner::Pattern::new("echoer", |b, _: Value| {
            b.name("test")?;
            let said = b.state("said", String::new())?;
            b.handler("echo", move |tx, e: Value| said.set(tx, e.to_string()))?;
            Ok(())
        }));
        let id = rt.charms().create("echoer", json!({})).unwrap();
        let tools = json!({ "mine": { "charm": rt.charms().result(&id).to_json() } });
        let catalog = Catalog::build(&rt, &tools);
        let echoes: Vec<_> = catalog.tools().iter().filter(|t| t.display.starts_with("test.echo")).collect();
        assert_eq!(echoes.len(), 2, "both stay");
        // The charm's keeps its names; the server's is told apart.
        let charm = echoes.iter().find(|t| t.display == "test.echo").expect("the charm's");
        assert_eq!((charm.wire.as_str(), charm.suffixed), ("test_echo", false));
        let served = echoes.iter().find(|t| t.display == "test.echo (tool source test)").expect("the server's");
        assert_ne!(served.wire, charm.wire);
        // A second source with the same name is refused.
        let again = McpServer::connect(test_server(&[], false), CALL).await.unwrap();
        assert!(attach(&rt, &again).unwrap_err().to_string().contains("already attached"));
        again.shutdown().await;
        detach(&rt, &server).await;
        assert!(sources::attached(&rt).is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_reaches_the_python_sdks_server_with_headers_from_the_environment() {
    within(async {
        let server = PythonHttpServer::start();
        let text = format!(
            r#"{{"mcpServers": {{"py": {{"url": "{}", "headers": {{"X-Trellis-Token": "${{TRELLIS_TEST_TOKEN}}"}}, "trusted": true}}}}}}"#,
            server.url
        );
        let env = |name: &str| (name == "TRELLIS_TEST_TOKEN").then(|| "open-sesame".to_string());
        let spec = trellis_mcp::client::config::parse(&text, &env).unwrap().remove(0);
        let (rt, client) = connect(spec).await;
        let sum = call(&rt, "py.add", json!({"a": 2, "b": 40})).await;
        assert!(text_of_ok(&sum).contains("42"), "{sum:?}");
        let token = call(&rt, "py.token", json!({})).await;
        assert!(text_of_ok(&token).contains("open-sesame"), "the header went with the request: {token:?}");
        let failed = call(&rt, "py.fail", json!({})).await;
        assert!(matches!(&failed, ToolOutput::ErrorText(t) if t.starts_with("`py.fail` failed")), "{failed:?}");
        detach(&rt, &client).await;
    })
    .await;
}

fn text_of_ok(output: &ToolOutput) -> String {
    assert!(!matches!(output, ToolOutput::ErrorText(_)), "{output:?}");
    text(output)
}

/// `tests/mcp/http_server.py` (the Python SDK's server) on a free loopback port,
/// stopped when dropped.
struct PythonHttpServer {
    child: std::process::Child,
    url: String,
}

impl PythonHttpServer {
    fn start() -> Self {
        use std::io::BufRead;
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/mcp/http_server.py");
        let mut child = std::process::Command::new(tools::python())
            .arg(script)
            .arg(port.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Uvicorn says when it listens.
        let stderr = child.stderr.take().unwrap();
        let mut lines = std::io::BufReader::new(stderr).lines();
        let started = lines.by_ref().map_while(Result::ok).any(|line| line.contains("Uvicorn running on"));
        assert!(started, "the Python SDK's server did not start");
        std::thread::spawn(move || lines.for_each(drop));
        PythonHttpServer { child, url: format!("http://127.0.0.1:{port}/mcp") }
    }
}

impl Drop for PythonHttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_offers_the_tools_the_conversation_speaks_of_and_a_forced_one() {
    use trellis_builtins::message::Message;
    use trellis_builtins::model::ToolChoice;
    use trellis_builtins::sources::selection::KeywordSelector;
    within(async {
        let (rt, server) = connect(test_server(&[], true)).await;
        let catalog = Catalog::build(&rt, &Value::Null);
        let conversation = [Message::user("please echo this back to me")];
        let all = sources::offered(&rt, catalog.specs(), &conversation, &ToolChoice::Auto);
        assert_eq!(all.len(), 4, "no selector: every tool");
        sources::select_with(&rt, Some(Arc::new(KeywordSelector::new(1))));
        let names = |offered: Vec<trellis_builtins::model::ToolSpec>| -> Vec<String> {
            offered.into_iter().map(|t| t.display_name).collect()
        };
        assert_eq!(names(sources::offered(&rt, catalog.specs(), &conversation, &ToolChoice::Auto)), ["test.echo"]);
        let forced = ToolChoice::Tool("test_hang".into());
        assert_eq!(names(sources::offered(&rt, catalog.specs(), &conversation, &forced)), ["test.echo", "test.hang"]);
        detach(&rt, &server).await;
    })
    .await;
}

/// Collects the messages of log events (fields included) into a channel.
struct Collect(tokio::sync::mpsc::UnboundedSender<String>);

impl tracing::Subscriber for Collect {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Fields(String);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        let _ = self.0.send(fields.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_standard_error_goes_to_the_log() {
    let (sender, mut events) = tokio::sync::mpsc::unbounded_channel();
    // The only test here that installs a subscriber: the forwarding runs on other threads.
    tracing::subscriber::set_global_default(Collect(sender)).unwrap();
    within(async {
        let (_rt, server) = connect(test_server(&["--page-size", "3"], false)).await;
        loop {
            let event = events.recv().await.expect("the log goes on");
            if event.contains("test server ready (page size 3)") {
                assert!(event.contains("server=\"test\"") || event.contains("server=test"), "{event}");
                break;
            }
        }
        server.shutdown().await;
    })
    .await;
}

#[tokio::test]
async fn plain_http_to_another_machine_is_refused_in_plain_words() {
    let spec = ServerSpec::from_flag("remote=http://example.invalid/mcp").unwrap();
    let error = McpServer::connect(spec, CALL).await.err().expect("plain http elsewhere").to_string();
    assert!(error.contains("use https://, or set \"insecure\": true"), "{error}");
}
