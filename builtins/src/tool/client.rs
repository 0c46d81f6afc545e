//! [`ClientContext`]: what a client phase may ask of the client it runs in.

/// Why a client could not do what a client phase asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The person declined to answer (Ctrl-C, an empty answer where one is needed).
    #[error("the user did not answer: {0}")]
    NoAnswer(String),
    /// This client cannot do what was asked (no person at it, no display).
    #[error("this client cannot do that: {0}")]
    Unsupported(String),
}

impl From<ClientError> for String {
    fn from(error: ClientError) -> String {
        error.to_string()
    }
}

/// The client a client phase runs in: the terminal asks the person at its prompt; a test
/// answers from a script. Client phases use it instead of reading a terminal themselves,
/// so the same tool runs in every client.
pub trait ClientContext {
    /// Asks the person a question; their answer in words.
    fn ask(&mut self, question: &str) -> Result<String, ClientError>;

    /// Asks the person to say yes or no.
    fn confirm(&mut self, question: &str) -> Result<bool, ClientError>;

    /// Asks the person to pick one of `options`; the option picked.
    fn choose(&mut self, question: &str, options: &[String]) -> Result<String, ClientError>;

    /// Shows something to the person (a display effect).
    fn show(&mut self, text: &str);
}
