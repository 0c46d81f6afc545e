//! Which MCP servers to attach: `--mcp 'name=command args'` on the command line, and the
//! `mcpServers` file desktop hosts use.
//!
//! A file looks like the one a desktop assistant reads, so a user can point Trellis at the
//! file they have:
//!
//! ```json
//! { "mcpServers": {
//!     "time": { "command": "uvx", "args": ["mcp-server-time"], "env": { "TZ": "UTC" } },
//!     "notes": { "url": "http://127.0.0.1:8000/mcp", "headers": { "Authorization": "Bearer ${NOTES_TOKEN}" },
//!                "trusted": true },
//!     "hosted": { "url": "https://mcp.example.com/mcp", "ca": "/etc/ssl/private-ca.pem" }
//! } }
//! ```
//!
//! An `https://` server is checked against the system's trust roots, and `ca` (a PEM file)
//! besides; plain `http://` reaches only this machine unless `"insecure": true`. A server
//! that wants OAuth is signed in to with `trellis mcp login NAME`; `"oauth"` may say how
//! Trellis is known to its authorization server: `client_id` (registered beforehand, with
//! `client_secret` for a confidential client), or `client_metadata_url` (an https URL of a
//! Client ID Metadata Document you host, used where the server supports them), and
//! `scopes`. Without it, Trellis registers itself (dynamic client registration).
//!
//! `${VAR}` in an `env` or `headers` value is taken from Trellis's own environment, so
//! secrets stay out of the file. Two keys are Trellis's own: `trusted` (default `false`)
//! lets the server's tools run without asking, whatever their annotations say; `tools`
//! (globs such as `"get_*"`) keeps only the tools it names. Keys hosts add that
//! Trellis does not use (`type`, `disabled`, ...) are ignored, except `"disabled": true`,
//! which leaves the server out.
//!
//! ```
//! use trellis_mcp::client::{ServerSpec, Transport};
//! let spec = ServerSpec::from_flag("time=python3 -m mcp_server_time --local-timezone 'Europe/Paris'")?;
//! assert_eq!(spec.name, "time");
//! let Transport::Stdio { command, args, .. } = &spec.transport else { unreachable!() };
//! assert_eq!(command, "python3");
//! assert_eq!(args, &["-m", "mcp_server_time", "--local-timezone", "Europe/Paris"]);
//! # Ok::<(), trellis_mcp::client::ConfigError>(())
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The largest configuration file read.
const MAX_FILE_BYTES: u64 = 1 << 20;
/// The most globs a server's `tools` may list.
const MAX_GLOBS: usize = 256;
/// The most servers one file or command line may name.
pub const MAX_SERVERS: usize = 64;

/// One server to attach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    /// What its tools are displayed under (`name.tool`).
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
    /// Its tools run without asking, whatever their annotations say.
    pub trusted: bool,
    /// Globs (`get_*`) naming the tools to use; empty: all of them.
    pub tools: Vec<String>,
}

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A command Trellis starts, speaking MCP on its standard input and output.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to its environment (values already expanded).
        env: BTreeMap<String, String>,
    },
    /// A Streamable HTTP endpoint.
    Http {
        /// Its URL (`https://…/mcp`; `http://` to loopback, or anywhere when `insecure`).
        url: String,
        /// Headers sent with every request (values already expanded).
        headers: BTreeMap<String, String>,
        /// A CA certificate (PEM) trusted for this server besides the system's roots.
        ca: Option<PathBuf>,
        /// Whether plain `http://` may reach another machine.
        insecure: bool,
        /// How Trellis is known to the server's authorization server, if it signs in.
        oauth: OAuthClient,
    },
}

/// How Trellis is known to an authorization server (`"oauth"` in a server's entry); by
/// default it registers itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OAuthClient {
    /// A client id registered beforehand.
    pub client_id: Option<String>,
    /// Its secret, for a confidential client (value already expanded).
    pub client_secret: Option<String>,
    /// The https URL of a Client ID Metadata Document describing Trellis.
    pub client_metadata_url: Option<String>,
    /// The scopes to ask for; empty: what the server says it supports.
    pub scopes: Vec<String>,
}

/// Why a server configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The configuration file cannot be read.
    #[error("cannot read the MCP configuration {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is too large.
    #[error("the MCP configuration {0} is larger than 1 MiB; is it the right file?")]
    TooLarge(PathBuf),
    /// The file is not the JSON it should be.
    #[error("the MCP configuration {path} is not valid: {message}")]
    Invalid {
        /// The file (empty for a flag).
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A `--mcp` value is malformed.
    #[error("`--mcp {given}`: {message}; write it as `--mcp 'name=command args'` or `--mcp 'name=http://host/mcp'`")]
    Flag {
        /// The value given.
        given: String,
        /// What is wrong.
        message: String,
    },
    /// A `${VAR}` names a variable that is not set.
    #[error("the MCP server `{server}` needs the environment variable `{variable}`; set it and try again")]
    MissingVariable {
        /// The server.
        server: String,
        /// The variable.
        variable: String,
    },
    /// Two servers have the same name.
    #[error("two MCP servers are named `{0}`; give each a name of its own")]
    Duplicate(String),
}

impl ServerSpec {
    /// Reads a `--mcp` value: `name=command args…` (a stdio server; arguments split on
    /// spaces, `'…'` and `"…"` quote) or `name=http://…` (Streamable HTTP). Untrusted.
    pub fn from_flag(flag: &str) -> Result<ServerSpec, ConfigError> {
        let bad = |message: &str| ConfigError::Flag { given: flag.to_string(), message: message.to_string() };
        let (name, rest) = flag.split_once('=').ok_or_else(|| bad("no `=` after the server's name"))?;
        let name = check_name(name.trim()).map_err(|m| bad(&m))?;
        let rest = rest.trim();
        let transport = if rest.starts_with("http://") || rest.starts_with("https://") {
            let (url, headers, oauth) = (rest.to_string(), BTreeMap::new(), OAuthClient::default());
            Transport::Http { url, headers, ca: None, insecure: false, oauth }
        } else {
            let mut words = split_words(rest).map_err(|m| bad(&m))?.into_iter();
            let command = words.next().ok_or_else(|| bad("no command after `=`"))?;
            Transport::Stdio { command, args: words.collect(), env: BTreeMap::new() }
        };
        Ok(ServerSpec { name, transport, trusted: false, tools: Vec::new() })
    }
}

/// The servers of an `mcpServers` file, in name order, leaving out disabled ones.
pub fn read_file(path: &Path) -> Result<Vec<ServerSpec>, ConfigError> {
    let read = |source| ConfigError::Read { path: path.to_path_buf(), source };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_FILE_BYTES + 1), &mut text).map_err(read)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(ConfigError::TooLarge(path.to_path_buf()));
    }
    parse(&text, &|name| std::env::var(name).ok()).map_err(|error| match error {
        ConfigError::Invalid { message, .. } => ConfigError::Invalid { path: path.to_path_buf(), message },
        other => other,
    })
}

/// The `mcpServers` file Trellis reads when none is given: the one `$TRELLIS_MCP_CONFIG`
/// names, which must then exist (set it empty for none); else
/// `$XDG_CONFIG_HOME/trellis/mcp.json` or `~/.config/trellis/mcp.json`, when it exists.
pub fn default_file() -> Option<PathBuf> {
    match std::env::var_os(CONFIG_VARIABLE) {
        Some(path) if path.is_empty() => None,
        Some(path) => Some(PathBuf::from(path)),
        None => Some(trellis_runner::dirs::config_dir()?.join("mcp.json")).filter(|path| path.is_file()),
    }
}

/// The environment variable that names the `mcpServers` file.
pub const CONFIG_VARIABLE: &str = "TRELLIS_MCP_CONFIG";

/// The servers of an `mcpServers` document; `${VAR}` is looked up with `var`.
pub fn parse(text: &str, var: &dyn Fn(&str) -> Option<String>) -> Result<Vec<ServerSpec>, ConfigError> {
    let invalid = |message: String| ConfigError::Invalid { path: PathBuf::new(), message };
    let document: Value = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
    let servers = match document.get("mcpServers") {
        Some(Value::Object(servers)) => servers,
        Some(_) => return Err(invalid("`mcpServers` must be an object of name to server".into())),
        None => return Err(invalid("no `mcpServers` object at the top level".into())),
    };
    if servers.len() > MAX_SERVERS {
        return Err(invalid(format!("more than {MAX_SERVERS} servers")));
    }
    let mut specs = Vec::new();
    for (name, server) in servers {
        let at = |message: &str| invalid(format!("server `{name}`: {message}"));
        let Value::Object(fields) = server else { return Err(at("must be an object")) };
        if fields.get("disabled").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        let name = check_name(name).map_err(|m| at(&m))?;
        let strings = |key: &str| -> Result<BTreeMap<String, String>, ConfigError> {
            let Some(map) = fields.get(key) else { return Ok(BTreeMap::new()) };
            let map = map.as_object().ok_or_else(|| at(&format!("`{key}` must be an object of strings")))?;
            map.iter()
                .map(|(k, v)| {
                    let v = v.as_str().ok_or_else(|| at(&format!("`{key}.{k}` must be a string")))?;
                    Ok((k.clone(), expand(v, &name, var)?))
                })
                .collect()
        };
        let transport = match (fields.get("command"), fields.get("url")) {
            (Some(Value::String(command)), None) => {
                let args = match fields.get("args") {
                    None => Vec::new(),
                    Some(Value::Array(args)) => args
                        .iter()
                        .map(|a| a.as_str().map(str::to_string).ok_or_else(|| at("`args` must be strings")))
                        .collect::<Result<_, _>>()?,
                    Some(_) => return Err(at("`args` must be an array of strings")),
                };
                Transport::Stdio { command: command.clone(), args, env: strings("env")? }
            }
            (None, Some(Value::String(url))) => {
                if fields.get("type").and_then(Value::as_str) == Some("sse") {
                    return Err(at("the old HTTP+SSE transport is not supported; use its Streamable HTTP URL"));
                }
                let ca = match fields.get("ca") {
                    None => None,
                    Some(Value::String(path)) => Some(PathBuf::from(expand(path, &name, var)?)),
                    Some(_) => return Err(at("`ca` must be the path of a PEM file")),
                };
                let insecure = match fields.get("insecure") {
                    None => false,
                    Some(Value::Bool(insecure)) => *insecure,
                    Some(_) => return Err(at("`insecure` must be true or false")),
                };
                let oauth = oauth_client(fields.get("oauth"), &|text| expand(text, &name, var)).map_err(|m| at(&m))?;
                Transport::Http { url: expand(url, &name, var)?, headers: strings("headers")?, ca, insecure, oauth }
            }
            (Some(_), Some(_)) => return Err(at("has both `command` and `url`; keep one")),
            _ => return Err(at("needs `command` (a string) or `url` (a string)")),
        };
        // `"trusted": "yes"` is no answer: refused, not taken as untrusted in silence.
        let trusted = match fields.get("trusted") {
            None => false,
            Some(Value::Bool(trusted)) => *trusted,
            Some(_) => return Err(at("`trusted` must be true or false")),
        };
        let tools = match fields.get("tools") {
            None => Vec::new(),
            Some(Value::Array(globs)) if globs.len() <= MAX_GLOBS => globs
                .iter()
                .map(|g| g.as_str().map(str::to_string).ok_or_else(|| at("`tools` must be glob strings")))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(at(&format!("`tools` must be an array of at most {MAX_GLOBS} globs"))),
        };
        specs.push(ServerSpec { name, transport, trusted, tools });
    }
    Ok(specs)
}

/// Puts flag servers after file servers, refusing two with one name.
pub fn combine(file: Vec<ServerSpec>, flags: Vec<ServerSpec>) -> Result<Vec<ServerSpec>, ConfigError> {
    let mut all: Vec<ServerSpec> = Vec::with_capacity(file.len() + flags.len());
    for spec in file.into_iter().chain(flags) {
        if all.iter().any(|s| s.name == spec.name) {
            return Err(ConfigError::Duplicate(spec.name));
        }
        all.push(spec);
    }
    if all.len() > MAX_SERVERS {
        return Err(ConfigError::Invalid { path: PathBuf::new(), message: format!("more than {MAX_SERVERS} servers") });
    }
    Ok(all)
}

/// The `"oauth"` object of a server's entry; `expand` fills in `${VAR}`s.
fn oauth_client(
    given: Option<&Value>,
    expand: &dyn Fn(&str) -> Result<String, ConfigError>,
) -> Result<OAuthClient, String> {
    let Some(given) = given else { return Ok(OAuthClient::default()) };
    let fields = given.as_object().ok_or("`oauth` must be an object")?;
    let text = |key: &str| -> Result<Option<String>, String> {
        match fields.get(key) {
            None => Ok(None),
            Some(Value::String(text)) => expand(text).map(Some).map_err(|e| e.to_string()),
            Some(_) => Err(format!("`oauth.{key}` must be a string")),
        }
    };
    let scopes = match fields.get("scopes") {
        None => Vec::new(),
        Some(Value::Array(all)) => all
            .iter()
            .map(|s| s.as_str().map(str::to_string).ok_or("`oauth.scopes` must be strings"))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("`oauth.scopes` must be an array of strings".into()),
    };
    let client = OAuthClient {
        client_id: text("client_id")?,
        client_secret: text("client_secret")?,
        client_metadata_url: text("client_metadata_url")?,
        scopes,
    };
    if client.client_secret.is_some() && client.client_id.is_none() {
        return Err("`oauth.client_secret` goes with `oauth.client_id`".into());
    }
    if client.client_metadata_url.as_deref().is_some_and(|url| !url.starts_with("https://")) {
        return Err("`oauth.client_metadata_url` must be an https:// URL".into());
    }
    Ok(client)
}

/// A server name is what tools are displayed under: no `.` (it separates server from
/// tool), no control characters, 1 to 64 characters.
fn check_name(name: &str) -> Result<String, String> {
    let fine = !name.is_empty()
        && name.chars().count() <= 64
        && !name.contains('.')
        && !name.chars().any(|c| c.is_control() || c.is_whitespace());
    if fine {
        Ok(name.to_string())
    } else {
        Err(format!(
            "the server name `{}` must be 1 to 64 characters without `.`, spaces or control characters",
            name.escape_debug()
        ))
    }
}

/// Replaces each `${VAR}` in `value` with the variable's value.
fn expand(value: &str, server: &str, var: &dyn Fn(&str) -> Option<String>) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let variable = &after[..end];
        let found = var(variable).ok_or_else(|| ConfigError::MissingVariable {
            server: server.to_string(),
            variable: variable.to_string(),
        })?;
        out.push_str(&found);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Splits a command line on whitespace; `'…'` and `"…"` quote (no escapes inside `'…'`,
/// `\` escapes the next character elsewhere).
fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => words.extend(word.take()),
            '\'' | '"' => {
                let quoted = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        None => return Err(format!("a {c} quote is not closed")),
                        Some(end) if end == c => break,
                        Some('\\') if c == '"' => quoted.extend(chars.next()),
                        Some(other) => quoted.push(other),
                    }
                }
            }
            '\\' => word.get_or_insert_with(String::new).extend(chars.next()),
            other => word.get_or_insert_with(String::new).push(other),
        }
    }
    words.extend(word);
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "TOKEN").then(|| "s3cret".to_string())
    }

    #[test]
    fn a_desktop_hosts_file_reads_as_it_is() {
        let text = r#"{ "mcpServers": {
            "time": { "type": "stdio", "command": "uvx", "args": ["mcp-server-time"], "env": { "A": "x${TOKEN}y" } },
            "web": { "url": "http://127.0.0.1:1/mcp", "headers": { "Authorization": "Bearer ${TOKEN}" }, "trusted": true,
                     "tools": ["get_*", "echo"],
                     "oauth": { "client_id": "trellis-desk", "client_secret": "${TOKEN}", "scopes": ["read"] } },
            "off": { "command": "nothing", "disabled": true }
        } }"#;
        let specs = parse(text, &env).expect("valid");
        assert_eq!(specs.len(), 2, "disabled servers are left out");
        assert_eq!(specs[0].name, "time");
        assert!(!specs[0].trusted, "untrusted unless the file says so");
        let Transport::Stdio { env, .. } = &specs[0].transport else { panic!("stdio") };
        assert_eq!(env["A"], "xs3crety");
        let Transport::Http { headers, .. } = &specs[1].transport else { panic!("http") };
        assert_eq!(headers["Authorization"], "Bearer s3cret");
        let Transport::Http { oauth, .. } = &specs[1].transport else { panic!("http") };
        let expected = OAuthClient {
            client_id: Some("trellis-desk".into()),
            client_secret: Some("s3cret".into()),
            client_metadata_url: None,
            scopes: vec!["read".into()],
        };
        assert_eq!(*oauth, expected);
        assert!(specs[1].trusted);
        assert_eq!(specs[1].tools, ["get_*", "echo"]);
    }

    #[test]
    fn what_is_wrong_in_a_file_is_named() {
        let cases = [
            (r#"{}"#, "no `mcpServers`"),
            (r#"{"mcpServers": {"a": {}}}"#, "needs `command`"),
            (r#"{"mcpServers": {"a": {"command": "x", "url": "y"}}}"#, "both"),
            (r#"{"mcpServers": {"a.b": {"command": "x"}}}"#, "without `.`"),
            (r#"{"mcpServers": {"a": {"command": "x", "args": [1]}}}"#, "`args`"),
            (r#"{"mcpServers": {"a": {"url": "x", "type": "sse"}}}"#, "Streamable HTTP"),
            (r#"{"mcpServers": {"a": {"command": "x", "trusted": "yes"}}}"#, "`trusted` must be true or false"),
            (r#"{"mcpServers": {"a": {"url": "x", "oauth": {"client_secret": "s"}}}}"#, "goes with `oauth.client_id`"),
            (r#"{"mcpServers": {"a": {"url": "x", "oauth": {"client_metadata_url": "http://x/c"}}}}"#, "https://"),
            (r#"{"mcpServers": {"a": {"url": "x", "oauth": {"scopes": "all"}}}}"#, "`oauth.scopes`"),
        ];
        for (text, expected) in cases {
            let error = parse(text, &env).expect_err(text).to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
        let missing = parse(r#"{"mcpServers": {"a": {"url": "x", "headers": {"H": "${NOPE}"}}}}"#, &env);
        assert!(missing.expect_err("unset").to_string().contains("`NOPE`"));
    }

    #[test]
    fn flags_split_like_a_shell_and_tell_the_form_when_wrong() {
        let spec = ServerSpec::from_flag(r#"e=node "my dir/index.js" stdio a\ b"#).expect("valid");
        let Transport::Stdio { command, args, .. } = spec.transport else { panic!("stdio") };
        assert_eq!(
            (command.as_str(), args),
            ("node", vec!["my dir/index.js".to_string(), "stdio".into(), "a b".into()])
        );
        let http = ServerSpec::from_flag("w=http://127.0.0.1:9/mcp").expect("valid");
        assert!(matches!(http.transport, Transport::Http { .. }));
        for bad in ["noequals", "=cmd", "a=", "a='open", "a.b=cmd"] {
            let error = ServerSpec::from_flag(bad).expect_err(bad).to_string();
            assert!(error.contains("--mcp 'name=command args'"), "{bad}: {error}");
        }
    }

    #[test]
    fn two_servers_with_one_name_are_refused() {
        let a = ServerSpec::from_flag("a=x").expect("valid");
        assert!(matches!(combine(vec![a.clone()], vec![a]), Err(ConfigError::Duplicate(name)) if name == "a"));
    }
}
