//! `trellis mcp login NAME` and `trellis mcp logout NAME`: signing in to an MCP server
//! reached by URL that wants OAuth (`trellis_mcp::client::signin`), and forgetting it.
//! Neither needs a space: the sign-in is the user's, in their own file.

use std::time::Duration;

use trellis_mcp::client::signin::{self, SignIn, SignIns};
use trellis_mcp::client::{ServerSpec, Transport};

use super::mcp::ServerArgs;
use super::output::{emit, emit_json};
use super::Format;
use crate::terminal::safe_line;

/// The server named `name` among `specs`, with its URL.
fn server<'a>(specs: &'a [ServerSpec], name: &str) -> anyhow::Result<(&'a ServerSpec, &'a str)> {
    let Some(spec) = specs.iter().find(|spec| spec.name == name) else {
        let known: Vec<&str> = specs.iter().map(|spec| spec.name.as_str()).collect();
        anyhow::bail!(
            "no MCP server named `{}` ({}); name one with --mcp 'NAME=https://...' or in an mcpServers file",
            safe_line(name),
            if known.is_empty() { "none is configured".to_string() } else { format!("known: {}", known.join(", ")) }
        );
    };
    match &spec.transport {
        Transport::Http { url, .. } => Ok((spec, url.as_str())),
        Transport::Stdio { .. } => Err(signin::SignInError::NotHttp(name.to_string()).into()),
    }
}

/// `trellis mcp login NAME`: the browser flow, the URL printed to open, the tokens kept.
pub async fn login(args: &ServerArgs, name: &str, timeout: Duration, format: Format) -> anyhow::Result<()> {
    let specs = args.specs()?;
    let (spec, _) = server(&specs, name)?;
    let file = SignIns::user()?;
    let shown = |auth_url: &str| {
        eprintln!(
            "open this URL in a browser to sign in to `{}`:\n{}\nwaiting for the sign-in (up to {} s); with the \
             browser on another machine, paste here the address it ends on (a page that does not load)",
            safe_line(name),
            safe_line(auth_url),
            timeout.as_secs()
        );
    };
    // Lines typed (or pasted) meanwhile; the thread ends with the process.
    let (paste, pasted) = tokio::sync::mpsc::channel(4);
    std::thread::spawn(move || {
        for line in std::io::stdin().lines().map_while(Result::ok) {
            if paste.blocking_send(line).is_err() {
                break;
            }
        }
    });
    let state = signin::login(spec, &file, (timeout, pasted), shown).await?;
    if format.json {
        emit_json(&serde_json::json!({ "server": name, "sign_in": state }));
    } else {
        emit(&format!("{}: {state}", safe_line(name)));
    }
    Ok(())
}

/// `trellis mcp logout NAME`: forgets the server's sign-in.
pub fn logout(args: &ServerArgs, name: &str, format: Format) -> anyhow::Result<()> {
    let specs = args.specs()?;
    let (_, url) = server(&specs, name)?;
    let had = signin::logout(url, &SignIns::user()?)?;
    if format.json {
        emit_json(&serde_json::json!({ "server": name, "forgotten": had }));
    } else if had {
        emit(&format!("signed out of `{}`: its tokens are forgotten", safe_line(name)));
    } else {
        emit(&format!("`{}` had no sign-in here", safe_line(name)));
    }
    Ok(())
}

/// The sign-in state of `spec` for `mcp list`: `None` for a server started as a command.
pub fn state(spec: &ServerSpec) -> Option<SignIn> {
    let Transport::Http { url, .. } = &spec.transport else { return None };
    SignIns::user().and_then(|file| file.state(url)).ok()
}
