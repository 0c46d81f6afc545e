//! `llm_dialog`: a tool-using conversation with a language model, as a builtin node.
//!
//! A pattern instantiates it with `b.builtin("dialog", "llm_dialog", inputs)?` where
//! `inputs` is `{"messages", "system", "model", "max_tokens", "tools", "tool_choice"}`;
//! each may be a literal or a link to a cell (so the pattern can change them).
//! `tool_choice` is `auto` (the default), `none`, `required`, or one tool's display name;
//! it holds for the first answer of each request (later rounds are `auto`, so the model
//! can answer once the tool ran). Under `dialog` the
//! charm's result then has:
//!
//! | key | what |
//! |---|---|
//! | `pending` | whether a reply is being generated |
//! | `add_message` | stream: a user [`Message`], its files kept apart (see [`crate::files`]); while pending it waits in `queued` |
//! | `queued` | the messages sent while the reply runs: `while_running` `steer` (default) takes them in before the next model request, `queue` after the reply |
//! | `cancel_generation` | stream: ends the request (see **Cancel** below) |
//! | `flattened_tools` | the tool catalog as a UI shows it |
//! | `partial` | the text of the reply being streamed |
//! | `error` | why the last request failed, or `null` |
//! | `request` | the id of the latest request; results of older ones are discarded |
//! | `interactions` | the calls waiting for a person (see the `interaction` module) |
//! | `resolve` | stream: a person's answer to a waiting call ([`Resolve`]) |
//!
//! A request runs in rounds: the model answers; if it called tools, they run (one after
//! another, in the order given) and their results go back to the model; until
//! it answers without tool calls or the round cap is reached.
//!
//! **Cancel** (`cancel_generation`, or stopping the charm) ends the request: the model's
//! stream is dropped (which stops the provider's request), pattern tools waiting to settle
//! are stopped, the model is not asked again, and every call without a result gets a
//! "cancelled" one. A handler that is already running is not interrupted: handlers are
//! synchronous transactions and the engine runs one at a time, so the cancel event waits
//! for it and its change stays; the cancelled result says the change may have been
//! applied. The per-tool timeout is the bound on a handler that hangs.

mod answer;
mod calls;
mod cells;
mod compact;
mod context;
mod elicitation;
mod handle;
mod interaction;
mod keys;
mod messages;
mod recover;
mod request;
mod resolve;
mod result;
mod rounds;
mod settings;
mod shared;
mod stale;
#[cfg(test)]
mod tests;
mod undo;
mod watching;

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use trellis_runner::{Builder, Builtin, Link, Read, Value};

use crate::catalog::{CatalogCache, ToolTarget};
use crate::files::FileLimits;
use crate::message::{Message, Role, ToolOutput};
use crate::tool::ToolRegistry;

pub use crate::ask::InteractionKind;
pub(crate) use cells::DialogCells;
pub use compact::{estimate_tokens, Compaction, CONTEXT_BUDGET};
pub use context::{READ_RESULT, TOOL_RESULT_CAP};
pub use handle::{DialogHandle, Progress};
pub use interaction::{Disallow, Interaction, Phase};
pub use keys::{DialogInput, DialogInputs, DialogOutput};
pub use messages::prepare_for_provider;
pub use recover::{CUT_OFF, MAX_RESUMES};
pub use resolve::{Resolution, Resolve};
pub use settings::DialogSettings;
pub use shared::ModelResolver;
use shared::Shared;
pub use undo::{UndoError, UndoneRequest, MODEL_WRITER};

/// The builtin's id.
pub const LLM_DIALOG: &str = "llm_dialog";

/// How many messages sent while a reply runs may wait for it.
pub const MAX_QUEUED: usize = 16;

/// The key under which a conversation charm (a chatbot) keeps its dialog.
pub const DIALOG_KEY: &str = "dialog";

/// Whether the charm whose result is at `result` is a conversation: it holds a dialog at
/// [`DIALOG_KEY`]. Its streams are for the people talking, so it is no tool, no mention
/// target, and not offered to other assistants.
pub fn is_conversation(rt: &trellis_runner::Runtime, result: &Link) -> bool {
    let request = result.child(DIALOG_KEY).child(DialogOutput::Request.key());
    rt.read(&request).is_ok_and(|request| request != Value::Null)
}

/// The `llm_dialog` builtin. Register it with `Runtime::register_builtin`.
#[derive(Clone)]
pub struct LlmDialog {
    shared: Arc<Shared>,
}

impl Default for LlmDialog {
    fn default() -> Self {
        Self::new()
    }
}

impl LlmDialog {
    /// The builtin with the real model strings (`crate::provider::model_from_str`).
    pub fn new() -> Self {
        Self::with_resolver(Arc::new(crate::provider::model_from_str))
    }

    /// The builtin with a custom way to find models (tests inject scripted models).
    pub fn with_resolver(resolver: ModelResolver) -> Self {
        let shared = Shared::new(resolver, DialogSettings::default(), ToolRegistry::standard());
        LlmDialog { shared: Arc::new(shared) }
    }

    /// The builtin with other loop limits.
    pub fn with_settings(self, settings: DialogSettings) -> Self {
        self.rebuilt(settings, self.shared.tools.clone())
    }

    /// The builtin whose dialogs find `{"tool": "name"}` entries in `tools` (use
    /// [`ToolRegistry::standard`] and register yours, to keep `request_human_input`).
    pub fn with_tools(self, tools: ToolRegistry) -> Self {
        self.rebuilt(self.shared.settings, tools)
    }

    /// The defined tools its dialogs offer (front ends run their client phases).
    pub fn tools(&self) -> &ToolRegistry {
        &self.shared.tools
    }

    fn rebuilt(&self, settings: DialogSettings, tools: ToolRegistry) -> Self {
        LlmDialog { shared: Arc::new(self.shared.rebuilt(settings, tools)) }
    }
}

/// The id of one request of a dialog. Each message (and each cancel) takes the next id;
/// a request writes only while the dialog's `request` still holds its id, so a cancelled
/// or superseded request never touches a newer one's state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct RequestId(pub u64);

impl RequestId {
    /// The id after this one.
    pub fn next(self) -> RequestId {
        RequestId(self.0.wrapping_add(1))
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The event of `cancel_generation`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct Cancel {}

impl Builtin for LlmDialog {
    fn id(&self) -> &'static str {
        LLM_DIALOG
    }

    fn instantiate(&self, b: &mut Builder<'_>, key: &str, inputs: serde_json::Value) -> trellis_runner::Result<()> {
        let mut cells = DialogCells::at(b.at(key));
        cells.catalog = Arc::new(CatalogCache::with_tools(self.shared.tools.clone()));
        let mut inputs = match inputs {
            serde_json::Value::Object(map) => map,
            serde_json::Value::Null => serde_json::Map::new(),
            other => return Err(format!("llm_dialog inputs must be an object, got {other}").into()),
        };
        let tx = b.tx();
        if !inputs.contains_key(DialogInput::Messages.key()) {
            // The dialog's own conversation, kept across a restart of its charm.
            let kept = tx.read(cells.messages().link())?.to_json();
            let own = if kept.is_array() { kept } else { json!([]) };
            inputs.insert(DialogInput::Messages.key().to_string(), own);
        }
        tx.write(&cells.inputs, Value::from(serde_json::Value::Object(inputs)))?;
        b.alias(&format!("{key}/{}", DialogOutput::Partial.key()), cells.partial.link())?;
        if let Some(request) = init(b, &cells, &self.shared.settings)? {
            let (shared, c) = (self.shared.clone(), cells.clone());
            b.tx().after_commit(move |rt| request::start(shared, rt.clone(), c, request, request::Begin::Recover));
        }
        // Calls that waited across a restart get what is left of their wait timeout.
        let (shared, c) = (self.shared.clone(), cells.clone());
        b.tx().after_commit(move |rt| {
            let waiting = interaction::interactions_cell(&c).get(rt).unwrap_or_default();
            shared.time_out_waiting(rt, &c, &waiting);
        });

        let shared = self.shared.clone();
        let c = cells.clone();
        b.handler(&format!("{key}/{}", DialogOutput::AddMessage.key()), move |tx, message: Message| {
            add_message(&shared, &c, tx, message)
        })?;
        let shared = self.shared.clone();
        let c = cells.clone();
        b.handler(&format!("{key}/{}", DialogOutput::CancelGeneration.key()), move |tx, _: Cancel| {
            cancel(&shared, &c, tx)
        })?;
        let shared = self.shared.clone();
        let c = cells.clone();
        b.handler(&format!("{key}/{}", DialogOutput::Resolve.key()), move |tx, answer: Resolve| {
            if let Some(request) = interaction::resolve(&c, tx, answer, &shared.tools, shared.settings.tool_timeout)? {
                // Every waiting call has its answer: the request goes on.
                c.pending.set(tx, true)?;
                c.error.set(tx, None)?;
                let (shared, cells) = (shared.clone(), c.clone());
                tx.after_commit(move |rt| request::start(shared, rt.clone(), cells, request, request::Begin::Resume));
            }
            Ok(())
        })?;
        let c = cells.clone();
        b.handler(&format!("{key}/{}", DialogOutput::Disallow.key()), move |tx, event: Disallow| {
            interaction::disallow(tx, &c, event)
        })?;
        // Stopping the charm stops its request too, as a cancel would.
        let shared = self.shared.clone();
        let c = cells.clone();
        b.on_stop(move |rt| {
            if let Err(e) = rt.transact(|tx| cancel(&shared, &c, tx)) {
                rt.report(e);
            }
            crate::watch::off(rt, &c.base);
        });
        // Where conversations run, a watch that fires starts a turn.
        if self.shared.settings.resume {
            let base = cells.base.clone();
            b.tx().after_commit(move |rt| watching::listen(rt, base));
        }

        let weak = b.runtime().downgrade();
        let tools_at = cells.inputs.child(DialogInput::Tools.key());
        let catalogs = cells.catalog.clone();
        b.derive(&format!("{key}/{}", DialogOutput::FlattenedTools.key()), move |tx| {
            use trellis_runner::Read;
            let rt = weak.upgrade().ok_or_else(|| trellis_runner::Error::ComputationFailed {
                name: "flattened_tools".into(),
                message: "the runtime is gone".into(),
            })?;
            let tools = tx.read(&tools_at)?.to_json();
            // Derive again when the tools of the runtime's sources change.
            tx.read(&crate::sources::changes())?;
            let catalog = catalogs.get(&rt, &tools);
            // Depend on what the catalog is made of (the tools map, each tool's stream
            // marker, each charm's name), not on the charms' data: a counter going up must
            // not rebuild the catalog.
            for tool in catalog.tools() {
                if let ToolTarget::Handler { stream } = &tool.target {
                    tx.read(stream)?;
                }
                if let Some(charm) = &tool.charm {
                    tx.read(&Link::new(Arc::clone(charm), trellis_runner::Path::new([trellis_runner::NAME])))?;
                }
            }
            Ok(catalog.flattened())
        })?;
        Ok(())
    }
}

/// Sets a dialog's state up as it starts; the request to go on with, when the process
/// stopped in one and the dialog resumes it (see `recover`).
fn init(
    b: &mut Builder<'_>,
    cells: &DialogCells,
    settings: &DialogSettings,
) -> trellis_runner::Result<Option<RequestId>> {
    let tx = b.tx();
    let files = settings.files;
    let interrupted = cells.pending.get(tx).unwrap_or(false);
    if interrupted && !settings.resume {
        // Left for a process that runs conversations to go on with.
        return Ok(None);
    }
    // A (re)start interrupts whatever request was running: a new request id supersedes
    // it, so a task still alive from before writes nothing more.
    if interrupted {
        cells.request.update(tx, RequestId::next)?;
        let resumes = cells.resumes.get(tx).unwrap_or(0);
        if resumes < MAX_RESUMES {
            cells.resumes.set(tx, resumes + 1)?;
            cells.resumed_by.set(tx, recover::this_process().to_owned())?;
            if let Some(cut) = recover::cut_reply(&cells.partial.get(tx).unwrap_or_default()) {
                cells.messages().push(tx, cut)?;
            }
            cells.partial.set(tx, String::new())?;
            return cells.request.get(tx).map(Some);
        }
        cells.resumes.set(tx, 0)?;
        let why = format!(
            "the request stopped {MAX_RESUMES} times in a row while it was resumed, so it ends here; send a new message to go on"
        );
        cells.error.set(tx, Some(why))?;
    }
    cells.pending.set(tx, false)?;
    cells.partial.set(tx, String::new())?;
    if cells.request.get_value(tx)? == Value::Null {
        cells.request.set(tx, RequestId::default())?;
        cells.error.set(tx, None)?;
    }
    let waiting = interaction::interactions_cell(cells);
    if waiting.get_value(tx)? == Value::Null {
        waiting.set(tx, Vec::new())?;
    }
    // A tool's question died with the process whose call asked it.
    elicitation::forget(tx, cells)?;
    // A round waiting for a person keeps waiting across a restart; one that was going on
    // after its answers was interrupted like any other request.
    if interrupted || !interaction::is_waiting(tx, cells)? {
        flush_held(tx, cells, files, "interrupted: the runtime restarted before this call ran")?;
        messages::close_unanswered(
            tx,
            &cells.messages(),
            "interrupted: the runtime restarted before this tool finished",
        )?;
    }
    Ok(None)
}

/// Ends a waiting round: its results so far, and `unanswered` for the calls that never
/// ran, go into the conversation, and nothing waits any more.
fn flush_held(
    tx: &trellis_runner::Tx,
    cells: &DialogCells,
    files: FileLimits,
    unanswered: &str,
) -> trellis_runner::Result<()> {
    let Some(mut held) = interaction::held_cell(cells).get(tx)? else { return Ok(()) };
    for call in held.calls.iter_mut().filter(|call| call.output.is_none()) {
        // An approved call may have been running when the round was ended.
        let text = if call.approved { "stopped after the user approved it; it may have run" } else { unanswered };
        call.output = Some(ToolOutput::ErrorText(text.to_string()));
    }
    cells.push_results(tx, held.results(), files)?;
    interaction::forget(tx, cells)
}

fn add_message(
    shared: &Arc<Shared>,
    cells: &DialogCells,
    tx: &trellis_runner::Tx,
    mut message: Message,
) -> trellis_runner::Result<()> {
    if message.role != Role::User {
        return Err(format!("add_message takes user messages; got a {:?} message", message.role).into());
    }
    if message.text().trim().is_empty() && message.files().next().is_none() {
        return Err("the message is empty: say something, or attach a file".into());
    }
    crate::files::keep_sent(tx, &mut message, shared.settings.files).map_err(|e| e.to_string())?;
    if cells.pending.get(tx)? {
        let mut queued = cells.queued.get(tx).unwrap_or_default();
        if queued.len() >= MAX_QUEUED {
            return Err(format!(
                "{MAX_QUEUED} messages already wait for the reply to reach them: wait for it, or send cancel_generation"
            )
            .into());
        }
        queued.push(message);
        return cells.queued.set(tx, queued);
    }
    if interaction::is_waiting(tx, cells)? {
        let waiting: Vec<String> = interaction::interactions_cell(cells)
            .get(tx)?
            .into_iter()
            .filter(Interaction::blocks)
            .map(|i| format!("{} ({})", i.tool, i.call_id))
            .collect();
        return Err(format!(
            "a tool call is waiting for your answer ({}): resolve it, or send cancel_generation first",
            waiting.join(", ")
        )
        .into());
    }
    request::begin(shared, cells, tx, vec![message])
}

fn cancel(shared: &Arc<Shared>, cells: &DialogCells, tx: &trellis_runner::Tx) -> trellis_runner::Result<()> {
    let waiting = interaction::is_waiting(tx, cells)?;
    if !cells.pending.get(tx)? && !waiting {
        return Ok(());
    }
    // A new request id supersedes the running one: whatever it still writes is dropped.
    cells.request.update(tx, RequestId::next)?;
    cells.pending.set(tx, false)?;
    cells.partial.set(tx, String::new())?;
    // A cancel stops the reply altogether: what was sent during it is not sent on.
    cells.queued.set(tx, Vec::new())?;
    let files = shared.settings.files;
    flush_held(tx, cells, files, "cancelled by the user while it waited for an answer; it did not run")?;
    elicitation::forget(tx, cells)?;
    messages::close_unanswered(
        tx,
        &cells.messages(),
        "cancelled by the user before this call's result was recorded; a change the tool was making may have been applied",
    )?;
    let shared = shared.clone();
    let base = cells.base.clone();
    tx.after_commit(move |_| shared.abort(&base));
    Ok(())
}
