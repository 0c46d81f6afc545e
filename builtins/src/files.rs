//! Files in a conversation: the limits a file part keeps to, moving its bytes into a
//! document of their own when the dialog keeps the message, and loading them back for the
//! request a provider receives.
//!
//! A file's document holds `{"file": {"media_type", "size", "data"}}` (`data` base64). Only
//! the dialog writes one, and a part names its document in `doc`, which a sender may not
//! set: a part naming some other document would read that document to the model.

use base64::Engine;
use serde_json::json;
use trellis_runner::{Link, Path, Read, Tx, Value};

use crate::message::{size_text, FilePart, Message, Part, ToolOutput};

/// The longest media type or file name kept, in characters.
const MAX_LABEL: usize = 255;

/// How large files may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileLimits {
    /// The largest file part, in bytes (default 5 MiB).
    pub per_part: u64,
    /// The most bytes of files one message may carry (default 20 MiB).
    pub per_message: u64,
}

impl Default for FileLimits {
    fn default() -> Self {
        FileLimits { per_part: 5 << 20, per_message: 20 << 20 }
    }
}

/// Why a file part was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FileError {
    /// One part is larger than [`FileLimits::per_part`].
    #[error("{file} is larger than the {} limit for one file: send a smaller one", size_text(*limit))]
    TooLarge {
        /// The part, by name or position.
        file: String,
        /// [`FileLimits::per_part`].
        limit: u64,
    },
    /// The parts of one message together are larger than [`FileLimits::per_message`].
    #[error("the files of this message come to {}, more than the {} limit: send fewer at a time", size_text(*size), size_text(*limit))]
    MessageTooLarge {
        /// The bytes of the parts counted when the limit was passed.
        size: u64,
        /// [`FileLimits::per_message`].
        limit: u64,
    },
    /// The part is malformed.
    #[error("the file part {file} {why}")]
    Malformed {
        /// The part, by name or position.
        file: String,
        /// What is wrong with it.
        why: String,
    },
}

/// What a file part is called in an error: its name, or its position.
fn label(file: &FilePart, index: usize) -> String {
    match &file.name {
        Some(name) => format!("`{}`", name.escape_debug()),
        None => format!("#{}", index + 1),
    }
}

/// Checks a part's media type, name and bytes; its decoded size.
fn check(file: &FilePart, index: usize, limits: FileLimits) -> Result<Vec<u8>, FileError> {
    let malformed = |why: &str| FileError::Malformed { file: label(file, index), why: why.to_string() };
    let token = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b));
    let media = file.media_type.split_once('/');
    if file.media_type.len() > MAX_LABEL || !media.is_some_and(|(kind, sub)| token(kind) && token(sub)) {
        return Err(malformed("needs a media type such as image/png"));
    }
    if let Some(name) = &file.name {
        if name.chars().count() > MAX_LABEL || name.chars().any(char::is_control) || name.trim().is_empty() {
            return Err(malformed("has a name that is empty, too long, or holds control characters"));
        }
    }
    if file.doc.is_some() {
        return Err(malformed("names a document (`doc`); send its bytes in `data` instead"));
    }
    let Some(data) = &file.data else { return Err(malformed("has no bytes: put them in `data`, base64")) };
    // Judged before decoding, so an oversized part costs no copy.
    if (data.len() as u64) / 4 * 3 > limits.per_part + 2 {
        return Err(FileError::TooLarge { file: label(file, index), limit: limits.per_part });
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|_| malformed("has `data` that is not base64 (standard alphabet, padded)"))?;
    if bytes.len() as u64 > limits.per_part {
        return Err(FileError::TooLarge { file: label(file, index), limit: limits.per_part });
    }
    Ok(bytes)
}

/// Keeps the files a person sent: each file part of `message` is checked and its bytes
/// moved into a document of its own. Refuses the message if any part is malformed or too
/// large, or its parts together are.
pub fn keep_sent(tx: &Tx, message: &mut Message, limits: FileLimits) -> Result<(), FileError> {
    let mut total = 0u64;
    let mut checked = Vec::new();
    for (index, part) in message.content.iter().enumerate() {
        if let Part::File(file) = part {
            let bytes = check(file, index, limits)?;
            total += bytes.len() as u64;
            if total > limits.per_message {
                return Err(FileError::MessageTooLarge { size: total, limit: limits.per_message });
            }
            checked.push((index, bytes.len() as u64));
        }
    }
    for (index, size) in checked {
        if let Part::File(file) = &mut message.content[index] {
            store(tx, file, size).map_err(|e| FileError::Malformed { file: label(file, index), why: e.to_string() })?;
        }
    }
    Ok(())
}

/// Keeps the files tool results carry: each is moved into a document of its own, and one
/// that is malformed or too large becomes a text saying so (a tool's result is never
/// refused for its files).
pub fn keep_results(tx: &Tx, message: &mut Message, limits: FileLimits) -> trellis_runner::Result<()> {
    let mut total = 0u64;
    for part in &mut message.content {
        let Part::ToolResult { output: ToolOutput::Content(parts), .. } = part else { continue };
        for (index, part) in parts.iter_mut().enumerate() {
            let Part::File(file) = part else { continue };
            let checked = check(file, index, limits).and_then(|bytes| {
                total += bytes.len() as u64;
                match total > limits.per_message {
                    true => Err(FileError::MessageTooLarge { size: total, limit: limits.per_message }),
                    false => Ok(bytes.len() as u64),
                }
            });
            match checked {
                Ok(size) => store(tx, file, size)?,
                Err(why) => *part = Part::Text { text: format!("[{}: not kept, {why}]", file.describe()) },
            }
        }
    }
    Ok(())
}

/// Moves a checked part's bytes into a new document.
fn store(tx: &Tx, file: &mut FilePart, size: u64) -> trellis_runner::Result<()> {
    let doc = tx.space().new_doc_id("file");
    let data = file.data.take().unwrap_or_default();
    let kept = json!({"file": {"media_type": &file.media_type, "size": size, "data": data}});
    tx.write(&Link::new(doc.clone(), Path::root()), Value::from(kept))?;
    file.size = size;
    file.doc = Some(doc.to_string());
    Ok(())
}

/// The parts of `messages` that are files, including those inside tool results.
fn files_mut(messages: &mut [Message]) -> impl Iterator<Item = &mut Part> {
    messages.iter_mut().flat_map(|m| &mut m.content).flat_map(|part| {
        let inner: Vec<&mut Part> = match part {
            Part::ToolResult { output: ToolOutput::Content(parts), .. } => parts.iter_mut().collect(),
            other => vec![other],
        };
        inner.into_iter().filter(|p| matches!(p, Part::File(_)))
    })
}

/// Loads the bytes of every kept file part of `messages` (for a provider's request). A
/// part whose document is gone or is not a file becomes a text saying so.
pub fn load(space: &impl Read, messages: &mut [Message]) {
    for part in files_mut(messages) {
        let Part::File(file) = part else { continue };
        if file.data.is_some() {
            continue;
        }
        let data = file.doc.as_ref().and_then(|doc| {
            let kept = space.read(&Link::new(doc.as_str(), Path::new(["file"]))).ok()?.to_json();
            let serde_json::Value::String(data) = kept.get("data")? else { return None };
            (kept.get("media_type")?.as_str()? == file.media_type).then(|| data.clone())
        });
        match data {
            Some(data) => file.data = Some(data),
            None => *part = Part::Text { text: format!("[{}: its bytes are missing from the space]", file.describe()) },
        }
    }
}

/// Whether `messages` carry a file a provider takes natively (anything but text).
pub fn carries_media(messages: &[Message]) -> bool {
    fn media_in(parts: &[Part]) -> bool {
        parts.iter().any(|part| match part {
            Part::File(file) => !is_text(&file.media_type),
            Part::ToolResult { output: ToolOutput::Content(parts), .. } => media_in(parts),
            _ => false,
        })
    }
    messages.iter().any(|message| media_in(&message.content))
}

/// Takes the bytes out of every file of `messages` that is not text, so that a provider
/// sends its placeholder (for a model that takes no images or documents); the names of
/// those files.
pub fn withhold_media(messages: &mut [Message]) -> Vec<String> {
    let mut withheld = Vec::new();
    for part in files_mut(messages) {
        let Part::File(file) = part else { continue };
        if !is_text(&file.media_type) {
            withheld.push(file.name.clone().unwrap_or_else(|| file.media_type.clone()));
            file.data = None;
        }
    }
    withheld
}

/// Whether a model is shown a file of this media type as text (decoded as UTF-8).
pub fn is_text(media_type: &str) -> bool {
    media_type.starts_with("text/")
        || matches!(media_type, "application/json" | "application/xml" | "application/yaml" | "application/toml")
        || media_type.ends_with("+json")
        || media_type.ends_with("+xml")
}

/// A text file's contents as a model reads them, headed by its description; `None` for a
/// file that is not text or whose bytes are not loaded.
pub fn as_text(file: &FilePart) -> Option<String> {
    if !is_text(&file.media_type) {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(file.data.as_deref()?).ok()?;
    Some(format!("[{}]\n{}", file.describe(), String::from_utf8_lossy(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Role;
    use trellis_runner::Runtime;

    /// `message` with its files kept by `keep` in one transaction of `rt`.
    fn kept(
        rt: &Runtime,
        message: Message,
        keep: impl Fn(&Tx, &mut Message) -> Result<(), FileError>,
    ) -> Result<Message, String> {
        let outcome = rt.transact(|tx| {
            let mut message = message.clone();
            Ok(keep(tx, &mut message).map(|()| message))
        });
        outcome.expect("a transaction").map_err(|e| e.to_string())
    }

    fn png(size: usize) -> Part {
        Part::File(FilePart::from_bytes("image/png", Some("a.png".into()), &vec![7u8; size]))
    }

    #[test]
    fn a_kept_file_moves_to_its_own_document_and_loads_back() {
        let rt = Runtime::in_memory();
        let message = Message::new(Role::User, vec![Part::Text { text: "look".into() }, png(3000)]);
        let message = kept(&rt, message, |tx, m| keep_sent(tx, m, FileLimits::default())).expect("fits");
        let Part::File(kept) = &message.content[1] else { panic!("a file") };
        assert!(kept.data.is_none() && kept.doc.is_some() && kept.size == 3000, "{kept:?}");
        assert!(serde_json::to_string(&message).expect("json").len() < 200, "the message stays small");
        let mut loaded = vec![message];
        load(&rt, &mut loaded);
        let Part::File(back) = &loaded[0].content[1] else { panic!("a file") };
        let Part::File(sent) = png(3000) else { panic!("a file") };
        assert_eq!(back.data, sent.data, "the same bytes");
    }

    #[test]
    fn limits_and_malformed_parts_are_refused_with_what_to_do() {
        let rt = Runtime::in_memory();
        let limits = FileLimits { per_part: 1000, per_message: 1500 };
        let keep =
            |parts: Vec<Part>| kept(&rt, Message::new(Role::User, parts), |tx, m| keep_sent(tx, m, limits)).map(drop);
        assert!(keep(vec![png(1001)]).is_err_and(|e| e.contains("`a.png` is larger than")), "one part");
        assert!(keep(vec![png(900), png(900)]).is_err_and(|e| e.contains("send fewer at a time")), "together");
        let mut forged = FilePart::from_bytes("image/png", None, b"x");
        forged.doc = Some("charm-secret".into());
        assert!(keep(vec![Part::File(forged)]).is_err_and(|e| e.contains("`doc`")), "no document named by a sender");
        let mut bad = FilePart::from_bytes("image/png", None, b"x");
        bad.data = Some("not base64!".into());
        assert!(keep(vec![Part::File(bad)]).is_err_and(|e| e.contains("not base64")));
        let typeless = FilePart::from_bytes("png", None, b"x");
        assert!(keep(vec![Part::File(typeless)]).is_err_and(|e| e.contains("media type")));
        assert_eq!(keep(vec![png(900)]), Ok(()));
    }

    #[test]
    fn a_tool_results_oversized_file_becomes_a_note() {
        let rt = Runtime::in_memory();
        let output = ToolOutput::Content(vec![Part::Text { text: "here".into() }, png(2000)]);
        let message = Message::new(Role::Tool, vec![Part::ToolResult { id: "c".into(), name: "t".into(), output }]);
        let limits = FileLimits { per_part: 1000, per_message: 1500 };
        let message = kept(&rt, message, |tx, m| {
            keep_results(tx, m, limits).map_err(|e| FileError::Malformed { file: String::new(), why: e.to_string() })
        })
        .expect("kept");
        let Part::ToolResult { output: ToolOutput::Content(parts), .. } = &message.content[0] else { panic!() };
        assert!(matches!(&parts[1], Part::Text { text } if text.contains("not kept")), "{parts:?}");
    }

    #[test]
    fn a_missing_document_loads_as_a_note() {
        let rt = Runtime::in_memory();
        let mut file = FilePart::from_bytes("image/png", None, b"x");
        (file.data, file.doc) = (None, Some("file-gone".into()));
        let mut messages = vec![Message::new(Role::User, vec![Part::File(file)])];
        load(&rt, &mut messages);
        assert!(matches!(&messages[0].content[0], Part::Text { text } if text.contains("missing")));
    }
}
