//! Keeping a conversation well-formed: every tool call answered exactly once, and no
//! empty text sent to a provider.

use std::collections::HashSet;

use trellis_runner::{Cell, Tx};

use crate::message::{Message, Part, Role, ToolOutput};

/// The conversation as a provider may see it: empty text parts and empty messages
/// removed, every tool call followed by exactly one result (a missing one becomes an
/// error result), results without a call dropped.
pub fn prepare_for_provider(messages: &[Message]) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    let mut open_calls: Vec<(String, String)> = Vec::new();
    let mut answered: HashSet<String> = HashSet::new();
    for message in messages {
        // Anything but tool results ends the answers to earlier calls.
        if message.role != Role::Tool {
            close(&mut out, &mut open_calls, &mut answered);
        }
        let mut content = Vec::with_capacity(message.content.len());
        for part in &message.content {
            match part {
                Part::Text { text } if text.trim().is_empty() => {}
                Part::ToolCall { id, name, .. } if message.role == Role::Assistant => {
                    open_calls.push((id.clone(), name.clone()));
                    content.push(part.clone());
                }
                Part::ToolCall { .. } => {}
                Part::ToolResult { id, .. } => {
                    let is_open = open_calls.iter().any(|(call, _)| call == id);
                    if is_open && answered.insert(id.clone()) {
                        content.push(part.clone());
                    }
                }
                Part::Text { .. } | Part::File(_) => content.push(part.clone()),
            }
        }
        if !content.is_empty() {
            out.push(Message::new(message.role, content));
        }
    }
    close(&mut out, &mut open_calls, &mut answered);
    out
}

/// Appends error results for the calls in `open` that got none, then forgets them (ids
/// are only unique within one batch of calls: some models reuse them in later turns).
fn close(out: &mut Vec<Message>, open: &mut Vec<(String, String)>, answered: &mut HashSet<String>) {
    let missing: Vec<Part> = open
        .drain(..)
        .filter(|(id, _)| !answered.remove(id))
        .map(|(id, name)| Part::ToolResult {
            id,
            name,
            output: ToolOutput::ErrorText("no result: the call was interrupted".into()),
        })
        .collect();
    if missing.is_empty() {
        return;
    }
    match out.last_mut() {
        Some(last) if last.role == Role::Tool => last.content.extend(missing),
        _ => out.push(Message::new(Role::Tool, missing)),
    }
}

/// A call of the conversation's last assistant message that no result answers yet.
pub(crate) struct Open<'a> {
    /// Its place among the calls of its message.
    pub index: usize,
    pub id: &'a str,
    pub name: &'a str,
    pub input: &'a serde_json::Value,
}

/// The index of the conversation's last assistant message, and its calls that no result
/// answers yet; `None` without an assistant message.
pub(crate) fn unanswered(all: &[Message]) -> Option<(usize, Vec<Open<'_>>)> {
    let last = all.iter().rposition(|m| m.role == Role::Assistant)?;
    let answered: HashSet<&str> = all[last..]
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|p| match p {
            Part::ToolResult { id, .. } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    let calls = all[last].content.iter().filter_map(|p| match p {
        Part::ToolCall { id, name, input } => Some((id, name, input)),
        _ => None,
    });
    let open = calls
        .enumerate()
        .filter(|(_, (id, ..))| !answered.contains(id.as_str()))
        .map(|(index, (id, name, input))| Open { index, id, name, input })
        .collect();
    Some((last, open))
}

/// Stores an error result for every tool call of the last assistant message that has
/// none yet, so the stored conversation never keeps an unanswered call.
pub(crate) fn close_unanswered(tx: &Tx, messages: &Cell<Vec<Message>>, reason: &str) -> trellis_runner::Result<()> {
    let all = match messages.get(tx) {
        Ok(all) => all,
        Err(_) => return Ok(()), // nothing valid stored yet
    };
    let Some((_, open)) = unanswered(&all) else { return Ok(()) };
    let missing: Vec<Part> = open
        .into_iter()
        .map(|call| Part::ToolResult {
            id: call.id.to_string(),
            name: call.name.to_string(),
            output: ToolOutput::ErrorText(reason.to_string()),
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    messages.push(tx, Message::new(Role::Tool, missing))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> Part {
        Part::ToolCall { id: id.into(), name: "t".into(), input: json!({}) }
    }

    fn result(id: &str) -> Part {
        Part::ToolResult { id: id.into(), name: "t".into(), output: ToolOutput::Text("ok".into()) }
    }

    #[test]
    fn empty_text_and_empty_messages_are_dropped() {
        let messages = vec![
            Message::user("hi"),
            Message::new(Role::Assistant, vec![Part::Text { text: " ".into() }]),
            Message::user(""),
        ];
        assert_eq!(prepare_for_provider(&messages), vec![Message::user("hi")]);
    }

    #[test]
    fn every_call_gets_exactly_one_result() {
        let messages = vec![
            Message::user("go"),
            Message::new(Role::Assistant, vec![Part::Text { text: "".into() }, call("a"), call("b")]),
            Message::new(Role::Tool, vec![result("a"), result("a"), result("zzz")]),
            Message::user("again"),
        ];
        let out = prepare_for_provider(&messages);
        assert_eq!(out[1].content, vec![call("a"), call("b")], "empty text removed");
        let results: Vec<&Part> = out[2].content.iter().collect();
        assert_eq!(results.len(), 2, "one result each, orphan and duplicate dropped: {results:?}");
        assert_eq!(results[0], &result("a"));
        assert!(matches!(results[1], Part::ToolResult { id, output: ToolOutput::ErrorText(_), .. } if id == "b"));
        assert_eq!(out[3], Message::user("again"));
    }

    #[test]
    fn ids_reused_in_a_later_turn_are_answered_again() {
        let turn = |text: &str| {
            vec![
                Message::user(text),
                Message::new(Role::Assistant, vec![call("c1")]),
                Message::new(Role::Tool, vec![result("c1")]),
            ]
        };
        let messages: Vec<Message> = turn("one").into_iter().chain(turn("two")).collect();
        assert_eq!(prepare_for_provider(&messages), messages);
    }

    #[test]
    fn a_trailing_unanswered_call_is_closed() {
        let messages = vec![Message::user("go"), Message::new(Role::Assistant, vec![call("x")])];
        let out = prepare_for_provider(&messages);
        assert_eq!(out.len(), 3);
        assert_eq!(out[2].role, Role::Tool);
    }
}
