//! `trellis chat`: talk to a model that can act on @-mentioned charms.
//!
//! `session` holds the conversation (the space's chatbot charm, mentions, turns);
//! `render` shows it; `super::interactive` is the prompt on a terminal.

mod render;
mod session;

use std::io::{IsTerminal, Read as _};
use std::time::Duration;

use anyhow::Context;

pub use self::render::{line, transcript, usage, ASSISTANT};
pub use self::session::Session;
use super::Format;

/// `trellis chat`: interactive on a terminal, otherwise one turn per `--message` or per
/// line of standard input.
pub async fn run(session: Session, messages: Vec<String>, timeout: Duration, format: Format) -> anyhow::Result<()> {
    let turns: Vec<String> = if !messages.is_empty() {
        messages
    } else if std::io::stdin().is_terminal() {
        return super::interactive::run(session, format).await;
    } else {
        let mut input = String::new();
        std::io::stdin().read_to_string(&mut input).context("cannot read standard input")?;
        input.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect()
    };
    let mut all = Vec::new();
    for turn in turns {
        let new = session.turn(&turn, timeout).await?;
        if !format.json {
            super::output::emit(&transcript(&session, &new));
        }
        all.extend(new);
    }
    if format.json {
        super::output::emit_json(&serde_json::to_value(&all)?);
    }
    Ok(())
}
