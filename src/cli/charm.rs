//! `trellis charm ...` and `trellis demo`.

use anyhow::{bail, Context};
use clap::Subcommand;
use serde_json::json;
use trellis_builtins::catalog::Catalog;
use trellis_builtins::message::ToolOutput;
use trellis_runner::{CharmInfo, Runtime};

use super::output::{print, render_result};
use super::terminal::safe_line;
use super::Format;

/// How long `charm send` waits for a handler.
const SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

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
                let row = |c: &CharmInfo| {
                    format!("{:<28} {:<16} {}", safe_line(&c.id), safe_line(&c.name), safe_line(&c.pattern))
                };
                list.iter().map(row).collect::<Vec<_>>().join("\n")
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
            // The same path a model's tool call takes: schema validation first, then the
            // handler's transaction, then the snapshot and the summary of what changed.
            let catalog = Catalog::build(rt, &json!({ &*id: {"charm": charms.result(&id).to_json()} }));
            let tool =
                catalog.tools().iter().find(|t| t.display.rsplit_once('.').is_some_and(|(_, key)| key == handler));
            let Some(tool) = tool else {
                let handlers: Vec<&str> =
                    catalog.tools().iter().filter_map(|t| t.display.rsplit_once('.').map(|(_, k)| k)).collect();
                bail!(
                    "charm {} has no handler `{handler}`; its handlers are: {}",
                    safe_line(&charms.name(&id)),
                    handlers.join(", ")
                );
            };
            let invocation = tool.invoke(rt, event, SEND_TIMEOUT).await;
            match invocation.output {
                ToolOutput::ErrorText(error) => bail!("{error}"),
                ToolOutput::Json(result) => {
                    let summary = invocation.summary.unwrap_or_else(|| "no changes".into());
                    print(format, &json!({"id": &*id, "summary": summary, "result": result["result"]}), || {
                        summary.clone()
                    });
                }
                ToolOutput::Text(text) => print(format, &json!({"id": &*id, "summary": text}), || text.clone()),
            }
        }
        CharmCommand::Rename { charm, name } => {
            let id = charms.find(&charm)?;
            charms.rename(&id, &name)?;
            print(format, &json!({"id": &*id, "name": name}), || format!("{id} is now {}", safe_line(&name)));
        }
    }
    Ok(())
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
