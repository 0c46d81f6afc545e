//! The `trellis` command as a library: [`App`] parses the command line and runs it, with
//! the patterns and builtins an embedder registers beside the reference ones. Every
//! command takes `--space` and `--json`.

pub(crate) mod charm;
pub(crate) mod chat;
mod commands;
pub(crate) mod connections;
mod copy;
mod form;
mod headless;
mod history;
mod interactive;
mod mcp;
pub(crate) mod output;
mod plugin;
mod remote;
mod serve;
mod signin;
mod space;
mod token;
pub(crate) mod tools;
pub(crate) mod transcript;
mod watch;

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches};
use trellis_runner::{Builtin, Pattern, Runtime};

use crate::session::{Reply, Session};
use crate::terminal;
use commands::{positive_seconds, Cli, Command, SpaceCommand};
use space::{default_space, in_use, unwritable, Claim, Place};

/// The output format chosen on the command line.
#[derive(Debug, Clone, Copy)]
pub struct Format {
    json: bool,
}

impl Format {
    /// Text output.
    pub fn text() -> Format {
        Format { json: false }
    }
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
    /// The defined tools the chat's dialogs offer and whose client phases the terminal runs.
    tools: trellis_builtins::tool::ToolRegistry,
    /// Plugins in Rust, whose tools the terminal runs and whose hooks fire around turns.
    plugins: Vec<trellis_plugins::Plugin>,
}

/// What a fresh space gets, beside (or instead of) the reference charms.
/// Shared by the threads a server of a database opens its spaces on.
type Seed = Box<dyn Fn(&Runtime) -> anyhow::Result<()> + Send + Sync>;

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
            tools: trellis_builtins::tool::ToolRegistry::standard(),
            plugins: Vec::new(),
        }
    }

    /// The tools defined with `ToolBuilder` that dialogs may offer (`{"tool": "name"}`
    /// entries); `trellis chat` runs their client phases at the terminal. Start from
    /// `ToolRegistry::standard()` to keep `request_human_input`.
    pub fn tools(mut self, tools: trellis_builtins::tool::ToolRegistry) -> App {
        self.tools = tools;
        self
    }

    /// Adds a plugin written in Rust (`trellis_plugins::Plugin::builder`). `trellis chat`
    /// offers its tools to the model as client tools and runs them in this process (its
    /// `on_tool_call` hook around each call), and its `before_request` and
    /// `after_response` hooks fire around every turn; `pending` and `resolve` run its
    /// tools too. A plugin that breaks a registration rule (a tool name taken by a server
    /// tool or another plugin) is reported and left out. The web page of `trellis serve`
    /// runs installed plugin bundles only.
    pub fn plugin(mut self, plugin: trellis_plugins::Plugin) -> App {
        self.plugins.push(plugin);
        self
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
    /// A server of a database may open several spaces at once, on threads of their own:
    /// the seed is shared by them.
    pub fn seed(mut self, seed: impl Fn(&Runtime) -> anyhow::Result<()> + Send + Sync + 'static) -> App {
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
        crate::program::set_name(&self.name);
        let mut command = Cli::command().name(self.name.clone()).bin_name(self.name.clone());
        if let Some(about) = &self.about {
            command = command.about(about.clone());
        }
        let matched = command.try_get_matches_from(args).and_then(|m| Ok((Cli::from_arg_matches(&m)?, m)));
        let (cli, matches) = match matched {
            Ok(parsed) => parsed,
            // Help and version print here too, and exit 0.
            Err(e) => e.exit(),
        };
        start_log();
        // With traces on, the command is the root of its trace: a request it sends to the
        // server holding its space goes on in it (`traceparent`).
        let span = crate::telemetry::command_span(&self.name, &matches);
        let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("error: cannot start the async runtime: {e}");
                return ExitCode::FAILURE;
            }
        };
        let outcome = runtime.block_on(tracing::Instrument::instrument(self.execute(cli), span));
        // The tasks end, and with them the space is let go (an `App` run in a test opens
        // it again next). A call the command stopped waiting for (a plugin past its
        // timeout, still burning its fuel on a blocking thread) is not waited for long.
        runtime.shutdown_timeout(SHUTDOWN);
        // The spans of the command's last moments too.
        crate::telemetry::flush();
        match outcome {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => match e.downcast_ref::<chat::Waiting>() {
                Some(waiting) => {
                    eprintln!("{}", terminal::safe(&waiting.to_string()));
                    ExitCode::from(chat::Waiting::EXIT_CODE)
                }
                None => {
                    eprintln!("error: {}", terminal::safe(&crate::program::with_commands(&explain(&e))));
                    ExitCode::FAILURE
                }
            },
        }
    }

    /// What a chat on `place` serves beside it while a tool's question waits: a space in a
    /// file only (a node of a database serves its spaces already).
    fn publish(&self, rt: &Runtime, place: &Place, chatbot: &str) -> Option<chat::Publish> {
        let Place::File(space) = place else { return None };
        let (rt, space, chatbot, tools) = (rt.clone(), space.clone(), chatbot.to_string(), self.tools.clone());
        Some(chat::Publish { rt, space, chatbot, tools })
    }

    /// The session of the space's chatbot charm (`chatbot`, else the app's) as the
    /// conversation left it, with the app's tools and plugins.
    fn attach(&self, rt: &Runtime, chatbot: Option<&str>) -> anyhow::Result<Session> {
        Session::attach(rt, chatbot.unwrap_or(&self.chatbot), self.tools.clone(), &self.plugins)
    }

    async fn execute(&self, cli: Cli) -> anyhow::Result<()> {
        let format = Format { json: cli.json };
        if let Command::Plugin(command) = &cli.command {
            if !command.needs_space() {
                return plugin::run_local(command, format);
            }
        }
        if let Command::Mcp(command) = &cli.command {
            if !command.needs_space() {
                return command.run_local(format).await;
            }
        }
        // Whole spaces: two of them, opened below the runtime.
        if let Command::Space(command) = cli.command {
            return command.run(format);
        }
        let command = match cli.command {
            Command::Serve(args) if args.database.is_some() => return self.serve_many(args).await,
            command => command,
        };
        let place = match cli.space {
            Some(given) => Place::parse(given)?,
            None => Place::File(default_space()?),
        };
        let claim = match &command {
            Command::Serve(args) => args.claim(),
            _ => Claim::default(),
        };
        let rt = match (self.open_space(&place, command.runs_conversations(), &claim), &place) {
            (Ok(rt), _) => rt,
            // `trellis serve` holds the space: talk to it instead.
            (Err(e), Place::File(path)) if in_use(&e) => match crate::client::Remote::connect(path).await {
                Some(server) => return remote::run(server, command, format).await,
                // A running chat, say: what only reads can read what it saved.
                None if command.only_reads() => self.open_snapshot(path, "is in use by another trellis process")?,
                None => return Err(space::readers_still_can(&e)),
            },
            // A node of the database holds the space: the command goes there.
            (Err(e), Place::Postgres(url)) => match space::holder_addr(&e) {
                Some(addr) => {
                    return remote::run(crate::client::Remote::holder(url, &addr).await?, command, format).await
                }
                None => return Err(e),
            },
            (Err(e), Place::File(path)) if unwritable(&e) && command.only_reads() => {
                self.open_snapshot(path, "is not writable")?
            }
            (Err(e), _) if unwritable(&e) => return Err(space::readers_still_can(&e)),
            (Err(e), _) => return Err(e),
        };
        let done = self.run_command(rt.clone(), command, place, format).await;
        // What the command's changes made the watches find is recorded before it exits.
        let watches = trellis_runner::Link::new(trellis_builtins::watch::WATCHES_DOC, trellis_runner::Path::root());
        if rt.settled(&watches, Duration::from_secs(5)).await.is_err() {
            eprintln!("warning: the watches did not finish checking this command's changes; the next command will");
        }
        // A document that could not be read was read as empty: what was shown (an empty
        // list, "unknown charm") would be false.
        match rt.space().damage() {
            Some(damage) => Err(anyhow::Error::new(damage)
                .context("the space could not be read whole, so what was shown may be incomplete or wrong")),
            None => done,
        }
    }

    async fn run_command(&self, rt: Runtime, command: Command, place: Place, format: Format) -> anyhow::Result<()> {
        match command {
            Command::Patterns => output::patterns(&rt, format),
            Command::Charm(command) => charm::run(&rt, command, format).await,
            Command::Tools { charms } => tools::run(&rt, &charms, format),
            Command::Chat { model, messages, chatbot, tool_choice, timeout, result_schema, attach, resume, mcp } => {
                let result_schema = chat::result_schema(result_schema.as_deref())?;
                let files = chat::attachments(&attach)?;
                mcp::with_servers(&rt, &mcp, async {
                    let chatbot = chatbot.as_deref().unwrap_or(&self.chatbot);
                    let session =
                        Session::open(&rt, chatbot, &model, &tool_choice, self.tools.clone(), &self.plugins).await?;
                    session.set_result_schema(result_schema).await?;
                    let publish = self.publish(&rt, &place, chatbot);
                    let timing = (Duration::from_secs_f64(timeout), resume);
                    chat::run(session, messages, files, timing, (format, publish)).await
                })
                .await?
            }
            Command::Pending { chatbot } => chat::pending(&self.attach(&rt, chatbot.as_deref())?, format),
            Command::Undo { request, chatbot } => {
                history::undo(&self.attach(&rt, chatbot.as_deref())?, request, format)
            }
            Command::Resolve {
                call,
                approve: _,
                deny,
                answer,
                output,
                decline,
                cancel,
                always,
                input,
                disallow,
                chatbot,
                timeout,
                mcp,
            } => {
                let session = self.attach(&rt, chatbot.as_deref())?;
                if let Some(tool) = disallow {
                    return chat::disallow(&session, &tool, format).await;
                }
                let reply = Reply::from_flags(deny, answer, output, (decline, cancel), (always, input))?;
                let timeout = Duration::from_secs_f64(timeout);
                let publish = self.publish(&rt, &place, chatbot.as_deref().unwrap_or(&self.chatbot));
                let resolving = chat::resolve(&session, call.as_deref(), reply, timeout, (format, publish));
                mcp::with_servers(&rt, &mcp, resolving).await?
            }
            Command::Mcp(command) => mcp::run(rt, command, format).await,
            Command::Demo => charm::demo(&rt, format).await,
            Command::Plugin(command) => plugin::run(&rt, command, format).await,
            Command::Serve(args) => {
                let space = match place {
                    Place::File(path) => Some(path),
                    Place::Postgres(_) => None,
                };
                let servers = args.mcp.clone();
                mcp::with_servers(&rt, &servers, crate::serve::run(rt.clone(), self.serve_options(args, space))).await?
            }
            Command::Token(command) => token::run(&rt, command, format),
            Command::Watch(command) => watch::run(&rt, command, format),
            Command::Space(command) => command.run(format),
        }
    }
}

/// The log on standard error (escaped), at the level `TRELLIS_LOG` names: `error`, `warn`
/// (the default: MCP servers that stop, tool entries skipped, storage trouble), `info`
/// (also each tool call and what MCP servers write on their standard error), `debug`,
/// `trace` or `off`; and OpenTelemetry traces when the environment names a collector
/// (`crate::telemetry`). A program that set up its own tracing subscriber keeps it.
fn start_log() {
    use tracing_subscriber::filter::LevelFilter;
    let level = match std::env::var("TRELLIS_LOG") {
        Err(_) => LevelFilter::WARN,
        Ok(text) => text.trim().parse().unwrap_or_else(|_| {
            eprintln!(
                "warning: TRELLIS_LOG={} is not a level (error, warn, info, debug, trace, off); logging warnings",
                terminal::safe_line(&text)
            );
            LevelFilter::WARN
        }),
    };
    crate::telemetry::start(level);
}

/// How long a command, once done, waits for the blocking calls it stopped waiting for.
const SHUTDOWN: Duration = Duration::from_secs(2);

/// An error and its causes on one line, as `{:#}` writes them, but without a cause whose
/// text the message already holds: many errors name their cause in their own message too,
/// and a user should not read "No such file or directory" twice. A cause that only puts a
/// label before such a text ("Error code 1544: attempt to write a readonly database") is
/// left out as well.
fn explain(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        let labelled = cause.split_once(": ").is_some_and(|(_, said)| !said.is_empty() && text.contains(said));
        if !text.contains(&cause) && !labelled {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

#[cfg(test)]
mod tests {
    /// An error saying `text`, caused by `source`.
    #[derive(Debug)]
    struct Said(&'static str, Option<Box<Said>>);

    impl std::fmt::Display for Said {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Said {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|s| s as _)
        }
    }

    #[test]
    fn a_cause_is_told_once_even_behind_a_label() {
        let sqlite = Said("readonly database", Some(Box::new(Said("Error code 1544: readonly database", None))));
        let error = anyhow::Error::new(sqlite).context("cannot open the space");
        assert_eq!(super::explain(&error), "cannot open the space: readonly database");
        let io = Said("cannot read the file", Some(Box::new(Said("Permission denied", None))));
        assert_eq!(super::explain(&anyhow::Error::new(io)), "cannot read the file: Permission denied");
    }
}
