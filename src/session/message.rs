//! What a chat message must be before it is sent, and the files that go with it.

use trellis_builtins::files::FileLimits;
use trellis_builtins::message::{size_text, FilePart};

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

/// Reads the file at `path` as a part of the next message: its media type from its
/// extension (`application/octet-stream` when unknown), its name from the path. A file
/// larger than a dialog keeps by default is refused before it is read.
pub fn attach_file(path: &std::path::Path) -> Result<FilePart, String> {
    let shown = path.display();
    let limit = FileLimits::default().per_part;
    let metadata = std::fs::metadata(path).map_err(|e| format!("cannot attach {shown}: {e}"))?;
    if !metadata.is_file() {
        return Err(format!("cannot attach {shown}: it is not a file"));
    }
    if metadata.len() > limit {
        return Err(format!(
            "cannot attach {shown}: it is {}, and a file may be at most {}; send a smaller one",
            size_text(metadata.len()),
            size_text(limit)
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot attach {shown}: {e}"))?;
    let media_type = mime_guess::from_path(path).first_or_octet_stream().essence_str().to_string();
    let name = path.file_name().map(|name| name.to_string_lossy().into_owned());
    Ok(FilePart::from_bytes(media_type, name, &bytes))
}
