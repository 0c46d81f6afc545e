//! Command-line parsing and dispatch. Every command takes `--space` and `--json`.

mod charm;
mod chat;
mod interactive;
mod output;
mod tools;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use trellis_runner::Runtime;

/// Trellis: live charms in a durable space, and a chat that acts on them.
#[derive(Debug, Parser)]
#[command(name = "trellis", version, about, long_about = None)]
pub struct Cli {
    /// The space's SQLite file [default: trellis/space.sqlite in your data directory].
    #[arg(long, global = true, env = "TRELLIS_SPACE", value_name = "PATH")]
    space: Option<PathBuf>,

    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    json: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List the registered patterns.
    Patterns,
    /// Create, list, inspect and drive charms.
    #[command(subcommand)]
    Charm(charm::CharmCommand),
    /// Show the tools the given charms offer a model: display name, wire name,
    /// description, input schema.
    Tools {
        /// Charm ids or names.
        #[arg(required = true)]
        charms: Vec<String>,
    },
    /// Chat with a model that acts on @-mentioned charms. Interactive on a terminal;
    /// otherwise each --message (or each line of standard input) is one turn.
    Chat {
        /// The model: offline (no network, no key), scripted:PATH, openai:MODEL
        /// (OPENAI_API_KEY), anthropic:MODEL (ANTHROPIC_API_KEY), ollama:MODEL.
        #[arg(long, default_value = "offline")]
        model: String,
        /// A message to send (repeatable: one turn each).
        #[arg(long = "message", short = 'm')]
        messages: Vec<String>,
    },
    /// Run a short demo: a counter charm, an event, its derived label.
    Demo,
}

/// The output format chosen on the command line.
#[derive(Debug, Clone, Copy)]
pub struct Format {
    json: bool,
}

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let format = Format { json: cli.json };
    let path = match cli.space {
        Some(path) => path,
        None => default_space()?,
    };
    let rt = open_space(&path)?;
    match cli.command {
        Command::Patterns => output::patterns(&rt, format),
        Command::Charm(command) => charm::run(&rt, command, format).await,
        Command::Tools { charms } => tools::run(&rt, &charms, format),
        Command::Chat { model, messages } => chat::run(&rt, &model, messages, format).await,
        Command::Demo => charm::demo(&rt, format).await,
    }
}

/// Opens (creating if needed) the space and registers the reference patterns; a fresh
/// space gets one charm of each so there is something to talk to.
fn open_space(path: &std::path::Path) -> anyhow::Result<Runtime> {
    let rt = Runtime::open(path).with_context(|| format!("cannot open the space at {}", path.display()))?;
    trellis_patterns::register_all(&rt);
    if rt.charms().list().is_empty() {
        trellis_patterns::seed(&rt).context("cannot seed the fresh space with the reference charms")?;
    }
    Ok(rt)
}

fn default_space() -> anyhow::Result<PathBuf> {
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/share")))
        .context("cannot find a data directory (neither XDG_DATA_HOME nor HOME is set); pass --space PATH")?;
    Ok(data.join("trellis").join("space.sqlite"))
}
