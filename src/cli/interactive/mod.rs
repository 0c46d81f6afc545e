//! The interactive chat on a terminal: a line editor with history and Tab completion
//! of `@` mentions and `/commands`, the attachments as a line of chips, and each reply
//! as it happens (streamed text, tool calls and results).
//!
//! Ctrl-C: while a reply is generated it cancels the reply, and a second one leaves; at
//! the prompt it clears the line, and on an empty line twice in a row (or right after a
//! cancelled reply) it leaves. Ctrl-D on an empty line leaves.

mod client;
mod completion;
mod follow;

use crate::cli::output::emit;
use crate::terminal::safe_line;
use anyhow::Context as _;
use rustyline::error::ReadlineError;
use rustyline::history::DefaultHistory;
use rustyline::{CompletionType, Config, Editor, EventHandler, KeyEvent};

use self::completion::{CtrlC, Helper};
use self::follow::Outcome;
use super::Format;
use crate::session::{attach_file, Reply, Session};
use trellis_builtins::dialog::InteractionKind;
use trellis_builtins::message::FilePart;

const PROMPT: &str = "> ";

const HELP: &str = "Type a message; mention charms with @Name to give the model their handlers.
  /tools         the tools the model has now
  /clear         forget the conversation and the attachments
  /model [NAME]  show or switch the model (offline, scripted:PATH, openai:M, anthropic:M, ollama:M)
  /usage         the tokens the answers used, as the provider reported them
  /attach [FILE] send a file (an image, a PDF, a text file) with your next message;
                 without FILE, list what is attached
  /approve [CALL]        let a tool call that waits for your approval run
  /disallow TOOL         a tool you allowed always (`a` at its question) asks again
  /deny [CALL] REASON    refuse it; the model is told why
  /answer [CALL] TEXT    answer the model's question (yes or no, or one of its options)
  /output [CALL] JSON    send a tool's client output yourself
  /help          this text
  /quit          leave (or Ctrl-D)
Tab completes @names and /commands; Up and Down recall earlier lines.
Ctrl-C cancels a reply being generated; pressed again (or twice at an empty prompt) it leaves.";

/// Runs the prompt loop until Ctrl-D, `/quit` or a second Ctrl-C.
/// `files` go with the first message typed.
pub async fn run(session: Session, files: Vec<FilePart>, _format: Format) -> anyhow::Result<()> {
    follow::install_ctrl_c()?;
    let mut editor = editor(&session)?;
    emit(&format!(
        "{} chat with {}: @Name mentions a charm (Tab completes), /help lists the commands, Ctrl-D leaves.",
        crate::program::name(),
        session.model()
    ));
    let mut chips = Chips { files, ..Chips::default() };
    // Whether the last thing that happened was a Ctrl-C (at the prompt or cancelling).
    let mut interrupted = false;
    loop {
        chips.show(&session);
        // The editor owns the terminal (raw mode) only while it reads a line.
        let read = tokio::task::block_in_place(|| editor.readline(PROMPT));
        let line = match read {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                if interrupted {
                    return Ok(());
                }
                interrupted = true;
                emit("(Ctrl-C again or Ctrl-D to leave)");
                continue;
            }
            Err(ReadlineError::Eof) => return Ok(()),
            Err(e) => return Err(e).context("cannot read from the terminal"),
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        // History is a convenience: failing to record a line is no reason to stop.
        let _ = editor.add_history_entry(line);
        interrupted = false;
        let mut outcome = step(&session, &mut chips, line).await;
        // Calls waiting for the user are asked about right here, one prompt each.
        while matches!(outcome, Ok(Outcome::Done)) && !session.waiting().is_empty() {
            outcome = match ask(&mut editor, &session).await {
                Ok(Some(sent)) => answered(&session, sent).await,
                Ok(None) => break,
                Err(e) => Err(e),
            };
        }
        match outcome {
            Ok(Outcome::Done) => {}
            Ok(Outcome::Cancelled) => interrupted = true,
            Ok(Outcome::Quit) => return Ok(()),
            Err(e) => emit(&format!("error: {e:#}")),
        }
    }
}

/// Asks the user about the first waiting call until an answer is taken; the index the
/// messages of what follows start at, or `None` when the user leaves it waiting (Ctrl-C
/// or Ctrl-D at the question).
async fn ask(editor: &mut Editor<Helper, DefaultHistory>, session: &Session) -> anyhow::Result<Option<usize>> {
    // A plugin's tool runs here without asking: installing and enabling it was the consent.
    if let Some(sent) = session.run_plugin_call().await? {
        return Ok(Some(sent));
    }
    let Some(waiting) = session.waiting().into_iter().next() else { return Ok(None) };
    if let Some(tool) = session.client_tool(&waiting).filter(|_| waiting.kind != InteractionKind::Approval) {
        // This terminal is the client: the tool's client phase runs here and asks the
        // person where the tool asks; an output the server refuses is asked for again.
        loop {
            let mut terminal = client::Terminal { editor: &mut *editor, tool: waiting.tool.clone(), left: false };
            let reply = match tool.run_client(waiting.input.clone(), &mut terminal) {
                Ok(output) => Reply::Output(output),
                Err(_) if terminal.left => {
                    emit("(left waiting: answer it later with /answer, /output or /deny)");
                    return Ok(None);
                }
                Err(why) => Reply::Deny(why.into()),
            };
            match session.resolve(Some(&waiting.call_id), reply).await {
                Ok(sent) => return Ok(Some(sent)),
                Err(e) => emit(&format!("{e:#}")),
            }
            // Answered meanwhile (another front end, or its wait timed out): nothing to ask.
            if !session.waiting().iter().any(|w| w.call_id == waiting.call_id) {
                return Ok(None);
            }
        }
    }
    for line in crate::cli::transcript::preview_lines(&waiting) {
        emit(&line);
    }
    let person_only = !waiting.person_only.is_empty();
    let question = match waiting.kind {
        InteractionKind::Approval if person_only => {
            let fields: Vec<String> = waiting.person_only.iter().map(|f| format!("`{}`", safe_line(f))).collect();
            format!(
                "arguments of {} as JSON, {} set by you (empty: deny): ",
                safe_line(&waiting.tool),
                fields.join(", ")
            )
        }
        InteractionKind::Approval => {
            format!("approve {}? [y/N, a = always in this chat, or why not] ", safe_line(&waiting.tool))
        }
        InteractionKind::Question => "your answer: ".to_string(),
        InteractionKind::Confirmation => "yes or no: ".to_string(),
        InteractionKind::Choice => {
            let options: Vec<_> = waiting.options.iter().map(|o| safe_line(o)).collect();
            format!("choose ({}): ", options.join(" | "))
        }
        InteractionKind::ClientExecution => format!("output of {} (JSON): ", safe_line(&waiting.tool)),
        // Asked while the reply runs, and answered there (see `follow`).
        InteractionKind::DisplayEffect | InteractionKind::Elicitation => return Ok(None),
    };
    loop {
        let line = match tokio::task::block_in_place(|| editor.readline(&question)) {
            Ok(line) => line.trim().to_string(),
            Err(ReadlineError::Interrupted | ReadlineError::Eof) => {
                emit("(left waiting: answer it later with /approve, /deny or /answer)");
                return Ok(None);
            }
            Err(e) => return Err(e).context("cannot read from the terminal"),
        };
        let reply = match (waiting.kind, line.to_lowercase().as_str()) {
            (InteractionKind::Approval, "") if person_only => Reply::Deny("no reason given".into()),
            (InteractionKind::Approval, _) if person_only => match serde_json::from_str(&line) {
                Ok(input) => Reply::Approve { always: false, input: Some(input) },
                Err(e) => {
                    emit(&format!("that is not JSON ({e}); type the call's arguments as JSON, or nothing to deny it"));
                    continue;
                }
            },
            (InteractionKind::Approval, "y" | "yes") => Reply::APPROVE,
            (InteractionKind::Approval, "a" | "always") => Reply::Approve { always: true, input: None },
            (InteractionKind::Approval, "" | "n" | "no") => Reply::Deny("no reason given".into()),
            (InteractionKind::Approval, _) => Reply::Deny(line),
            (_, "") => Reply::Deny("the user gave no answer".into()),
            (InteractionKind::ClientExecution, _) => match serde_json::from_str(&line) {
                Ok(output) => Reply::Output(output),
                Err(e) => {
                    emit(&format!("that is not JSON ({e}); type the tool's output as JSON"));
                    continue;
                }
            },
            _ => Reply::Answer(line),
        };
        match session.resolve(Some(&waiting.call_id), reply).await {
            Ok(sent) => return Ok(Some(sent)),
            // A wrong-shaped answer (not yes or no, not an option): say why and ask again.
            Err(e) => emit(&format!("{e:#}")),
        }
    }
}

fn editor(session: &Session) -> anyhow::Result<Editor<Helper, DefaultHistory>> {
    let config = Config::builder()
        .completion_type(CompletionType::List)
        .max_history_size(1000)
        .and_then(|b| b.history_ignore_dups(true))
        .context("cannot configure the line editor")?
        .build();
    let mut editor = Editor::with_config(config).context("cannot set up line editing on this terminal")?;
    editor.set_helper(Some(Helper::new(session.chatbot().clone())));
    editor.bind_sequence(KeyEvent::ctrl('C'), EventHandler::Conditional(Box::new(CtrlC)));
    Ok(editor)
}

/// Handles one line: a command, or a message and its reply.
async fn step(session: &Session, chips: &mut Chips, line: &str) -> anyhow::Result<Outcome> {
    let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
    let rest = rest.trim();
    match word {
        "/quit" | "/exit" => return Ok(Outcome::Quit),
        "/help" => emit(HELP),
        "/clear" => {
            session.clear().await?;
            emit("(conversation and attachments cleared)");
        }
        "/tools" => {
            emit(&super::tools::render(&session.dialog().flattened_tools()));
            // Where the client tools come from: they run here, not on the server.
            for plugin in session.plugins() {
                emit(&safe_line(&format!(
                    "plugin {} {} (runs here, in its sandbox): {}",
                    plugin.name,
                    plugin.version,
                    plugin.tools.join(", ")
                )));
            }
        }
        "/usage" => emit(&super::transcript::usage(&session.dialog().messages())),
        "/approve" => {
            let sent = session.resolve((!rest.is_empty()).then_some(rest), Reply::APPROVE).await?;
            return answered(session, sent).await;
        }
        "/deny" | "/answer" | "/output" => {
            // `/deny CALL REASON` when the first word names a waiting call, else `/deny REASON`.
            let (first, after) = rest.split_once(' ').unwrap_or((rest, ""));
            let names_a_call = session.interactions().iter().any(|i| i.call_id == first);
            let (call, text) = if names_a_call { (Some(first), after.trim()) } else { (None, rest) };
            let reply = match word {
                "/deny" => Reply::Deny(if text.is_empty() { "no reason given" } else { text }.to_string()),
                "/output" => Reply::Output(serde_json::from_str(text).context("/output takes the output as JSON")?),
                _ => Reply::Answer(text.to_string()),
            };
            let sent = session.resolve(call, reply).await?;
            return answered(session, sent).await;
        }
        "/attach" if rest.is_empty() => match chips.files.is_empty() {
            true => emit("(no file is attached; /attach FILE attaches one to your next message)"),
            false => emit(&chips.files_line()),
        },
        "/attach" => {
            chips.files.push(attach_file(std::path::Path::new(rest)).map_err(anyhow::Error::msg)?);
            emit(&chips.files_line());
        }
        "/disallow" => {
            session.disallow(rest).await?;
            emit(&format!("({} asks for approval again)", safe_line(rest)));
        }
        "/model" if rest.is_empty() => emit(&format!("model: {}", session.model())),
        "/model" => {
            session.set_model(rest).await?;
            emit(&format!("model: {rest}"));
        }
        _ if word.starts_with('/') => emit(&format!("unknown command {word}; /help lists the commands")),
        _ => {
            let compacted = session.dialog().compacted();
            // Kept if the message is refused, so it can be sent again with them.
            let sent = session.start(line, chips.files.clone()).await?;
            chips.files.clear();
            chips.show(session);
            let outcome = answered(session, sent).await;
            for note in super::chat::notes(session, compacted) {
                emit(&note);
            }
            return outcome;
        }
    }
    Ok(Outcome::Done)
}

/// Follows the reply to what was sent at `sent`, shows display effects, then shows any
/// calls waiting for an answer.
async fn answered(session: &Session, sent: usize) -> anyhow::Result<Outcome> {
    let outcome = follow::follow(session, sent).await?;
    if outcome == Outcome::Done {
        session.after_response();
    }
    session.show_effects(&mut super::headless::Headless { format: Format::text() }).await?;
    let interactions = session.waiting();
    if outcome == Outcome::Done && !interactions.is_empty() {
        emit(&super::transcript::waiting(&interactions, "(answer each below)"));
    }
    Ok(outcome)
}

/// The attachments as last shown: `[@Counter] [@Todo]`, printed when they change; and
/// the files attached to the next message.
#[derive(Default)]
struct Chips {
    shown: Vec<String>,
    files: Vec<FilePart>,
}

impl Chips {
    /// `(with your next message: cat.png (image/png, 12.0 KB))`.
    fn files_line(&self) -> String {
        let files: Vec<String> = self.files.iter().map(|f| safe_line(&f.describe()).into_owned()).collect();
        format!("(with your next message: {})", files.join(", "))
    }

    fn show(&mut self, session: &Session) {
        let now = session.attachments();
        if now != self.shown {
            // None left (after /clear) says nothing: the command already did.
            if !now.is_empty() {
                emit(&chips(&now));
            }
            self.shown = now;
        }
    }
}

fn chips(names: &[String]) -> String {
    names.iter().map(|n| format!("[@{}]", safe_line(n))).collect::<Vec<_>>().join(" ")
}
