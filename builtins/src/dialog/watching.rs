//! The conversation's side of standing watches (`crate::watch`): the `watch` tool it
//! offers the model when charms are attached, and the messages its watches fire, which
//! start a turn (told at once while it runs in this process; taken by the next process
//! that runs it otherwise).

use serde::Deserialize;
use serde_json::json;
use trellis_runner::{DocId, Link, Runtime};

use super::DialogCells;
use crate::catalog::Catalog;
use crate::invoke::Invocation;
use crate::message::{Message, ToolOutput};
use crate::model::ToolSpec;
use crate::watch::{self, Fired, NewWatch, WATCH_TOOL};

/// The `watch` tool's arguments.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct WatchCall {
    charm: String,
    condition: String,
    #[serde(default)]
    note: String,
}

/// The tool, offered when the request has a charm's tools and no tool of its name.
pub(super) fn spec(catalog: &Catalog) -> Option<ToolSpec> {
    let charms = catalog.tools().iter().any(|t| t.charm.is_some());
    if !charms || catalog.get(WATCH_TOOL).is_some() {
        return None;
    }
    let schema = json!({
        "type": "object",
        "properties": {
            "charm": {"type": "string", "description": "The charm to watch, as its tools name it (Counter for Counter.increment)."},
            "condition": {"type": "string", "description": "When to be told: a CEL expression over the charm's fields, such as `count > 10` or `notes.exists(n, n.title == \"milk\")`."},
            "note": {"type": "string", "description": "What you want to do or say then; it comes back to you with the message."}
        },
        "required": ["charm", "condition"],
        "additionalProperties": false
    });
    Some(ToolSpec::new(
        WATCH_TOOL,
        WATCH_TOOL,
        "Watch a charm: when `condition` turns true (from false), this conversation gets a message with your note and \
         you are asked to act, even if the user is away. It fires once each time the condition turns true, and lasts \
         until the user removes it.",
        schema,
    ))
}

/// A call of the `watch` tool: the watch made, or why not.
pub(super) fn call(
    (rt, max): (&Runtime, usize),
    cells: &DialogCells,
    catalog: &Catalog,
    input: &serde_json::Value,
) -> Invocation {
    let call: WatchCall = match serde_json::from_value(input.clone()) {
        Ok(call) => call,
        Err(e) => return Invocation::error(format!("not a watch: {e}; give charm, condition and note")),
    };
    let prefix = format!("{}.", call.charm);
    let charm = catalog.tools().iter().find(|t| t.display.starts_with(&prefix)).and_then(|t| t.charm.clone());
    let Some(charm) = charm else {
        let mut names: Vec<&str> = catalog
            .tools()
            .iter()
            .filter(|t| t.charm.is_some())
            .filter_map(|t| t.display.split_once('.').map(|(c, _)| c))
            .collect();
        names.sort_unstable();
        names.dedup();
        return Invocation::error(format!(
            "no attached charm `{}`; the attached ones are: {}",
            call.charm,
            names.join(", ")
        ));
    };
    let new = NewWatch {
        dialog: cells.base.clone(),
        conversation: crate::invoke::preview::place(rt, &cells.base.doc, &[]),
        charm: DocId::from(charm),
        condition: call.condition,
        note: call.note,
        max,
    };
    match watch::add(rt, new) {
        Ok(made) => {
            let now = if made.holds {
                "it holds already, so it fires when it next turns true"
            } else {
                "it does not hold now"
            };
            let answer = json!({ "watch": made.id, "holds_now": made.holds, "message": format!("watching {}: {now}", made.charm_name) });
            Invocation { output: ToolOutput::Json(answer), summary: None, effect: None }
        }
        Err(e) => Invocation::error(format!("no watch was made: {e}")),
    }
}

/// Tells the conversation of `dialog` what its watches fired, as one message that starts
/// a turn; what it could not tell waits again. Returns what it told.
pub(super) async fn deliver(rt: &Runtime, dialog: &Link) -> trellis_runner::Result<Vec<Fired>> {
    let fired = watch::take_fired(rt, dialog).map_err(|e| trellis_runner::Error::Refused(e.to_string()))?;
    if fired.is_empty() {
        return Ok(fired);
    }
    // What a watch says comes from the model's note and the charm's data: never the user's.
    let said = fired.iter().map(|f| f.text.as_str()).collect::<Vec<_>>().join("\n");
    let text = format!("(From Trellis, not the user's words.) {said}");
    let sent = super::DialogHandle::new(rt.clone(), dialog.clone()).send(Message::user(text)).await;
    if let Err(error) = sent {
        if let Err(e) = watch::put_back(rt, &fired) {
            tracing::warn!(error = %e, "lost the messages of watches that fired");
        }
        return Err(error);
    }
    Ok(fired)
}

/// While the conversation runs in this process, its watches' messages start turns.
pub(super) fn listen(rt: &Runtime, dialog: Link) {
    watch::on_fired(rt, dialog.clone(), move |rt| deliver_soon(rt, &dialog));
}

/// [`deliver`]s on a task of the conversation's (which [`DialogHandle::wait`] waits for),
/// if anything waits and a Tokio runtime runs; else the next process that runs the
/// conversation tells it.
///
/// [`DialogHandle::wait`]: super::DialogHandle::wait
pub(super) fn deliver_soon(rt: &Runtime, dialog: &Link) {
    if watch::waiting(rt, dialog).is_empty() {
        return;
    }
    if tokio::runtime::Handle::try_current().is_err() {
        tracing::warn!("a watch fired off any Tokio runtime; its message waits");
        return;
    }
    let (rt, base) = (rt.clone(), dialog.clone());
    rt.clone().spawn_tracked(base.doc.clone(), async move {
        if let Err(error) = deliver(&rt, &base).await {
            tracing::warn!(%error, "could not tell the conversation what its watches found; it waits");
        }
    });
}
