//! Reaching a server: starting its command (its standard error goes to the log) or
//! opening its Streamable HTTP endpoint, then the MCP handshake.
//!
//! The handshake tries the current revision first (`server/discover`), else `initialize`.
//! An HTTP server is reached with the client of `super::http` (TLS, no redirects).

use std::collections::HashMap;
use std::time::Duration;

use rmcp::model::ProtocolVersion;
use rmcp::service::RunningService;
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::RoleClient;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

use super::config::{ServerSpec, Transport};
use super::handler::Handler;
use super::stdio::ChildTransport;
use super::ConnectError;

/// The variables a stdio server gets from Trellis's environment (those MCP hosts pass on
/// Unix), beside the ones its configuration sets.
const INHERITED_ENV: &[&str] = &["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "TMPDIR"];

/// The longest line of a server's standard error logged as one line.
const MAX_LOG_LINE: usize = 8 * 1024;

/// A running MCP session with a server, and the child's process id for a stdio server.
pub(super) struct Session {
    pub(super) service: RunningService<RoleClient, Handler>,
    pub(super) pid: Option<u32>,
}

/// Starts (or opens) the server of `spec` and shakes hands within `timeout`.
pub(super) async fn open(spec: &ServerSpec, handler: Handler, timeout: Duration) -> Result<Session, ConnectError> {
    let name = spec.name.clone();
    let failed = |message: String| ConnectError::Failed { server: name.clone(), message };
    let handshake = |e: &dyn std::fmt::Display| failed(format!("the MCP handshake failed: {e}"));
    let timed_out = || ConnectError::Timeout { server: name.clone(), after: timeout };
    match &spec.transport {
        Transport::Stdio { command, args, env } => {
            let mut cmd = tokio::process::Command::new(command);
            // Only what a program needs to run, and what the configuration gives it: the
            // rest of Trellis's environment (provider keys) is not the server's business.
            let inherited = INHERITED_ENV.iter().filter_map(|name| Some((*name, std::env::var_os(name)?)));
            cmd.args(args).env_clear().envs(inherited).envs(env);
            let (child, stderr) = ChildTransport::spawn(cmd).map_err(|e| {
                failed(format!("cannot start `{command}`: {e}; check the command and that it is installed"))
            })?;
            let pid = child.id();
            if let Some(stderr) = stderr {
                tokio::spawn(log_lines(spec.name.clone(), stderr));
            }
            // Dropping the transport on a failed handshake kills the child (Tokio reaps it).
            let service = tokio::time::timeout(timeout, handler.serve_with_lifecycle(child, lifecycle()))
                .await
                .map_err(|_| timed_out())?
                .map_err(|e| handshake(&e))?;
            Ok(Session { service, pid })
        }
        Transport::Http { url, headers, ca, insecure, .. } => {
            super::http::check_url(url, *insecure).map_err(failed)?;
            let client = super::http::client(ca.as_deref()).map_err(failed)?;
            let mut custom = HashMap::new();
            for (key, value) in headers {
                let key = http::HeaderName::try_from(key.as_str())
                    .map_err(|e| failed(format!("the header name `{key}` cannot be sent: {e}")))?;
                let value = http::HeaderValue::try_from(value.as_str())
                    .map_err(|e| failed(format!("the value of the header `{key}` cannot be sent: {e}")))?;
                custom.insert(key, value);
            }
            let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
            // A server the person signed in to gets its token, refreshed as needed.
            let signed_in = match super::signin::SignIns::user() {
                Ok(file) => tokio::time::timeout(timeout, super::signin::authorized(url, client.clone(), &file))
                    .await
                    .map_err(|_| timed_out())?
                    .map_err(|e| failed(format!("cannot use its sign-in: {e}")))?,
                Err(_) => None,
            };
            let had_sign_in = signed_in.is_some();
            let shaking = match signed_in {
                Some(authorized) => {
                    shake_hands(handler, StreamableHttpClientTransport::with_client(authorized, config))
                }
                None => shake_hands(handler, StreamableHttpClientTransport::with_client(client, config)),
            };
            let service = tokio::time::timeout(timeout, shaking)
                .await
                .map_err(|_| timed_out())?
                .map_err(|e| failed(explained(&e, spec, (ca.is_some(), had_sign_in))))?;
            Ok(Session { service, pid: None })
        }
    }
}

/// The handshake over `transport`, boxed so that both HTTP clients (with a sign-in or
/// without) take one path.
fn shake_hands<T, E, A: 'static>(
    handler: Handler,
    transport: T,
) -> futures::future::BoxFuture<
    'static,
    Result<RunningService<RoleClient, Handler>, rmcp::service::ClientInitializeError>,
>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    Box::pin(handler.serve_with_lifecycle(transport, lifecycle()))
}

/// A failed HTTP handshake's error, saying what helps: a sign-in when the server asks
/// for one, a CA when reqwest's message hides a certificate the system does not trust.
fn explained(error: &dyn std::fmt::Display, spec: &ServerSpec, (has_ca, had_sign_in): (bool, bool)) -> String {
    let text = error.to_string();
    if text.contains("Auth required") {
        let again = if had_sign_in { " again (the kept sign-in was refused and could not be refreshed)" } else { "" };
        return format!("the server asks you to sign in{again}: run `trellis mcp login {}`", spec.name);
    }
    let hint = match spec_is_https(spec) && !has_ca {
        true => " (if its certificate comes from a private CA, give that CA with \"ca\" in its entry or --mcp-ca)",
        false => "",
    };
    format!("the MCP handshake failed: {text}{hint}")
}

fn spec_is_https(spec: &ServerSpec) -> bool {
    matches!(&spec.transport, Transport::Http { url, .. } if url.starts_with("https://"))
}

/// The current revision first (`server/discover`), else the `initialize` handshake of
/// the revisions most servers speak today (a server that says it does not know
/// `server/discover` gets it at once; one that stays silent, after rmcp's 10 s).
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto { preferred_versions: vec![ProtocolVersion::LATEST], legacy_version: None }
}

/// Logs each line the server writes to its standard error, until it closes it. A line
/// longer than [`MAX_LOG_LINE`] is logged in pieces.
async fn log_lines(server: String, stderr: impl AsyncRead + Unpin) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = {
            let mut limited = (&mut reader).take(MAX_LOG_LINE as u64);
            limited.read_until(b'\n', &mut line).await
        };
        match read {
            Ok(0) => break,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end();
                if !text.is_empty() {
                    tracing::info!(server = %server, "stderr: {text}");
                }
            }
            Err(error) => {
                tracing::debug!(server = %server, %error, "cannot read the server's standard error");
                break;
            }
        }
    }
}
