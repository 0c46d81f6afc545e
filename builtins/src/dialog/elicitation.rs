//! A tool's question to the person while its call runs (see `sources::elicit`): an MCP
//! server's form or URL becomes an [`InteractionKind::Elicitation`] of the call in the
//! dialog's `interactions`, so `trellis pending`, `trellis resolve` and the page see it
//! as they see an approval. Unlike an approval it holds up no round: the call is running,
//! and waits only for the reply. `resolve` checks the answer (a form's fields against the
//! form's schema), takes the question away and leaves the reply in `elicited`, where the
//! waiting call picks it up.
//!
//! A call asks one question at a time. A question that outlives its call (a cancel, a
//! restart: the process that would take the reply is gone) is taken away with it. A long
//! call may say how it goes meanwhile (`progress`, kept until its round ends).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::Notify;
use trellis_runner::{Cell, Runtime, Tx, WeakRuntime};

use super::interaction::{interactions_cell, now_ms, Interaction, Phase};
use super::resolve::{Resolution, Resolve};
use super::{DialogCells, RequestId};
use crate::ask::InteractionKind;
use crate::sources::elicit::{Person, Question, Reply, Wants};

/// The longest question kept from a tool, in bytes; the rest is cut.
const MAX_MESSAGE: usize = 4 * 1024;
/// The largest form schema taken from a tool (serialised); a larger one is cancelled.
const MAX_SCHEMA: usize = 64 * 1024;

/// A reply waiting for its call to pick it up, in `elicited`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
enum Stored {
    Accept { content: Value },
    Decline,
    Cancel,
}

/// How each running call outside the space goes, by call id (see `Person::progress`): in
/// the dialog's live document, beside the streamed reply, so it never rewrites the
/// conversation.
pub(super) fn progress_cell(cells: &DialogCells) -> Cell<std::collections::BTreeMap<String, String>> {
    Cell::from_link(cells.beside("live").child("progress"))
}

/// The longest progress message kept, in bytes.
const MAX_PROGRESS: usize = 512;

/// The replies not yet picked up, by call id.
fn elicited(cells: &DialogCells) -> Cell<std::collections::BTreeMap<String, Stored>> {
    Cell::from_link(cells.base.child("elicited"))
}

/// The call of request `id` a question comes from, as its interaction shows it.
pub(super) struct Call {
    pub id: String,
    pub display: String,
    pub wire: String,
    pub arguments: Value,
}

/// The person of a dialog, for one call of a tool outside the space.
pub(super) struct DialogPerson(Arc<Asking>);

/// What a [`DialogPerson`] asks with.
struct Asking {
    rt: WeakRuntime,
    cells: DialogCells,
    request: RequestId,
    call: Call,
    wait_timeout: Option<Duration>,
    /// How long earlier questions waited, and since when the current one waits.
    waits: Mutex<(Duration, Option<Instant>)>,
    /// One question at a time: a second waits for the first to be answered.
    one_at_a_time: tokio::sync::Mutex<()>,
}

impl DialogPerson {
    pub(super) fn new(
        rt: &Runtime,
        cells: &DialogCells,
        request: RequestId,
        call: Call,
        wait_timeout: Option<Duration>,
    ) -> DialogPerson {
        DialogPerson(Arc::new(Asking {
            rt: rt.downgrade(),
            cells: cells.clone(),
            request,
            call,
            wait_timeout,
            waits: Mutex::new((Duration::ZERO, None)),
            one_at_a_time: tokio::sync::Mutex::new(()),
        }))
    }
}

impl Asking {
    async fn reply(self: Arc<Self>, question: Question) -> Reply {
        let _turn = self.one_at_a_time.lock().await;
        let Some(rt) = self.rt.upgrade() else { return Reply::Cancel };
        let interaction = match self.interaction(question) {
            Ok(interaction) => interaction,
            Err(why) => {
                tracing::warn!(call = %self.call.id, "a tool's question was cancelled: {why}");
                return Reply::Cancel;
            }
        };
        self.waits.lock().1 = Some(Instant::now());
        let reply = self.wait(&rt, interaction).await;
        let mut waits = self.waits.lock();
        if let Some(since) = waits.1.take() {
            waits.0 += since.elapsed();
        }
        reply
    }

    /// The question as the call's interaction; why it cannot be asked.
    fn interaction(&self, question: Question) -> Result<Interaction, String> {
        let mut prompt = question.message;
        if prompt.len() > MAX_MESSAGE {
            let mut end = MAX_MESSAGE;
            while !prompt.is_char_boundary(end) {
                end -= 1;
            }
            prompt.truncate(end);
        }
        let input = match question.wants {
            Wants::Form { schema } => {
                if serde_json::to_vec(&schema).map_or(true, |json| json.len() > MAX_SCHEMA) {
                    return Err(format!("its form's schema is larger than {} KiB", MAX_SCHEMA >> 10));
                }
                crate::validation::compile(&schema).map_err(|e| format!("its form's schema is not valid: {e}"))?;
                json!({ "schema": schema })
            }
            Wants::Url { url } => json!({ "url": url }),
        };
        Ok(Interaction {
            call_id: self.call.id.clone(),
            tool: self.call.display.clone(),
            wire: self.call.wire.clone(),
            arguments: self.call.arguments.clone(),
            kind: InteractionKind::Elicitation,
            phase: Phase::Client,
            prompt,
            options: Vec::new(),
            input,
            client_tool: None,
            person_only: Vec::new(),
            preview: None,
            asked_at: now_ms(),
        })
    }

    /// Stores `asked` and waits for its reply (a cancel, or the wait timeout, cancels).
    async fn wait(&self, rt: &Runtime, asked: Interaction) -> Reply {
        let cells = &self.cells;
        let woken = Arc::new(Notify::new());
        let wake = |woken: &Arc<Notify>| {
            let woken = woken.clone();
            move |_: &Runtime| {
                woken.notify_one();
                true
            }
        };
        // Watching before asking: a reply right after is not missed.
        let _replies = rt.observe(elicited(cells).link(), wake(&woken));
        let _requests = rt.observe(cells.request.link(), wake(&woken));
        let stored = rt.transact(|tx| {
            if cells.request.get(tx)? != self.request {
                return Ok(false);
            }
            let mut all = interactions_cell(cells).get(tx)?;
            all.push(asked.clone());
            interactions_cell(cells).set(tx, all)?;
            Ok(true)
        });
        match stored {
            Ok(true) => {}
            Ok(false) => return Reply::Cancel,
            Err(error) => {
                tracing::warn!(call = %asked.call_id, %error, "could not store a tool's question");
                return Reply::Cancel;
            }
        }
        let deadline = self.wait_timeout.map(|limit| tokio::time::Instant::now() + limit);
        loop {
            match self.take(rt) {
                Ok(Some(reply)) => return reply,
                Ok(None) => {}
                Err(()) => return Reply::Cancel,
            }
            let woke = match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, woken.notified()).await.is_ok(),
                None => {
                    woken.notified().await;
                    true
                }
            };
            if !woke {
                // Unanswered in time: the question goes, the tool hears a cancel.
                let _ = rt.transact(|tx| withdraw(tx, cells, &asked.call_id));
                return Reply::Cancel;
            }
        }
    }

    /// The reply, taken out of `elicited`, once there is one; `Err` when the request is
    /// over (cancelled, superseded).
    fn take(&self, rt: &Runtime) -> Result<Option<Reply>, ()> {
        let cells = &self.cells;
        let taken = rt.transact(|tx| {
            if cells.request.get(tx)? != self.request {
                return Ok(Err(()));
            }
            let mut all = elicited(cells).get(tx).unwrap_or_default();
            let Some(stored) = all.remove(&self.call.id) else { return Ok(Ok(None)) };
            elicited(cells).set(tx, all)?;
            Ok(Ok(Some(stored)))
        });
        match taken {
            Ok(Ok(Some(Stored::Accept { content }))) => Ok(Some(Reply::Accept(content))),
            Ok(Ok(Some(Stored::Decline))) => Ok(Some(Reply::Decline)),
            Ok(Ok(Some(Stored::Cancel))) => Ok(Some(Reply::Cancel)),
            Ok(Ok(None)) => Ok(None),
            Ok(Err(())) | Err(_) => Err(()),
        }
    }
}

impl Person for DialogPerson {
    fn ask(&self, question: Question) -> BoxFuture<'static, Reply> {
        Box::pin(self.0.clone().reply(question))
    }

    fn waited(&self) -> Duration {
        let (before, now) = *self.0.waits.lock();
        before + now.map_or(Duration::ZERO, |since| since.elapsed())
    }

    fn progress(&self, message: &str) {
        let asking = &self.0;
        let Some(rt) = asking.rt.upgrade() else { return };
        let message: String = message
            .chars()
            .scan(0, |bytes, c| {
                *bytes += c.len_utf8();
                (*bytes <= MAX_PROGRESS).then_some(c)
            })
            .collect();
        let told = rt.transact(|tx| {
            if asking.cells.request.get(tx)? != asking.request {
                return Ok(());
            }
            let mut all = progress_cell(&asking.cells).get(tx).unwrap_or_default();
            all.insert(asking.call.id.clone(), message.clone());
            progress_cell(&asking.cells).set(tx, all)
        });
        if let Err(error) = told {
            tracing::debug!(call = %asking.call.id, %error, "could not record a call's progress");
        }
    }
}

/// Takes the question of call `call_id` away, unanswered.
fn withdraw(tx: &Tx, cells: &DialogCells, call_id: &str) -> trellis_runner::Result<()> {
    let mut all = interactions_cell(cells).get(tx)?;
    all.retain(|i| !(i.kind == InteractionKind::Elicitation && i.call_id == call_id));
    interactions_cell(cells).set(tx, all)
}

/// Takes every question away, with the replies nobody picked up: their calls are over
/// (the request was cancelled, or the process that ran them stopped).
pub(super) fn forget(tx: &Tx, cells: &DialogCells) -> trellis_runner::Result<()> {
    let mut all = interactions_cell(cells).get(tx)?;
    let before = all.len();
    all.retain(|i| i.kind != InteractionKind::Elicitation);
    if all.len() != before {
        interactions_cell(cells).set(tx, all)?;
    }
    if elicited(cells).get_value(tx)? != trellis_runner::Value::Null {
        elicited(cells).set(tx, Default::default())?;
    }
    end_progress(tx, cells)
}

/// Forgets how the calls went: they are over.
pub(super) fn end_progress(tx: &Tx, cells: &DialogCells) -> trellis_runner::Result<()> {
    if progress_cell(cells).get_value(tx)? != trellis_runner::Value::Null {
        progress_cell(cells).set(tx, Default::default())?;
    }
    Ok(())
}

/// `resolve` for a question (`asked`): checks `answer`, takes the question away and
/// leaves the reply for the call.
pub(super) fn answer(
    tx: &Tx,
    cells: &DialogCells,
    asked: &Interaction,
    answer: &Resolve,
) -> trellis_runner::Result<()> {
    let call = &answer.call_id;
    let stored = match &answer.resolution {
        Resolution::Approved => {
            return Err(format!(
                "call `{call}` asks you to {}, not for an approval",
                if asked.input.get("url").is_some() { "visit a URL" } else { "fill in a form" }
            )
            .into())
        }
        Resolution::Denied { .. } => Stored::Decline,
        Resolution::Cancelled | Resolution::TimedOut { .. } => Stored::Cancel,
        Resolution::Answered(given) | Resolution::Output(given) => Stored::Accept { content: accepted(asked, given)? },
    };
    withdraw(tx, cells, call)?;
    let mut all = elicited(cells).get(tx).unwrap_or_default();
    all.insert(call.clone(), stored);
    elicited(cells).set(tx, all)
}

/// What accepting `asked` with `given` sends the tool: for a URL, nothing; for a form, its
/// fields, checked against the form's schema. An answer in words (`--answer`) fills a
/// form of one field, read as that field's type.
fn accepted(asked: &Interaction, given: &Value) -> Result<Value, String> {
    let Some(schema) = asked.input.get("schema") else { return Ok(Value::Null) };
    let call = &asked.call_id;
    let fields = schema.get("properties").and_then(Value::as_object);
    let content = match (given, fields) {
        (Value::Object(_), _) => given.clone(),
        (Value::String(text), Some(fields)) if fields.len() == 1 => {
            let (name, field) = fields.iter().next().ok_or("the form has no field")?;
            let value = crate::sources::elicit::field_value(name, field, text)
                .map_err(|why| format!("the answer to call `{call}`: {why}; answer again"))?;
            json!({ name: value })
        }
        _ => {
            let names: Vec<&str> = fields.map(|f| f.keys().map(String::as_str).collect()).unwrap_or_default();
            return Err(format!(
                "call `{call}` asks for a form's fields ({}): answer with an object of them (`--output JSON`)",
                names.join(", ")
            ));
        }
    };
    let validator = crate::validation::compile(schema)?;
    match crate::validation::violations(&validator, &content) {
        None => Ok(content),
        Some(why) => Err(format!("the answer to call `{call}` does not fit the form ({why}); answer again")),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::{json, Value};
    use trellis_runner::{Pattern, Runtime};

    use crate::ask::InteractionKind;
    use crate::dialog::{DialogHandle, LlmDialog, Resolution, Resolve};
    use crate::message::{Message, ToolOutput};
    use crate::scripted::{ScriptedModel, Turn};
    use crate::sources::elicit::{self, Question};
    use crate::sources::{self, CallFuture, SourceTool, ToolSource};

    const WAIT: Duration = Duration::from_secs(10);

    /// A source whose one tool, `ask`, asks the person for a name and answers with the reply.
    struct Forms;

    impl ToolSource for Forms {
        fn name(&self) -> &str {
            "forms"
        }
        fn tools(&self) -> Arc<[SourceTool]> {
            Arc::new([SourceTool::new("ask", "Asks a name.", json!({"type": "object"})).read_only(true)])
        }
        fn version(&self) -> u64 {
            0
        }
        fn trusted(&self) -> bool {
            true
        }
        fn call(&self, _tool: &str, _arguments: Value, _timeout: Duration) -> CallFuture {
            Box::pin(async {
                let Some(person) = elicit::person() else { return ToolOutput::ErrorText("nobody to ask".into()) };
                let schema =
                    json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
                let reply = person.ask(Question::form("Your name?", schema)).await;
                ToolOutput::Json(json!({ "reply": format!("{reply:?}") }))
            })
        }
    }

    /// A chat whose scripted model calls `forms.ask`, then answers, with a message sent: its
    /// runtime and dialog.
    async fn asking() -> (Runtime, DialogHandle) {
        let rt = Runtime::in_memory();
        sources::attach(&rt, Arc::new(Forms)).expect("attached");
        let model =
            Arc::new(ScriptedModel::from_turns(vec![Turn::tool_call("forms_ask", json!({})), Turn::text("Thanks.")]));
        rt.register_builtin(Arc::new(LlmDialog::with_resolver(Arc::new(move |_| Ok(model.clone())))));
        rt.register_pattern(Pattern::new("chat", |b, _: Value| {
            let messages = b.state::<Vec<Message>>("messages", Vec::new())?;
            b.builtin("dialog", "llm_dialog", json!({"messages": messages, "model": "scripted"}))?;
            Ok(())
        }));
        let chat = rt.charms().create("chat", Value::Null).expect("the chat");
        let dialog = DialogHandle::new(rt.clone(), rt.charms().result(&chat).child("dialog"));
        dialog.send(Message::user("who am I?")).await.expect("sent");
        (rt, dialog)
    }

    /// The question, once the call asks it.
    async fn asked(dialog: &DialogHandle) -> crate::dialog::Interaction {
        for _ in 0..200 {
            if let Some(question) = dialog.waiting().into_iter().find(|i| i.kind == InteractionKind::Elicitation) {
                return question;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the call did not ask");
    }

    fn result(dialog: &DialogHandle) -> String {
        serde_json::to_string(&dialog.messages()).unwrap_or_default()
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_sources_question_waits_as_an_interaction_and_its_checked_answer_goes_back() {
        let (_rt, dialog) = asking().await;
        let question = asked(&dialog).await;
        assert_eq!((question.tool.as_str(), question.prompt.as_str()), ("forms.ask", "Your name?"));
        assert_eq!(question.input["schema"]["required"], json!(["name"]));
        assert!(dialog.pending(), "the call runs on while it asks");
        // An answer that does not fit the form is refused; the question waits on.
        let wrong = dialog.resolve(Resolve::new(question.call_id.clone(), Resolution::Output(json!({"name": 5}))));
        let wrong = wrong.await.expect_err("refused").to_string();
        assert!(wrong.contains("does not fit the form"), "{wrong}");
        assert!(dialog.waiting().iter().any(|i| i.call_id == question.call_id));
        // Words fill a form of one field.
        dialog.resolve(Resolve::answer(question.call_id.clone(), json!("Ada"))).await.expect("answered");
        dialog.wait(WAIT).await.expect("the reply ends");
        let said = result(&dialog);
        assert!(said.contains(r#"Accept(Object {\"name\": String(\"Ada\")})"#), "{said}");
        assert!(dialog.waiting().is_empty());
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_cancelled_reply_takes_its_question_away() {
        let (_rt, dialog) = asking().await;
        asked(&dialog).await;
        dialog.cancel().await.expect("cancelled");
        assert!(dialog.waiting().is_empty(), "the question went with its call: {:?}", dialog.waiting());
        assert!(!dialog.pending());
    }
}
