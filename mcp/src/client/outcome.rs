//! What an MCP server's answer to `tools/call` becomes for the model: both ways a call
//! fails (a result with `isError`, and a JSON-RPC error) are error texts it reads. Images
//! and audio stay files the model receives; links to resources are listed by name and URI.

use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::ServiceError;
use trellis_builtins::files::FileLimits;
use trellis_builtins::message::{FilePart, Part, ToolOutput};

/// The most text one result keeps; a server may answer with anything.
const MAX_TEXT: usize = 256 * 1024;

/// The output of a call that got a result.
pub(super) fn from_result(server: &str, tool: &str, result: CallToolResult) -> ToolOutput {
    let text = text_of(&result.content);
    if result.is_error == Some(true) {
        let text = if text.is_empty() { "no reason given".to_string() } else { text };
        return ToolOutput::ErrorText(format!("`{server}.{tool}` failed: {text}"));
    }
    match result.structured_content {
        Some(value) if serde_json::to_string(&value).is_ok_and(|s| s.len() <= MAX_TEXT) => ToolOutput::Json(value),
        _ if result.content.iter().any(is_media) => ToolOutput::Content(parts_of(result.content)),
        _ => ToolOutput::Text(text),
    }
}

/// Whether a block is an image or audio.
fn is_media(block: &ContentBlock) -> bool {
    matches!(block, ContentBlock::Image(_) | ContentBlock::Audio(_))
}

/// The content blocks as parts: images and audio as files (the dialog keeps them apart and
/// checks their bytes), the rest as text.
fn parts_of(content: Vec<ContentBlock>) -> Vec<Part> {
    // Base64 of a file at the limit a dialog keeps by default: a larger one is only named,
    // before it is held anywhere.
    let most = FileLimits::default().per_part / 3 * 4 + 4;
    content
        .into_iter()
        .map(|block| {
            let (data, media_type) = match &block {
                ContentBlock::Image(image) => (&image.data, &image.mime_type),
                ContentBlock::Audio(audio) => (&audio.data, &audio.mime_type),
                other => return Part::Text { text: text_of(std::slice::from_ref(other)) },
            };
            let file = FilePart { media_type: bounded(media_type.clone()), name: None, size: 0, data: None, doc: None };
            if data.len() as u64 > most {
                return Part::Text { text: format!("[{}: not kept, larger than a file may be]", file.media_type) };
            }
            // The size is counted again when the dialog keeps the bytes.
            Part::File(FilePart { size: data.len() as u64 / 4 * 3, data: Some(data.clone()), ..file })
        })
        .collect()
}

/// The output of a call that got no result.
pub(super) fn from_error(server: &str, tool: &str, error: ServiceError) -> ToolOutput {
    let text = match error {
        ServiceError::McpError(error) => {
            let data = error.data.as_ref().map(|d| format!(" ({})", bounded(d.to_string()))).unwrap_or_default();
            format!(
                "`{server}.{tool}` failed: {}{data} (JSON-RPC error {})",
                bounded(error.message.to_string()),
                error.code.0
            )
        }
        ServiceError::TransportClosed => {
            format!("`{server}.{tool}` did not answer: the MCP server `{server}` is gone")
        }
        // The transport's own text names its generic types; the cause at the bottom says
        // what happened (an answer too large, a connection refused). The server may well
        // answer the next call.
        ServiceError::TransportSend(_) => {
            format!(
                "`{server}.{tool}` did not answer: the request to the MCP server `{server}` failed: {}",
                root_cause(&error)
            )
        }
        other => format!("`{server}.{tool}` failed: {other}"),
    };
    ToolOutput::ErrorText(text)
}

/// The message of the innermost cause of `error`.
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    bounded(cause.to_string())
}

/// The content blocks as one text: text as it is, other kinds named.
fn text_of(content: &[ContentBlock]) -> String {
    let parts: Vec<String> = content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => format!("[an image, {}]", image.mime_type),
            ContentBlock::Audio(audio) => format!("[audio, {}]", audio.mime_type),
            ContentBlock::Resource(resource) => {
                serde_json::to_value(&resource.resource).map(|v| v.to_string()).unwrap_or_default()
            }
            ContentBlock::ResourceLink(link) => format!("[a resource: {} <{}>]", link.name, link.uri),
            _ => "[content of a kind Trellis does not show]".to_string(),
        })
        .collect();
    bounded(parts.join("\n"))
}

/// `text` cut to [`MAX_TEXT`] bytes (at a character boundary), saying so.
pub(super) fn bounded(mut text: String) -> String {
    if text.len() > MAX_TEXT {
        let mut end = MAX_TEXT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(" … (cut: the server sent more)");
    }
    text
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ErrorCode, ErrorData};

    use super::*;

    #[test]
    fn a_result_marked_as_an_error_is_an_error_text() {
        let result = CallToolResult::error(vec![ContentBlock::text("division by zero")]);
        assert_eq!(
            from_result("calc", "div", result),
            ToolOutput::ErrorText("`calc.div` failed: division by zero".into())
        );
    }

    #[test]
    fn a_json_rpc_error_is_an_error_text_with_its_code() {
        let error = ServiceError::McpError(ErrorData::new(ErrorCode::INVALID_PARAMS, "unknown tool: nope", None));
        let ToolOutput::ErrorText(text) = from_error("calc", "nope", error) else { panic!("an error") };
        assert!(text.contains("unknown tool: nope") && text.contains("-32602"), "{text}");
    }

    #[test]
    fn structured_content_is_json_and_text_is_text() {
        let structured = CallToolResult::structured(serde_json::json!({"sum": 3}));
        assert_eq!(from_result("c", "t", structured), ToolOutput::Json(serde_json::json!({"sum": 3})));
        let text = CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
        assert_eq!(from_result("c", "t", text), ToolOutput::Text("a\nb".into()));
    }

    #[test]
    fn images_stay_files_and_resource_links_are_named() {
        let link = rmcp::model::Resource::new("file:///notes.txt", "notes");
        let result = CallToolResult::success(vec![
            ContentBlock::text("a dot"),
            ContentBlock::image("iVBORw==", "image/png"),
            ContentBlock::resource_link(link),
        ]);
        let ToolOutput::Content(parts) = from_result("e", "img", result) else { panic!("content") };
        assert_eq!(parts[0], Part::Text { text: "a dot".into() });
        let Part::File(file) = &parts[1] else { panic!("a file: {parts:?}") };
        assert_eq!((file.media_type.as_str(), file.data.as_deref()), ("image/png", Some("iVBORw==")));
        assert_eq!(parts[2], Part::Text { text: "[a resource: notes <file:///notes.txt>]".into() });
    }

    #[test]
    fn a_transport_failure_names_its_cause_not_the_transport() {
        #[derive(Debug, thiserror::Error)]
        #[error("Transport [WorkerTransport<StreamableHttpClientWorker<reqwest::Client>>] error: {0}")]
        struct Wrapper(#[source] std::io::Error);
        let wrapped = Wrapper(std::io::Error::other("HTTP response body exceeded the limit of 16777216 bytes"));
        assert_eq!(root_cause(&wrapped), "HTTP response body exceeded the limit of 16777216 bytes");
        let ToolOutput::ErrorText(text) = from_error("h", "echo", ServiceError::TransportClosed) else { panic!() };
        assert!(text.ends_with("the MCP server `h` is gone"), "{text}");
    }

    #[test]
    fn a_huge_answer_is_cut() {
        let text = bounded("é".repeat(MAX_TEXT));
        assert!(text.len() < MAX_TEXT + 64 && text.ends_with("(cut: the server sent more)"));
    }
}
