//! Following a reply while it is generated: the streamed text as it arrives, tool calls
//! and results as their messages appear, Ctrl-C to cancel (a second one leaves), and
//! lines typed meanwhile sent as queued messages.
//!
//! The terminal is in its ordinary (cooked) mode here: the line editor only owns it
//! while reading a line, so Ctrl-C arrives as SIGINT, which tokio's handler turns into
//! an event instead of ending the process, and what the person types is echoed by the
//! terminal and becomes readable only when Enter ends the line. Each tick looks for such
//! a line without blocking and sends it: the dialog queues it and takes it at the next
//! step boundary (after the running tool calls, before the next model request).
//!
//! A tool that asks the person something while it runs (an MCP server's form or URL) is
//! answered here too: the question is printed, and the lines typed then fill in its form
//! a field at a time (`crate::cli::form`) instead of being queued.

use crate::cli::output::emit;
use crate::terminal::{safe_line, write_text};
use std::io::Write;
use std::time::Duration;

use anyhow::Context as _;
use trellis_builtins::ask::InteractionKind;
use trellis_builtins::message::{Part, Role};

use crate::cli::form::{Form, Step};
use crate::cli::transcript::{line, ASSISTANT};
use crate::session::Session;

/// How often the dialog's state is looked at.
const TICK: Duration = Duration::from_millis(30);

/// How a reply ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It completed (or failed; the failure is printed).
    Done,
    /// Ctrl-C cancelled it.
    Cancelled,
    /// Ctrl-C was pressed again: leave.
    Quit,
}

/// Prints the reply to the message at index `sent` until no request is pending.
pub async fn follow(session: &Session, sent: usize) -> anyhow::Result<Outcome> {
    let mut printer = Printer { seen: sent, streamed: String::new(), mid_line: false };
    let mut interrupts = Interrupts::new()?;
    let mut tick = tokio::time::interval(TICK);
    let mut cancelled = false;
    let mut form: Option<Form> = None;
    let mut told = std::collections::HashMap::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {
                // Read `pending` first: every message committed before it turned false
                // is then seen by this round.
                let pending = session.dialog().pending();
                printer.catch_up(session)?;
                if !pending {
                    break;
                }
                for progress in session.dialog().progress() {
                    if told.get(&progress.call) != Some(&progress.text) {
                        printer.end_line()?;
                        emit(&crate::cli::transcript::progress_line(&progress));
                        told.insert(progress.call, progress.text);
                    }
                }
                if form.as_ref().is_none_or(|f| !asks(session, &f.call_id)) {
                    form = start_form(session, &mut printer)?;
                }
                if let Some(typed) = typed_line() {
                    // The terminal's echo of Enter ended the streamed line.
                    printer.mid_line = false;
                    match form.as_mut() {
                        Some(asking) => {
                            if fill(session, asking, typed.trim()).await {
                                form = None;
                            }
                        }
                        None => queue(session, typed.trim()).await,
                    }
                }
            }
            () = interrupts.next() => {
                printer.end_line()?;
                if cancelled {
                    emit("(leaving)");
                    return Ok(Outcome::Quit);
                }
                cancelled = true;
                emit("(cancelling the reply; Ctrl-C again leaves)");
                session.dialog().cancel().await.context("cannot cancel the reply")?;
            }
        }
    }
    printer.end_line()?;
    if cancelled {
        emit("(cancelled)");
        return Ok(Outcome::Cancelled);
    }
    if let Err(e) = session.check_error() {
        emit(&format!("error: {e:#}"));
    }
    Ok(Outcome::Done)
}

/// Whether the tool's question of call `call_id` still waits.
fn asks(session: &Session, call_id: &str) -> bool {
    session.waiting().iter().any(|w| w.call_id == call_id && w.kind == InteractionKind::Elicitation)
}

/// The form of a tool's question that waits, if one does, its header and first line
/// printed.
fn start_form(session: &Session, printer: &mut Printer) -> anyhow::Result<Option<Form>> {
    let waiting = session.waiting();
    let Some(question) = waiting.iter().find(|w| w.kind == InteractionKind::Elicitation) else { return Ok(None) };
    printer.end_line()?;
    let (form, header) = Form::start(question);
    emit(&header);
    prompt(&form.prompt());
    Ok(Some(form))
}

/// Fills the form's current field with `typed`; true once the answer is sent.
async fn fill(session: &Session, form: &mut Form, typed: &str) -> bool {
    match form.take(typed) {
        Step::Ask(next) => {
            prompt(&next);
            false
        }
        Step::Done(reply) => match session.resolve(Some(&form.call_id), reply).await {
            Ok(_) => true,
            // Refused (a field does not fit the schema): the form again, from its top.
            Err(e) => {
                emit(&format!("{e:#}"));
                match session.waiting().into_iter().find(|w| w.call_id == form.call_id) {
                    Some(again) => {
                        *form = Form::start(&again).0;
                        prompt(&form.prompt());
                        false
                    }
                    None => true,
                }
            }
        },
    }
}

/// Prints `text` with no line end: the person types the rest of the line.
fn prompt(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Sends a line typed while the reply runs; the dialog queues it (`while_running`).
async fn queue(session: &Session, typed: &str) {
    if typed.is_empty() {
        return;
    }
    if typed.starts_with('/') {
        emit(&format!("(commands wait for the reply to end: type {} again then)", safe_line(typed)));
        return;
    }
    match session.start(typed, Vec::new()).await {
        Ok(_) => emit(&format!("(queued: {}; it is sent after the running step)", safe_line(typed))),
        Err(e) => emit(&format!("error: {e:#}")),
    }
}

/// A line the person finished typing since the last look, if any. The terminal is in
/// canonical mode, so stdin is readable only once a whole line is there, and one read
/// returns that line: reading it never waits for the person.
#[cfg(unix)]
fn typed_line() -> Option<String> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::io::BufRead as _;
    use std::os::fd::AsFd as _;
    let stdin = std::io::stdin();
    let mut ready = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
    if !matches!(poll(&mut ready, PollTimeout::ZERO), Ok(n) if n > 0) {
        return None;
    }
    let mut line = String::new();
    // Nothing (Ctrl-D) or text that is not UTF-8 is no message.
    stdin.lock().read_line(&mut line).ok().filter(|read| *read > 0)?;
    Some(line)
}

/// Without a way to look at the terminal without blocking, lines typed during a reply
/// wait for the prompt (the terminal keeps them).
#[cfg(not(unix))]
fn typed_line() -> Option<String> {
    None
}

/// What of the conversation is on the screen already.
struct Printer {
    /// Messages printed (or skipped) so far.
    seen: usize,
    /// The streamed text of the answer in progress that is printed.
    streamed: String,
    /// Whether the cursor is after text on its line.
    mid_line: bool,
}

impl Printer {
    fn catch_up(&mut self, session: &Session) -> anyhow::Result<()> {
        let messages = session.dialog().messages();
        let mut out = std::io::stdout().lock();
        for message in messages.iter().skip(self.seen) {
            for part in &message.content {
                match (message.role, part) {
                    // The user's own message: it is on the screen as typed.
                    (Role::User, Part::Text { .. }) => {}
                    (_, Part::Text { text }) => {
                        let streamed = self.streamed.as_str();
                        if !streamed.is_empty() && text.starts_with(streamed) {
                            // Print what did not stream yet.
                            let rest = text[streamed.len()..].trim_end();
                            write_text(&mut out, rest)?;
                            if self.mid_line || !rest.is_empty() {
                                writeln!(out)?;
                            }
                        } else if !streamed.is_empty() && streamed.starts_with(text.trim_end()) {
                            if self.mid_line {
                                writeln!(out)?;
                            }
                        } else {
                            if self.mid_line {
                                writeln!(out)?;
                            }
                            write!(out, "{ASSISTANT}")?;
                            write_text(&mut out, text.trim_end())?;
                            writeln!(out)?;
                        }
                        self.streamed.clear();
                        self.mid_line = false;
                    }
                    _ => {
                        if self.mid_line {
                            writeln!(out)?;
                            self.mid_line = false;
                        }
                        write_text(&mut out, &line(session, message.role, part))?;
                        writeln!(out)?;
                    }
                }
            }
            // A finished answer replaces whatever of it was streamed.
            self.streamed.clear();
        }
        self.seen = self.seen.max(messages.len());
        // The answer in progress; a `partial` that does not extend what is printed
        // belongs to the next answer, whose message shows up on a later round.
        let partial = session.dialog().partial();
        if partial.len() > self.streamed.len() && partial.starts_with(self.streamed.as_str()) {
            if self.streamed.is_empty() {
                if self.mid_line {
                    writeln!(out)?;
                }
                write!(out, "{ASSISTANT}")?;
            }
            write_text(&mut out, &partial[self.streamed.len()..])?;
            self.mid_line = !partial.ends_with('\n');
            self.streamed = partial;
        }
        out.flush()?;
        Ok(())
    }

    /// Ends a streamed line that is still open.
    fn end_line(&mut self) -> anyhow::Result<()> {
        if self.mid_line {
            let mut out = std::io::stdout().lock();
            writeln!(out)?;
            out.flush()?;
            self.mid_line = false;
        }
        Ok(())
    }
}

/// Ctrl-C presses (SIGINT) from the moment this is made; earlier ones are not seen.
struct Interrupts {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Interrupts {
    fn new() -> anyhow::Result<Self> {
        #[cfg(unix)]
        {
            let signal = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
                .context("cannot listen for Ctrl-C")?;
            Ok(Interrupts { signal })
        }
        #[cfg(not(unix))]
        Ok(Interrupts {})
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        {
            if self.signal.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        #[cfg(not(unix))]
        {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Makes Ctrl-C outside a line read an event for [`follow`] instead of the end of the
/// process (the handler stays for the rest of the process).
pub fn install_ctrl_c() -> anyhow::Result<()> {
    Interrupts::new().map(drop)
}
