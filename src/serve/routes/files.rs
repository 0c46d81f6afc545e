//! `GET /api/chat/files/{doc}`: the bytes of a file of the conversation, for the page's
//! `<img>` and download links (which send the session cookie like any request of the page).
//!
//! Only a document a file part of the conversation names is served, never any other: a
//! document id is no secret (a charm's is in its URL), and the dialog alone writes the
//! documents its parts name. The bytes come from whoever sent them, a person or a tool, so
//! they never run here: `nosniff`, a sandbox with nothing allowed, and only the raster
//! images a browser decodes as images shown inline; every other type (SVG, which can hold
//! script, HTML, ...) is a download.

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use trellis_builtins::message::{FilePart, Message, Part, ToolOutput};
use trellis_runner::Read as _;

use crate::serve::error::ApiError;
use crate::serve::Server;

/// The media types shown inline: images a browser only ever decodes as pictures.
const INLINE: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// What a served file may do once it reaches a browser: nothing (no script, no request,
/// no plugin), even opened on its own.
const POLICY: &str = "sandbox; default-src 'none'";

/// `GET /api/chat/files/{doc}`.
pub async fn get(State(server): State<Server>, Path(doc): Path<String>) -> Result<Response, ApiError> {
    let messages = server.chat().dialog().messages();
    let Some(file) = named(&messages, &doc) else {
        return Err(ApiError::not_found(format!(
            "no file of the conversation is kept in document `{}`; GET /api/chat lists its files (`doc` of each \
             file part)",
            doc.escape_debug()
        )));
    };
    let bytes = bytes(&server, &doc, &file.media_type).ok_or_else(|| {
        ApiError::not_found(format!("the bytes of {} are missing from the space: send the file again", file.describe()))
    })?;
    let inline = INLINE.contains(&file.media_type.as_str());
    let kind = HeaderValue::from_str(&file.media_type)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    let disposition = HeaderValue::from_str(&disposition(inline, file.name.as_deref()))
        .unwrap_or_else(|_| HeaderValue::from_static("attachment"));
    let headers = [
        (header::CONTENT_TYPE, kind),
        (header::CONTENT_DISPOSITION, disposition),
        (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
        (header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY)),
        // A file's document is written once and never changes; it is this person's only.
        (header::CACHE_CONTROL, HeaderValue::from_static("private, max-age=31536000, immutable")),
    ];
    Ok((headers, bytes).into_response())
}

/// The file part of `messages` (or of their tool results) kept in document `doc`.
fn named<'m>(messages: &'m [Message], doc: &str) -> Option<&'m FilePart> {
    let parts = messages.iter().flat_map(|m| &m.content).flat_map(|part| match part {
        Part::ToolResult { output: ToolOutput::Content(parts), .. } => parts.iter().collect(),
        other => vec![other],
    });
    parts
        .filter_map(|part| if let Part::File(file) = part { Some(file) } else { None })
        .find(|file| file.doc.as_deref() == Some(doc))
}

/// The bytes kept in document `doc`, when it holds a file of `media_type`.
fn bytes(server: &Server, doc: &str, media_type: &str) -> Option<Vec<u8>> {
    let at = trellis_runner::Link::new(doc, trellis_runner::Path::new(["file"]));
    let kept = server.runtime().read(&at).ok()?.to_json();
    if kept.get("media_type")?.as_str()? != media_type {
        return None;
    }
    base64::engine::general_purpose::STANDARD.decode(kept.get("data")?.as_str()?).ok()
}

/// `inline` or `attachment`, with the file's name (RFC 6266): plainly for old clients,
/// with what cannot be said plainly as `_`, and exactly as `filename*`.
fn disposition(inline: bool, name: Option<&str>) -> String {
    let kind = if inline { "inline" } else { "attachment" };
    let Some(name) = name else { return kind.to_string() };
    let plain: String = name
        .chars()
        .map(|c| if c == ' ' || (c.is_ascii_graphic() && c != '"' && c != '\\') { c } else { '_' })
        .collect();
    let exact: String = name
        .bytes()
        .map(|b| match b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            true => char::from(b).to_string(),
            false => format!("%{b:02X}"),
        })
        .collect();
    format!("{kind}; filename=\"{plain}\"; filename*=UTF-8''{exact}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use trellis_builtins::message::Role;

    fn kept(doc: &str, media_type: &str) -> Part {
        let mut file = FilePart::from_bytes(media_type, Some("a.png".into()), b"x");
        (file.data, file.doc) = (None, Some(doc.to_string()));
        Part::File(file)
    }

    #[test]
    fn only_documents_the_conversation_names_are_found_tool_results_included() {
        let result = ToolOutput::Content(vec![Part::Text { text: "here".into() }, kept("file-2", "image/gif")]);
        let messages = vec![
            Message::new(Role::User, vec![Part::Text { text: "look".into() }, kept("file-1", "image/png")]),
            Message::new(Role::Tool, vec![Part::ToolResult { id: "c".into(), name: "t".into(), output: result }]),
        ];
        assert_eq!(named(&messages, "file-1").map(|f| f.media_type.as_str()), Some("image/png"));
        assert_eq!(named(&messages, "file-2").map(|f| f.media_type.as_str()), Some("image/gif"));
        assert!(named(&messages, "charm-1").is_none());
    }

    #[test]
    fn a_name_is_given_plainly_and_exactly() {
        assert_eq!(disposition(true, None), "inline");
        assert_eq!(disposition(false, Some("a b.txt")), "attachment; filename=\"a b.txt\"; filename*=UTF-8''a%20b.txt");
        let odd = disposition(false, Some("\"x\"\\é.svg"));
        assert_eq!(odd, "attachment; filename=\"_x___.svg\"; filename*=UTF-8''%22x%22%5C%C3%A9.svg");
        assert!(HeaderValue::from_str(&odd).is_ok());
    }
}
