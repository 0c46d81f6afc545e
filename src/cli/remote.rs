//! The commands a person runs beside `trellis serve` on the same space: they talk to
//! the server (`crate::client::Remote`) and print what they print on their own.
//! Commands that need the space itself (`mcp serve`, `serve`, `demo`, the interactive
//! chat) say to stop the server first, or to use the page.

use std::time::Duration;

use anyhow::bail;
use reqwest::Method;
use serde_json::{json, Value};
use trellis_builtins::dialog::Interaction;
use trellis_builtins::message::Message;

use super::chat::{report_pending, resolve_how, Waiting};
use super::output::{emit, emit_json, print, render_charms, render_patterns, render_result};
use super::token::{self, TokenCommand};
use super::transcript::{transcript_named, waiting};
use super::watch::WatchCommand;
use super::{charm::CharmCommand, Command, Format};
use crate::client::Remote;
use crate::session::Reply;
use crate::terminal::safe_line;
use crate::tokens::TokenInfo;

/// Runs `command` through the server.
pub async fn run(remote: Remote, command: Command, format: Format) -> anyhow::Result<()> {
    let get = |segments: &'static [&'static str]| remote.call(Method::GET, segments, None);
    match command {
        Command::Patterns => {
            let patterns = get(&["api", "patterns"]).await?;
            print(format, &patterns, || render_patterns(&patterns));
        }
        Command::Charm(command) => charm(&remote, command, format).await?,
        Command::Tools { charms } => {
            let mut all = Vec::new();
            for charm in &charms {
                let tools = remote.call(Method::GET, &["api", "charms", charm, "tools"], None).await?;
                all.extend(tools.as_array().cloned().unwrap_or_default());
            }
            let all = Value::Array(all);
            print(format, &all, || super::tools::render(&all));
        }
        Command::Chat { model, messages, chatbot, tool_choice, timeout, result_schema, attach, resume: _, mcp } => {
            refuse_mcp(&remote, &mcp)?;
            let mut files = super::chat::attachments(&attach)?;
            if chatbot.is_some() || tool_choice != "auto" || result_schema.is_some() {
                bail!(
                    "--chatbot, --tool-choice and --result-schema need the space; {} serve holds it (stop it, or use \
                     the page)",
                    crate::program::name()
                );
            }
            if messages.is_empty() && std::io::IsTerminal::is_terminal(&std::io::stdin()) {
                bail!(
                    "the interactive chat needs the space; {} serve holds it: chat in the page at {}",
                    crate::program::name(),
                    remote.url()
                );
            }
            let turns: Vec<String> = if messages.is_empty() {
                std::io::read_to_string(std::io::stdin())?
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(String::from)
                    .collect()
            } else {
                messages
            };
            remote.call(Method::PUT, &["api", "chat", "model"], Some(&json!({ "model": model }))).await?;
            let timeout = Duration::from_secs_f64(timeout);
            let mut all = Vec::new();
            let mut state = Value::Null;
            for turn in turns {
                let mut body = json!({ "text": turn });
                if !files.is_empty() {
                    body["files"] = serde_json::to_value(std::mem::take(&mut files))?;
                }
                let sent = remote.call(Method::POST, &["api", "chat", "messages"], Some(&body)).await?;
                let (new, now) = follow(&remote, index(&sent), timeout, format).await?;
                all.extend(new);
                state = now;
                if !interactions(&state).is_empty() {
                    break;
                }
            }
            finish(&state, all, format)?;
        }
        Command::Pending { chatbot: None } => {
            let waiting_now: Vec<Interaction> = serde_json::from_value(get(&["api", "interactions"]).await?)?;
            let chat = get(&["api", "chat"]).await?;
            let allowed: Vec<String> = chat["allowed"]
                .as_array()
                .map(|all| all.iter().filter_map(|t| t.as_str()).map(str::to_owned).collect())
                .unwrap_or_default();
            // A server resumes a cut-off reply when it opens the space: none waits here.
            report_pending(&waiting_now, false, (&allowed, &[]), format)?;
        }
        Command::Resolve { disallow: Some(tool), chatbot: None, .. } => {
            remote.call(Method::DELETE, &["api", "chat", "allowed", &tool], None).await?;
            if !format.json {
                emit(&format!("{} asks for approval again", safe_line(&tool)));
            }
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
            disallow: None,
            chatbot: None,
            timeout,
            mcp,
        } => {
            refuse_mcp(&remote, &mcp)?;
            let call = match call {
                Some(call) => call,
                None => {
                    let all: Vec<Interaction> = serde_json::from_value(get(&["api", "interactions"]).await?)?;
                    match all.as_slice() {
                        [only] => only.call_id.clone(),
                        [] => bail!("no call is waiting for an answer"),
                        _ => bail!(
                            "several calls are waiting; say which (`{} pending` lists them)",
                            crate::program::name()
                        ),
                    }
                }
            };
            let body = match Reply::from_flags(deny, answer, output, (decline, cancel), (always, input))? {
                Reply::Deny(reason) => json!({ "deny": reason }),
                Reply::Answer(text) => json!({ "answer": text }),
                Reply::Output(output) => json!({ "output": output }),
                Reply::Decline => json!("decline"),
                Reply::Cancel => json!("cancel"),
                Reply::Approve { always: false, input: None } => json!("approve"),
                Reply::Approve { always, input } => json!({ "approve_with": { "always": always, "input": input } }),
            };
            let accepted = remote.call(Method::POST, &["api", "interactions", &call, "resolve"], Some(&body)).await?;
            let (new, state) = follow(&remote, index(&accepted), Duration::from_secs_f64(timeout), format).await?;
            finish(&state, new, format)?;
        }
        Command::Token(command) => token(&remote, command, format).await?,
        Command::Watch(WatchCommand::List) => {
            let all = remote.call(Method::GET, &["api", "watches"], None).await?;
            super::watch::print_list(&serde_json::from_value::<Vec<_>>(all)?, format)?;
        }
        Command::Watch(WatchCommand::Remove { id }) => {
            let removed = remote.call(Method::DELETE, &["api", "watches", &id], None).await?;
            print(format, &json!({ "removed": removed }), || format!("removed {}", safe_line(&id)));
        }
        Command::Undo { request, chatbot: None } => {
            let undone =
                remote.call(Method::POST, &["api", "chat", "undo"], Some(&json!({ "request": request }))).await?;
            super::history::print_undone(&serde_json::from_value(undone)?, format)?;
        }
        _ => return Err(remote.needs_the_space("this command")),
    }
    Ok(())
}

/// `trellis charm ...` through the server.
async fn charm(remote: &Remote, command: CharmCommand, format: Format) -> anyhow::Result<()> {
    match command {
        CharmCommand::List => {
            let charms = remote.call(Method::GET, &["api", "charms"], None).await?;
            print(format, &charms, || render_charms(&charms));
        }
        CharmCommand::New { pattern, name, arg } => {
            let argument: Value =
                serde_json::from_str(&arg).map_err(|e| anyhow::anyhow!("--arg is not valid JSON: {e}"))?;
            let body = json!({ "pattern": pattern, "name": name, "argument": argument });
            let created = remote.call(Method::POST, &["api", "charms"], Some(&body)).await?;
            let id = created["id"].as_str().unwrap_or_default().to_string();
            print(format, &json!({ "id": id, "name": created["name"] }), || id.clone());
        }
        CharmCommand::Get { charm, provenance: true } => {
            let data = remote.call(Method::GET, &["api", "charms", &charm, "provenance"], None).await?;
            super::history::print_provenance(&data, format);
        }
        CharmCommand::Get { charm, provenance: false } => {
            let data = remote.call(Method::GET, &["api", "charms", &charm], None).await?;
            let result = with_handlers(&data);
            print(format, &result, || render_result(&result));
        }
        CharmCommand::Send { charm, handler, event } => {
            let event: Value =
                serde_json::from_str(&event).map_err(|e| anyhow::anyhow!("the event is not valid JSON: {e}"))?;
            let sent =
                remote.call(Method::POST, &["api", "charms", &charm, "handlers", &handler], Some(&event)).await?;
            let summary = sent["summary"].as_str().unwrap_or_default().to_string();
            print(format, &sent, || summary.clone());
        }
        CharmCommand::Rename { charm, name } => {
            let renamed =
                remote.call(Method::PATCH, &["api", "charms", &charm], Some(&json!({ "name": name }))).await?;
            let id = renamed["id"].as_str().unwrap_or_default().to_string();
            print(format, &json!({ "id": id, "name": name }), || format!("{id} is now {}", safe_line(&name)));
        }
    }
    Ok(())
}

/// `trellis token ...` through the server.
async fn token(remote: &Remote, command: TokenCommand, format: Format) -> anyhow::Result<()> {
    match command {
        TokenCommand::New { name } => {
            let new = remote.call(Method::POST, &["api", "tokens"], Some(&json!({ "name": name }))).await?;
            token::print_new(&serde_json::from_value(new)?, format);
        }
        TokenCommand::List => {
            let all = remote.call(Method::GET, &["api", "tokens"], None).await?;
            token::print_list(&serde_json::from_value::<Vec<TokenInfo>>(all)?, format);
        }
        TokenCommand::Revoke { id } => {
            let revoked = remote.call(Method::DELETE, &["api", "tokens", &id], None).await?;
            token::print_revoked(&serde_json::from_value(revoked)?, format);
        }
    }
    Ok(())
}

/// A charm's data with its handlers as stream markers again, as `charm get` shows a
/// charm's result.
fn with_handlers(data: &Value) -> Value {
    let mut result = data["data"].clone();
    if let (Value::Object(fields), Some(handlers)) = (&mut result, data["handlers"].as_object()) {
        for (key, schema) in handlers {
            let schema = (!schema.is_null()).then_some(schema);
            let result = data["returns"].get(key);
            fields.insert(key.clone(), trellis_runner::link::stream_marker(schema, result).to_json());
        }
    }
    result
}

fn index(accepted: &Value) -> usize {
    accepted["index"].as_u64().and_then(|i| usize::try_from(i).ok()).unwrap_or(0)
}

fn interactions(state: &Value) -> Vec<Interaction> {
    serde_json::from_value(state["interactions"].clone()).unwrap_or_default()
}

/// Follows the conversation from message `from` until no reply is being generated;
/// prints the new messages as `chat` does; returns them and the state.
async fn follow(
    remote: &Remote,
    from: usize,
    timeout: Duration,
    format: Format,
) -> anyhow::Result<(Vec<Message>, Value)> {
    let state = remote
        .follow_chat(timeout, |s| {
            let count = s["messages"].as_array().map_or(0, Vec::len);
            s["pending"] == false
                && (count > from + 1
                    || !s["error"].is_null()
                    || !s["interactions"].as_array().is_none_or(Vec::is_empty))
        })
        .await?;
    if let Some(error) = state["error"].as_str() {
        bail!("the model failed: {error}");
    }
    let messages: Vec<Message> = serde_json::from_value(state["messages"].clone())?;
    let new = messages.get(from..).map(<[Message]>::to_vec).unwrap_or_default();
    if !format.json {
        let tools = state["tools"].as_array().cloned().unwrap_or_default();
        let display = |wire: &str| {
            tools.iter().find(|t| t["wire"] == wire).and_then(|t| t["display"].as_str()).unwrap_or(wire).to_string()
        };
        emit(&transcript_named(&display, &new));
    }
    Ok((new, state))
}

/// Prints the messages as JSON when asked; ends with [`Waiting`] when calls wait.
fn finish(state: &Value, messages: Vec<Message>, format: Format) -> anyhow::Result<()> {
    if format.json {
        emit_json(&serde_json::to_value(&messages)?);
    }
    let waiting_now = interactions(state);
    if waiting_now.is_empty() {
        Ok(())
    } else {
        Err(Waiting(waiting(&waiting_now, &resolve_how())).into())
    }
}

/// MCP servers are attached by the process that holds the space: refuses `--mcp` and its
/// companions rather than ignore them.
fn refuse_mcp(remote: &Remote, mcp: &super::mcp::McpArgs) -> anyhow::Result<()> {
    if mcp.is_empty() {
        return Ok(());
    }
    Err(remote.needs_the_space("--mcp, --mcp-config and --max-tools"))
}
