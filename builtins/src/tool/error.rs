//! [`ToolError`]: why a tool's phase failed or its arguments were refused.

/// Why a phase of a tool failed, or why its arguments were refused: a message the model
/// reads (and a person sees in the transcript), so it says what went wrong and, where it
/// can, what to send instead.
///
/// Authors write `Err("why".into())` or `Err(format!("...").into())`; `?` takes a `String`
/// or `&str` error as it is.
///
/// ```
/// use trellis_builtins::tool::ToolError;
///
/// fn halve(n: i64) -> Result<i64, ToolError> {
///     if n % 2 != 0 {
///         return Err(format!("{n} is odd; send an even number").into());
///     }
///     Ok(n / 2)
/// }
/// assert_eq!(halve(3).unwrap_err().to_string(), "3 is odd; send an even number");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(String);

impl ToolError {
    /// An error saying `message`.
    pub fn new(message: impl Into<String>) -> Self {
        ToolError(message.into())
    }

    /// What it says.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl From<String> for ToolError {
    fn from(message: String) -> Self {
        ToolError(message)
    }
}

impl From<&str> for ToolError {
    fn from(message: &str) -> Self {
        ToolError(message.to_string())
    }
}

impl From<super::ClientError> for ToolError {
    fn from(error: super::ClientError) -> Self {
        ToolError(error.to_string())
    }
}

impl From<ToolError> for String {
    fn from(error: ToolError) -> Self {
        error.0
    }
}
