//! What a chat message must be before it is sent.

/// The longest chat message, in characters: in the terminal as on the web page (a model
/// reads it whole, and a larger one would only cost memory and time on the way).
pub const MAX_MESSAGE: usize = 16_000;

/// Refuses a chat message longer than [`MAX_MESSAGE`] characters, or empty, saying why.
pub fn check_message(text: &str) -> Result<(), String> {
    let length = text.chars().count();
    if length > MAX_MESSAGE {
        return Err(format!(
            "the message is {length} characters long; the limit is {MAX_MESSAGE}: split it into several messages"
        ));
    }
    if text.trim().is_empty() {
        return Err("the message is empty".to_string());
    }
    Ok(())
}
