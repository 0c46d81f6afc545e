//! `trellis mcp`: the Model Context Protocol both ways. `mcp serve` offers the space's
//! charms to MCP hosts; `mcp list` shows the MCP servers `chat` would attach; the
//! `--mcp` and `--mcp-config` flags ([`McpArgs`]) attach them to `chat` and `resolve`.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::json;
use trellis_builtins::sources::selection::KeywordSelector;
use trellis_builtins::sources::{self, ToolSource};
use trellis_mcp::client::{self, config, McpServer, ServerSpec, CONNECT_TIMEOUT};
use trellis_runner::Runtime;

use super::output::print;
use super::Format;
use crate::terminal::{indented, safe, safe_line};

/// The MCP servers whose tools a chat offers, beside the charms', and how many tools a
/// request offers.
#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    #[command(flatten)]
    servers: ServerArgs,
    /// Offer the model at most N tools per request: the ones whose names and descriptions
    /// share the most words with the recent conversation (and those it already called)
    /// [default: all].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    max_tools: Option<u16>,
}

impl McpArgs {
    /// Whether the command line names no MCP server, file or cap (a default file may
    /// still apply).
    pub fn is_empty(&self) -> bool {
        self.servers.servers.is_empty() && self.servers.config.is_none() && self.max_tools.is_none()
    }
}

/// The MCP servers to attach.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// Attach an MCP server's tools (repeatable): `name=command args` starts a server on
    /// standard input and output, `name=http://host/mcp` reaches one over Streamable HTTP.
    /// Its tools are offered as `name.tool`; unless trusted in a --mcp-config file, a tool
    /// not marked read-only waits for your approval.
    #[arg(long = "mcp", value_name = "NAME=COMMAND")]
    servers: Vec<String>,
    /// An `mcpServers` file, as desktop MCP hosts use (`command`, `args`, `env`, or `url`
    /// and `headers`; `"trusted": true` to run a server's tools without asking, `"tools"`:
    /// globs of the tools to use)
    /// [default: $TRELLIS_MCP_CONFIG (empty for none), else ~/.config/trellis/mcp.json
    /// when it exists].
    #[arg(long = "mcp-config", value_name = "PATH")]
    config: Option<PathBuf>,
    /// A CA certificate (PEM) to trust, besides the system's, for the https:// servers that
    /// name none of their own (`"ca"` in the --mcp-config file).
    #[arg(long = "mcp-ca", value_name = "PEM")]
    ca: Option<PathBuf>,
}

impl ServerArgs {
    /// The servers named by the flags and the file (the default file only when it exists).
    pub(super) fn specs(&self) -> anyhow::Result<Vec<ServerSpec>> {
        let file = match &self.config {
            Some(path) => config::read_file(path)?,
            None => match config::default_file() {
                Some(path) if std::env::var_os(config::CONFIG_VARIABLE).is_some() => config::read_file(&path)
                    .with_context(|| {
                        format!("${} names an MCP servers file (set it empty to read none)", config::CONFIG_VARIABLE)
                    })?,
                Some(path) => config::read_file(&path)?,
                None => Vec::new(),
            },
        };
        let flags = self.servers.iter().map(|flag| ServerSpec::from_flag(flag)).collect::<Result<Vec<_>, _>>()?;
        let mut specs = config::combine(file, flags)?;
        for spec in &mut specs {
            if let config::Transport::Http { ca: ca @ None, .. } = &mut spec.transport {
                ca.clone_from(&self.ca);
            }
        }
        Ok(specs)
    }
}

/// `trellis mcp ...`.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Serve the space over standard input and output: every charm handler is a tool
    /// (`Counter_increment`, titled `Counter.increment`). Point an MCP host's
    /// `mcpServers` entry at `trellis --space PATH mcp serve`.
    Serve {
        /// Serve Streamable HTTP at http://ADDR/mcp instead (e.g. 127.0.0.1:7879; port 0
        /// picks one). Loopback only, unless --allow-remote.
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
        /// Let --http bind an address other machines can reach. Every request then needs a
        /// bearer token of the space (`token new`); serve https:// with --tls-cert and
        /// --tls-key, or the tokens cross the network in the clear.
        #[arg(long, requires = "http")]
        allow_remote: bool,
        /// With --http: each connection's deadlines and the cap per address.
        #[command(flatten)]
        connections: super::connections::ConnectionArgs,
        /// With --http: seconds a client's session may stay silent, with no stream open,
        /// before it is closed (its subscriptions go back to the budget; the client is
        /// answered 404 and starts a new session). A client listening on an open stream
        /// is never closed for being quiet.
        #[arg(long, value_name = "SECONDS", requires = "http", default_value_t = trellis_mcp::SESSION_IDLE.as_secs(),
              value_parser = clap::value_parser!(u64).range(1..=86_400))]
        session_idle: u64,
        /// With --http: serve https:// with this certificate chain (PEM, the server's
        /// certificate first); needs --tls-key.
        #[arg(long, value_name = "PEM", requires_all = ["http", "tls_key"])]
        tls_cert: Option<std::path::PathBuf>,
        /// With --tls-cert: the certificate's private key (PEM).
        #[arg(long, value_name = "PEM", requires = "tls_cert")]
        tls_key: Option<std::path::PathBuf>,
        /// With --http: ask every request for a bearer token of the space (`token new`),
        /// on loopback too; with --allow-remote it is always asked.
        #[arg(long, requires = "http")]
        require_token: bool,
    },
    /// Start (or reach) the MCP servers `chat` would attach and show each one's state,
    /// sign-in and tools; then stop them.
    List {
        #[command(flatten)]
        servers: ServerArgs,
    },
    /// Sign in to an MCP server reached by URL that asks for OAuth: prints a URL to open in
    /// a browser (on any machine; it comes back here), then keeps the tokens in your own
    /// file ($XDG_CONFIG_HOME/trellis/mcp-sign-ins.json), never in the space. Calls send
    /// them to that server only, refreshed as needed.
    Login {
        /// The server, as --mcp or the mcpServers file names it.
        name: String,
        #[command(flatten)]
        servers: ServerArgs,
        /// How long to wait for the browser to come back, in seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 300.0, value_parser = super::positive_seconds)]
        timeout: f64,
    },
    /// Forget the sign-in of an MCP server (its tokens are removed from your file).
    Logout {
        /// The server, as --mcp or the mcpServers file names it.
        name: String,
        #[command(flatten)]
        servers: ServerArgs,
    },
}

impl McpCommand {
    /// Whether the command needs a space (signing in and out are the user's alone).
    pub fn needs_space(&self) -> bool {
        !matches!(self, McpCommand::Login { .. } | McpCommand::Logout { .. })
    }

    /// Runs a command that needs no space.
    pub async fn run_local(&self, format: Format) -> anyhow::Result<()> {
        match self {
            McpCommand::Login { name, servers, timeout } => {
                super::signin::login(servers, name, std::time::Duration::from_secs_f64(*timeout), format).await
            }
            McpCommand::Logout { name, servers } => super::signin::logout(servers, name, format),
            McpCommand::Serve { .. } | McpCommand::List { .. } => {
                anyhow::bail!("`mcp serve` and `mcp list` run on a space")
            }
        }
    }
}

/// Runs `trellis mcp ...`.
pub async fn run(rt: Runtime, command: McpCommand, format: Format) -> anyhow::Result<()> {
    match command {
        McpCommand::Login { .. } | McpCommand::Logout { .. } => command.run_local(format).await,
        McpCommand::Serve { http: None, .. } => Ok(trellis_mcp::serve_stdio(rt).await?),
        McpCommand::Serve {
            http: Some(addr),
            allow_remote,
            connections,
            session_idle,
            tls_cert,
            tls_key,
            require_token,
        } => {
            if !addr.ip().is_loopback() && !allow_remote {
                anyhow::bail!(
                    "{addr} is not a loopback address: anyone who can reach it could act on your charms; \
                     use 127.0.0.1, or pass --allow-remote if that is what you want"
                );
            }
            let tls = match (tls_cert, tls_key) {
                (Some(cert), Some(key)) => Some(trellis_http::Tls::from_pem_files(&cert, &key)?),
                _ => None,
            };
            // Beyond loopback, only the holders of the space's tokens act on its charms.
            let tokens: Option<trellis_mcp::TokenCheck> = (allow_remote || require_token).then(|| {
                let rt = rt.clone();
                std::sync::Arc::new(move |token: &str| crate::tokens::verify(&rt, token).is_some()) as _
            });
            if tokens.is_some() && crate::tokens::list(&rt).is_empty() {
                eprintln!(
                    "note: this space has no tokens yet, so every request is refused; make one with `{} token new`",
                    crate::program::name()
                );
            }
            let scheme = if tls.is_some() { "https" } else { "http" };
            let ready = |bound| eprintln!("serving MCP (Streamable HTTP) at {scheme}://{bound}/mcp");
            let options = trellis_mcp::HttpOptions {
                addr,
                remote: allow_remote,
                limits: connections.limits(),
                session_idle: std::time::Duration::from_secs(session_idle),
                tls,
                tokens,
            };
            Ok(trellis_mcp::serve_http(rt, options, ready).await?)
        }
        McpCommand::List { servers } => list(&servers, format).await,
    }
}

/// `trellis mcp list`.
async fn list(args: &ServerArgs, format: Format) -> anyhow::Result<()> {
    let specs = args.specs()?;
    let connected = client::connect_all(specs.clone(), CONNECT_TIMEOUT).await;
    let servers: Vec<serde_json::Value> =
        specs.iter().zip(&connected).map(|(spec, server)| describe(spec, server)).collect();
    for server in connected.iter().flatten() {
        server.shutdown().await;
    }
    let failed = connected.iter().filter(|server| server.is_err()).count();
    let json = serde_json::Value::Array(servers);
    print(format, &json, || render(&json));
    if failed > 0 {
        anyhow::bail!("{failed} of {} MCP servers could not be reached (see their state above)", specs.len());
    }
    Ok(())
}

/// One server as `mcp list --json` shows it.
fn describe(spec: &ServerSpec, server: &Result<McpServer, client::ConnectError>) -> serde_json::Value {
    match server {
        Ok(server) => {
            let tools: Vec<serde_json::Value> = server
                .tools()
                .iter()
                .map(|tool| {
                    json!({
                        "name": tool.name,
                        "display": format!("{}.{}", spec.name, tool.name),
                        "description": tool.description,
                        "read_only": tool.read_only,
                        "destructive": tool.destructive,
                        "needs_approval": tool.approval(&spec.name, spec.trusted).is_some(),
                    })
                })
                .collect();
            json!({
                "name": spec.name,
                "endpoint": server.endpoint(),
                "trusted": spec.trusted,
                "sign_in": super::signin::state(spec),
                "state": server.state().to_string(),
                "server": server.server_info(),
                "protocol": server.protocol(),
                "notes": server.notes(),
                "tools": tools,
            })
        }
        Err(error) => json!({
            "name": spec.name,
            "trusted": spec.trusted,
            "sign_in": super::signin::state(spec),
            "state": format!("failed: {error}"),
            "tools": [],
        }),
    }
}

/// `mcp list` for people.
fn render(servers: &serde_json::Value) -> String {
    let servers = servers.as_array().map(Vec::as_slice).unwrap_or_default();
    if servers.is_empty() {
        return "no MCP servers: add one with --mcp 'name=command args' or in an mcpServers file (--mcp-config)"
            .to_string();
    }
    let text = |value: &serde_json::Value| safe_line(value.as_str().unwrap_or("")).into_owned();
    let mut out = Vec::new();
    for server in servers {
        let trust = if server["trusted"] == true { ", trusted" } else { "" };
        let sign_in = serde_json::from_value::<trellis_mcp::client::signin::SignIn>(server["sign_in"].clone())
            .map(|state| format!(", {state}"))
            .unwrap_or_default();
        out.push(format!(
            "{}  ({}{trust}{sign_in})  {}",
            text(&server["name"]),
            text(&server["state"]),
            text(&server["endpoint"])
        ));
        for note in server["notes"].as_array().map(Vec::as_slice).unwrap_or_default() {
            out.push(format!("    note: {}", text(note)));
        }
        for tool in server["tools"].as_array().map(Vec::as_slice).unwrap_or_default() {
            let asks = if tool["needs_approval"] == true { "  [asks before each call]" } else { "" };
            let description = indented(tool["description"].as_str().unwrap_or(""), "        ");
            out.push(format!("    {}{asks}\n        {description}", text(&tool["display"])));
        }
    }
    out.join("\n")
}

/// Runs `work` with the servers of `args` attached to `rt` (a server that cannot be
/// reached is skipped with a warning) and their tool selection, and shuts them down after.
pub async fn with_servers<T>(rt: &Runtime, args: &McpArgs, work: impl Future<Output = T>) -> anyhow::Result<T> {
    if let Some(cap) = args.max_tools {
        sources::select_with(rt, Some(Arc::new(KeywordSelector::new(usize::from(cap)))));
    }
    let specs = args.servers.specs()?;
    let mut attached = Vec::new();
    for (spec, server) in specs.iter().zip(client::connect_all(specs.clone(), CONNECT_TIMEOUT).await) {
        match server.map_err(anyhow::Error::from).and_then(|s| {
            client::attach(rt, &s).with_context(|| format!("cannot attach `{}`", spec.name))?;
            Ok(s)
        }) {
            Ok(server) => {
                // What was left out of its tools, and why (`mcp list` shows the same).
                for note in server.notes() {
                    eprintln!("warning: the MCP server `{}`: {}", safe(&spec.name), safe(&note));
                }
                attached.push(server);
            }
            Err(error) => eprintln!("warning: {}; going on without its tools", safe(&format!("{error:#}"))),
        }
    }
    let result = work.await;
    for server in &attached {
        client::detach(rt, server).await;
    }
    Ok(result)
}
