//! `trellis chat`: talk to a model that can act on @-mentioned charms.
//!
//! `session` holds the conversation (the space's chatbot charm, mentions, turns);
//! `render` shows it; `super::interactive` is the prompt on a terminal.

mod render;
mod session;

use std::io::{IsTerminal, Read as _};
use std::time::Duration;

use anyhow::Context;
use trellis_builtins::tool::{ClientContext, ClientError};

pub use self::render::{line, transcript, transcript_named, usage, waiting, ASSISTANT};
pub use self::session::{Reply, Session};
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
        session.show_effects(&mut Headless { format }).await?;
        all.extend(run_plugin_calls(&session, timeout, format).await?);
        if !session.waiting().is_empty() {
            break;
        }
    }
    finish(&session, all, format)
}

/// `trellis pending`: the calls waiting for the user's answer.
pub fn pending(session: &Session, format: Format) -> anyhow::Result<()> {
    let interactions = session.interactions();
    if format.json {
        super::output::emit_json(&serde_json::to_value(&interactions)?);
    } else if interactions.is_empty() {
        super::output::emit("nothing is waiting for an answer");
    } else {
        super::output::emit(&waiting(&interactions, RESOLVE_HOW));
    }
    Ok(())
}

/// `trellis resolve`: answers a waiting call and follows the conversation until it is
/// done or waits again.
pub async fn resolve(
    session: &Session,
    call_id: Option<&str>,
    reply: Reply,
    timeout: Duration,
    format: Format,
) -> anyhow::Result<()> {
    let before = session.resolve(call_id, reply).await?;
    let mut new = session.follow_up(before, timeout).await?;
    if !format.json {
        super::output::emit(&transcript(session, &new));
    }
    session.show_effects(&mut Headless { format }).await?;
    new.extend(run_plugin_calls(session, timeout, format).await?);
    finish(session, new, format)
}

/// Executes the waiting calls to plugins' tools one after another (each in its plugin's
/// sandbox, see [`Session::run_plugin_call`]), following the conversation after each;
/// the messages that followed.
async fn run_plugin_calls(
    session: &Session,
    timeout: Duration,
    format: Format,
) -> anyhow::Result<Vec<trellis_builtins::message::Message>> {
    let mut all = Vec::new();
    while let Some(before) = session.run_plugin_call().await? {
        let new = session.follow_up(before, timeout).await?;
        if !format.json {
            super::output::emit(&transcript(session, &new));
        }
        all.extend(new);
        session.show_effects(&mut Headless { format }).await?;
    }
    Ok(all)
}

/// The client a command without a terminal is: it shows display effects (in text output)
/// and has no person to ask, so a client phase that asks waits for `trellis resolve`.
pub struct Headless {
    /// The command's output format: display effects print in text output only.
    pub format: Format,
}

impl ClientContext for Headless {
    fn ask(&mut self, _question: &str) -> Result<String, ClientError> {
        Err(ClientError::Unsupported(NO_PERSON.into()))
    }

    fn confirm(&mut self, _question: &str) -> Result<bool, ClientError> {
        Err(ClientError::Unsupported(NO_PERSON.into()))
    }

    fn choose(&mut self, _question: &str, _options: &[String]) -> Result<String, ClientError> {
        Err(ClientError::Unsupported(NO_PERSON.into()))
    }

    fn show(&mut self, text: &str) {
        if !self.format.json {
            super::output::emit(&format!("  ▸ {}", super::terminal::safe_line(text)));
        }
    }
}

const NO_PERSON: &str = "no one is at a terminal to ask; answer with `trellis resolve`";

/// How to answer waiting calls from the command line.
pub(crate) const RESOLVE_HOW: &str =
    "answer with `trellis resolve CALL --approve`, `--deny REASON`, for a question `--answer TEXT`, \
     or for a client execution `--output JSON`";

/// Prints the messages as JSON when asked, and ends with [`Waiting`] when calls wait.
fn finish(session: &Session, messages: Vec<trellis_builtins::message::Message>, format: Format) -> anyhow::Result<()> {
    if format.json {
        super::output::emit_json(&serde_json::to_value(&messages)?);
    }
    let interactions = session.waiting();
    if interactions.is_empty() {
        Ok(())
    } else {
        Err(Waiting(waiting(&interactions, RESOLVE_HOW)).into())
    }
}

/// The conversation stopped at calls waiting for the user: the command exits with
/// [`Waiting::EXIT_CODE`] after saying what waits.
#[derive(Debug)]
pub struct Waiting(pub(crate) String);

impl Waiting {
    /// The exit status of a command that ends waiting for the user.
    pub const EXIT_CODE: u8 = 3;
}

impl std::fmt::Display for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Waiting {}
