//! The terminal as a client executor: a tool's client phase asks the person here, at the
//! chat's prompt, and display effects print inline.

use rustyline::error::ReadlineError;
use rustyline::history::DefaultHistory;
use rustyline::Editor;
use trellis_builtins::tool::{ClientContext, ClientError};

use super::completion::Helper;
use crate::cli::output::emit;
use crate::terminal::safe_line;

/// A client phase's questions, asked at the prompt of the chat's line editor.
pub struct Terminal<'a> {
    /// The chat's line editor (it owns the terminal while it reads).
    pub editor: &'a mut Editor<Helper, DefaultHistory>,
    /// The tool that asks, named in every question.
    pub tool: String,
    /// The person left the question (Ctrl-C or Ctrl-D): the call stays waiting.
    pub left: bool,
}

impl Terminal<'_> {
    fn line(&mut self, prompt: &str) -> Result<String, ClientError> {
        let prompt = format!("{} asks: {} ", safe_line(&self.tool), safe_line(prompt));
        match tokio::task::block_in_place(|| self.editor.readline(&prompt)) {
            Ok(line) => Ok(line.trim().to_string()),
            Err(ReadlineError::Interrupted | ReadlineError::Eof) => {
                self.left = true;
                Err(ClientError::NoAnswer("the user left the question (Ctrl-C)".into()))
            }
            Err(e) => Err(ClientError::Unsupported(format!("cannot read from the terminal: {e}"))),
        }
    }
}

impl ClientContext for Terminal<'_> {
    fn ask(&mut self, question: &str) -> Result<String, ClientError> {
        self.line(question)
    }

    fn confirm(&mut self, question: &str) -> Result<bool, ClientError> {
        loop {
            match self.line(&format!("{question} [y/n]"))?.to_lowercase().as_str() {
                "y" | "yes" => return Ok(true),
                "n" | "no" => return Ok(false),
                _ => emit("yes or no, please"),
            }
        }
    }

    fn choose(&mut self, question: &str, options: &[String]) -> Result<String, ClientError> {
        let listed: Vec<String> = options.iter().map(|o| safe_line(o).into_owned()).collect();
        loop {
            let answer = self.line(&format!("{question} ({})", listed.join(" | ")))?;
            if let Some(option) = options.iter().find(|o| o.eq_ignore_ascii_case(&answer)) {
                return Ok(option.clone());
            }
            emit(&format!("one of: {}", listed.join(", ")));
        }
    }

    fn show(&mut self, text: &str) {
        emit(&format!("  ▸ {}", safe_line(text)));
    }
}
