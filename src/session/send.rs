//! Sending an event to a charm's handler the way a model's tool call does: `trellis
//! charm send` and the server's send both come here.

use serde_json::json;
use trellis_builtins::catalog::Catalog;
use trellis_builtins::message::ToolOutput;
use trellis_runner::{DocId, Link, Runtime};

/// How long `charm send` waits for a handler.
const SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// What sending an event to a charm's handler did.
#[derive(Debug, Clone)]
pub struct Sent {
    /// The charm.
    pub id: DocId,
    /// What changed (`count: 3 → 5`), or `no changes`.
    pub summary: String,
    /// The charm's data after the handler ran, when the tool returned it.
    pub result: Option<serde_json::Value>,
    /// What the handler returned, when it answers.
    pub returned: Option<serde_json::Value>,
}

impl Sent {
    /// `{id, summary, result, returned}` as `charm send --json` prints it and the server
    /// answers it (`returned` only for a handler that answers).
    pub fn to_json(&self) -> serde_json::Value {
        let mut json = json!({"id": &*self.id, "summary": self.summary});
        if let Some(result) = &self.result {
            json["result"] = result.clone();
        }
        if let Some(returned) = &self.returned {
            json["returned"] = returned.clone();
        }
        json
    }
}

/// Why an event sent to a charm did not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// The charm has no handler of that name.
    NoHandler { charm: String, handler: String, handlers: Vec<String> },
    /// The event was refused (schema, depth, the handler's own refusal, approval, timeout).
    Refused(String),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::NoHandler { charm, handler, handlers } => {
                write!(f, "charm {charm} has no handler `{handler}`; its handlers are: {}", handlers.join(", "))
            }
            SendError::Refused(why) => f.write_str(why),
        }
    }
}

/// Sends `event` to the handler `handler` of charm `id` the way a model's tool call does:
/// schema validation first, then the handler's transaction, then the snapshot and the
/// summary of what changed (`charm send` and the server's `send` both come here). With a
/// `receipt`, the handler runs at most once for it (a client's idempotency key).
pub async fn send(
    rt: &Runtime,
    id: &DocId,
    handler: &str,
    event: serde_json::Value,
    receipt: Option<&Link>,
) -> Result<Sent, SendError> {
    let charms = rt.charms();
    let catalog = Catalog::build(rt, &json!({ &**id: {"charm": charms.result(id).to_json()} }));
    let key = |t: &trellis_builtins::catalog::Tool| t.display.rsplit_once('.').map(|(_, key)| key.to_string());
    let Some(tool) = catalog.tools().iter().find(|t| key(t).as_deref() == Some(handler)) else {
        let handlers = catalog.tools().iter().filter_map(key).collect();
        return Err(SendError::NoHandler { charm: charms.name(id), handler: handler.to_string(), handlers });
    };
    let invocation = match receipt {
        Some(receipt) => tool.invoke_once(rt, event, SEND_TIMEOUT, receipt).await,
        None => tool.invoke(rt, event, SEND_TIMEOUT).await,
    };
    match invocation.output {
        ToolOutput::ErrorText(error) => Err(SendError::Refused(error)),
        ToolOutput::Json(mut answer) => Ok(Sent {
            id: id.clone(),
            summary: invocation.summary.unwrap_or_else(|| "no changes".into()),
            result: Some(answer["result"].take()),
            returned: answer.get_mut("returned").map(serde_json::Value::take),
        }),
        text => Ok(Sent { id: id.clone(), summary: text.as_text(), result: None, returned: None }),
    }
}
