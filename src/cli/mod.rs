//! Command-line parsing and dispatch. Every command takes `--space` and `--json`.

mod charm;
mod chat;
mod interactive;
mod output;
mod terminal;
mod tools;

use std::path::{Path, PathBuf};
use std::time::Duration;

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
        /// How long to wait for each reply to a --message or piped line, in seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 300.0, value_parser = positive_seconds)]
        timeout: f64,
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
        Command::Chat { model, messages, timeout } => {
            chat::run(&rt, &model, messages, Duration::from_secs_f64(timeout), format).await
        }
        Command::Demo => charm::demo(&rt, format).await,
    }
}

/// Prints why a command failed on standard error, made safe for the terminal like all
/// output (errors quote names, model output and files).
pub fn print_error(error: &anyhow::Error) {
    eprintln!("error: {}", terminal::safe(&format!("{error:#}")));
}

/// Opens (creating if needed) the space and registers the reference patterns; a fresh
/// space gets one charm of each so there is something to talk to.
///
/// A space file that was there but comes back without any document (truncated, or
/// replaced by an empty file) is also fresh to the runtime; saying so keeps a lost space
/// from passing silently for a new one.
fn open_space(path: &Path) -> anyhow::Result<Runtime> {
    let existing = std::fs::metadata(path).ok().filter(std::fs::Metadata::is_file).map(|m| m.len());
    let rt = Runtime::open(path).with_context(|| format!("cannot open the space at {}", path.display()))?;
    trellis_patterns::register_all(&rt);
    if let (Some(bytes), true) = (existing, rt.space().doc_ids("").is_empty()) {
        eprintln!(
            "warning: the space {} existed but held no data ({bytes} bytes); starting a new space with the \
             reference charms (if you expected your charms there, restore that file from a backup)",
            terminal::safe_line(&path.display().to_string())
        );
    }
    if rt.charms().list().is_empty() {
        trellis_patterns::seed(&rt).context("cannot seed the fresh space with the reference charms")?;
    }
    Ok(rt)
}

/// Parses `--timeout`: a positive number of seconds that fits a `Duration`.
fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds > 0.0 && Duration::try_from_secs_f64(seconds).is_ok() => Ok(seconds),
        _ => Err(format!("`{text}` is not a positive number of seconds")),
    }
}

fn default_space() -> anyhow::Result<PathBuf> {
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/share")))
        .context("cannot find a data directory (neither XDG_DATA_HOME nor HOME is set); pass --space PATH")?;
    Ok(data.join("trellis").join("space.sqlite"))
}
