//! The command line's grammar: the `trellis` command, its global flags and subcommands,
//! as clap derives them, each with the help text a user reads. Only what is parsed lives
//! here; `App` (the module above) and the subcommands' modules run it, so the help can be
//! read, and changed, in one place.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use super::{charm, mcp, plugin, serve, token, watch};

/// Trellis: live charms in a durable space, and a chat that acts on them.
#[derive(Debug, Parser)]
#[command(name = "trellis", version, about, long_about = None)]
pub(super) struct Cli {
    /// The space: a SQLite file [default: trellis/space.sqlite in your data directory], or
    /// a space in PostgreSQL, postgres://USER[:PASSWORD]@HOST[:PORT]/DB?space=NAME.
    #[arg(long, global = true, env = "TRELLIS_SPACE", value_name = "PATH|URL")]
    pub(super) space: Option<PathBuf>,

    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub(super) json: bool,

    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Debug, Subcommand)]
pub(super) enum Command {
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
        /// A JSON Schema file: each reply ends with one value of it, printed (as JSON with
        /// --json); a value that does not fit goes back to the model, twice at most.
        #[arg(long, value_name = "FILE")]
        result_schema: Option<std::path::PathBuf>,
        /// A file to send with the first message (repeatable): an image, a PDF, a text
        /// file, at most 5 MB each. At the prompt, /attach FILE does the same.
        #[arg(long = "attach", value_name = "FILE")]
        attach: Vec<std::path::PathBuf>,
        /// Go on with the reply a stopped process left (`trellis pending` lists it), then
        /// with any --message; every chat does so first, this needs no message.
        #[arg(long)]
        resume: bool,
        #[command(flatten)]
        mcp: mcp::McpArgs,
    },
    /// List the tool calls waiting for your approval, and the model's questions, in the chat.
    Pending {
        /// The chatbot pattern whose conversation to look at [default: the program's chatbot].
        #[arg(long, value_name = "PATTERN")]
        chatbot: Option<String>,
    },
    /// Answer a tool call waiting for approval, a question from the model, or a tool waiting
    /// for the client's output, then follow
    /// the chat until it is done or waits again (exit status 3 when it waits again, as
    /// `chat` does).
    #[command(group(clap::ArgGroup::new("reply").args(["approve", "deny", "answer", "output", "decline", "cancel", "disallow"])))]
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
        /// Send a client execution's output (JSON), as the tool's client phase would, or the
        /// fields of a form an MCP server asks you to fill in ('{"name": "Ada"}'; checked
        /// against the form's schema; `--answer` does for a form of one field).
        #[arg(long, value_name = "JSON")]
        output: Option<String>,
        /// Say no to what an MCP server asks you mid-call; the tool goes on without.
        #[arg(long)]
        decline: bool,
        /// Dismiss what an MCP server asks you mid-call, without an answer either way.
        #[arg(long)]
        cancel: bool,
        /// With --approve: later calls of the same tool in this conversation run without
        /// asking (`trellis pending` lists them; `--disallow TOOL` asks again).
        #[arg(long)]
        always: bool,
        /// Approve the call with these arguments (JSON) instead of the model's; they are
        /// checked against the tool's schema, and the model is told. Fields only a person
        /// sets (`trellis pending` says which) are given this way.
        #[arg(long, value_name = "JSON", required_unless_present_any = ["approve", "deny", "answer", "output", "decline", "cancel", "disallow"])]
        input: Option<String>,
        /// Instead of answering a call: the calls of this tool (as `trellis pending` lists
        /// the allowed ones) ask for approval again.
        #[arg(long, value_name = "TOOL", conflicts_with_all = ["call", "always", "input"])]
        disallow: Option<String>,
        /// The chatbot pattern whose conversation to answer [default: the program's chatbot].
        #[arg(long, value_name = "PATTERN")]
        chatbot: Option<String>,
        /// How long to wait for what follows, in seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 300.0, value_parser = positive_seconds)]
        timeout: f64,
        #[command(flatten)]
        mcp: mcp::McpArgs,
    },
    /// Undo the conversation's last request (or --request ID): every change its tool
    /// calls made in the space is put back in one transaction, and the model is told.
    /// Refused, listing them, when someone wrote one of those values again since. What
    /// the calls did outside the space (MCP servers, plugins) is listed as not undone.
    Undo {
        /// The request to undo (`charm get NAME --provenance` shows which wrote a value)
        /// [default: the latest].
        #[arg(long, value_name = "ID")]
        request: Option<u64>,
        /// The chatbot pattern whose conversation to undo in [default: the program's chatbot].
        #[arg(long, value_name = "PATTERN")]
        chatbot: Option<String>,
    },
    /// The standing watches models set (`watch list`, `watch remove ID`): each tells its
    /// conversation when a condition over a charm's fields turns true.
    #[command(subcommand)]
    Watch(watch::WatchCommand),
    /// The Model Context Protocol: offer this space's charms to MCP hosts, list the MCP
    /// servers whose tools chat offers.
    #[command(subcommand)]
    Mcp(mcp::McpCommand),
    /// Run a short demo: a counter charm, an event, its derived label.
    Demo,
    /// Plugins: client tools run on this machine in a sandbox (keygen, sign, trust,
    /// install, list, remove, enable, disable, call).
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Serve the space over HTTP: a JSON API (/openapi.json) and a web chat. Prints the
    /// address to open, with a one-time sign-in token.
    Serve(serve::ServeArgs),
    /// Bearer tokens for `trellis serve`'s API (the space keeps only their hashes).
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// Whole spaces: copy one between SQLite and PostgreSQL.
    #[command(subcommand)]
    Space(SpaceCommand),
}

/// `trellis space ...`.
#[derive(Debug, Subcommand)]
pub(super) enum SpaceCommand {
    /// Copy every document of a space (charms, conversations, plugins, tokens) into a new,
    /// empty one, then read the copy back and check it. FROM and TO are each a space file
    /// or postgres://USER@HOST/DB?space=NAME; both are opened for writing, so stop a
    /// server that has one open first.
    Copy {
        /// The space to copy.
        #[arg(value_name = "FROM")]
        from: PathBuf,
        /// The space to make: it must hold no document yet.
        #[arg(value_name = "TO")]
        to: PathBuf,
    },
}

/// Parses `--timeout`: a positive number of seconds that fits a `Duration`.
pub(super) fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds > 0.0 && Duration::try_from_secs_f64(seconds).is_ok() => Ok(seconds),
        _ => Err(format!("`{text}` is not a positive number of seconds")),
    }
}
