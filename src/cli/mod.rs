//! The `trellis` command as a library: [`App`] parses the command line and runs it, with
//! the patterns and builtins an embedder registers beside the reference ones. Every
//! command takes `--space` and `--json`.

mod charm;
mod chat;
mod interactive;
mod mcp;
mod output;
mod terminal;
mod tools;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use trellis_runner::{Builtin, Pattern, Runtime};

/// Trellis: live charms in a durable space, and a chat that acts on them.
#[derive(Debug, Parser)]
#[command(name = "trellis", version, about, long_about = None)]
struct Cli {
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
    /// otherwise each --message (or each line of standard input) is one turn, and a turn
    /// that ends waiting for you (a call to approve, a question) stops with exit status 3:
    /// see `pending` and `resolve`.
    Chat {
        /// The model: offline (no network, no key), scripted:PATH, openai:MODEL
        /// (OPENAI_API_KEY), anthropic:MODEL (ANTHROPIC_API_KEY), ollama:MODEL.
        #[arg(long, default_value = "offline")]
        model: String,
        /// A message to send (repeatable: one turn each).
        #[arg(long = "message", short = 'm')]
        messages: Vec<String>,
        /// The chatbot pattern that holds the conversation (`trellis patterns` lists them)
        /// [default: the program's chatbot, `chatbot` for trellis].
        #[arg(long, value_name = "PATTERN")]
        chatbot: Option<String>,
        /// Whether the model may call tools: auto, none, required (it must call one), or a
        /// tool's display name such as Counter.increment; holds for the first answer to each
        /// message. Small local models often need `required` to use tools at all.
        #[arg(long, value_name = "CHOICE", default_value = "auto")]
        tool_choice: String,
        /// How long to wait for each reply to a --message or piped line, in seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 300.0, value_parser = positive_seconds)]
        timeout: f64,
        #[command(flatten)]
        mcp: mcp::McpArgs,
    },
    /// List the tool calls waiting for your approval, and the model's questions, in the chat.
    Pending {
        /// The chatbot pattern whose conversation to look at [default: the program's chatbot].
        #[arg(long, value_name = "PATTERN")]
        chatbot: Option<String>,
    },
    /// Answer a tool call waiting for approval or a question from the model, then follow
    /// the chat until it is done or waits again (exit status 3 when it waits again, as
    /// `chat` does).
    #[command(group(clap::ArgGroup::new("reply").required(true).args(["approve", "deny", "answer"])))]
    Resolve {
        /// The waiting call, as `trellis pending` shows it; may be left out when only one waits.
        call: Option<String>,
        /// Let the call run.
        #[arg(long)]
        approve: bool,
        /// Refuse the call (or decline to answer); the reason is told to the model.
        #[arg(long, value_name = "REASON")]
        deny: Option<String>,
        /// Answer the model's question (text), confirmation (yes or no) or choice (an option).
        #[arg(long, value_name = "TEXT")]
        answer: Option<String>,
        /// The chatbot pattern whose conversation to answer [default: the program's chatbot].
        #[arg(long, value_name = "PATTERN")]
        chatbot: Option<String>,
        /// How long to wait for what follows, in seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 300.0, value_parser = positive_seconds)]
        timeout: f64,
        #[command(flatten)]
        mcp: mcp::McpArgs,
    },
    /// The Model Context Protocol: offer this space's charms to MCP hosts, list the MCP
    /// servers whose tools chat offers.
    #[command(subcommand)]
    Mcp(mcp::McpCommand),
    /// Run a short demo: a counter charm, an event, its derived label.
    Demo,
}

/// The output format chosen on the command line.
#[derive(Debug, Clone, Copy)]
pub struct Format {
    json: bool,
}

/// The `trellis` command, built like an axum or clap app: register your patterns (and
/// builtins), choose what a fresh space holds, and [`run`](App::run) it from `main`. Every
/// subcommand (`chat`, `charm`, `tools`, `patterns`, `demo`) then knows your patterns
/// beside the reference ones (counter, dice, notes, todo, chatbot).
///
/// ```no_run
/// use trellis::prelude::*;
///
/// fn greeter() -> Pattern {
///     Pattern::new("greeter", |b, _: serde_json::Value| {
///         b.name("Greeter")?;
///         b.state("greeting", "hello".to_string())?;
///         Ok(())
///     })
/// }
///
/// fn main() -> std::process::ExitCode {
///     trellis::App::new("greet")
///         .pattern(greeter())
///         .seed(|rt| Ok(rt.charms().create("greeter", serde_json::json!({})).map(drop)?))
///         .run()
/// }
/// ```
pub struct App {
    name: String,
    about: Option<String>,
    patterns: Vec<Pattern>,
    builtins: Vec<Arc<dyn Builtin>>,
    seeds: Vec<Seed>,
    reference_charms: bool,
    chatbot: String,
}

/// What a fresh space gets, beside (or instead of) the reference charms.
type Seed = Box<dyn Fn(&Runtime) -> anyhow::Result<()>>;

impl App {
    /// The command, named `name` in help and errors, with the reference patterns, the
    /// `llm_dialog` builtin, and a fresh space seeded with one reference charm of each kind.
    pub fn new(name: impl Into<String>) -> App {
        App {
            name: name.into(),
            about: None,
            patterns: Vec::new(),
            builtins: Vec::new(),
            seeds: Vec::new(),
            reference_charms: true,
            chatbot: "chatbot".into(),
        }
    }

    /// The one-line description `--help` shows.
    pub fn about(mut self, about: impl Into<String>) -> App {
        self.about = Some(about.into());
        self
    }

    /// Registers a pattern (a pattern with a reference pattern's id replaces it).
    pub fn pattern(mut self, pattern: Pattern) -> App {
        self.patterns.push(pattern);
        self
    }

    /// Registers a builtin node your patterns use.
    pub fn builtin(mut self, builtin: Arc<dyn Builtin>) -> App {
        self.builtins.push(builtin);
        self
    }

    /// Whether a fresh space gets one charm of each reference pattern (default yes).
    pub fn reference_charms(mut self, seed: bool) -> App {
        self.reference_charms = seed;
        self
    }

    /// Adds what a fresh space gets (after the reference charms, when those are seeded).
    pub fn seed(mut self, seed: impl Fn(&Runtime) -> anyhow::Result<()> + 'static) -> App {
        self.seeds.push(Box::new(seed));
        self
    }

    /// The chatbot pattern `chat` uses unless `--chatbot` says otherwise. It must keep
    /// the chatbot contract (`trellis_patterns::chatbot`).
    pub fn chatbot(mut self, pattern: impl Into<String>) -> App {
        self.chatbot = pattern.into();
        self
    }

    /// Runs the command line of this process; for `main`.
    pub fn run(self) -> ExitCode {
        self.run_from(std::env::args_os())
    }

    /// Runs the command line `args` (the program name first): parses it, starts the async
    /// runtime, runs the subcommand and prints its error, if any, on standard error.
    pub fn run_from(self, args: impl IntoIterator<Item = impl Into<OsString> + Clone>) -> ExitCode {
        let mut command = Cli::command().name(self.name.clone()).bin_name(self.name.clone());
        if let Some(about) = &self.about {
            command = command.about(about.clone());
        }
        let cli = match command.try_get_matches_from(args).and_then(|m| Cli::from_arg_matches(&m)) {
            Ok(cli) => cli,
            // Help and version print here too, and exit 0.
            Err(e) => e.exit(),
        };
        let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("error: cannot start the async runtime: {e}");
                return ExitCode::FAILURE;
            }
        };
        match runtime.block_on(self.execute(cli)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => match e.downcast_ref::<chat::Waiting>() {
                Some(waiting) => {
                    eprintln!("{waiting}");
                    ExitCode::from(chat::Waiting::EXIT_CODE)
                }
                None => {
                    eprintln!("error: {}", terminal::safe(&format!("{e:#}")));
                    ExitCode::FAILURE
                }
            },
        }
    }

    async fn execute(&self, cli: Cli) -> anyhow::Result<()> {
        let format = Format { json: cli.json };
        let path = match cli.space {
            Some(path) => path,
            None => default_space()?,
        };
        let rt = self.open_space(&path)?;
        match cli.command {
            Command::Patterns => output::patterns(&rt, format),
            Command::Charm(command) => charm::run(&rt, command, format).await,
            Command::Tools { charms } => tools::run(&rt, &charms, format),
            Command::Chat { model, messages, chatbot, tool_choice, timeout, mcp } => {
                mcp::with_servers(&rt, &mcp, async {
                    let session =
                        chat::Session::open(&rt, chatbot.as_deref().unwrap_or(&self.chatbot), &model, &tool_choice)
                            .await?;
                    chat::run(session, messages, Duration::from_secs_f64(timeout), format).await
                })
                .await?
            }
            Command::Pending { chatbot } => {
                let session = chat::Session::attach(&rt, chatbot.as_deref().unwrap_or(&self.chatbot))?;
                chat::pending(&session, format)
            }
            Command::Resolve { call, approve: _, deny, answer, chatbot, timeout, mcp } => {
                let session = chat::Session::attach(&rt, chatbot.as_deref().unwrap_or(&self.chatbot))?;
                let reply = match (deny, answer) {
                    (Some(reason), _) => chat::Reply::Deny(reason),
                    (None, Some(text)) => chat::Reply::Answer(text),
                    (None, None) => chat::Reply::Approve,
                };
                let timeout = Duration::from_secs_f64(timeout);
                mcp::with_servers(&rt, &mcp, chat::resolve(&session, call.as_deref(), reply, timeout, format)).await?
            }
            Command::Mcp(command) => mcp::run(rt, command, format).await,
            Command::Demo => charm::demo(&rt, format).await,
        }
    }

    /// Opens (creating if needed) the space and registers the patterns; a fresh space
    /// gets its seed so there is something to talk to.
    ///
    /// A space file that was there but comes back without any document (truncated, or
    /// replaced by an empty file) is also fresh to the runtime; saying so keeps a lost
    /// space from passing silently for a new one.
    fn open_space(&self, path: &Path) -> anyhow::Result<Runtime> {
        let existing = std::fs::metadata(path).ok().filter(std::fs::Metadata::is_file).map(|m| m.len());
        let rt = Runtime::open(path).with_context(|| format!("cannot open the space at {}", path.display()))?;
        trellis_patterns::register_all(&rt);
        for builtin in &self.builtins {
            rt.register_builtin(Arc::clone(builtin));
        }
        for pattern in &self.patterns {
            rt.register_pattern(pattern.clone());
        }
        if let (Some(bytes), true) = (existing, rt.space().doc_ids("").is_empty()) {
            eprintln!(
                "warning: the space {} existed but held no data ({bytes} bytes); starting a new space with the \
                 reference charms (if you expected your charms there, restore that file from a backup)",
                terminal::safe_line(&path.display().to_string())
            );
        }
        if rt.charms().list().is_empty() {
            if self.reference_charms {
                trellis_patterns::seed(&rt).context("cannot seed the fresh space with the reference charms")?;
            }
            for seed in &self.seeds {
                seed(&rt).context("cannot seed the fresh space")?;
            }
        }
        Ok(rt)
    }
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
