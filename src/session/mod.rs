//! The chat session every front end drives (the terminal chat, `trellis serve`'s web chat):
//! the space's chatbot charm, driven through the chatbot contract
//! (`trellis_patterns::chatbot::Chatbot`), and what both front ends share around it:
//! the `Reply` to a waiting call, message checks (`message`), pattern listing
//! (`patterns`), sending an event to a charm's handler (`send`) and the flattened tool
//! listing (`tools`).
//!
//! One chatbot charm per chatbot pattern and space holds the conversation, so it
//! continues across runs (`/clear` forgets it). Each message's @-mentions are resolved
//! against the charm names and attached before the message is sent.

mod message;
mod patterns;
mod provenance;
mod reply;
mod send;
mod tools;

pub use message::{attach_file, check_message};
pub use patterns::{pattern_infos, PatternInfo};
pub use provenance::{provenance, Provenance};
pub use reply::Reply;
pub use send::{send, SendError};
pub use tools::flattened;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use serde_json::json;
use trellis_builtins::dialog::{DialogHandle, Interaction, InteractionKind, Resolve};
use trellis_builtins::message::{FilePart, Message, Part, Role};
use trellis_builtins::tool::{ClientContext, ToolRef, ToolRegistry};
use trellis_patterns::chatbot::{Chatbot, ChatbotError};
use trellis_plugins::store::{Loaded, PluginStore};
use trellis_plugins::{Plugin, PluginManager, Request, Response};
use trellis_runner::Runtime;

use crate::terminal::safe_line;

/// The chat session: the chatbot charm and its dialog, the tools whose client phases
/// this terminal runs, and the space's enabled plugins, whose tools it executes.
pub struct Session {
    chat: Chatbot,
    tools: ToolRegistry,
    plugins: Arc<PluginManager>,
    /// The loaded plugins' verified bundles, for a front end that runs them itself.
    bundles: Vec<Loaded>,
    /// The display names (by wire name) of the tools offered at each message sent, so a
    /// call stays named as the model saw it after its tool left (its MCP server stopped).
    names: parking_lot::Mutex<HashMap<String, String>>,
}

impl Session {
    /// Finds (or creates) the space's charm of the chatbot pattern `chatbot` and sets
    /// its model and tool choice.
    pub async fn open(
        rt: &Runtime,
        chatbot: &str,
        model: &str,
        tool_choice: &str,
        tools: ToolRegistry,
        plugins: &[Plugin],
    ) -> anyhow::Result<Session> {
        // Fail before anything changes: a bad model string or a missing key.
        trellis_builtins::provider::model_from_str(model)?;
        let chat = Chatbot::find_or_create(rt, chatbot).map_err(shown)?;
        chat.set_model(model).await.map_err(shown)?;
        chat.set_tool_choice(tool_choice).await.map_err(shown)?;
        let session = Session::with_plugins(rt, chat, tools, plugins);
        session.offer_plugin_tools().await?;
        Ok(session)
    }

    /// The session of `chat`, with the program's own plugins registered (`App::plugin`),
    /// then the space's enabled plugins loaded (each one that does not load is reported
    /// and left out).
    fn with_plugins(rt: &Runtime, chat: Chatbot, tools: ToolRegistry, own: &[Plugin]) -> Session {
        let plugins = Arc::new(PluginManager::new());
        let server_tools = wire_names(chat.dialog());
        for plugin in own {
            let name = plugin.name().to_string();
            if let Err(why) = plugins.register(plugin.clone(), &server_tools) {
                warn(&format!("plugin {name} is not registered: {why}"));
            }
        }
        let loaded = PluginStore::of_user(rt).and_then(|store| store.load_bundles(&plugins, &server_tools));
        let bundles = match loaded {
            Ok((bundles, failed)) => {
                for (plugin, why) in failed {
                    warn(&format!("plugin {plugin} is not loaded: {why}"));
                }
                bundles
            }
            Err(why) => {
                warn(&format!("no plugin is loaded: {why}"));
                Vec::new()
            }
        };
        Session { chat, tools, plugins, bundles, names: Default::default() }
    }

    /// Offers the loaded plugins' tools to the model as client tools (none when no plugin
    /// is enabled, so a disabled plugin's tools are withdrawn).
    pub async fn offer_plugin_tools(&self) -> anyhow::Result<()> {
        let (offered, conflicts) = self.plugins.client_tools_beside(wire_names(self.dialog()));
        for conflict in conflicts {
            warn(&conflict.to_string());
        }
        let definitions = offered
            .into_iter()
            .map(|tool| (tool.name, json!({"description": tool.description, "parameters": tool.parameters})))
            .collect();
        self.chat.set_client_tools(definitions).await.map_err(shown)
    }

    /// Executes the first waiting call to a plugin's tool here, in the plugin's sandbox,
    /// and resolves it with the result (an error result when the plugin fails); the index
    /// from which what follows appears, or `None` when no plugin call waits.
    pub async fn run_plugin_call(&self) -> anyhow::Result<Option<usize>> {
        let call = self
            .waiting()
            .into_iter()
            .find(|waiting| waiting.kind == InteractionKind::ClientExecution && self.plugins.has_tool(&waiting.tool));
        let Some(call) = call else { return Ok(None) };
        let output = self.plugins.execute(&call.tool, call.arguments.clone()).await;
        self.report_hooks();
        self.resolve(Some(&call.call_id), Reply::Output(output)).await.map(Some)
    }

    /// The loaded plugins and their tools (for `/tools`).
    pub fn plugins(&self) -> Vec<trellis_plugins::PluginInfo> {
        self.plugins.plugins()
    }

    /// The loaded plugins' bundles, verified at load (for the web page, which runs their
    /// modules in the browser).
    pub fn plugin_bundles(&self) -> &[Loaded] {
        &self.bundles
    }

    /// The dialog.
    pub fn dialog(&self) -> &DialogHandle {
        self.chat.dialog()
    }

    /// The space's charm of the chatbot pattern `chatbot` as it is (for `pending` and
    /// `resolve`: the model and tool choice stay as the conversation left them).
    pub fn attach(rt: &Runtime, chatbot: &str, tools: ToolRegistry, plugins: &[Plugin]) -> anyhow::Result<Session> {
        Ok(Session::with_plugins(rt, Chatbot::find_or_create(rt, chatbot).map_err(shown)?, tools, plugins))
    }

    /// The chatbot charm this session drives.
    pub fn chatbot(&self) -> &Chatbot {
        &self.chat
    }

    /// Sends one user message (attaching its mentions first) without waiting for the
    /// reply; returns the index of that message in the conversation, from which the
    /// reply's messages follow. The plugins' `before_request` hooks see the message
    /// first, and may change it.
    ///
    /// `files` go with the message (see [`attach_file`] to read one from disk); with files,
    /// the text may be empty.
    pub async fn start(&self, text: &str, files: Vec<FilePart>) -> anyhow::Result<usize> {
        if files.is_empty() || !text.is_empty() {
            check_message(text).map_err(anyhow::Error::msg)?;
        }
        let mut request = Request { message: text.to_string(), ..Request::default() };
        self.plugins.before_request(&mut request);
        self.report_hooks();
        // Before the request starts (it may call a tool whose server then leaves at once),
        // and again once the message's mentions are attached (their charms' tools).
        self.learn_names();
        let sent = self.chat.start_with(&request.message, files).await.map_err(shown)?;
        self.learn_names();
        Ok(sent)
    }

    /// Runs the plugins' `after_response` hooks once the answer to the last message is
    /// complete (nothing of it waits for the client or a person), with all of it: the
    /// tools called on the way, whichever process ran them, and the final text.
    pub fn after_response(&self) {
        if self.plugins.plugins().is_empty() || !self.waiting().is_empty() {
            return;
        }
        let messages = self.dialog().messages();
        let flattened = self.dialog().flattened_tools();
        let asked = messages.iter().rposition(|m| m.role == Role::User).map_or(0, |at| at + 1);
        let assistant = messages[asked..].iter().filter(|m| m.role == Role::Assistant);
        let response = Response {
            text: assistant.clone().map(Message::text).rfind(|t| !t.is_empty()).unwrap_or_default(),
            tools_called: assistant
                .flat_map(|m| &m.content)
                .filter_map(|part| match part {
                    Part::ToolCall { name, .. } => Some(self.display_in(&flattened, name)),
                    _ => None,
                })
                .collect(),
        };
        self.plugins.after_response(&response);
        self.report_hooks();
    }

    /// Warns of the plugin hooks that failed since the last report.
    fn report_hooks(&self) {
        for failed in self.plugins.take_reports() {
            warn(&failed.to_string());
        }
    }

    /// Sends one user message (attaching its mentions) and waits up to `timeout` for the
    /// whole reply.
    pub async fn turn(&self, text: &str, files: Vec<FilePart>, timeout: Duration) -> anyhow::Result<Vec<Message>> {
        let before = self.start(text, files).await?;
        match self.dialog().wait(timeout).await {
            Err(trellis_runner::Error::Timeout(..)) => {
                let mut message = format!(
                    "the model {} did not finish its answer within {} s; try again, allow it longer with \
                     --timeout SECONDS, or choose another model with --model (`offline` needs no network)",
                    self.model(),
                    timeout.as_secs_f64()
                );
                // Stop the request, so the stored conversation is not left waiting on it.
                if let Err(e) = self.chat.cancel().await {
                    message.push_str(&format!(" (the request could not be stopped: {e})"));
                }
                bail!(message);
            }
            waited => waited?,
        }
        self.check_error()?;
        self.after_response();
        Ok(self.dialog().messages().split_off(before))
    }

    /// The failure of the last request, as an error.
    pub fn check_error(&self) -> anyhow::Result<()> {
        match self.dialog().error() {
            Some(error) => bail!("the model failed: {error}"),
            None => Ok(()),
        }
    }

    /// The calls waiting for the user's answer or the client, and display effects not
    /// shown yet.
    pub fn interactions(&self) -> Vec<Interaction> {
        self.chat.interactions()
    }

    /// The calls the conversation waits for (display effects left out).
    pub fn waiting(&self) -> Vec<Interaction> {
        self.dialog().waiting()
    }

    /// The registered tool whose client phase this terminal runs for `interaction`.
    pub fn client_tool(&self, interaction: &Interaction) -> Option<ToolRef> {
        let tool = self.tools.get(interaction.client_tool.as_deref()?)?;
        tool.has_client_phase().then_some(tool)
    }

    /// Shows every display effect waiting (running the tool's client phase with `client`
    /// when this terminal has it, else printing its input) and acknowledges it.
    pub async fn show_effects(&self, client: &mut dyn ClientContext) -> anyhow::Result<()> {
        for effect in self.interactions().into_iter().filter(|i| !i.blocks()) {
            let output = match self.client_tool(&effect) {
                Some(tool) => {
                    tool.run_client(effect.input.clone(), client).unwrap_or_else(|e| json!({ "error": e.message() }))
                }
                None => {
                    client.show(&format!("{}: {}", effect.tool, effect.input));
                    json!({ "shown": true })
                }
            };
            let call_id = effect.call_id;
            let ack = Resolve::output(call_id.clone(), output).asked_at(effect.asked_at);
            if let Err(error) = self.chat.resolve(ack).await {
                // Another front end acknowledging it first is no loss; anything else is said.
                if self.interactions().iter().any(|i| i.call_id == call_id) {
                    warn(&format!("could not acknowledge {}: {error}", effect.tool));
                }
            }
        }
        Ok(())
    }

    /// Answers the waiting call `call_id` (the only one waiting, when `None`) with `reply`;
    /// returns the index from which the messages of what follows appear.
    pub async fn resolve(&self, call_id: Option<&str>, reply: Reply) -> anyhow::Result<usize> {
        let waiting = self.waiting();
        let call_id = match (call_id, waiting.as_slice()) {
            (Some(id), _) => id.to_string(),
            (None, [only]) => only.call_id.clone(),
            (None, []) => bail!("no call is waiting for an answer"),
            (None, _) => bail!(
                "several calls are waiting ({}); say which",
                waiting.iter().map(|i| i.call_id.as_str()).collect::<Vec<_>>().join(", ")
            ),
        };
        if matches!(reply, Reply::Approve { .. }) {
            self.check_offered(&waiting, &call_id)?;
        }
        let before = self.dialog().messages().len();
        let answer = match reply {
            Reply::Approve { always, input } => {
                let approval = Resolve::approve(call_id);
                let approval = if always { approval.always() } else { approval };
                input.map_or(approval.clone(), |input| approval.with_input(input))
            }
            Reply::Deny(reason) => Resolve::deny(call_id, reason),
            Reply::Answer(text) => Resolve::answer(call_id, serde_json::Value::String(text)),
            Reply::Output(output) => Resolve::output(call_id, output),
            Reply::Decline => Resolve::deny(call_id, "the user declined"),
            Reply::Cancel => Resolve::new(call_id, trellis_builtins::dialog::Resolution::Cancelled),
        };
        self.chat.resolve(answer).await.map_err(shown)?;
        Ok(before)
    }

    /// Refuses to approve a call whose tool this chat does not offer now (an MCP server's
    /// or a plugin's, not attached here): approved, it would only fail as an unknown
    /// tool, and the approval would be used up.
    fn check_offered(&self, waiting: &[Interaction], call_id: &str) -> anyhow::Result<()> {
        let Some(call) = waiting.iter().find(|i| i.call_id == call_id && i.kind == InteractionKind::Approval) else {
            return Ok(());
        };
        if self.dialog().offers(&call.wire) {
            return Ok(());
        }
        bail!(
            "{} is not among this chat's tools here (its MCP server or plugin is not attached): approve it with the \
             --mcp or --mcp-config flags the chat had, or --deny it; it is still waiting",
            safe_line(&call.tool)
        )
    }

    /// Makes `tool`'s calls ask for approval again; an error, in the dialog's words, when
    /// it was not allowed.
    pub async fn disallow(&self, tool: &str) -> anyhow::Result<()> {
        self.dialog().disallow(tool).await.map_err(|error| match error {
            // The dialog's own words, without the handler's address.
            trellis_runner::Error::HandlerFailed { message, .. } => anyhow::anyhow!(message),
            other => other.into(),
        })
    }

    /// Waits up to `timeout` for the request a stopped process left, which this process
    /// resumed as the chat opened; the messages of that request (from its user message on),
    /// or `None` when no request was resumed.
    pub async fn resumed(&self, timeout: Duration) -> anyhow::Result<Option<Vec<Message>>> {
        // The request may have ended already: the dialog resumes it as it starts.
        if !self.dialog().pending() && !self.dialog().resumed_here() {
            return Ok(None);
        }
        let asked = self.dialog().messages().iter().rposition(|m| m.role == Role::User).unwrap_or(0);
        self.follow_up(asked, timeout).await.map(Some)
    }

    /// Tells the conversation what its watches fired while nobody ran it (one message,
    /// which starts a turn) and waits up to `timeout` for the reply; the messages from
    /// that message on, or `None` when no watch fired.
    pub async fn watched(&self, timeout: Duration) -> anyhow::Result<Option<Vec<Message>>> {
        // After a reply this process resumed: the watch's message starts a turn of its own.
        self.dialog().wait(timeout).await?;
        let before = self.dialog().messages().len();
        if self.dialog().deliver_watches().await?.is_empty() {
            return Ok(None);
        }
        self.follow_up(before, timeout).await.map(Some)
    }

    /// Waits up to `timeout` for what follows an answer; the messages from `before` on.
    pub async fn follow_up(&self, before: usize, timeout: Duration) -> anyhow::Result<Vec<Message>> {
        let messages = self.dialog().follow(before, timeout).await?;
        self.check_error()?;
        self.after_response();
        Ok(messages)
    }

    /// The names of the attached charms, in the order they were attached.
    pub fn attachments(&self) -> Vec<String> {
        self.chat.attachments()
    }

    /// The model string the chat uses now.
    pub fn model(&self) -> String {
        self.chat.model()
    }

    /// Forgets the conversation and the attachments.
    pub async fn clear(&self) -> anyhow::Result<()> {
        self.chat.clear().await.map_err(shown)
    }

    /// Asks each reply to end with one value of `schema`, or no longer (`None`).
    pub async fn set_result_schema(&self, schema: Option<serde_json::Value>) -> anyhow::Result<()> {
        self.chat.set_result_schema(schema).await.map_err(shown)
    }

    /// The value the last reply ended with, when a result schema is set (`null` when it
    /// gave none); `None` without a result schema.
    pub fn result(&self) -> Option<serde_json::Value> {
        (!self.chat.result_schema().is_null()).then(|| self.chat.result())
    }

    /// Switches the model (checked first).
    pub async fn set_model(&self, model: &str) -> anyhow::Result<()> {
        trellis_builtins::provider::model_from_str(model)?;
        self.chat.set_model(model).await.map_err(shown)
    }

    /// The display name of a tool by its wire name: as offered now, else as offered when
    /// a message was sent, else the wire name.
    pub fn display_name(&self, wire: &str) -> String {
        self.display_in(&self.dialog().flattened_tools(), wire)
    }

    /// [`Session::display_name`] with the tools offered now given.
    fn display_in(&self, flattened: &serde_json::Value, wire: &str) -> String {
        match display_of(flattened, wire) {
            Some(display) => display.to_string(),
            None => self.names.lock().get(wire).cloned().unwrap_or_else(|| wire.to_string()),
        }
    }

    /// Remembers the display names of the tools offered now.
    fn learn_names(&self) {
        let flattened = self.dialog().flattened_tools();
        let mut names = self.names.lock();
        for tool in flattened.as_array().into_iter().flatten() {
            if let (Some(wire), Some(display)) = (tool["wire"].as_str(), tool["display"].as_str()) {
                names.insert(wire.to_string(), display.to_string());
            }
        }
    }
}

/// The display name of the tool called `wire` in a dialog's `flattened_tools`.
fn display_of<'a>(flattened: &'a serde_json::Value, wire: &str) -> Option<&'a str> {
    flattened.as_array().into_iter().flatten().find(|t| t["wire"] == wire).and_then(|t| t["display"].as_str())
}

/// The wire names of the dialog's tools (plugin tools may not take them).
fn wire_names(dialog: &DialogHandle) -> Vec<String> {
    let tools = dialog.flattened_tools();
    // The client tools offered last (a plugin's own, from the last run) are no server
    // tools: counted as such, they would keep that plugin from loading again.
    let server = tools.as_array().into_iter().flatten().filter(|t| t["client"] != true);
    server.filter_map(|t| t["wire"].as_str().map(str::to_string)).collect()
}

/// A warning on standard error, escaped for the terminal.
fn warn(message: &str) {
    eprintln!("warning: {}", safe_line(message));
}

/// A chatbot error as the terminal may show it: charm names in it come from the space.
fn shown(error: ChatbotError) -> anyhow::Error {
    anyhow::anyhow!("{}", safe_line(&error.to_string()))
}
