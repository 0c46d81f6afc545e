//! The API's endpoints in one table: each names its method, path, handler and the types
//! it reads and answers. The router is built from it, and so is the OpenAPI document
//! (`super::openapi`), from the same types the handlers use.

use axum::routing::{delete, get, patch, post, put, MethodRouter};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use trellis_builtins::dialog::Interaction;

use super::routes::{charms, chat, files, interactions, patterns, plugins, tokens, watches};
use super::Server;
use crate::session::PatternInfo;

/// How a type's schema is made (a reference into the document's components).
pub type SchemaOf = fn(&mut SchemaGenerator) -> Schema;

/// The schema of `T`, for the table.
pub fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// What an endpoint answers when it succeeds.
pub enum Answer {
    /// JSON of a type, with this status.
    Json(u16, SchemaOf),
    /// Nothing (204).
    Nothing,
    /// Bytes of this media type (200).
    Bytes(&'static str),
    /// Server-sent events (`text/event-stream`): their names and what each carries.
    Events(&'static [(&'static str, SchemaOf)]),
}

/// One endpoint of the API.
pub struct Endpoint {
    /// `get`, `post`, ... as OpenAPI spells it.
    pub method: &'static str,
    /// The path, with `{name}` parameters as axum and OpenAPI both write them.
    pub path: &'static str,
    /// A stable name for it.
    pub operation: &'static str,
    /// What it does.
    pub summary: &'static str,
    /// The JSON body it reads.
    pub body: Option<SchemaOf>,
    /// What it answers.
    pub answer: Answer,
    /// The handler.
    pub handler: MethodRouter<Server>,
}

/// Every endpoint of the API.
pub fn endpoints() -> Vec<Endpoint> {
    use Answer::{Bytes, Events, Json, Nothing};
    let endpoint = |method, path, operation, summary, body, answer, handler| Endpoint {
        method,
        path,
        operation,
        summary,
        body,
        answer,
        handler,
    };
    vec![
        endpoint(
            "get",
            "/api/patterns",
            "listPatterns",
            "The registered patterns",
            None,
            Json(200, schema::<Vec<PatternInfo>>),
            get(patterns::list),
        ),
        endpoint(
            "get",
            "/api/charms",
            "listCharms",
            "The charms of the space",
            None,
            Json(200, schema::<Vec<charms::CharmSummary>>),
            get(charms::list),
        ),
        endpoint(
            "post",
            "/api/charms",
            "createCharm",
            "Create a charm of a pattern",
            Some(schema::<charms::NewCharm>),
            Json(201, schema::<charms::CharmData>),
            post(charms::create),
        ),
        endpoint(
            "get",
            "/api/charms/{charm}",
            "getCharm",
            "A charm's data and handlers (by id or name)",
            None,
            Json(200, schema::<charms::CharmData>),
            get(charms::get),
        ),
        endpoint(
            "patch",
            "/api/charms/{charm}",
            "renameCharm",
            "Rename a charm",
            Some(schema::<charms::Rename>),
            Json(200, schema::<charms::CharmData>),
            patch(charms::rename),
        ),
        endpoint(
            "post",
            "/api/charms/{charm}/handlers/{handler}",
            "sendEvent",
            "Send an event (the body) to a charm's handler, validated as a model's tool call is; with an \
             Idempotency-Key header the handler runs at most once for that key (send again with it after a lost answer)",
            Some(schema::<serde_json::Value>),
            Json(200, schema::<charms::Sent>),
            post(charms::send),
        ),
        endpoint(
            "get",
            "/api/charms/{charm}/provenance",
            "charmProvenance",
            "Who wrote each of a charm's fields last (a model's call, a person's command, the web page, an MCP \
             client) and when, or that a computation derives it",
            None,
            Json(200, schema::<crate::session::Provenance>),
            get(charms::provenance),
        ),
        endpoint(
            "get",
            "/api/charms/{charm}/tools",
            "charmTools",
            "The tools a charm offers a model",
            None,
            Json(200, schema::<Vec<charms::ToolInfo>>),
            get(charms::tools),
        ),
        endpoint(
            "get",
            "/api/charms/{charm}/events",
            "charmEvents",
            "The charm's data now and after each change, as server-sent events",
            None,
            Events(&[("charm", schema::<charms::CharmData>)]),
            get(charms::events),
        ),
        endpoint(
            "get",
            "/api/chat",
            "getChat",
            "The conversation: messages, waiting calls, attachments, tools",
            None,
            Json(200, schema::<chat::ChatState>),
            get(chat::get),
        ),
        endpoint(
            "post",
            "/api/chat/messages",
            "sendMessage",
            "Send a message, with files or not (its @-mentions attach charms); the reply follows on the events",
            Some(schema::<chat::NewMessage>),
            Json(202, schema::<chat::Accepted>),
            post(chat::send),
        ),
        endpoint(
            "get",
            "/api/chat/files/{doc}",
            "getChatFile",
            "The bytes of a file of the conversation (`doc` of a file part), as its media type: PNG, JPEG, GIF \
             and WebP inline, anything else as a download",
            None,
            Bytes("*/*"),
            get(files::get),
        ),
        endpoint(
            "post",
            "/api/chat/cancel",
            "cancelReply",
            "Stop the reply (the body is any JSON object, `{}`: a write is JSON)",
            Some(schema::<serde_json::Map<String, serde_json::Value>>),
            Nothing,
            post(chat::cancel),
        ),
        endpoint(
            "post",
            "/api/chat/undo",
            "undoRequest",
            "Undo the conversation's last request (or `request`): what its tool calls changed in the space is put \
             back in one transaction and the model is told; 409 when it runs, wrote nothing, or someone wrote one of those \
             values again since",
            Some(schema::<chat::Undo>),
            Json(200, schema::<trellis_builtins::dialog::UndoneRequest>),
            post(chat::undo),
        ),
        endpoint(
            "get",
            "/api/watches",
            "listWatches",
            "The space's standing watches (set by models with their `watch` tool): each condition, note, whether it \
             holds now and how often it fired",
            None,
            Json(200, schema::<Vec<trellis_builtins::watch::Watch>>),
            get(watches::list),
        ),
        endpoint(
            "delete",
            "/api/watches/{id}",
            "removeWatch",
            "Remove a watch (and the message it fired that no conversation took yet); the watch removed",
            None,
            Json(200, schema::<trellis_builtins::watch::Watch>),
            delete(watches::remove),
        ),
        endpoint(
            "put",
            "/api/chat/model",
            "setModel",
            "Choose the model",
            Some(schema::<chat::SetModel>),
            Nothing,
            put(chat::set_model),
        ),
        endpoint(
            "post",
            "/api/chat/attachments",
            "attachCharm",
            "Attach a charm: its handlers become the model's tools",
            Some(schema::<chat::Attach>),
            Nothing,
            post(chat::attach),
        ),
        endpoint(
            "delete",
            "/api/chat/attachments/{name}",
            "detachCharm",
            "Detach a charm",
            None,
            Nothing,
            delete(chat::detach),
        ),
        endpoint(
            "delete",
            "/api/chat/allowed/{tool}",
            "disallowTool",
            "Make a tool that runs without asking (`allowed` of the chat) ask for approval again",
            None,
            Nothing,
            delete(chat::disallow),
        ),
        endpoint(
            "get",
            "/api/chat/events",
            "chatEvents",
            "The conversation now (`chat`), then its changes (`change`), the streamed reply, the attached charms' data",
            None,
            Events(&[
                ("chat", schema::<chat::ChatState>),
                ("change", schema::<chat::ChatChange>),
                ("partial", schema::<Partial>),
                ("charm", schema::<charms::CharmData>),
            ]),
            get(chat::events),
        ),
        endpoint(
            "get",
            "/api/interactions",
            "listInteractions",
            "The calls waiting for a person's answer",
            None,
            Json(200, schema::<Vec<Interaction>>),
            get(interactions::list),
        ),
        endpoint(
            "post",
            "/api/interactions/{call}/resolve",
            "resolveInteraction",
            "Approve, deny or answer a waiting call; the conversation goes on once none waits",
            Some(schema::<interactions::Resolution>),
            Json(202, schema::<chat::Accepted>),
            post(interactions::resolve),
        ),
        endpoint(
            "get",
            "/api/plugins",
            "listPlugins",
            "The enabled plugins whose tools the page runs (their calls wait as client executions)",
            None,
            Json(200, schema::<Vec<plugins::PagePlugin>>),
            get(plugins::list),
        ),
        endpoint(
            "get",
            "/api/plugins/{name}/module",
            "pluginModule",
            "A plugin's WebAssembly module, verified when the server loaded it",
            None,
            Bytes("application/wasm"),
            get(plugins::module),
        ),
        endpoint(
            "get",
            "/api/tokens",
            "listTokens",
            "The space's bearer tokens (never the tokens themselves)",
            None,
            Json(200, schema::<Vec<crate::tokens::TokenInfo>>),
            get(tokens::list),
        ),
        endpoint(
            "post",
            "/api/tokens",
            "createToken",
            "Make a bearer token; the answer is the only time it is shown",
            Some(schema::<tokens::NewTokenName>),
            Json(201, schema::<crate::tokens::NewToken>),
            post(tokens::create),
        ),
        endpoint(
            "delete",
            "/api/tokens/{id}",
            "revokeToken",
            "Revoke a bearer token",
            None,
            Json(200, schema::<crate::tokens::TokenInfo>),
            delete(tokens::revoke),
        ),
    ]
}

/// The `partial` event: the reply streamed so far.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct Partial {
    /// Its text: what follows the text sent before when `append`, else all of it.
    pub text: String,
    /// Whether `text` goes on from the text sent before.
    pub append: bool,
}
