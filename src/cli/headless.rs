//! `Headless`: the client of a command run without a terminal.

use trellis_builtins::tool::{ClientContext, ClientError};

use super::Format;

/// The client a command without a terminal is: it shows display effects (in text output)
/// and has no person to ask, so a client phase that asks waits for `trellis resolve`.
pub struct Headless {
    /// The command's output format: display effects print in text output only.
    pub format: Format,
}

impl ClientContext for Headless {
    fn ask(&mut self, _question: &str) -> Result<String, ClientError> {
        Err(ClientError::Unsupported(no_person()))
    }

    fn confirm(&mut self, _question: &str) -> Result<bool, ClientError> {
        Err(ClientError::Unsupported(no_person()))
    }

    fn choose(&mut self, _question: &str, _options: &[String]) -> Result<String, ClientError> {
        Err(ClientError::Unsupported(no_person()))
    }

    fn show(&mut self, text: &str) {
        if !self.format.json {
            super::output::emit(&format!("  ▸ {}", crate::terminal::safe_line(text)));
        }
    }
}

fn no_person() -> String {
    format!("no one is at a terminal to ask; answer with `{} resolve`", crate::program::name())
}
