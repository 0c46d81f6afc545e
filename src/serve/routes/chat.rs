//! `/api/chat`: the space's conversation (the chatbot charm `trellis chat` talks to):
//! its state, a new message (with files), cancel, the model, attachments, and its progress
//! as events. Its files' bytes are `super::files`.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use trellis_builtins::dialog::{Compaction, DialogOutput, Interaction, UndoError, UndoneRequest};
use trellis_builtins::files::FileLimits;
use trellis_builtins::message::{FilePart, Message};
use trellis_patterns::chatbot::{ChatbotError, ChatbotField};
use trellis_runner::{Cell, DocId, Writer};

use super::charms::{tool_infos, ToolInfo};
use super::DONE;
use crate::serve::auth::Credential;
use crate::serve::error::ApiError;
use crate::serve::limits::{check_files, check_message, Body, MAX_FILES, MAX_MESSAGE_BODY};
use crate::serve::{events, Server};

/// The conversation as a front end shows it.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ChatState {
    /// The chatbot charm.
    pub charm: String,
    /// The model string.
    pub model: String,
    /// Whether a reply is being generated.
    pub pending: bool,
    /// Why the last reply failed.
    pub error: Option<String>,
    /// The conversation.
    pub messages: Vec<Message>,
    /// The calls waiting for a person's answer.
    pub interactions: Vec<Interaction>,
    /// The attached charms.
    pub attachments: Vec<Attached>,
    /// The tools the model has now, and where each comes from.
    pub tools: Vec<ActiveTool>,
    /// Where the model's view of the conversation was compacted, if it was.
    pub compaction: Option<Compacted>,
    /// The value the last reply ended with, when a result schema asked for one.
    pub result: Option<serde_json::Value>,
    /// What the person should know that is no failure (a model that cannot take the
    /// images it was sent), said once.
    pub notice: Option<String>,
    /// The messages sent while the reply runs, waiting for it to reach them.
    pub queued: Vec<Message>,
    /// How the running calls of tools outside the space go (a long task's stage).
    pub progress: Vec<CallProgress>,
    /// The tools (display names) whose calls run without asking for approval in this
    /// conversation (an approval said "always"); `DELETE /api/chat/allowed/{tool}` makes
    /// one ask again.
    pub allowed: Vec<String>,
    /// How large the files of a message may be.
    pub file_limits: FileSizes,
}

/// A change of the conversation, on its events after the first `chat` (which is all of it):
/// `messages` replace those from index `from` on (the ones before are as sent); the model,
/// `pending`, `error`, `notice`, `queued` and `progress` come each time, the other fields
/// (`allowed` too) only when they changed
/// (`null` for "none now"); `file_limits` never change.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ChatChange {
    /// Where in the conversation `messages` start.
    pub from: usize,
    /// The messages from `from` on.
    pub messages: Vec<Message>,
    /// The model string.
    pub model: String,
    /// Whether a reply is being generated.
    pub pending: bool,
    /// Why the last reply failed.
    pub error: Option<String>,
    /// What the person should know that is no failure.
    pub notice: Option<String>,
    /// The messages sent while the reply runs, waiting for it to reach them.
    pub queued: Vec<Message>,
    /// How the running calls of tools outside the space go.
    pub progress: Vec<CallProgress>,
    /// The calls waiting for a person's answer, when they changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interactions: Option<Vec<Interaction>>,
    /// The attached charms, when they changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attachments: Option<Vec<Attached>>,
    /// The tools the model has, when they changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ActiveTool>>,
    /// The tools that run without asking, when they changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed: Option<Vec<String>>,
    /// Where the conversation was compacted, when that changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compaction: Option<Option<Compacted>>,
    /// The value the last reply ended with, when that changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Option<serde_json::Value>>,
}

/// The model reads the first `upto` messages as `summary` (the conversation keeps them
/// whole): a long conversation is compacted to stay within the dialog's `context_budget`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Compacted {
    /// How many messages, from the first, the summary stands for.
    pub upto: usize,
    /// What the model reads in their place.
    pub summary: String,
}

/// How a running call of a tool outside the space goes (an MCP task's stage).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct CallProgress {
    /// The model's call id.
    pub call: String,
    /// The tool, as people know it.
    pub tool: String,
    /// What it said last.
    pub text: String,
}

/// How large the files of a message may be, in bytes (the server checks them again).
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct FileSizes {
    /// One file.
    pub per_file: u64,
    /// All the files of one message together.
    pub per_message: u64,
}

/// An attached charm.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Attached {
    /// The name it was attached by.
    pub name: String,
    /// The charm's id, when one of that name exists.
    pub id: Option<String>,
}

/// A tool the model has, and where it comes from.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ActiveTool {
    /// The name people see.
    pub display: String,
    /// The name the model calls it by (in `messages`' tool calls).
    pub wire: String,
    /// What it does.
    pub description: String,
    /// The charm it comes from (its name), `plugin NAME` for a plugin's tool (the page runs
    /// it), or `chat` for the chatbot's own tools.
    pub from: String,
}

/// `POST /api/chat/messages`: text, files, or both.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct NewMessage {
    /// The text; `@Name` attaches the charm named. It may be empty (or left out) when
    /// files are given, and is otherwise more than white space.
    #[serde(default)]
    #[schemars(length(max = 16000))]
    pub text: String,
    /// Files sent with the text: each with `media_type`, `name` and its bytes in `data`
    /// (base64), at most 5 MiB each and 20 MiB together (see `file_limits` of the chat);
    /// `doc` is the server's to set, never a sender's.
    #[serde(default)]
    #[schemars(length(max = MAX_FILES))]
    pub files: Vec<FilePart>,
}

/// A message was accepted; the reply follows (`GET /api/chat/events`).
#[derive(Debug, Serialize, JsonSchema)]
pub struct Accepted {
    /// Where in `messages` what follows starts.
    pub index: usize,
}

/// `PUT /api/chat/model`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SetModel {
    /// `offline`, `openai:MODEL`, `anthropic:MODEL`, `ollama:MODEL`; `scripted:PATH` only
    /// for a file in the directory the server was given with `--scripts`.
    #[schemars(pattern(MODEL_PATTERN))]
    pub model: String,
}

/// The model strings `model_from_str` understands (whether a key is set is another matter).
const MODEL_PATTERN: &str = r"^\s*(offline|(openai|ollama|anthropic|scripted):[\s\S]*\S[\s\S]*?)\s*$";

/// `POST /api/chat/attachments`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Attach {
    /// The charm's id or name.
    pub charm: String,
}

/// The state of the conversation now.
pub fn state(server: &Server) -> ChatState {
    let (rt, chat) = (server.runtime(), server.chat());
    let dialog = chat.dialog();
    let charms = rt.charms();
    let attachments = chat
        .attachments()
        .into_iter()
        .map(|name| {
            let id = charms.find(&name).ok().map(|id| id.to_string());
            Attached { name, id }
        })
        .collect();
    // A client tool of a plugin comes from that plugin (the page runs it).
    let plugin_of = |name: &str| {
        let bundles = chat.plugin_bundles().iter();
        let mut owners = bundles.filter(|l| l.bundle.manifest.tools.iter().any(|t| t.name == name));
        owners.next().map(|l| format!("plugin {}", l.bundle.manifest.name))
    };
    let tools = tool_infos(dialog.flattened_tools())
        .into_iter()
        .map(|t: ToolInfo| ActiveTool {
            from: match t.charm {
                Some(id) => charms.name(&id),
                None => plugin_of(&t.display).unwrap_or_else(|| "chat".to_string()),
            },
            display: t.display,
            wire: t.wire,
            description: t.description,
        })
        .collect();
    let messages = dialog.messages();
    let limits = FileLimits::default();
    ChatState {
        charm: chat.chatbot().charm().to_string(),
        model: chat.model(),
        pending: dialog.pending(),
        error: dialog.error(),
        compaction: compaction(server, &messages),
        messages,
        interactions: chat.interactions(),
        attachments,
        tools,
        result: chat.result().filter(|value| !value.is_null()),
        notice: dialog.notice(),
        queued: dialog.queued(),
        progress: dialog
            .progress()
            .into_iter()
            .map(|p| CallProgress { call: p.call, tool: p.tool, text: p.text })
            .collect(),
        allowed: dialog.allowed(),
        file_limits: FileSizes { per_file: limits.per_part, per_message: limits.per_message },
    }
}

/// The dialog's compaction, when it is of `messages` (not of a conversation cleared since).
fn compaction(server: &Server, messages: &[Message]) -> Option<Compacted> {
    let rt = server.runtime();
    let dialog = rt.charms().result(server.chat().chatbot().charm()).child(ChatbotField::Dialog.key());
    let cell: Cell<Option<Compaction>> = Cell::from_link(dialog.child(DialogOutput::Compaction.key()));
    let compaction = cell.get(rt).ok().flatten().filter(|c| c.covers(messages))?;
    Some(Compacted { upto: compaction.upto, summary: compaction.summary })
}

/// `GET /api/chat`.
pub async fn get(State(server): State<Server>) -> Json<ChatState> {
    Json(state(&server))
}

/// `POST /api/chat/messages`: attaches the message's @-mentions and sends it with its
/// files; the reply follows (202). A message sent while a reply runs waits for it (in
/// `queued`, see the dialog's `while_running`). A file the dialog refuses (too large, not
/// base64) is 422, with what to do; a conversation with a call waiting for an answer, 409.
pub async fn send(
    State(server): State<Server>,
    Body(message): Body<NewMessage, MAX_MESSAGE_BODY>,
) -> Result<impl IntoResponse, ApiError> {
    check_files(message.files.len())?;
    let text = match (message.text.trim().is_empty(), message.files.is_empty()) {
        (true, true) => return Err(ApiError::unprocessable("the message is empty: send `text`, `files`, or both")),
        // With files, words are optional: blank ones are left out.
        (true, false) => "",
        (false, _) => {
            check_message(&message.text)?;
            message.text.as_str()
        }
    };
    let chat = server.chat();
    let index = chat.chatbot().start_with(text, message.files).await.map_err(|error| match error {
        // The dialog refuses a message while a call waits for an answer, and one whose files
        // it does not keep; it says which in words only, so its state tells them apart.
        ChatbotError::Refused(why) if !chat.waiting().is_empty() => {
            // The dialog says which of its streams cancels; over this API it is a route.
            ApiError::new(StatusCode::CONFLICT, format!("{why} (over this API: POST /api/chat/cancel)"))
        }
        ChatbotError::Refused(why) => ApiError::unprocessable(why),
        other => other.into(),
    })?;
    Ok((StatusCode::ACCEPTED, Json(Accepted { index })))
}

/// `POST /api/chat/cancel`: stops the reply being generated (and closes waiting calls).
/// Its body (a JSON object, `{}`) says nothing; it is read so that the write is JSON.
pub async fn cancel(
    State(server): State<Server>,
    Body(_): Body<serde_json::Map<String, serde_json::Value>>,
) -> Result<StatusCode, ApiError> {
    server.chat().chatbot().cancel().await?;
    Ok(DONE)
}

/// The body of `POST /api/chat/undo`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Undo {
    /// The request to undo; the latest when left out.
    #[serde(default)]
    #[schemars(range(max = 9_007_199_254_740_991u64))]
    pub request: Option<u64>,
}

/// `POST /api/chat/undo`: puts back what a request's tool calls changed, made as the
/// page (or the API client) that asked.
pub async fn undo(
    State(server): State<Server>,
    Extension(credential): Extension<Credential>,
    Body(undo): Body<Undo>,
) -> Result<Json<UndoneRequest>, ApiError> {
    let by = match credential {
        Credential::Session => Writer::new("undo", "an undo on the web page"),
        Credential::Local => Writer::new("undo", format!("{} undo", crate::program::name())),
        Credential::Token(_) => Writer::new("undo", "an undo by a client of the API"),
    };
    let request = undo.request.map(trellis_builtins::dialog::RequestId);
    server.chat().dialog().undo(request, by).map(Json).map_err(|e| match e {
        // What the conversation holds decides, never the body's shape.
        UndoError::WrittenSince { .. }
        | UndoError::Running(_)
        | UndoError::Waiting(_)
        | UndoError::Not { .. }
        | UndoError::Nothing => ApiError::new(StatusCode::CONFLICT, e.to_string()),
        UndoError::Runtime(e) => e.into(),
    })
}

/// `PUT /api/chat/model`.
pub async fn set_model(State(server): State<Server>, Body(set): Body<SetModel>) -> Result<StatusCode, ApiError> {
    use trellis_builtins::model::ModelError;
    // A model string that names no model is refused content; a model that cannot be used
    // here (no key set, no script file) conflicts with the server's environment.
    let model = server.scripts().check(&set.model)?;
    trellis_builtins::provider::model_from_str(&model).map_err(|e| match e {
        ModelError::UnknownModel(_) => ApiError::unprocessable(e.to_string()),
        _ => ApiError::new(StatusCode::CONFLICT, e.to_string()),
    })?;
    server.chat().chatbot().set_model(&model).await?;
    Ok(DONE)
}

/// `POST /api/chat/attachments`: attaches a charm under its name.
pub async fn attach(State(server): State<Server>, Body(attach): Body<Attach>) -> Result<StatusCode, ApiError> {
    let rt = server.runtime();
    let id: DocId = rt.charms().find(&attach.charm)?;
    if trellis_builtins::dialog::is_conversation(rt, &rt.charms().result(&id)) {
        return Err(ApiError::new(StatusCode::CONFLICT, "a conversation cannot be attached to a conversation"));
    }
    server.chat().chatbot().attach(&rt.charms().name(&id), &id).await?;
    Ok(DONE)
}

/// `DELETE /api/chat/attachments/{name}`.
pub async fn detach(State(server): State<Server>, Path(name): Path<String>) -> Result<StatusCode, ApiError> {
    let chat = server.chat().chatbot();
    if !chat.attachments().contains(&name) {
        return Err(ApiError::not_found(format!("no charm is attached as `{name}`")));
    }
    chat.detach(&name).await?;
    Ok(DONE)
}

/// `DELETE /api/chat/allowed/{tool}`: the tool's calls ask for approval again (a tool
/// not in `allowed` is not found, saying which are).
pub async fn disallow(State(server): State<Server>, Path(tool): Path<String>) -> Result<StatusCode, ApiError> {
    let dialog = server.chat().dialog();
    let allowed = dialog.allowed();
    if !allowed.contains(&tool) {
        let listed =
            if allowed.is_empty() { "none is".to_string() } else { format!("allowed: {}", allowed.join(", ")) };
        return Err(ApiError::not_found(format!(
            "`{tool}` does not run without asking ({listed}); an approval with \"always\" allows a tool"
        )));
    }
    dialog.disallow(&tool).await?;
    Ok(DONE)
}

/// `GET /api/chat/events`: the conversation's state now (`chat`), then what changed
/// (`change`), the streamed reply (`partial`), and each attached charm's data (`charm`),
/// for as long as the request's credential holds.
pub async fn events(State(server): State<Server>, Extension(credential): Extension<Credential>) -> impl IntoResponse {
    events::chat(server, credential)
}
