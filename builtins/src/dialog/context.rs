//! What of the conversation a request carries: the turns after a compaction (see
//! `compact`), every tool result capped.
//!
//! The conversation keeps each tool result whole, in the space. A request carries at most
//! `tool_result_cap` bytes of each ([`TOOL_RESULT_CAP`] by default): past that the model
//! reads the start, then a note of what was cut and the whole size, and the request offers
//! the [`READ_RESULT`] tool, which pages through the result the conversation kept. A
//! 1 MB result thus costs the model what it chooses to read of it, and the provider never
//! refuses a request for one.

use serde_json::{json, Value};

use super::compact::Compaction;
use super::messages::prepare_for_provider;
use crate::message::{Message, Part, ToolOutput};
use crate::model::{ModelRequest, ToolSpec};

/// How many bytes of a tool result a request carries when the dialog's
/// `tool_result_cap` is not given.
pub const TOOL_RESULT_CAP: usize = 16 * 1024;

/// The least `tool_result_cap` taken: a smaller one would leave no room for a note.
const MIN_CAP: usize = 256;

/// The wire name of the tool that pages through a result cut in a request.
pub const READ_RESULT: &str = "read_tool_result";

/// The cap a dialog's `tool_result_cap` input asks for (at least [`MIN_CAP`]).
pub(super) fn cap_of(input: &Value) -> usize {
    input.as_u64().and_then(|n| usize::try_from(n).ok()).unwrap_or(TOOL_RESULT_CAP).max(MIN_CAP)
}

/// Fills `request` with what of the conversation it carries: the `system` prompt, followed
/// by the summary of the turns a `compaction` stands for; the messages after those, made
/// ready for a provider; each tool result capped at `cap` bytes. Whether a result was cut.
pub(super) fn fill(
    request: &mut ModelRequest,
    system: Option<&str>,
    messages: &[Message],
    compaction: Option<&Compaction>,
    cap: usize,
) -> bool {
    request.system = match compaction {
        Some(compaction) => {
            let before = system.map(|s| format!("{s}\n\n")).unwrap_or_default();
            Some(format!("{before}The conversation's earlier turns, summarised:\n{}", compaction.summary))
        }
        None => system.map(str::to_string),
    };
    request.messages = prepare_for_provider(&messages[compaction.map_or(0, |c| c.upto)..]);
    cap_results(&mut request.messages, cap)
}

/// Cuts each tool result in `messages` longer than `cap` bytes to its start and a note,
/// except the pages [`READ_RESULT`] read (each at most `cap` long already); whether any
/// was cut.
pub(super) fn cap_results(messages: &mut [Message], cap: usize) -> bool {
    let mut cut = false;
    for part in messages.iter_mut().flat_map(|message| message.content.iter_mut()) {
        let Part::ToolResult { id, name, output } = part else { continue };
        if name == READ_RESULT {
            continue;
        }
        let text = output.as_text();
        if text.len() <= cap {
            continue;
        }
        let shown = text.floor_char_boundary(cap);
        let note = format!(
            "\n[cut: this result is {} bytes; the first {shown} are above. The whole result is kept: \
             read on with `{READ_RESULT}` {{\"call_id\": {}, \"offset\": {shown}}}]",
            text.len(),
            json!(id),
        );
        let start = format!("{}{note}", &text[..shown]);
        *output = match output {
            ToolOutput::ErrorText(_) => ToolOutput::ErrorText(start),
            // Its files are no text to cut: they stay.
            ToolOutput::Content(parts) => {
                let files = parts.iter().filter(|part| matches!(part, Part::File(_))).cloned();
                ToolOutput::Content(std::iter::once(Part::Text { text: start }).chain(files).collect())
            }
            _ => ToolOutput::Text(start),
        };
        cut = true;
    }
    cut
}

/// The tool a request offers when it carries a cut result.
pub(super) fn read_result_spec() -> ToolSpec {
    let schema = json!({
        "type": "object",
        "properties": {
            "call_id": {"type": "string", "description": "The id of the tool call whose result was cut."},
            "offset": {"type": "integer", "minimum": 0, "description": "Where to read from, in bytes (the note says where the cut was)."}
        },
        "required": ["call_id", "offset"]
    });
    ToolSpec::new(
        READ_RESULT,
        READ_RESULT,
        "Read on in a tool result that was cut because it was long: one page from `offset`.",
        schema,
    )
}

/// One page, at most `cap` bytes from `offset`, of the result of call `call_id` in
/// `messages` (the latest with that id): `{"call_id", "offset", "text", "total", "next"}`,
/// `next` being `null` at the end.
pub(super) fn read_result(messages: &[Message], arguments: &Value, cap: usize) -> ToolOutput {
    let call_id = arguments["call_id"].as_str().unwrap_or_default();
    let Some(offset) = arguments["offset"].as_u64().and_then(|n| usize::try_from(n).ok()) else {
        return ToolOutput::ErrorText("`offset` must be a whole number of bytes from 0".into());
    };
    let found = messages.iter().rev().flat_map(|message| message.content.iter().rev()).find_map(|part| match part {
        Part::ToolResult { id, output, .. } if id == call_id => Some(output.as_text()),
        _ => None,
    });
    let Some(text) = found else {
        return ToolOutput::ErrorText(format!(
            "no tool result of call {} in this conversation; use the call id the note gives",
            json!(call_id)
        ));
    };
    if offset > text.len() {
        return ToolOutput::ErrorText(format!(
            "`offset` {offset} is past the end of the result ({} bytes)",
            text.len()
        ));
    }
    // A page starts and ends on a character: an offset inside one starts at its beginning.
    let start = text.floor_char_boundary(offset);
    // `cap` is at least `MIN_CAP`, wider than any character: a page always moves on.
    let end = text.floor_char_boundary(start.saturating_add(cap));
    let next = (end < text.len()).then_some(end);
    ToolOutput::Json(json!({
        "call_id": call_id, "offset": start, "text": &text[start..end], "total": text.len(), "next": next
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Role;

    fn result(id: &str, output: ToolOutput) -> Message {
        Message::new(Role::Tool, vec![Part::ToolResult { id: id.into(), name: "Big.get".into(), output }])
    }

    #[test]
    fn a_long_result_is_cut_with_a_note_and_read_on_page_by_page() {
        let whole = "é".repeat(2_000); // 4,000 bytes, two each
        let kept = vec![result("c1", ToolOutput::Text(whole.clone()))];
        let mut sent = kept.clone();
        assert!(cap_results(&mut sent, 1_001));
        let Part::ToolResult { output: ToolOutput::Text(start), .. } = &sent[0].content[0] else { panic!("text") };
        assert!(start.starts_with(&"é".repeat(500)), "cut on a character");
        assert!(start.contains("this result is 4000 bytes; the first 1000"), "{start}");
        assert!(start.contains(r#"{"call_id": "c1", "offset": 1000}"#), "{start}");

        let mut read = String::new();
        let mut offset = Some(0);
        while let Some(at) = offset {
            let ToolOutput::Json(page) = read_result(&kept, &json!({"call_id": "c1", "offset": at}), 1_001) else {
                panic!("a page")
            };
            assert!(page["text"].as_str().unwrap().len() <= 1_001);
            read.push_str(page["text"].as_str().unwrap());
            offset = page["next"].as_u64().map(|n| n as usize);
        }
        assert_eq!(read, whole, "the pages make up the whole result");
    }

    #[test]
    fn short_results_and_pages_stay_whole_and_bad_reads_say_why() {
        let mut sent = vec![result("c1", ToolOutput::Json(json!({"n": 1})))];
        assert!(!cap_results(&mut sent, MIN_CAP));
        assert_eq!(cap_of(&json!(10)), MIN_CAP);
        assert_eq!(cap_of(&Value::Null), TOOL_RESULT_CAP);
        let error = |arguments| match read_result(&sent, &arguments, MIN_CAP) {
            ToolOutput::ErrorText(error) => error,
            other => panic!("{other:?}"),
        };
        assert!(error(json!({"call_id": "c9", "offset": 0})).contains("no tool result of call \"c9\""));
        assert!(error(json!({"call_id": "c1", "offset": 99})).contains("past the end"));
        assert!(error(json!({"call_id": "c1", "offset": -1})).contains("whole number"));
    }
}
