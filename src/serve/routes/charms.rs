//! `/api/charms`: list, create, get, send an event to a handler, rename, tools, and the
//! charm's changes as events.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::{Extension, Json};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use trellis_runner::{DocId, Link, Runtime, Writer};

use crate::serve::auth::Credential;
use crate::serve::error::ApiError;
use crate::serve::limits::{Body, NAME_PATTERN};
use crate::serve::{events, Server};
use crate::session::{send as send_event, SendError};

/// A charm as listed.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CharmSummary {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its pattern.
    pub pattern: String,
}

/// A charm's data as a client reads it: its fields without the stream markers, and the
/// names of its handlers.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct CharmData {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its pattern.
    pub pattern: String,
    /// Its current result, without the streams (those are `handlers`).
    pub data: serde_json::Value,
    /// The handlers events can be sent to (`POST /api/charms/{charm}/handlers/{handler}`),
    /// each with the JSON schema of its event (`null` when it declares none).
    pub handlers: std::collections::BTreeMap<String, serde_json::Value>,
    /// The handlers that answer, each with the JSON schema of what it returns (a send's
    /// `returned`).
    pub returns: std::collections::BTreeMap<String, serde_json::Value>,
}

/// `POST /api/charms`: a new charm.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct NewCharm {
    /// The pattern (`GET /api/patterns`).
    pub pattern: String,
    /// Its name.
    #[serde(default)]
    #[schemars(pattern(NAME_PATTERN))]
    pub name: Option<String>,
    /// The pattern's argument.
    #[serde(default)]
    pub argument: Option<serde_json::Value>,
}

/// `PATCH /api/charms/{charm}`: a new name.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Rename {
    /// The new name.
    #[schemars(pattern(NAME_PATTERN))]
    pub name: String,
}

/// What sending an event did.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Sent {
    /// The charm.
    pub id: String,
    /// What changed (`count: 3 → 5`), or `no changes`.
    pub summary: String,
    /// The charm's data after the handler ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// What the handler returned, for a handler that answers (see the charm's `returns`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub returned: Option<serde_json::Value>,
}

/// A tool as a model sees it, and where it comes from.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct ToolInfo {
    /// The name people see (`Counter.increment`).
    pub display: String,
    /// The name the model calls.
    pub wire: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// The JSON schema of its input.
    #[serde(default)]
    pub input_schema: serde_json::Value,
    /// The JSON schema of what it returns (the `returned` of its result), for a handler
    /// that answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    /// The charm whose handler it is, if it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charm: Option<String>,
}

/// Typed tools from a catalog's flattened form (entries that are not tools are skipped).
pub fn tool_infos(flattened: serde_json::Value) -> Vec<ToolInfo> {
    let list = match flattened {
        serde_json::Value::Array(list) => list,
        _ => Vec::new(),
    };
    list.into_iter().filter_map(|t| serde_json::from_value(t).ok()).collect()
}

/// The charm a path names (its id or its name).
fn find(rt: &Runtime, charm: &str) -> Result<DocId, ApiError> {
    Ok(rt.charms().find(charm)?)
}

/// The data of charm `id` (see [`CharmData`]).
pub fn data(rt: &Runtime, id: &DocId) -> Result<CharmData, ApiError> {
    let mut data = rt.charms().get(id)?;
    let (mut handlers, mut returns) = (std::collections::BTreeMap::new(), std::collections::BTreeMap::new());
    if let serde_json::Value::Object(fields) = &mut data {
        fields.retain(|key, value| match trellis_runner::link::stream_schema(value) {
            Some(schema) => {
                handlers.insert(key.clone(), schema.cloned().unwrap_or_default());
                if let Some(result) = trellis_runner::link::stream_result_schema(value) {
                    returns.insert(key.clone(), result.clone());
                }
                false
            }
            None => true,
        });
    }
    let record = rt.charms().record(id);
    Ok(CharmData {
        id: id.to_string(),
        name: rt.charms().name(id),
        pattern: record.map(|r| r.pattern).unwrap_or_default(),
        data,
        handlers,
        returns,
    })
}

/// `GET /api/charms`.
pub async fn list(State(server): State<Server>) -> Json<Vec<CharmSummary>> {
    let list = server.runtime().charms().list();
    Json(list.into_iter().map(|c| CharmSummary { id: c.id, name: c.name, pattern: c.pattern }).collect())
}

/// `POST /api/charms`.
pub async fn create(State(server): State<Server>, Body(new): Body<NewCharm>) -> Result<impl IntoResponse, ApiError> {
    let rt = server.runtime();
    let argument = new.argument.unwrap_or_else(|| serde_json::json!({}));
    let id = rt.charms().create_named(&new.pattern, argument, new.name.as_deref())?;
    Ok((StatusCode::CREATED, Json(data(rt, &id)?)))
}

/// `GET /api/charms/{charm}`.
pub async fn get(State(server): State<Server>, Path(charm): Path<String>) -> Result<Json<CharmData>, ApiError> {
    let rt = server.runtime();
    Ok(Json(data(rt, &find(rt, &charm)?)?))
}

/// `PATCH /api/charms/{charm}`.
pub async fn rename(
    State(server): State<Server>,
    Path(charm): Path<String>,
    Body(rename): Body<Rename>,
) -> Result<Json<CharmData>, ApiError> {
    let rt = server.runtime();
    let id = find(rt, &charm)?;
    rt.charms().rename(&id, &rename.name)?;
    Ok(Json(data(rt, &id)?))
}

/// `GET /api/charms/{charm}/provenance`: who wrote each field last.
pub async fn provenance(
    State(server): State<Server>,
    Path(charm): Path<String>,
) -> Result<Json<crate::session::Provenance>, ApiError> {
    let rt = server.runtime();
    let id = find(rt, &charm)?;
    Ok(Json(crate::session::provenance(rt, &id)?))
}

/// `POST /api/charms/{charm}/handlers/{handler}`: the body is the event; it goes through
/// the tool catalog like a model's call (validation, summary). With an `Idempotency-Key`
/// header the handler runs at most once for that key: a client that lost the answer (a
/// timeout, a node that died) sends again with the same key and gets the first answer.
pub async fn send(
    State(server): State<Server>,
    Extension(credential): Extension<Credential>,
    Path((charm, handler)): Path<(String, String)>,
    headers: HeaderMap,
    Body(event): Body<serde_json::Value>,
) -> Result<Json<Sent>, ApiError> {
    let rt = server.runtime();
    let id = find(rt, &charm)?;
    let receipt = idempotency_receipt(&headers, &id, &handler)?;
    let by = match credential {
        Credential::Session => Writer::new("web", "the web page"),
        // The hand-off file's token: a `charm send` of this machine, through the server.
        Credential::Local => Writer::new("command", "charm send"),
        Credential::Token(sha256) => {
            Writer::new("api", format!("a client of the API (token {})", &sha256[..sha256.len().min(8)]))
        }
    };
    match send_event(&rt.acting_as(by), &id, &handler, event, receipt.as_ref()).await {
        Ok(sent) => Ok(Json(Sent {
            id: sent.id.to_string(),
            summary: sent.summary,
            result: sent.result,
            returned: sent.returned,
        })),
        Err(e @ SendError::NoHandler { .. }) => Err(ApiError::not_found(e.to_string())),
        Err(SendError::Refused(why)) => Err(ApiError::unprocessable(why)),
    }
}

/// The longest `Idempotency-Key` taken.
const MAX_IDEMPOTENCY_KEY: usize = 128;

/// Where a send with an `Idempotency-Key` records that it ran: a document of its own per
/// charm, handler and key (a key names one send of one handler).
fn idempotency_receipt(headers: &HeaderMap, charm: &DocId, handler: &str) -> Result<Option<Link>, ApiError> {
    let Some(key) = headers.get("idempotency-key") else { return Ok(None) };
    let key = key
        .to_str()
        .ok()
        .filter(|key| !key.is_empty() && key.len() <= MAX_IDEMPOTENCY_KEY && key.bytes().all(|b| b.is_ascii_graphic()));
    let Some(key) = key else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters (a UUID, say)"),
        ));
    };
    let named = ring::digest::digest(&ring::digest::SHA256, format!("{charm}\n{handler}\n{key}").as_bytes());
    let doc = format!("api-receipt-{}", trellis_plugins::signing::encode_hex(named.as_ref()));
    Ok(Some(Link::new(DocId::from(doc.as_str()), trellis_runner::Path::root())))
}

/// `GET /api/charms/{charm}/tools`: what a model sees of the charm.
pub async fn tools(State(server): State<Server>, Path(charm): Path<String>) -> Result<Json<Vec<ToolInfo>>, ApiError> {
    let flattened = crate::session::flattened(server.runtime(), &[charm])?;
    Ok(Json(tool_infos(flattened)))
}

/// `GET /api/charms/{charm}/events`: the charm's data now, then again after each change,
/// for as long as the request's credential holds.
pub async fn events(
    State(server): State<Server>,
    Extension(credential): Extension<Credential>,
    Path(charm): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let id = find(server.runtime(), &charm)?;
    Ok(events::charm(server, credential, id))
}
