//! What an MCP server's answer to `tools/call` becomes for the model: both ways a call
//! fails (a result with `isError`, and a JSON-RPC error) are error texts it reads.

use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::ServiceError;
use trellis_builtins::message::ToolOutput;

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
        _ => ToolOutput::Text(text),
    }
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
            ContentBlock::ResourceLink(link) => format!("[a resource: {}]", link.uri),
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
