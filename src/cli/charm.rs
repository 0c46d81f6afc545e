//! `trellis charm ...` and `trellis demo`.

use anyhow::Context;
use clap::Subcommand;
use serde_json::json;
use trellis_runner::{DocId, Runtime, Writer};

use super::output::{print, render_charms, render_result};
use super::Format;
use crate::session::send;
use crate::terminal::safe_line;

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
        /// Instead of the values: who wrote each field last (a model's call with its
        /// request, a person's command, the web page, an MCP client) and when, or that a
        /// computation derives it.
        #[arg(long)]
        provenance: bool,
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
            let list = serde_json::to_value(charms.list())?;
            print(format, &list, || render_charms(&list));
        }
        CharmCommand::Get { charm, provenance: true } => {
            let report = crate::session::provenance(rt, &charms.find(&charm)?)?;
            super::history::print_provenance(&serde_json::to_value(report)?, format)
        }
        CharmCommand::Get { charm, provenance: false } => {
            let id = charms.find(&charm)?;
            let result = charms.get(&id)?;
            print(format, &result, || render_result(&result));
        }
        CharmCommand::Send { charm, handler, event } => {
            let id = charms.find(&charm)?;
            let event: serde_json::Value = serde_json::from_str(&event).context("the event is not valid JSON")?;
            let sent = send(&rt.acting_as(Writer::new("command", "charm send")), &id, &handler, event, None)
                .await
                .map_err(|e| anyhow::anyhow!("{}", safe_line(&e.to_string())))?;
            print(format, &sent.to_json(), || match &sent.returned {
                Some(returned) => format!("{}\nreturned: {returned}", sent.summary),
                None => sent.summary.clone(),
            });
        }
        CharmCommand::Rename { charm, name } => {
            let id = charms.find(&charm)?;
            charms.rename(&id, &name)?;
            print(format, &json!({"id": &*id, "name": name}), || format!("{id} is now {}", safe_line(&name)));
        }
    }
    Ok(())
}

/// `trellis demo`: a counter charm, one event, its derived label. The counter of an
/// earlier demo is used again, so running the demo twice does not leave two of them.
pub async fn demo(rt: &Runtime, format: Format) -> anyhow::Result<()> {
    const NAME: &str = "Demo counter";
    let earlier = rt.charms().list().into_iter().find(|charm| charm.name == NAME && charm.pattern == "counter");
    let (id, how) = match earlier {
        Some(charm) => (DocId::from(charm.id.as_str()), "using the charm of an earlier demo,"),
        None => (rt.charms().create_named("counter", json!({"start": 1}), Some(NAME))?, "created charm"),
    };
    let before = rt.charms().get(&id)?;
    rt.send(&rt.charms().result(&id).child("increment"), json!({"amount": 41})).await?;
    let after = rt.charms().get(&id)?;
    print(format, &json!({"id": &*id, "before": before, "after": after}), || {
        format!(
            "{how} {id} (pattern counter)\n{}\nsent increment {{\"amount\": 41}}\n{}\n\n`{} charm list` shows the charms in this space.",
            render_result(&before),
            render_result(&after),
            crate::program::name()
        )
    });
    Ok(())
}
