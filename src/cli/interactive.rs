//! The interactive chat on a terminal: a prompt, slash commands, the transcript as it
//! happens.

use std::io::{BufRead, Write};

use super::chat::{transcript, Session};
use super::Format;

const HELP: &str = "Type a message; mention charms with @Name to give the model their handlers.
  /tools         the tools the model has now
  /clear         forget the conversation and the attachments
  /model [NAME]  show or switch the model (offline, scripted:PATH, openai:M, anthropic:M, ollama:M)
  /help          this text
  /quit          leave (or Ctrl-D)";

/// Runs the prompt loop until end of input or `/quit`.
pub async fn run(session: Session, _format: Format) -> anyhow::Result<()> {
    println!("trellis chat: {} — /help for commands, @Name mentions a charm.", model_name(&session));
    let stdin = std::io::stdin();
    loop {
        print!("> ");
        std::io::stdout().flush()?;
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 {
            return Ok(());
        }
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match command(&session, line).await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => println!("error: {e:#}"),
        }
    }
}

fn model_name(session: &Session) -> String {
    use trellis_runner::Read;
    session
        .runtime()
        .charms()
        .list()
        .into_iter()
        .find(|c| c.pattern == "chatbot")
        .and_then(|c| session.runtime().read(&session.runtime().charms().result(&c.id.as_str().into()).child("model")).ok())
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "offline".into())
}

/// Handles one line; true when the user wants to leave.
async fn command(session: &Session, line: &str) -> anyhow::Result<bool> {
    let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
    match word {
        "/quit" | "/exit" => return Ok(true),
        "/help" => println!("{HELP}"),
        "/clear" => {
            session.clear().await?;
            println!("(conversation and attachments cleared)");
        }
        "/tools" => println!("{}", super::tools::render(&session.dialog().flattened_tools())),
        "/model" if rest.trim().is_empty() => println!("model: {}", model_name(session)),
        "/model" => {
            session.set_model(rest.trim()).await?;
            println!("model: {}", rest.trim());
        }
        _ if word.starts_with('/') => println!("unknown command {word}; /help lists the commands"),
        _ => {
            let new = session.turn(line).await?;
            println!("{}", transcript(session, &new[1..]));
        }
    }
    Ok(false)
}
