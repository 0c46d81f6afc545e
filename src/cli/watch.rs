//! `trellis watch list` and `trellis watch remove ID`: the standing watches models set
//! with their `watch` tool.

use clap::Subcommand;
use serde_json::json;
use trellis_builtins::watch;
use trellis_runner::Runtime;

use super::output::print;
use super::Format;
use crate::terminal::safe_line;

/// `trellis watch ...`.
#[derive(Debug, Subcommand)]
pub enum WatchCommand {
    /// List the space's watches: id, conversation, charm, condition, note, whether it
    /// holds now, how often it fired.
    List,
    /// Remove a watch (and the message it fired that no conversation took yet).
    Remove {
        /// The watch's id, as `watch list` shows it (w1).
        id: String,
    },
}

pub fn run(rt: &Runtime, command: WatchCommand, format: Format) -> anyhow::Result<()> {
    match command {
        WatchCommand::List => print_list(&watch::watches(rt), format)?,
        WatchCommand::Remove { id } => {
            let removed = watch::remove(rt, &id).map_err(|e| anyhow::anyhow!("{e}"))?;
            print(format, &json!({ "removed": removed }), || format!("removed {}", safe_line(&removed.id)));
        }
    }
    Ok(())
}

/// What `watch list` says (here or through the server).
pub fn print_list(all: &[watch::Watch], format: Format) -> anyhow::Result<()> {
    print(format, &serde_json::to_value(all)?, || {
        if all.is_empty() {
            return "no watches; a model sets one with its `watch` tool (\"tell me when the count passes 10\")".into();
        }
        let lines: Vec<String> = all
            .iter()
            .map(|w| {
                let now = if w.holds { "holds now" } else { "does not hold now" };
                let error = w.error.as_ref().map(|e| format!("; {e}")).unwrap_or_default();
                let line = format!(
                    "{}  {}: on {}, `{}` ({now}, fired {} times{error}); note: {}",
                    w.id, w.conversation, w.charm_name, w.condition, w.fired, w.note
                );
                // A note or a condition a model wrote is one line here, whatever it holds.
                safe_line(&line).into_owned()
            })
            .collect();
        lines.join("\n")
    });
    Ok(())
}
