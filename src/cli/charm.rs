//! `trellis charm ...` and `trellis demo`.

use anyhow::{bail, Context};
use clap::Subcommand;
use serde_json::json;
use trellis_runner::{Link, Runtime};

use super::output::{print, render_result};
use super::Format;

#[derive(Debug, Subcommand)]
pub enum CharmCommand {
    /// Create a charm from a pattern; prints its id.
    New {
        /// The pattern id (see `trellis patterns`).
        pattern: String,
        /// A display name for the charm.
        #[arg(long)]
        name: Option<String>,
        /// The pattern's argument as JSON.
        #[arg(long, default_value = "{}")]
        arg: String,
    },
    /// List the charms: id, name, pattern.
    List,
    /// Show a charm's current result (streams shown as handlers).
    Get {
        /// The charm's id or name.
        charm: String,
    },
    /// Send an event to one of a charm's handlers; prints what changed.
    Send {
        /// The charm's id or name.
        charm: String,
        /// The handler (a stream key of the charm's result).
        handler: String,
        /// The event as JSON.
        #[arg(default_value = "{}")]
        event: String,
    },
    /// Give a charm a new name.
    Rename {
        /// The charm's id or name.
        charm: String,
        /// The new name.
        name: String,
    },
}

pub async fn run(rt: &Runtime, command: CharmCommand, format: Format) -> anyhow::Result<()> {
    let charms = rt.charms();
    match command {
        CharmCommand::New { pattern, name, arg } => {
            let arg: serde_json::Value = serde_json::from_str(&arg).context("--arg is not valid JSON")?;
            let id = charms.create_named(&pattern, arg, name.as_deref())?;
            print(format, &json!({"id": &*id, "name": charms.name(&id)}), || id.to_string());
        }
        CharmCommand::List => {
            let list = charms.list();
            print(format, &serde_json::to_value(&list)?, || {
                list.iter().map(|c| format!("{:<28} {:<16} {}", c.id, c.name, c.pattern)).collect::<Vec<_>>().join("\n")
            });
        }
        CharmCommand::Get { charm } => {
            let id = charms.find(&charm)?;
            let result = charms.get(&id)?;
            print(format, &result, || render_result(&result));
        }
        CharmCommand::Send { charm, handler, event } => {
            let id = charms.find(&charm)?;
            let event: serde_json::Value = serde_json::from_str(&event).context("the event is not valid JSON")?;
            let stream = stream_of(rt, &id, &handler)?;
            let before = charms.get(&id)?;
            rt.send(&stream, event).await?;
            let after = charms.get(&id)?;
            let changes = changed_fields(&before, &after);
            print(format, &json!({"id": &*id, "changes": changes, "result": after}), || {
                if changes.is_empty() {
                    "no changes".to_string()
                } else {
                    changes.iter().map(|c| format!("{}: {} → {}", c["key"].as_str().unwrap_or(""), c["before"], c["after"])).collect::<Vec<_>>().join("\n")
                }
            });
        }
        CharmCommand::Rename { charm, name } => {
            let id = charms.find(&charm)?;
            charms.rename(&id, &name)?;
            print(format, &json!({"id": &*id, "name": name}), || format!("{id} is now {name}"));
        }
    }
    Ok(())
}

/// The stream of `handler` in the charm's result, or an error listing the handlers.
fn stream_of(rt: &Runtime, id: &str, handler: &str) -> anyhow::Result<Link> {
    let result = rt.charms().get(id)?;
    let handlers: Vec<&str> = result
        .as_object()
        .map(|m| m.iter().filter(|(_, v)| trellis_runner::link::stream_schema(v).is_some()).map(|(k, _)| k.as_str()).collect())
        .unwrap_or_default();
    if !handlers.contains(&handler) {
        bail!("charm {} has no handler `{handler}`; its handlers are: {}", rt.charms().name(id), handlers.join(", "));
    }
    Ok(rt.charms().result(&id.into()).child(handler))
}

/// Top-level data fields whose value differs between two snapshots.
fn changed_fields(before: &serde_json::Value, after: &serde_json::Value) -> Vec<serde_json::Value> {
    let empty = serde_json::Map::new();
    let (b, a) = (before.as_object().unwrap_or(&empty), after.as_object().unwrap_or(&empty));
    a.iter()
        .filter(|(k, v)| b.get(*k) != Some(*v))
        .map(|(k, v)| json!({"key": k, "before": b.get(k).cloned().unwrap_or(serde_json::Value::Null), "after": v}))
        .collect()
}

/// `trellis demo`: a counter charm, one event, its derived label.
pub async fn demo(rt: &Runtime, format: Format) -> anyhow::Result<()> {
    let id = rt.charms().create_named("counter", json!({"start": 1}), Some("Demo counter"))?;
    let before = rt.charms().get(&id)?;
    rt.send(&rt.charms().result(&id).child("increment"), json!({"amount": 41})).await?;
    let after = rt.charms().get(&id)?;
    print(format, &json!({"id": &*id, "before": before, "after": after}), || {
        format!(
            "created charm {id} (pattern counter)\n{}\nsent increment {{\"amount\": 41}}\n{}\n\n`trellis charm list` shows the charms in this space.",
            render_result(&before),
            render_result(&after)
        )
    });
    Ok(())
}
