//! The tool protocol through a real dialog driven by the scripted model: tools defined with
//! `ToolBuilder`, of server and client authority, their waiting calls and `resolve`.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use trellis_builtins::catalog::Catalog;
use trellis_builtins::dialog::{DialogHandle, DialogSettings, InteractionKind, LlmDialog, Phase, Resolve};
use trellis_builtins::message::{Message, Part, ToolOutput};
use trellis_builtins::model::{Model, ModelError};
use trellis_builtins::scripted::{ScriptedModel, Turn};
use trellis_builtins::tool::{
    Approval, Client, ClientContext, ClientError, Handoff, Server, ToolBuilder, ToolError, ToolRegistry,
};
use trellis_runner::storage::StorageError;
use trellis_runner::{Link, Pattern, Runtime};

const WAIT: Duration = Duration::from_secs(10);

/// Two numbers.
#[derive(Deserialize, schemars::JsonSchema)]
struct Pair {
    a: i64,
    b: i64,
}

/// A payment.
#[derive(Deserialize, schemars::JsonSchema)]
struct Pay {
    /// In cents.
    amount: u64,
    /// Who is paid.
    #[serde(default = "nobody")]
    to: String,
    /// A note on the payment.
    #[serde(default)]
    note: Option<String>,
}

fn nobody() -> String {
    "nobody".into()
}

/// What to ask a number for.
#[derive(Deserialize, schemars::JsonSchema)]
struct Ask {
    question: String,
}

/// A number the client picked.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Picked {
    n: i64,
}

/// Where to look.
#[derive(Deserialize, schemars::JsonSchema)]
struct Lookup {
    key: String,
}

fn registry() -> ToolRegistry {
    let tools = ToolRegistry::standard();
    let add = ToolBuilder::<Pair>::new("add", "Adds two numbers").authority(Server).server(|p: Pair| Ok(p.a + p.b));
    tools.register(add.build()).unwrap();
    let chart = ToolBuilder::<Pair>::new("chart", "Computes and shows a bar")
        .authority(Server)
        .server(|p: Pair| Ok(json!({ "bar": "#".repeat(usize::try_from(p.a.clamp(0, 40)).unwrap_or(0)), "b": p.b })))
        .client(|out: Value, client: &mut dyn ClientContext| {
            client.show(&out["bar"].to_string());
            Ok(json!({ "shown": true }))
        });
    tools.register(chart.build()).unwrap();
    let pay = ToolBuilder::<Pay>::new("pay", "Pays someone")
        .authority(Server)
        .server(|p: Pay| Ok(json!({ "paid": p.amount, "to": p.to, "note": p.note })))
        .approval(Approval::when("Pays more than a euro", |p: &Pay| p.amount > 100));
    tools.register(pay.build()).unwrap();
    let pick = ToolBuilder::<Ask>::new("pick", "Asks the user for a number from 1 to 10")
        .authority(Client)
        .client(|a: Ask, person: &mut dyn ClientContext| {
            let n = person.ask(&a.question)?.parse().map_err(|e| format!("not a number: {e}"))?;
            Ok(Picked { n })
        })
        .server(|_: Ask, picked: Picked| {
            if (1..=10).contains(&picked.n) {
                Ok(json!({ "number": picked.n }))
            } else {
                Err(format!("{} is not from 1 to 10", picked.n).into())
            }
        });
    tools.register(pick.build()).unwrap();
    let echo = ToolBuilder::<Ask>::new("echo", "The client answers; its output is the result")
        .authority(Client)
        .client(|a: Ask, person: &mut dyn ClientContext| Ok(Picked { n: person.ask(&a.question)?.len() as i64 }));
    tools.register(echo.build()).unwrap();
    let wipe = ToolBuilder::<Ask>::new("wipe", "Wipes after the client says how much")
        .authority(Client)
        .client(|a: Ask, person: &mut dyn ClientContext| Ok(Picked { n: person.ask(&a.question)?.len() as i64 }))
        .approval(Approval::always("Wipes data"));
    tools.register(wipe.build()).unwrap();
    let vault =
        ToolBuilder::<Lookup>::new("vault", "Opens the vault with a code the user types").authority(Server).handoff(
            |l: Lookup| {
                Ok(Handoff { state: format!("secret-of-{}", l.key), client: format!("type the code for {}", l.key) })
            },
            |prompt: String, person: &mut dyn ClientContext| {
                Ok(Picked { n: person.ask(&prompt)?.parse().unwrap_or(0) })
            },
            |l: Lookup, secret: String, code: Picked| {
                Ok(json!({ "key": l.key, "opened": code.n == 42, "kept": secret }))
            },
        );
    tools.register(vault.build()).unwrap();
    // A server phase that hangs (until the test process ends) after the client answered.
    let stall = ToolBuilder::<Ask>::new("stall", "Never finishes checking the client's answer")
        .authority(Client)
        .client(|a: Ask, person: &mut dyn ClientContext| Ok(Picked { n: person.ask(&a.question)?.len() as i64 }))
        .server(|_: Ask, _: Picked| -> Result<Value, ToolError> {
            loop {
                std::thread::park();
            }
        });
    tools.register(stall.build()).unwrap();
    tools
}

struct Setup {
    rt: Runtime,
    dialog: DialogHandle,
    tools: ToolRegistry,
    /// The chat charm's result.
    chat: Link,
}

fn setup_with(turns: Vec<Turn>, settings: DialogSettings) -> Setup {
    setup_on(Runtime::in_memory(), turns, settings)
}

/// The dialog on `rt`; the chat charm is created unless the space has it (a restart).
fn setup_on(rt: Runtime, turns: Vec<Turn>, settings: DialogSettings) -> Setup {
    let tools = registry();
    let model: Arc<dyn Model> = Arc::new(ScriptedModel::from_turns(turns));
    let resolver = move |_: &str| -> Result<Arc<dyn Model>, ModelError> { Ok(model.clone()) };
    let dialog = LlmDialog::with_resolver(Arc::new(resolver)).with_settings(settings).with_tools(tools.clone());
    rt.register_builtin(Arc::new(dialog));
    rt.register_pattern(Pattern::new("chat", |b, _: Value| {
        let messages = b.state::<Vec<Message>>("messages", Vec::new())?;
        let names = ["add", "chart", "pay", "pick", "echo", "vault", "wipe", "stall", "request_human_input"];
        let tools: serde_json::Map<String, Value> =
            names.iter().map(|n| (n.to_string(), json!({ "tool": n }))).collect();
        b.builtin("dialog", "llm_dialog", json!({"messages": messages, "model": "test", "tools": tools}))?;
        Ok(())
    }));
    let existing = rt.charms().list().into_iter().find(|c| c.pattern == "chat").map(|c| c.id.into());
    let chat = existing.unwrap_or_else(|| rt.charms().create("chat", json!({})).unwrap());
    let chat = rt.charms().result(&chat);
    let dialog = DialogHandle::new(rt.clone(), chat.child("dialog"));
    Setup { rt, dialog, tools, chat }
}

fn setup(turns: Vec<Turn>) -> Setup {
    setup_with(turns, DialogSettings::default())
}

fn results(s: &Setup) -> Vec<ToolOutput> {
    let messages = s.dialog.messages();
    messages
        .iter()
        .flat_map(|m| m.content.clone())
        .filter_map(|p| if let Part::ToolResult { output, .. } = p { Some(output) } else { None })
        .collect()
}

fn last_text(s: &Setup) -> String {
    s.dialog.messages().last().unwrap().text()
}

/// A client that answers from a list, as a person at a terminal would.
struct Scripted(Vec<String>, Vec<String>);

impl ClientContext for Scripted {
    fn ask(&mut self, _question: &str) -> Result<String, ClientError> {
        if self.0.is_empty() {
            return Err(ClientError::NoAnswer("nothing left to say".into()));
        }
        Ok(self.0.remove(0))
    }
    fn confirm(&mut self, question: &str) -> Result<bool, ClientError> {
        Ok(self.ask(question)? == "yes")
    }
    fn choose(&mut self, question: &str, _options: &[String]) -> Result<String, ClientError> {
        self.ask(question)
    }
    fn show(&mut self, text: &str) {
        self.1.push(text.to_string());
    }
}

#[tokio::test]
async fn a_server_only_tool_answers_at_once() {
    let s = setup(vec![Turn::tool_call("add", json!({"a": 2, "b": 3})), Turn::text("Five.")]);
    s.dialog.say("add 2 and 3", WAIT).await.unwrap();
    assert_eq!(results(&s), [ToolOutput::Json(json!(5))]);
    assert_eq!(last_text(&s), "Five.");
    assert!(s.dialog.interactions().is_empty());
}

#[tokio::test]
async fn a_server_tool_with_a_client_effect_answers_and_leaves_something_to_show() {
    let s = setup(vec![Turn::tool_call("chart", json!({"a": 3, "b": 1})), Turn::text("Shown.")]);
    s.dialog.say("chart it", WAIT).await.unwrap();
    // The model's result is the server's output; the round did not wait.
    assert_eq!(results(&s), [ToolOutput::Json(json!({"bar": "###", "b": 1}))]);
    assert_eq!(last_text(&s), "Shown.");
    let effects = s.dialog.interactions();
    assert_eq!(effects.len(), 1, "{effects:?}");
    let effect = &effects[0];
    assert_eq!((effect.kind, effect.phase, effect.blocks()), (InteractionKind::DisplayEffect, Phase::Display, false));
    assert_eq!(effect.input, json!({"bar": "###", "b": 1}));

    // The client runs the effect and acknowledges it; what it says is informational.
    let tool = s.tools.get(effect.client_tool.as_deref().unwrap()).unwrap();
    let mut client = Scripted(Vec::new(), Vec::new());
    let ack = tool.run_client(effect.input.clone(), &mut client).unwrap();
    assert_eq!(client.1, ["\"###\""]);
    s.dialog.resolve(Resolve::output(&effect.call_id, ack)).await.unwrap();
    assert!(s.dialog.interactions().is_empty());
    // A new message is taken while an effect is unacknowledged, too.
    assert_eq!(results(&s).len(), 1, "acknowledging changed no result");
}

#[tokio::test]
async fn a_client_tool_waits_and_its_server_phase_checks_the_output() {
    let s = setup(vec![
        Turn::tool_call("pick", json!({"question": "how many?"})),
        Turn::text("Too many."),
        Turn::tool_call("pick", json!({"question": "and now?"})),
        Turn::text("Not a number."),
        Turn::tool_call("pick", json!({"question": "last try?"})),
        Turn::text("Seven it is."),
    ]);
    s.dialog.say("pick a number", WAIT).await.unwrap();
    let waiting = s.dialog.interactions();
    assert_eq!(waiting.len(), 1);
    let call = &waiting[0];
    assert_eq!((call.kind, call.phase), (InteractionKind::ClientExecution, Phase::Client));
    assert_eq!(call.input, json!({"question": "how many?"}), "the client gets the arguments");
    assert_eq!(call.client_tool.as_deref(), Some("pick"));
    assert!(!s.dialog.pending(), "the request ended, waiting");

    // The server phase rejects an output out of range: the model reads why.
    s.dialog.resolve(Resolve::output(&call.call_id, json!({"n": 99}))).await.unwrap();
    s.dialog.wait(WAIT).await.unwrap();
    let ToolOutput::ErrorText(why) = &results(&s)[0] else { panic!("{:?}", results(&s)) };
    assert!(why.contains("99 is not from 1 to 10"), "{why}");
    assert_eq!(last_text(&s), "Too many.");

    // An output that does not match the client-output schema never reaches the server phase.
    s.dialog.say("again", WAIT).await.unwrap();
    let call = s.dialog.interactions()[0].call_id.clone();
    s.dialog.resolve(Resolve::output(&call, json!({"n": "seven"}))).await.unwrap();
    s.dialog.wait(WAIT).await.unwrap();
    let ToolOutput::ErrorText(why) = &results(&s)[1] else { panic!("{:?}", results(&s)) };
    assert!(why.contains("client's output for `pick` is not valid") && why.contains("/n"), "{why}");

    // The client phase itself, run where the client is, gives an output the server takes.
    s.dialog.say("once more", WAIT).await.unwrap();
    let call = s.dialog.interactions().remove(0);
    let tool = s.tools.get("pick").unwrap();
    let picked = tool.run_client(call.input.clone(), &mut Scripted(vec!["7".into()], Vec::new())).unwrap();
    s.dialog.resolve(Resolve::output(&call.call_id, picked)).await.unwrap();
    s.dialog.wait(WAIT).await.unwrap();
    assert_eq!(results(&s)[2], ToolOutput::Json(json!({"number": 7})));
    assert_eq!(last_text(&s), "Seven it is.");
}

#[tokio::test]
async fn a_client_tool_without_a_server_phase_passes_the_checked_output_through() {
    let s = setup(vec![Turn::tool_call("echo", json!({"question": "say"})), Turn::text("Got it.")]);
    s.dialog.say("echo", WAIT).await.unwrap();
    let call = s.dialog.interactions()[0].call_id.clone();
    let huge = s.dialog.resolve(Resolve::output(&call, json!({"n": 4, "pad": "x".repeat(2 << 20)}))).await.unwrap_err();
    assert!(huge.to_string().contains("larger than 1024 KiB"), "{huge}");
    let long_reason = Resolve::deny(call.clone(), "x".repeat(2 << 20));
    let huge = s.dialog.resolve(long_reason).await.unwrap_err();
    assert!(huge.to_string().contains("larger than 1024 KiB"), "a reason goes into the conversation too: {huge}");
    assert_eq!(s.dialog.waiting().len(), 1, "a refused output leaves the call waiting");
    s.dialog.resolve(Resolve::output(&call, json!({"n": 4}))).await.unwrap();
    s.dialog.wait(WAIT).await.unwrap();
    assert_eq!(results(&s), [ToolOutput::Json(json!({"n": 4}))]);
    assert_eq!(last_text(&s), "Got it.");
}

#[tokio::test]
async fn a_handoff_keeps_its_state_on_the_server() {
    let s = setup(vec![Turn::tool_call("vault", json!({"key": "blue"})), Turn::text("Open.")]);
    s.dialog.say("open the blue vault", WAIT).await.unwrap();
    let waiting = s.dialog.interactions();
    let call = &waiting[0];
    assert_eq!(call.input, json!("type the code for blue"), "the client gets what `before` handed over");
    let seen = serde_json::to_string(&waiting).unwrap();
    assert!(!seen.contains("secret-of-blue"), "server state is not in what front ends read: {seen}");
    s.dialog.resolve(Resolve::output(&call.call_id, json!({"n": 42}))).await.unwrap();
    s.dialog.wait(WAIT).await.unwrap();
    assert_eq!(results(&s), [ToolOutput::Json(json!({"key": "blue", "opened": true, "kept": "secret-of-blue"}))]);
}

#[tokio::test]
async fn an_approval_policy_over_the_arguments_is_enforced_everywhere() {
    let s = setup(vec![
        Turn::tool_call("pay", json!({"amount": 50})),
        Turn::tool_call("pay", json!({"amount": 5000, "to": "mallory"})),
        Turn::text("Paid."),
        Turn::tool_call("pay", json!({"amount": 7000})),
        Turn::text("Not paid."),
    ]);
    s.dialog.say("pay", WAIT).await.unwrap();
    // A small payment ran at once; the large one waits for approval.
    assert_eq!(results(&s)[0], ToolOutput::Json(json!({"paid": 50, "to": "nobody", "note": null})));
    let waiting = s.dialog.interactions();
    assert_eq!((waiting[0].kind, waiting[0].prompt.as_str()), (InteractionKind::Approval, "Pays more than a euro"));

    // No other way runs it: a catalog call, an answer for another call, an output.
    let catalog = Catalog::build_with_tools(&s.rt, &json!({"pay": {"tool": "pay"}}), &s.tools);
    let listed = catalog.get("pay").unwrap();
    assert_eq!(listed.approval.as_deref(), Some("Pays more than a euro"), "a catalog that lists it says so");
    assert!(listed.description.contains("Some calls wait for the user's approval"), "{}", listed.description);
    let direct = catalog.invoke(&s.rt, "pay", json!({"amount": 5000}), WAIT).await;
    assert!(matches!(&direct.output, ToolOutput::ErrorText(t) if t.contains("approval")), "{direct:?}");
    let small = catalog.invoke(&s.rt, "pay", json!({"amount": 5}), WAIT).await;
    assert!(matches!(small.output, ToolOutput::Json(_)), "{small:?}");
    let forged = Resolve::approve("call_forged");
    assert!(s.dialog.resolve(forged).await.unwrap_err().to_string().contains("not waiting"));
    // An output is no approval, and no denial either: refused, and the call still waits.
    let refused = s.dialog.resolve(Resolve::output(&waiting[0].call_id, json!({"paid": 5000}))).await.unwrap_err();
    assert!(refused.to_string().contains("asks for an approval or a denial, not an answer"), "{refused}");
    assert_eq!(s.dialog.interactions().len(), 1, "still waiting");
    let deny = Resolve::deny(waiting[0].call_id.clone(), "too much");
    s.dialog.resolve(deny).await.unwrap();
    s.dialog.wait(WAIT).await.unwrap();
    let ToolOutput::ErrorText(denied) = &results(&s)[1] else { panic!("{:?}", results(&s)) };
    assert!(denied.contains("denied") && denied.contains("too much"), "{denied}");

    // Granted, it runs.
    s.dialog.say("pay again", WAIT).await.unwrap();
    let call = s.dialog.interactions()[0].call_id.clone();
    s.dialog.resolve(Resolve::approve(call)).await.unwrap();
    s.dialog.wait(WAIT).await.unwrap();
    assert_eq!(results(&s)[2], ToolOutput::Json(json!({"paid": 7000, "to": "nobody", "note": null})));
}

#[tokio::test]
async fn an_approved_client_tool_then_waits_for_the_client() {
    let s = setup(vec![Turn::tool_call("wipe", json!({"question": "how much?"})), Turn::text("Wiped.")]);
    s.dialog.say("wipe", WAIT).await.unwrap();
    let approval = s.dialog.interactions().remove(0);
    assert_eq!(
        (approval.kind, approval.phase, approval.input.clone()),
        (InteractionKind::Approval, Phase::Approval, Value::Null)
    );
    let early = s.dialog.resolve(Resolve::output(&approval.call_id, json!({"n": 1}))).await;
    assert!(early.is_err(), "an output for an approval is refused; the call still waits");
    let deny = Resolve::deny(approval.call_id.clone(), "not now");
    s.dialog.resolve(deny).await.unwrap();
    s.dialog.wait(WAIT).await.unwrap();
    let ToolOutput::ErrorText(denied) = &results(&s)[0] else { panic!("{:?}", results(&s)) };
    assert!(denied.contains("denied"), "{denied}");

    let s = setup(vec![Turn::tool_call("wipe", json!({"question": "how much?"})), Turn::text("Wiped.")]);
    s.dialog.say("wipe", WAIT).await.unwrap();
    let approval = s.dialog.interactions().remove(0);
    s.dialog.resolve(Resolve::approve(approval.call_id.clone())).await.unwrap();
    s.dialog.wait(WAIT).await.unwrap();
    // Approved, the call goes on to its client phase and waits again.
    let client = s.dialog.interactions().remove(0);
    assert_eq!((client.call_id.as_str(), client.kind), (approval.call_id.as_str(), InteractionKind::ClientExecution));
    s.dialog.resolve(Resolve::output(&client.call_id, json!({"n": 2}))).await.unwrap();
    s.dialog.wait(WAIT).await.unwrap();
    assert_eq!(results(&s), [ToolOutput::Json(json!({"n": 2}))]);
    assert_eq!(last_text(&s), "Wiped.");
}

#[tokio::test]
async fn two_waiting_calls_of_one_round_are_answered_in_either_order() {
    for reversed in [false, true] {
        let both =
            Turn::tool_call("pick", json!({"question": "first"})).with_tool_call("echo", json!({"question": "second"}));
        let s = setup(vec![both, Turn::text("Both.")]);
        s.dialog.say("two things", WAIT).await.unwrap();
        let mut waiting = s.dialog.interactions();
        assert_eq!(waiting.len(), 2);
        if reversed {
            waiting.reverse();
        }
        s.dialog.resolve(Resolve::output(&waiting[0].call_id, json!({"n": 3}))).await.unwrap();
        assert_eq!(s.dialog.interactions().len(), 1, "the round still waits for the other");
        assert!(!s.dialog.pending());
        s.dialog.resolve(Resolve::output(&waiting[1].call_id, json!({"n": 3}))).await.unwrap();
        s.dialog.wait(WAIT).await.unwrap();
        // Results keep the model's call order whatever the order of the answers.
        assert_eq!(results(&s), [ToolOutput::Json(json!({"number": 3})), ToolOutput::Json(json!({"n": 3}))]);
        assert_eq!(last_text(&s), "Both.");
    }
}

#[tokio::test]
async fn cancel_while_a_client_call_waits_closes_it() {
    let s = setup(vec![Turn::tool_call("pick", json!({"question": "?"})), Turn::text("unused")]);
    s.dialog.say("pick", WAIT).await.unwrap();
    let call = s.dialog.interactions()[0].call_id.clone();
    s.dialog.cancel().await.unwrap();
    assert!(s.dialog.interactions().is_empty());
    let ToolOutput::ErrorText(why) = &results(&s)[0] else { panic!("{:?}", results(&s)) };
    assert!(why.contains("cancelled"), "{why}");
    let late = s.dialog.resolve(Resolve::output(&call, json!({"n": 5}))).await.unwrap_err();
    assert!(late.to_string().contains("no call is waiting"), "{late}");
}

#[tokio::test]
async fn a_call_nobody_answers_times_out_into_a_result_the_model_reads() {
    let settings = DialogSettings { wait_timeout: Some(Duration::from_millis(50)), ..DialogSettings::default() };
    let s =
        setup_with(vec![Turn::tool_call("pick", json!({"question": "?"})), Turn::text("No answer, then.")], settings);
    let mut finished = when_last_reads(&s, "No answer, then.");
    s.dialog.say("pick", WAIT).await.unwrap();
    tokio::time::timeout(WAIT, finished.wait_for(|over| *over)).await.unwrap().unwrap();
    let ToolOutput::ErrorText(why) = &results(&s)[0] else { panic!("{:?}", results(&s)) };
    assert!(why.contains("no answer came in time"), "{why}");
}

/// Observes the chat until its last message reads `text`.
fn when_last_reads(s: &Setup, text: &'static str) -> tokio::sync::watch::Receiver<bool> {
    let (done, seen) = tokio::sync::watch::channel(false);
    let dialog = s.dialog.clone();
    s.rt.observe(&s.chat, move |_| {
        let over = dialog.messages().last().is_some_and(|m| m.text() == text);
        done.send_replace(over);
        !over
    })
    .detach();
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_across_a_restart_still_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("space.sqlite");
    let turns = || vec![Turn::tool_call("pick", json!({"question": "?"})), Turn::text("No answer, then.")];
    {
        let s = setup_on(Runtime::open(&path).unwrap(), turns(), DialogSettings::default());
        s.dialog.say("pick", WAIT).await.unwrap();
        assert_eq!(s.dialog.waiting().len(), 1);
    }
    // The first runtime's last task lets go of the space just after the reply settled.
    let deadline = std::time::Instant::now() + WAIT;
    let rt = loop {
        match Runtime::open(&path) {
            Ok(rt) => break rt,
            Err(StorageError::InUse { .. }) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(e) => panic!("cannot reopen the space: {e}"),
        }
    };
    let settings = DialogSettings { wait_timeout: Some(Duration::from_millis(50)), ..DialogSettings::default() };
    let s = setup_on(rt, turns(), settings);
    let mut finished = when_last_reads(&s, "No answer, then.");
    // Starting the chat charm again arms what is left of the timeout.
    let chat = s.rt.charms().list().into_iter().find(|c| c.pattern == "chat").unwrap().id;
    s.rt.charms().start(&chat).unwrap();
    tokio::time::timeout(WAIT, finished.wait_for(|over| *over)).await.unwrap().unwrap();
    let ToolOutput::ErrorText(why) = &results(&s)[0] else { panic!("{:?}", results(&s)) };
    assert!(why.contains("no answer came in time"), "{why}");
}

#[tokio::test]
async fn request_human_input_is_a_client_tool_the_person_answers() {
    let s = setup(vec![
        Turn::tool_call(
            "request_human_input",
            json!({"type": "choice", "message": "Which?", "options": ["red", "blue"]}),
        ),
        Turn::text("Blue."),
    ]);
    s.dialog.say("ask me", WAIT).await.unwrap();
    let call = s.dialog.interactions().remove(0);
    assert_eq!((call.kind, call.options.clone()), (InteractionKind::Choice, vec!["red".to_string(), "blue".into()]));
    // A person's mistyped answer is refused and the call keeps waiting.
    let wrong = Resolve::answer(call.call_id.clone(), json!("green"));
    assert!(s.dialog.resolve(wrong).await.unwrap_err().to_string().contains("one of: red, blue"));
    let tool = s.tools.get("request_human_input").unwrap();
    let answer = tool.run_client(call.input.clone(), &mut Scripted(vec!["BLUE".into()], Vec::new())).unwrap();
    s.dialog.resolve(Resolve::output(&call.call_id, answer)).await.unwrap();
    s.dialog.wait(WAIT).await.unwrap();
    assert_eq!(results(&s), [ToolOutput::Json(json!({"choice": "blue"}))]);
}

#[test]
fn optional_fields_and_defaults_stay_in_the_advertised_schema() {
    let tools = registry();
    let schema = tools.get("pay").unwrap().input_schema().clone();
    assert_eq!(schema["required"], json!(["amount"]), "{schema}");
    assert_eq!(schema["properties"]["to"]["default"], json!("nobody"), "{schema}");
    assert_eq!(schema["properties"]["amount"]["description"], json!("In cents."), "{schema}");
    assert!(schema["properties"]["note"].is_object(), "{schema}");
    let taken =
        tools.register(ToolBuilder::<Pair>::new("add", "again").authority(Server).server(|_: Pair| Ok(0)).build());
    assert!(taken.unwrap_err().to_string().contains("registered already"));
    let bad =
        tools.register(ToolBuilder::<Pair>::new("a b", "spaces").authority(Server).server(|_: Pair| Ok(0)).build());
    assert!(bad.unwrap_err().to_string().contains("not valid"));
}

#[tokio::test]
async fn a_last_server_phase_that_hangs_ends_in_an_error_within_the_tool_timeout() {
    let settings = DialogSettings { tool_timeout: Duration::from_millis(300), ..DialogSettings::default() };
    let s = setup_with(vec![Turn::tool_call("stall", json!({"question": "well?"})), Turn::text("Gave up.")], settings);
    s.dialog.say("stall", WAIT).await.unwrap();
    let call = s.dialog.interactions().remove(0);
    // The resolve returns: the engine is not held by the hung phase.
    tokio::time::timeout(WAIT, s.dialog.resolve(Resolve::output(&call.call_id, json!({"n": 1}))))
        .await
        .unwrap()
        .unwrap();
    s.dialog.wait(WAIT).await.unwrap();
    let ToolOutput::ErrorText(error) = &results(&s)[0] else { panic!("{:?}", results(&s)) };
    assert!(error.contains("`stall` did not finish its last phase within 0.3 s"), "{error}");
    assert_eq!(last_text(&s), "Gave up.", "the model read the error and the dialog went on");
}
