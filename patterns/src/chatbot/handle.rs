//! The chatbot contract, in code: what a chatbot pattern exposes, and [`Chatbot`], the
//! typed handle every front end (the terminal chat, tests, later the web page) drives a
//! chatbot charm through.
//!
//! A chatbot pattern is any pattern whose charm result has
//!
//! - `dialog`: the location of its `llm_dialog` (`b.builtin("dialog", LLM_DIALOG, ..)?`);
//! - the data [`ChatbotField`]s: `messages`, `attachments`, `model`, `tool_choice`, and the
//!   dialog's `pending`, `error`, `partial`, `flattened_tools`, `interactions` re-exported
//!   at the top;
//! - the streams [`ChatbotStream`]s: `add_message`, `cancel_generation`, `attach`,
//!   `detach`, `clear`, `set_model`, `set_tool_choice`, `resolve`, taking the events of
//!   this module and the dialog's.
//!
//! [`wire`](super::wire) builds all of that in one call, so a custom chatbot is its own
//! system prompt and static tools plus `wire(b, args)`; [`Chatbot::open`] checks the
//! contract and names what is missing.

use std::time::Duration;

use serde_json::json;
use trellis_builtins::dialog::{is_conversation, DialogHandle, DialogOutput, Interaction, Resolve, DIALOG_KEY};
use trellis_builtins::message::{FilePart, Message, Part, Role};
use trellis_runner::link::is_stream;
use trellis_runner::{DocId, Read as _, Runtime};

use super::mention::{mentions, UnknownMention};

/// A stream every chatbot exposes at the top level of its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatbotStream {
    /// A user message ([`Message`]); refused while a reply is being generated.
    AddMessage,
    /// Stops the reply being generated.
    CancelGeneration,
    /// [`Attach`](super::Attach): a charm whose handlers become tools.
    Attach,
    /// [`Detach`](super::Detach): a charm by the name it was attached by.
    Detach,
    /// [`Clear`](super::Clear): forget the conversation and the attachments.
    Clear,
    /// [`SetModel`](super::SetModel).
    SetModel,
    /// [`SetToolChoice`](super::SetToolChoice).
    SetToolChoice,
    /// [`Resolve`]: a person's answer to a call waiting for approval.
    Resolve,
    /// [`SetClientTools`](super::SetClientTools): the tools the client executes itself.
    SetClientTools,
    /// Sets the JSON Schema each reply must end with a value of ([`SetResultSchema`](super::SetResultSchema)).
    SetResultSchema,
}

impl ChatbotStream {
    /// Every stream of the contract.
    pub const ALL: [ChatbotStream; 10] = [
        ChatbotStream::AddMessage,
        ChatbotStream::CancelGeneration,
        ChatbotStream::Attach,
        ChatbotStream::Detach,
        ChatbotStream::Clear,
        ChatbotStream::SetModel,
        ChatbotStream::SetToolChoice,
        ChatbotStream::Resolve,
        ChatbotStream::SetClientTools,
        ChatbotStream::SetResultSchema,
    ];

    /// The key in the charm's result.
    pub fn key(self) -> &'static str {
        match self {
            ChatbotStream::AddMessage => DialogOutput::AddMessage.key(),
            ChatbotStream::CancelGeneration => DialogOutput::CancelGeneration.key(),
            ChatbotStream::Attach => "attach",
            ChatbotStream::Detach => "detach",
            ChatbotStream::Clear => "clear",
            ChatbotStream::SetModel => "set_model",
            ChatbotStream::SetToolChoice => "set_tool_choice",
            ChatbotStream::Resolve => DialogOutput::Resolve.key(),
            ChatbotStream::SetClientTools => "set_client_tools",
            ChatbotStream::SetResultSchema => "set_result_schema",
        }
    }
}

/// A data field every chatbot exposes at the top level of its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatbotField {
    /// Where its `llm_dialog` lives.
    Dialog,
    /// The conversation (`Vec<Message>`).
    Messages,
    /// The attached charms (`Vec<Attachment>`).
    Attachments,
    /// The model string.
    Model,
    /// `auto`, `none`, `required` or a tool's display name.
    ToolChoice,
    /// Whether a reply is being generated.
    Pending,
    /// Why the last reply failed, or `null`.
    Error,
    /// The reply being streamed.
    Partial,
    /// The tools as a UI shows them.
    FlattenedTools,
    /// The calls waiting for a person ([`Interaction`]s).
    Interactions,
    /// The JSON Schema each reply ends with a value of, or `null`.
    ResultSchema,
    /// The value the last reply ended with, or `null`.
    Result,
}

impl ChatbotField {
    /// Every field of the contract.
    pub const ALL: [ChatbotField; 12] = [
        ChatbotField::Dialog,
        ChatbotField::Messages,
        ChatbotField::Attachments,
        ChatbotField::Model,
        ChatbotField::ToolChoice,
        ChatbotField::Pending,
        ChatbotField::Error,
        ChatbotField::Partial,
        ChatbotField::FlattenedTools,
        ChatbotField::Interactions,
        ChatbotField::ResultSchema,
        ChatbotField::Result,
    ];

    /// The key in the charm's result.
    pub fn key(self) -> &'static str {
        match self {
            ChatbotField::Dialog => DIALOG_KEY,
            ChatbotField::Messages => "messages",
            ChatbotField::Attachments => "attachments",
            ChatbotField::Model => "model",
            ChatbotField::ToolChoice => "tool_choice",
            ChatbotField::Pending => DialogOutput::Pending.key(),
            ChatbotField::Error => DialogOutput::Error.key(),
            ChatbotField::Partial => DialogOutput::Partial.key(),
            ChatbotField::FlattenedTools => DialogOutput::FlattenedTools.key(),
            ChatbotField::Interactions => DialogOutput::Interactions.key(),
            ChatbotField::ResultSchema => "result_schema",
            ChatbotField::Result => DialogOutput::Result.key(),
        }
    }
}

/// What went wrong driving a chatbot.
#[derive(Debug, thiserror::Error)]
pub enum ChatbotError {
    /// The charm does not keep the contract.
    #[error("charm {charm} ({pattern}) is not a chatbot: its result lacks {}; build chatbot patterns with `trellis_patterns::chatbot::wire`", missing.join(", "))]
    NotAChatbot {
        /// The charm.
        charm: String,
        /// Its pattern.
        pattern: String,
        /// The keys missing or of the wrong kind (streams are named `stream KEY`).
        missing: Vec<String>,
    },
    /// No pattern with this id is registered.
    #[error("no pattern `{0}` is registered; {list} to see the registered ones", list = trellis_runner::error::actions::LIST_PATTERNS)]
    UnknownPattern(String),
    /// A message mentions a charm that does not exist.
    #[error(transparent)]
    UnknownMention(#[from] UnknownMention),
    /// A message mentions a name that several charms have.
    #[error(
        "@{name} names {} charms ({}); {rename} so that each has a name of its own",
        ids.len(),
        ids.join(", "),
        rename = trellis_runner::error::actions::RENAME_CHARMS
    )]
    AmbiguousMention {
        /// The name mentioned.
        name: String,
        /// The charms that have it.
        ids: Vec<String>,
    },
    /// The model's reply failed.
    #[error("the model failed: {0}")]
    Reply(String),
    /// The chatbot refused what was sent, saying why (a reply is being generated, a call
    /// is not waiting, an answer of the wrong shape).
    #[error("{0}")]
    Refused(String),
    /// The runtime failed (storage, a timeout while waiting).
    #[error(transparent)]
    Runtime(trellis_runner::Error),
}

/// A handler's refusal is the chatbot's answer to the person, without the stream it came
/// from; any other runtime error stays as it is.
impl From<trellis_runner::Error> for ChatbotError {
    fn from(error: trellis_runner::Error) -> Self {
        match error {
            trellis_runner::Error::HandlerFailed { message, .. } => ChatbotError::Refused(message),
            other => ChatbotError::Runtime(other),
        }
    }
}

/// A chatbot charm, driven through its contract.
#[derive(Clone)]
pub struct Chatbot {
    rt: Runtime,
    charm: DocId,
    dialog: DialogHandle,
}

impl Chatbot {
    /// The chatbot charm `charm`, after checking that it keeps the contract.
    pub fn open(rt: &Runtime, charm: &DocId) -> Result<Chatbot, ChatbotError> {
        let missing = missing_keys(rt, charm);
        if !missing.is_empty() {
            let pattern = rt.charms().record(charm).map(|r| r.pattern).unwrap_or_default();
            return Err(ChatbotError::NotAChatbot { charm: charm.to_string(), pattern, missing });
        }
        let dialog = DialogHandle::new(rt.clone(), rt.charms().result(charm).child(ChatbotField::Dialog.key()));
        Ok(Chatbot { rt: rt.clone(), charm: charm.clone(), dialog })
    }

    /// The space's first charm of `pattern` (a space keeps one conversation per chatbot
    /// pattern), or a new one.
    pub fn find_or_create(rt: &Runtime, pattern: &str) -> Result<Chatbot, ChatbotError> {
        if rt.patterns().get(pattern).is_none() {
            return Err(ChatbotError::UnknownPattern(pattern.to_string()));
        }
        let existing = rt.charms().list().into_iter().find(|c| c.pattern == pattern);
        let charm = match existing {
            Some(record) => DocId::from(record.id.as_str()),
            None => rt.charms().create(pattern, json!({}))?,
        };
        Chatbot::open(rt, &charm)
    }

    /// The runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// The chatbot's charm.
    pub fn charm(&self) -> &DocId {
        &self.charm
    }

    /// Its dialog: messages, pending, partial, error, tools.
    pub fn dialog(&self) -> &DialogHandle {
        &self.dialog
    }

    async fn send(&self, stream: ChatbotStream, event: serde_json::Value) -> Result<(), ChatbotError> {
        self.rt.send(&self.rt.charms().result(&self.charm).child(stream.key()), event).await?;
        Ok(())
    }

    fn field(&self, field: ChatbotField) -> serde_json::Value {
        let at = self.rt.charms().result(&self.charm).child(field.key());
        self.rt.read(&at).map(|v| v.to_json()).unwrap_or_default()
    }

    /// The charms a message can mention: every charm but conversations.
    fn targets(&self) -> Vec<trellis_runner::CharmInfo> {
        let charms = self.rt.charms();
        charms
            .list()
            .into_iter()
            .filter(|c| !is_conversation(&self.rt, &charms.result(&c.id.as_str().into())))
            .collect()
    }

    /// The names of the charms a message can mention: every charm but chatbots.
    pub fn mentionable(&self) -> Vec<String> {
        self.targets().into_iter().map(|c| c.name).collect()
    }

    /// Attaches `charm` under `name`: its handlers become the model's tools.
    pub async fn attach(&self, name: &str, charm: &DocId) -> Result<(), ChatbotError> {
        let link = self.rt.charms().result(charm);
        self.send(ChatbotStream::Attach, json!({"name": name, "charm": link.to_json()})).await
    }

    /// Detaches the charm attached as `name`.
    pub async fn detach(&self, name: &str) -> Result<(), ChatbotError> {
        self.send(ChatbotStream::Detach, json!({"name": name})).await
    }

    /// Attaches every charm `text` mentions; returns the names mentioned. An unknown
    /// mention, or one of a name several charms have (the model could not tell them
    /// apart), is an error and attaches nothing.
    pub async fn attach_mentions(&self, text: &str) -> Result<Vec<String>, ChatbotError> {
        let charms = self.targets();
        let names: Vec<&str> = charms.iter().map(|c| c.name.as_str()).collect();
        let mentioned = mentions(text, &names)?;
        let mut attach = Vec::with_capacity(mentioned.len());
        for name in &mentioned {
            let having: Vec<&trellis_runner::CharmInfo> = charms.iter().filter(|c| &c.name == name).collect();
            let [charm] = having[..] else {
                let ids = having.iter().map(|c| c.id.clone()).collect();
                return Err(ChatbotError::AmbiguousMention { name: name.clone(), ids });
            };
            attach.push(charm);
        }
        for charm in attach {
            self.attach(&charm.name, &DocId::from(charm.id.as_str())).await?;
        }
        Ok(mentioned)
    }

    /// Sends one user message, attaching its mentions first, without waiting for the
    /// reply; returns the index of the message, after which the reply's messages follow.
    pub async fn start(&self, text: &str) -> Result<usize, ChatbotError> {
        self.start_with(text, Vec::new()).await
    }

    /// [`Chatbot::start`] with files attached to the message (images, PDFs, text files;
    /// see `trellis_builtins::files` for their limits).
    pub async fn start_with(&self, text: &str, files: Vec<FilePart>) -> Result<usize, ChatbotError> {
        self.attach_mentions(text).await?;
        let before = self.dialog.messages().len();
        let words = (!text.is_empty()).then(|| Part::Text { text: text.to_string() });
        let message = Message::new(Role::User, words.into_iter().chain(files.into_iter().map(Part::File)).collect());
        self.dialog.send(message).await?;
        Ok(before)
    }

    /// Sends one user message (attaching its mentions) and waits up to `timeout` for the
    /// whole reply; returns the new messages (the user's first).
    pub async fn say(&self, text: &str, timeout: Duration) -> Result<Vec<Message>, ChatbotError> {
        let before = self.start(text).await?;
        self.dialog.wait(timeout).await?;
        if let Some(error) = self.dialog.error() {
            return Err(ChatbotError::Reply(error));
        }
        Ok(self.dialog.messages().split_off(before))
    }

    /// Stops the reply being generated.
    pub async fn cancel(&self) -> Result<(), ChatbotError> {
        self.send(ChatbotStream::CancelGeneration, json!({})).await
    }

    /// Forgets the conversation and the attachments.
    pub async fn clear(&self) -> Result<(), ChatbotError> {
        self.send(ChatbotStream::Clear, json!({})).await?;
        // Its watches end with it.
        if let Err(error) = self.dialog.end_watches() {
            self.rt.report(trellis_runner::Error::Refused(format!("the cleared conversation's watches stay: {error}")));
        }
        Ok(())
    }

    /// Switches the model (the string is not checked here; see `model_from_str`).
    pub async fn set_model(&self, model: &str) -> Result<(), ChatbotError> {
        self.send(ChatbotStream::SetModel, json!({"model": model})).await
    }

    /// Sets the tool choice: `auto`, `none`, `required` or a tool's display name.
    pub async fn set_tool_choice(&self, choice: &str) -> Result<(), ChatbotError> {
        self.send(ChatbotStream::SetToolChoice, json!({"tool_choice": choice})).await
    }

    /// Asks each reply to end with a value of `schema` (checked, and stored in
    /// [`Chatbot::result`]), or no longer (`None`).
    pub async fn set_result_schema(&self, schema: Option<serde_json::Value>) -> Result<(), ChatbotError> {
        self.send(ChatbotStream::SetResultSchema, json!({ "schema": schema })).await
    }

    /// The value the last reply ended with, when a result schema asked for one.
    pub fn result(&self) -> serde_json::Value {
        self.field(ChatbotField::Result)
    }

    /// The JSON Schema each reply ends with a value of, or `null`.
    pub fn result_schema(&self) -> serde_json::Value {
        self.field(ChatbotField::ResultSchema)
    }

    /// Sets the tools the client executes itself: name → `{"description", "parameters"}`
    /// (replacing the previous set; an empty map removes them).
    pub async fn set_client_tools(
        &self,
        tools: serde_json::Map<String, serde_json::Value>,
    ) -> Result<(), ChatbotError> {
        self.send(ChatbotStream::SetClientTools, json!({ "tools": tools })).await
    }

    /// The calls waiting for a person's answer.
    pub fn interactions(&self) -> Vec<Interaction> {
        self.dialog.interactions()
    }

    /// Answers a waiting call (see [`Resolve`]); the conversation goes on once no call
    /// waits (follow it with [`Chatbot::dialog`]).
    pub async fn resolve(&self, answer: Resolve) -> Result<(), ChatbotError> {
        Ok(self.dialog.resolve(answer).await?)
    }

    /// The names of the attached charms, in the order they were attached.
    pub fn attachments(&self) -> Vec<String> {
        let list = self.field(ChatbotField::Attachments);
        list.as_array().into_iter().flatten().filter_map(|a| a["name"].as_str().map(str::to_string)).collect()
    }

    /// The model string in use.
    pub fn model(&self) -> String {
        self.field(ChatbotField::Model).as_str().unwrap_or("offline").to_string()
    }

    /// The tool choice in use.
    pub fn tool_choice(&self) -> String {
        self.field(ChatbotField::ToolChoice).as_str().unwrap_or("auto").to_string()
    }
}

/// The contract keys `charm`'s result lacks (streams as `stream KEY`); empty for a chatbot.
fn missing_keys(rt: &Runtime, charm: &str) -> Vec<String> {
    let root = rt.charms().result(&DocId::from(charm));
    let Ok((_, result)) = rt.resolve(&root) else {
        return vec!["a result".to_string()];
    };
    let fields = result.as_object();
    let mut missing = Vec::new();
    for stream in ChatbotStream::ALL {
        let present = fields.and_then(|f| f.get(stream.key())).is_some_and(|v| {
            is_stream(v) || rt.resolve(&root.child(stream.key())).is_ok_and(|(_, marker)| is_stream(&marker))
        });
        if !present {
            missing.push(format!("stream {}", stream.key()));
        }
    }
    for field in ChatbotField::ALL {
        if !fields.is_some_and(|f| f.contains_key(field.key())) {
            missing.push(field.key().to_string());
        }
    }
    missing
}
