//! The plugin manager: each registration rule, hooks in order, the `on_tool_call` chain,
//! and failures that become `{"error": ...}` results.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use parking_lot::Mutex;
use serde_json::{json, Value};
use trellis_plugins::{
    sync_executor, Executor, HookName, Plugin, PluginBuilder, PluginManager, RegisterError, Request, Response,
    ToolDefinition, ToolError,
};

fn object() -> Value {
    json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})
}

fn echo() -> Arc<dyn Executor> {
    sync_executor(Ok)
}

fn tool(name: &str) -> ToolDefinition {
    ToolDefinition::new(name, "a test tool", object())
}

fn plugin_with(name: &str, tools: &[&str]) -> PluginBuilder {
    tools.iter().fold(Plugin::builder(name, "1.0.0"), |b, t| b.tool(tool(t), echo()))
}

fn register(manager: &PluginManager, plugin: PluginBuilder) -> Result<(), RegisterError> {
    manager.register(plugin.build(), ["Counter_increment"])
}

/// Parameters whose one property is an array of arrays, `levels` deep in all.
fn deep_parameters(levels: usize) -> Value {
    let inner = (2..levels).fold(json!({"type": "string"}), |inner, _| json!({"type": "array", "items": inner}));
    json!({"type": "object", "properties": {"x": inner}})
}

#[test]
fn each_registration_rule_is_named_when_broken() {
    let manager = PluginManager::new();
    let cases: Vec<(PluginBuilder, &str)> = vec![
        (plugin_with("", &["a"]), "rule: a plugin name is 1 to 64"),
        (plugin_with("has space", &["a"]), "rule: a plugin name"),
        (Plugin::builder("p", "").tool(tool("a"), echo()), "rule: a version is present"),
        (Plugin::builder("p", "  ").tool(tool("a"), echo()), "rule: a version is present"),
        (Plugin::builder("p", "1\n").tool(tool("a"), echo()), "no white space around it"),
        (plugin_with("p", &["bad.name"]), "rule: a tool name is 1 to 64 letters, digits, `_` or `-`"),
        (plugin_with("p", &["with space"]), "rule: a tool name"),
        (plugin_with("p", &[&"x".repeat(65)]), "rule: a tool name"),
        (plugin_with("p", &[""]), "rule: a tool name"),
        (Plugin::builder("p", "1").definition(tool("a")), "rule: every tool has exactly one executor"),
        (plugin_with("p", &["a"]).executor("b", echo()), "rule: every executor belongs to one of the plugin's tools"),
        (plugin_with("p", &["a", "a"]), "rule: one definition and one executor per tool"),
        (plugin_with("p", &["Counter_increment"]), "rule: client tools never shadow server tools"),
        (
            Plugin::builder("p", "1").tool(ToolDefinition::new("a", "", json!({"type": "string"})), echo()),
            "rule: parameters are a JSON Schema with \"type\": \"object\"",
        ),
        (
            Plugin::builder("p", "1").tool(ToolDefinition::new("a", "", json!([1])), echo()),
            "they are a JSON array, not an object",
        ),
        (
            Plugin::builder("p", "1")
                .tool(ToolDefinition::new("a", "", json!({"type": "object", "minProperties": "x"})), echo()),
            "rule: parameters are a JSON Schema",
        ),
        (
            // Offered as a client tool, it must be one: nested too deeply, every chat
            // would refuse it.
            Plugin::builder("p", "1").tool(ToolDefinition::new("a", "", deep_parameters(10)), echo()),
            "rule `max-depth`",
        ),
        (
            // Nor may a description be longer, or the tools more, than a request takes.
            Plugin::builder("p", "1")
                .tool(ToolDefinition::new("a", "é".repeat(1500), json!({"type": "object"})), echo()),
            "rule: at most 2048 bytes, as a chat request takes",
        ),
        (
            plugin_with("p", &["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"]),
            "rule: at most 10 tools per plugin, as many as a chat request takes",
        ),
    ];
    let limits = trellis_builtins::tool::limits::ClientToolLimits::default();
    use trellis_plugins::rules::{MAX_DESCRIPTION_BYTES, MAX_TOOLS_PER_PLUGIN};
    assert_eq!((MAX_DESCRIPTION_BYTES, MAX_TOOLS_PER_PLUGIN), (limits.max_description, limits.max_tools));
    for (plugin, rule) in cases {
        let refused = register(&manager, plugin).expect_err(rule);
        assert!(refused.to_string().contains(rule), "expected {rule:?} in: {refused}");
    }
    assert!(manager.plugins().is_empty(), "nothing was registered by a refused plugin");

    // Names at the limits are accepted: 64 characters, `-` and `_`.
    register(&manager, plugin_with("first", &[&"x".repeat(64), "a-b_C9"])).expect("valid names");
    let conflict = register(&manager, plugin_with("second", &["a-b_C9"])).expect_err("taken");
    assert_eq!(
        conflict,
        RegisterError::ConflictWithPlugin { plugin: "second".into(), tool: "a-b_C9".into(), other: "first".into() }
    );
    assert!(conflict.to_string().contains("rule: tool names are unique across plugins; nothing is overwritten"));
    let twice = register(&manager, plugin_with("first", &["other"])).expect_err("same name");
    assert!(twice.to_string().contains("rule: plugin names are unique"), "{twice}");
    assert_eq!(manager.client_tools().len(), 2, "the first plugin's tools are untouched");
    assert_eq!(manager.plugins()[0].tools, vec!["x".repeat(64), "a-b_C9".to_string()]);
}

#[test]
fn a_server_tool_that_appears_later_is_never_shadowed() {
    let manager = PluginManager::new();
    register(&manager, plugin_with("p", &["notes_add", "mine"])).expect("no conflict yet");
    let (offered, conflicts) = manager.client_tools_beside(["Counter_increment", "notes_add"]);
    assert_eq!(offered.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["mine"]);
    assert_eq!(conflicts, [RegisterError::ConflictWithServer { plugin: "p".into(), tool: "notes_add".into() }]);
    assert_eq!(manager.client_tools().len(), 2, "alone, every client tool is offered");
}

#[test]
fn a_failing_on_register_refuses_the_plugin_and_it_can_register_later() {
    let manager = PluginManager::new();
    let refused = register(&manager, plugin_with("p", &["a"]).on_register(|| Err("no config".into())));
    assert_eq!(refused, Err(RegisterError::Hook { plugin: "p".into(), message: "no config".into() }));
    assert!(!manager.has_tool("a"));
    let panicked = register(&manager, plugin_with("p", &["a"]).on_register(|| panic!("boom")));
    assert!(matches!(panicked, Err(RegisterError::Hook { message, .. }) if message.contains("boom")));
    register(&manager, plugin_with("p", &["a"])).expect("the name and tool are free again");
    assert!(manager.has_tool("a"));
}

fn record(log: &Mutex<Vec<String>>, entry: String) -> Result<(), ToolError> {
    log.lock().push(entry);
    Ok(())
}

#[test]
fn a_registration_that_loses_a_race_during_on_register_is_refused_and_unregistered() {
    let manager = Arc::new(PluginManager::new());
    let unregistered = Arc::new(AtomicUsize::new(0));
    let (inner, count) = (Arc::clone(&manager), Arc::clone(&unregistered));
    let first = plugin_with("first", &["t"])
        .on_register(move || {
            // While `first` registers, `second` takes its tool's name.
            inner
                .register(plugin_with("second", &["t"]).build(), Vec::<String>::new())
                .map_err(|e| e.to_string().into())
        })
        .on_unregister(move || {
            count.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
    let lost = register(&manager, first).expect_err("second won");
    assert_eq!(
        lost,
        RegisterError::ConflictWithPlugin { plugin: "first".into(), tool: "t".into(), other: "second".into() }
    );
    assert_eq!(unregistered.load(Ordering::SeqCst), 1, "on_register ran, so on_unregister does");
    assert_eq!(manager.plugins().iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["second"]);
}

/// A plugin whose every hook writes `NAME.hook` to `log`.
fn logging(name: &'static str, tools: &[&str], log: &Arc<Mutex<Vec<String>>>) -> PluginBuilder {
    let entry = move |hook: &str| format!("{name}.{hook}");
    let (l1, l2, l3, l4, l5) = (log.clone(), log.clone(), log.clone(), log.clone(), log.clone());
    plugin_with(name, tools)
        .on_register(move || record(&l1, entry("on_register")))
        .before_request(move |request| {
            l2.lock().push(entry("before_request"));
            request.message.push_str(&format!(" +{name}"));
            Ok(())
        })
        .after_response(move |_| record(&l3, entry("after_response")))
        .on_tool_call(move |call, next| {
            let log = l4.clone();
            async move {
                log.lock().push(entry("on_tool_call"));
                let result = next.run(call).await;
                log.lock().push(entry("on_tool_call done"));
                Ok(result)
            }
            .boxed()
        })
        .on_unregister(move || record(&l5, entry("on_unregister")))
}

#[tokio::test]
async fn hooks_fire_in_the_documented_order() {
    let log = Arc::new(Mutex::new(Vec::new()));
    let manager = PluginManager::new();
    register(&manager, logging("a", &["ta"], &log)).expect("a");
    let executed = log.clone();
    let b = logging("b", &[], &log).tool(
        tool("tb"),
        Arc::new(move |args: Value| {
            executed.lock().push("tb executes".to_string());
            std::future::ready(Ok(args))
        }),
    );
    register(&manager, b).expect("b");

    let mut request = Request { message: "hi".into(), ..Request::default() };
    manager.before_request(&mut request);
    assert_eq!(request.message, "hi +a +b", "each hook sees the request as the previous one left it");
    manager.after_response(&Response::default());
    assert_eq!(manager.execute("tb", json!({"n": 1})).await, json!({"n": 1}));
    assert!(manager.unregister("a"));
    assert!(!manager.has_tool("ta"), "its tools are withdrawn");
    assert!(!manager.unregister("a"), "already gone");

    assert_eq!(
        *log.lock(),
        [
            "a.on_register",
            "b.on_register",
            "a.before_request",
            "b.before_request",
            "a.after_response",
            "b.after_response",
            "a.on_tool_call",
            "b.on_tool_call",
            "tb executes",
            "b.on_tool_call done",
            "a.on_tool_call done",
            "a.on_unregister",
        ]
    );
    assert!(manager.take_reports().is_empty());
}

#[tokio::test]
async fn a_failing_hook_is_reported_and_the_others_still_run() {
    let manager = PluginManager::new();
    let broken = plugin_with("broken", &["x"])
        .before_request(|request| {
            request.message = "clobbered".into();
            Err("cannot reach the settings".into())
        })
        .after_response(|_| panic!("after_response exploded"))
        .on_unregister(|| Err("left a mess".into()));
    register(&manager, broken).expect("broken");
    register(
        &manager,
        plugin_with("fine", &["y"]).before_request(|r| {
            r.metadata.insert("fine".into(), json!(true));
            Ok(())
        }),
    )
    .expect("fine");

    let mut request = Request { message: "hello".into(), ..Request::default() };
    manager.before_request(&mut request);
    assert_eq!(request.message, "hello", "a failing hook leaves the request as it found it");
    assert_eq!(request.metadata.get("fine"), Some(&json!(true)), "the next plugin's hook still ran");
    manager.after_response(&Response::default());
    assert_eq!(manager.execute("y", json!({"n": 2})).await, json!({"n": 2}), "tools still work");
    assert!(manager.unregister("broken"));

    let reports = manager.take_reports();
    let hooks: Vec<(&str, HookName)> = reports.iter().map(|r| (r.plugin.as_str(), r.hook)).collect();
    assert_eq!(
        hooks,
        [("broken", HookName::BeforeRequest), ("broken", HookName::AfterResponse), ("broken", HookName::OnUnregister)]
    );
    assert!(reports[0].to_string().contains("cannot reach the settings"), "{}", reports[0]);
    assert!(reports[1].message.contains("after_response exploded"), "{}", reports[1]);
    assert!(manager.take_reports().is_empty(), "taken once");
}

#[tokio::test]
async fn on_tool_call_can_gate_wrap_or_replace_execution() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let manager = PluginManager::new();
    let plugin = Plugin::builder("files", "1.0.0")
        .tool(
            tool("delete_file"),
            Arc::new(move |args: Value| {
                counted.fetch_add(1, Ordering::SeqCst);
                std::future::ready(Ok(json!({"deleted": args["n"]})))
            }),
        )
        .build();
    manager.register(plugin, Vec::<String>::new()).expect("valid");

    // A permission gate: refuses without running the executor.
    let allowed = Arc::new(AtomicUsize::new(0));
    let gate = allowed.clone();
    manager.set_tool_call_override(Arc::new(Gate(gate)));
    let refused = manager.execute("delete_file", json!({"n": 1})).await;
    assert_eq!(refused, json!({"error": "permission denied for `delete_file` (plugin files)"}));
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the executor never ran");

    // The same gate lets it through, wrapped: the result is annotated.
    allowed.store(1, Ordering::SeqCst);
    assert_eq!(
        manager.execute("delete_file", json!({"n": 7})).await,
        json!({"result": {"deleted": 7}, "logged": true})
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // A layer may change the arguments; they are validated after it.
    allowed.store(2, Ordering::SeqCst);
    let bad = manager.execute("delete_file", json!({"n": 7})).await;
    let message = bad["error"].as_str().unwrap_or_default();
    assert!(message.contains("invalid arguments for `delete_file`") && message.contains("Nothing was run"), "{bad}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // An override that fails gives the model an error and is reported.
    allowed.store(3, Ordering::SeqCst);
    let failed = manager.execute("delete_file", json!({"n": 7})).await;
    assert!(failed["error"].as_str().unwrap_or_default().contains("on_tool_call hook failed: the prompt closed"));
    assert_eq!(manager.take_reports().len(), 1);
}

/// A test override: 0 refuses, 1 runs and annotates, 2 breaks the arguments, 3 fails.
struct Gate(Arc<AtomicUsize>);

impl trellis_plugins::Hooks for Gate {
    fn on_tool_call(
        &self,
        mut call: trellis_plugins::ToolCall,
        next: trellis_plugins::Next,
    ) -> futures::future::BoxFuture<'static, Result<Value, ToolError>> {
        match self.0.load(Ordering::SeqCst) {
            0 => futures::future::ready(Ok(json!({
                "error": format!("permission denied for `{}` (plugin {})", call.tool, call.plugin)
            })))
            .boxed(),
            1 => next.run(call).map(|result| Ok(json!({"result": result, "logged": true}))).boxed(),
            2 => {
                call.arguments = json!({"n": "seven"});
                next.run(call).map(Ok).boxed()
            }
            _ => futures::future::ready(Err(ToolError::new("the prompt closed"))).boxed(),
        }
    }
}

#[tokio::test]
async fn executor_failures_become_error_results() {
    let manager = PluginManager::new().with_timeout(Duration::from_millis(200));
    let plugin = Plugin::builder("flaky", "0.1.0")
        .tool(tool("fails"), sync_executor(|_| Err("the disk is full".into())))
        .tool(tool("panics"), sync_executor(|_| panic!("index out of range")))
        .tool(
            tool("hangs"),
            Arc::new(|_: Value| async {
                futures::future::pending::<()>().await;
                Ok(Value::Null)
            }),
        )
        .build();
    manager.register(plugin, Vec::<String>::new()).expect("valid");
    let ask = |tool: &'static str| manager.execute(tool, json!({"n": 1}));
    assert_eq!(ask("fails").await, json!({"error": "`fails` failed: the disk is full"}));
    assert_eq!(ask("panics").await, json!({"error": "`panics` failed: it panicked: index out of range"}));
    assert_eq!(ask("hangs").await, json!({"error": "`hangs` did not finish within 0.2 s and was stopped"}));
    let missing = manager.execute("unknown", json!({})).await;
    assert!(missing["error"].as_str().unwrap_or_default().contains("there is no client tool `unknown`"));
    let invalid = manager.execute("fails", json!({"n": "one"})).await;
    assert!(invalid["error"].as_str().unwrap_or_default().contains("at /n"), "{invalid}");
}

#[tokio::test]
async fn the_manager_can_be_shared_across_tasks() {
    fn send_sync<T: Send + Sync>(_: &T) {}
    let manager = Arc::new(PluginManager::new());
    register(&manager, plugin_with("p", &["a"])).expect("valid");
    send_sync(&manager);
    let shared = Arc::clone(&manager);
    // `execute`'s future is `Send`: it can run on another task.
    let result = tokio::spawn(async move { shared.execute("a", json!({"n": 5})).await }).await.expect("joined");
    assert_eq!(result, json!({"n": 5}));
}
