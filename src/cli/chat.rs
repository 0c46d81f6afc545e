//! `trellis chat`: talk to a model that can act on @-mentioned charms.
//!
//! `crate::session` holds the conversation (the space's chatbot charm, mentions, turns),
//! shared with `trellis serve`; `super::transcript` shows it; `super::interactive` is the
//! prompt on a terminal.

use std::io::{BufRead as _, IsTerminal};
use std::time::Duration;

use super::headless::Headless;
use super::transcript::{transcript, waiting};
use super::Format;
use crate::session::{attach_file, Reply, Session};
use anyhow::Context;
use trellis_builtins::message::FilePart;

/// `trellis chat`: interactive on a terminal, otherwise one turn per `--message` or per
/// line of standard input.
/// `files` go with the first message. A request a stopped process left is gone on with
/// first; with `resume`, that is all there is to do when no message is given.
pub async fn run(
    session: Session,
    messages: Vec<String>,
    mut files: Vec<FilePart>,
    (timeout, resume): (Duration, bool),
    (format, publish): (Format, Option<Publish>),
) -> anyhow::Result<()> {
    let mut all = Vec::new();
    match session.resumed(timeout).await? {
        Some(resumed) => {
            if !format.json {
                super::output::emit("(going on with the reply the stopped process left)");
                super::output::emit(&transcript(&session, &resumed));
            }
            all.extend(resumed);
        }
        None if resume => super::output::emit("nothing to resume: no reply was cut off by a stop"),
        None => {}
    }
    if let Some(watched) = session.watched(timeout).await? {
        if !format.json {
            super::output::emit("(your watches fired while no chat ran)");
            super::output::emit(&transcript(&session, &watched));
        }
        all.extend(watched);
    }
    if resume && messages.is_empty() {
        return finish(&session, all, format);
    }
    if messages.is_empty() && std::io::stdin().is_terminal() {
        return super::interactive::run(session, files, format).await;
    }
    let _questions = Questions::announce(&session, publish);
    let mut turns = Turns::new(messages);
    while let Some(turn) = turns.next().await? {
        let compacted = session.dialog().compacted();
        let new = session.turn(&turn, std::mem::take(&mut files), timeout).await?;
        if !format.json {
            for note in notes(&session, compacted) {
                super::output::emit(&note);
            }
            super::output::emit(&transcript(&session, &new));
        }
        all.extend(new);
        session.show_effects(&mut Headless { format }).await?;
        all.extend(run_plugin_calls(&session, timeout, format).await?);
        if !session.waiting().is_empty() {
            turns.not_sent();
            break;
        }
    }
    finish(&session, all, format)
}

/// The files of `--attach`, read before anything is sent, so a bad one changes nothing.
pub fn attachments(paths: &[std::path::PathBuf]) -> anyhow::Result<Vec<FilePart>> {
    paths.iter().map(|path| attach_file(path).map_err(anyhow::Error::msg)).collect()
}

/// The lines a turn adds beside its messages: where it compacted the conversation
/// (`compacted`: the messages the summary stood for before the turn), and the dialog's
/// notice.
pub fn notes(session: &Session, compacted: usize) -> Vec<String> {
    let now = session.dialog().compacted();
    let compaction = (now > compacted)
        .then(|| format!("  ⋯ the model now reads the first {now} messages as a summary (context budget)"));
    let notice = session.dialog().notice().map(|notice| format!("  ⋯ {}", crate::terminal::safe_line(&notice)));
    compaction.into_iter().chain(notice).collect()
}

/// What a chat without a terminal says: each `--message`, else each line of standard
/// input, taken as it arrives, so that a program that writes a line and waits for the
/// answer gets it before it writes the next.
enum Turns {
    Given(std::vec::IntoIter<String>),
    Read(tokio::sync::mpsc::Receiver<std::io::Result<String>>),
}

impl Turns {
    fn new(messages: Vec<String>) -> Turns {
        if !messages.is_empty() {
            return Turns::Given(messages.into_iter());
        }
        let (lines, read) = tokio::sync::mpsc::channel(1);
        // Standard input blocks: read on a thread of its own, which the process ends.
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                if lines.blocking_send(line).is_err() {
                    break;
                }
            }
        });
        Turns::Read(read)
    }

    /// The next turn; blank lines are no turn.
    async fn next(&mut self) -> anyhow::Result<Option<String>> {
        match self {
            Turns::Given(messages) => Ok(messages.next()),
            Turns::Read(lines) => loop {
                let Some(line) = lines.recv().await else { return Ok(None) };
                let line = line.context("cannot read standard input")?;
                if !line.trim().is_empty() {
                    return Ok(Some(line.trim().to_string()));
                }
            },
        }
    }

    /// Says which `--message`s were not sent: the chat waits for an answer first.
    fn not_sent(&self) {
        if let Turns::Given(rest) = self {
            if rest.len() > 0 {
                eprintln!(
                    "{} more message(s) not sent: the chat waits for your answer first (see `{} pending`)",
                    rest.len(),
                    crate::program::name()
                );
            }
        }
    }
}

/// `trellis pending`: the calls waiting for the user's answer.
pub fn pending(session: &Session, format: Format) -> anyhow::Result<()> {
    // This command goes on with no conversation: a request still pending was cut off.
    let interrupted = session.dialog().pending();
    let dialog = session.dialog();
    report_pending(&session.interactions(), interrupted, (&dialog.allowed(), &dialog.fired()), format)
}

/// What `trellis pending` says: the calls waiting for an answer, whether a reply was cut
/// off, and the tools this chat runs without asking. `--json` prints them as one object,
/// `{"waiting": [...], "interrupted": bool, "allowed": [...]}`.
pub(super) fn report_pending(
    waiting_now: &[trellis_builtins::dialog::Interaction],
    interrupted: bool,
    (allowed, fired): (&[String], &[trellis_builtins::watch::Fired]),
    format: Format,
) -> anyhow::Result<()> {
    if format.json {
        let report = serde_json::json!({ "waiting": waiting_now, "interrupted": interrupted, "allowed": allowed, "fired": fired });
        super::output::emit_json(&report);
        return Ok(());
    }
    for fired in fired {
        let how = format!("{} chat", crate::program::name());
        let line = format!("{} (the next `{how}` tells the model)", fired.text);
        super::output::emit(&crate::terminal::safe_line(&line));
    }
    if interrupted {
        let how = format!("{} chat --resume", crate::program::name());
        super::output::emit(&format!(
            "interrupted: a reply was cut off when its process stopped; `{how}` goes on with it"
        ));
    } else if waiting_now.is_empty() {
        super::output::emit("nothing is waiting for an answer");
    } else {
        super::output::emit(&waiting(waiting_now, &resolve_how()));
    }
    if !allowed.is_empty() {
        let tools: Vec<String> = allowed.iter().map(|t| crate::terminal::safe_line(t).into_owned()).collect();
        let how = format!("{} resolve --disallow TOOL", crate::program::name());
        super::output::emit(&format!("allowed without asking in this chat: {} (`{how}` asks again)", tools.join(", ")));
    }
    Ok(())
}

/// `trellis resolve --disallow TOOL`: the tool's calls ask for approval again.
pub async fn disallow(session: &Session, tool: &str, format: Format) -> anyhow::Result<()> {
    session.disallow(tool).await?;
    if !format.json {
        super::output::emit(&format!("{} asks for approval again", crate::terminal::safe_line(tool)));
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
    (format, publish): (Format, Option<Publish>),
) -> anyhow::Result<()> {
    let before = session.resolve(call_id, reply).await?;
    let _questions = Questions::announce(session, publish);
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

/// What a chat needs to serve its space beside it while a tool's question waits (see
/// `crate::serve::BesideChat`): a space in a file, its chatbot and the program's tools.
pub struct Publish {
    pub rt: trellis_runner::Runtime,
    pub space: std::path::PathBuf,
    pub chatbot: String,
    pub tools: trellis_builtins::tool::ToolRegistry,
}

/// Says on standard error how long calls go (a task's stages), and, once each, what tools
/// ask the person while a reply runs without a terminal to answer at (a form to fill in, a
/// URL to visit), and how to answer from another shell, which reaches this process through
/// the space's hand-off file while a question waits (and the reply that asked it runs on);
/// until dropped.
struct Questions(tokio::task::JoinHandle<()>);

/// How often a chat without a terminal looks for tools' questions.
const QUESTIONS_TICK: Duration = Duration::from_millis(100);

impl Questions {
    fn announce(session: &Session, publish: Option<Publish>) -> Questions {
        use trellis_builtins::ask::InteractionKind;
        let dialog = session.dialog().clone();
        Questions(tokio::spawn(async move {
            let mut told = std::collections::HashSet::new();
            let mut progressed = std::collections::HashMap::new();
            let mut beside = None;
            loop {
                for progress in dialog.progress() {
                    if progressed.get(&progress.call) != Some(&progress.text) {
                        eprintln!("{}", super::transcript::progress_line(&progress));
                        progressed.insert(progress.call, progress.text);
                    }
                }
                let questions: Vec<_> =
                    dialog.waiting().into_iter().filter(|asked| asked.kind == InteractionKind::Elicitation).collect();
                // Kept while the reply that asked runs on, for the answering command to follow.
                if questions.is_empty() && !dialog.pending() {
                    beside = None;
                } else if let (false, None, Some(publish)) = (questions.is_empty(), &beside, &publish) {
                    let Publish { rt, space, chatbot, tools } = publish;
                    match crate::serve::BesideChat::start(rt.clone(), space, chatbot, tools.clone()).await {
                        Ok(started) => beside = Some(started),
                        Err(error) => tracing::warn!("other commands cannot reach this chat to answer: {error:#}"),
                    }
                }
                for asked in questions {
                    if told.insert((asked.call_id.clone(), asked.asked_at)) {
                        let how = format!("{} resolve {} ...", crate::program::name(), asked.call_id);
                        let how = crate::terminal::safe_line(&how);
                        let asked = super::form::describe(&asked);
                        eprintln!("{asked}\n  (the call waits: answer from another shell with `{how}`)");
                    }
                }
                tokio::time::sleep(QUESTIONS_TICK).await;
            }
        }))
    }
}

impl Drop for Questions {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The most bytes a `--result-schema` file may have.
const MAX_SCHEMA_FILE: u64 = 1 << 20;

/// The JSON Schema in a `--result-schema` file, checked to be one; `None` without a file.
pub fn result_schema(path: Option<&std::path::Path>) -> anyhow::Result<Option<serde_json::Value>> {
    let Some(path) = path else { return Ok(None) };
    let shown = path.display();
    let meta = std::fs::metadata(path).with_context(|| format!("cannot read the result schema {shown}"))?;
    if !meta.is_file() || meta.len() > MAX_SCHEMA_FILE {
        anyhow::bail!("the result schema {shown} must be a JSON file of at most {MAX_SCHEMA_FILE} bytes");
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the result schema {shown}"))?;
    let schema: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("the result schema {shown} is not JSON"))?;
    trellis_builtins::structured::ResultFormat::new(schema.clone()).map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
    Ok(Some(schema))
}

/// How to answer waiting calls from the command line.
pub(crate) fn resolve_how() -> String {
    format!(
        "answer with `{} resolve CALL --approve`, `--deny REASON`, for a question `--answer TEXT`, \
         or for a client execution `--output JSON`",
        crate::program::name()
    )
}

/// Prints the messages as JSON when asked, and ends with [`Waiting`] when calls wait.
///
/// With a result schema, the value the reply ended with is what it prints: as JSON, or
/// after the transcript as `result: VALUE`.
fn finish(session: &Session, messages: Vec<trellis_builtins::message::Message>, format: Format) -> anyhow::Result<()> {
    match (session.result(), format.json) {
        (Some(result), true) => super::output::emit_json(&result),
        (None, true) => super::output::emit_json(&serde_json::to_value(&messages)?),
        (Some(result), false) if !result.is_null() => {
            let shown = serde_json::to_string_pretty(&result)?;
            super::output::emit(&format!("result: {}", crate::terminal::safe(&shown)));
        }
        _ => {}
    }
    let interactions = session.waiting();
    if interactions.is_empty() {
        Ok(())
    } else {
        Err(Waiting(waiting(&interactions, &resolve_how())).into())
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
