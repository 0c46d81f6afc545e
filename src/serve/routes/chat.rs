//! `/api/chat`: the space's conversation (the chatbot charm `trellis chat` talks to):
//! its state, a new message, cancel, the model, attachments, and its progress as events.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Extension, Json};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use trellis_builtins::dialog::Interaction;
use trellis_builtins::message::Message;
use trellis_runner::DocId;

use super::charms::{tool_infos, ToolInfo};
use super::DONE;
use crate::serve::auth::Credential;
use crate::serve::error::ApiError;
use crate::serve::limits::{check_message, Body, MESSAGE_PATTERN};
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
}

/// A change of the conversation, on its events after the first `chat` (which is all of it):
/// `messages` replace those from index `from` on (the ones before are as sent); the model,
/// `pending` and `error` come each time, the other fields only when they changed.
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
    /// The calls waiting for a person's answer, when they changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interactions: Option<Vec<Interaction>>,
    /// The attached charms, when they changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attachments: Option<Vec<Attached>>,
    /// The tools the model has, when they changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ActiveTool>>,
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

/// `POST /api/chat/messages`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct NewMessage {
    /// The text; `@Name` attaches the charm named.
    #[schemars(length(min = 1, max = 16000), pattern(MESSAGE_PATTERN))]
    pub text: String,
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
    ChatState {
        charm: chat.chatbot().charm().to_string(),
        model: chat.model(),
        pending: dialog.pending(),
        error: dialog.error(),
        messages: dialog.messages(),
        interactions: chat.interactions(),
        attachments,
        tools,
    }
}

/// `GET /api/chat`.
pub async fn get(State(server): State<Server>) -> Json<ChatState> {
    Json(state(&server))
}

/// `POST /api/chat/messages`: attaches the message's @-mentions and sends it; the reply
/// follows (202).
pub async fn send(
    State(server): State<Server>,
    Body(message): Body<NewMessage>,
) -> Result<impl IntoResponse, ApiError> {
    check_message(&message.text)?;
    let index = server.chat().chatbot().start(&message.text).await.map_err(|error| match error {
        // The dialog says which of its streams cancels; over this API it is a route.
        trellis_patterns::chatbot::ChatbotError::Refused(why) => {
            ApiError::new(StatusCode::CONFLICT, format!("{why} (over this API: POST /api/chat/cancel)"))
        }
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

/// `GET /api/chat/events`: the conversation's state now (`chat`), then what changed
/// (`change`), the streamed reply (`partial`), and each attached charm's data (`charm`),
/// for as long as the request's credential holds.
pub async fn events(State(server): State<Server>, Extension(credential): Extension<Credential>) -> impl IntoResponse {
    events::chat(server, credential)
}
