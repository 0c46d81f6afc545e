//! The pure parser of an OpenAI-compatible chat-completions stream: SSE `data:` payloads
//! in, [`ModelEvent`]s out.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::model::{ModelEvent, Usage};
use crate::provider::http::{self, ParseError, StreamParser};

/// Pure parser of an OpenAI-compatible chat-completions stream.
///
/// Feed it each SSE `data:` payload with [`OpenAiStreamParser::push_data`]. Tool calls
/// are keyed by their `index` (which need not start at 0), their arguments concatenated
/// and parsed when the choice finishes; they are emitted then, in index order.
///
/// [`ModelEvent::Finish`] comes once, with the token usage when the server reports it:
/// at the finish chunk if it carries the usage (llama.cpp), else at the usage chunk that
/// follows it (OpenAI, with empty `choices`), else at `[DONE]` or the end of the body.
///
/// ```
/// use trellis_builtins::model::{ModelEvent, Usage};
/// use trellis_builtins::provider::openai::OpenAiStreamParser;
///
/// let mut parser = OpenAiStreamParser::new();
/// let events = parser
///     .push_data(r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}"#)
///     .unwrap();
/// assert_eq!(events, vec![ModelEvent::TextDelta("Hi".into())]);
/// let events =
///     parser.push_data(r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1}}"#).unwrap();
/// let usage = Some(Usage { input_tokens: 9, output_tokens: 1 });
/// assert_eq!(events, vec![ModelEvent::Finish { reason: "stop".into(), usage }]);
/// ```
#[derive(Debug, Default)]
pub struct OpenAiStreamParser {
    calls: BTreeMap<u64, PendingCall>,
    /// The key of the call the last fragment went to, for servers that omit `index`.
    last_key: Option<u64>,
    /// Why the choice finished, once it has: its tool calls are out, `Finish` may wait
    /// for the usage.
    reason: Option<String>,
    /// The latest token usage the server reported.
    usage: Option<Usage>,
    /// `Finish` is out.
    finished: bool,
    /// `[DONE]` arrived.
    done: bool,
}

#[derive(Debug, Default)]
struct PendingCall {
    /// The `index` the server used (keys can differ when a server reuses an index).
    index: u64,
    id: Option<String>,
    name: String,
    arguments: String,
}

impl OpenAiStreamParser {
    /// A parser at the start of an answer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Handles one `data:` payload (a JSON chunk or `[DONE]`).
    pub fn push_data(&mut self, data: &str) -> Result<Vec<ModelEvent>, ParseError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            let mut events = self.end_choice("stop")?;
            events.extend(self.finish_event());
            return Ok(events);
        }
        if data.is_empty() {
            return Ok(Vec::new());
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| ParseError::Malformed(format!("chunk is not JSON ({e}): {}", http::truncate(data, 200))))?;
        if let Some(error) = chunk.get("error") {
            return Err(ParseError::Provider(provider_error_text(error)));
        }
        if !chunk.is_object() {
            return Err(ParseError::Malformed(format!("chunk is not a JSON object: {}", http::truncate(data, 200))));
        }
        if let Some(usage) = usage(chunk.get("usage")) {
            self.usage = Some(usage);
        }
        let mut events = Vec::new();
        // After the finish only the usage counts: some servers send more chunks for the
        // choice (Azure's content filter results).
        if let Some(choice) = first_choice(&chunk).filter(|_| self.reason.is_none()) {
            events.extend(self.choice_delta(choice)?);
        }
        if self.usage.is_some() {
            events.extend(self.finish_event());
        }
        Ok(events)
    }

    /// The events of one chunk's choice.
    fn choice_delta(&mut self, choice: &Value) -> Result<Vec<ModelEvent>, ParseError> {
        let mut events = Vec::new();
        if let Some(delta) = choice.get("delta").filter(|d| d.is_object()) {
            for field in ["content", "refusal"] {
                if let Some(text) = delta.get(field).and_then(Value::as_str).filter(|t| !t.is_empty()) {
                    events.push(ModelEvent::TextDelta(text.to_string()));
                }
            }
            match delta.get("tool_calls") {
                None | Some(Value::Null) => {}
                Some(Value::Array(calls)) => {
                    for call in calls {
                        self.tool_call_delta(call)?;
                    }
                }
                Some(other) => return Err(ParseError::Malformed(format!("`tool_calls` is not an array: {other}"))),
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            events.extend(self.end_choice(reason)?);
        }
        Ok(events)
    }

    fn tool_call_delta(&mut self, call: &Value) -> Result<(), ParseError> {
        if !call.is_object() {
            return Err(ParseError::Malformed(format!("tool call delta is not an object: {call}")));
        }
        let id = call.get("id").and_then(Value::as_str).filter(|id| !id.is_empty());
        let key = match call.get("index").and_then(Value::as_u64) {
            Some(index) => {
                // Some servers reuse one index for parallel calls: a new id there is a new call.
                let existing =
                    self.calls.iter().rev().find(|(_, c)| c.index == index).map(|(key, c)| (*key, c.id.clone()));
                match (existing, id) {
                    (Some((_, Some(old))), Some(new)) if old != new => self.next_key(index)?,
                    (Some((key, _)), _) => key,
                    (None, _) => self.new_key(index)?,
                }
            }
            None => match (self.last_key, id) {
                (Some(key), None) => key,
                (Some(key), Some(new)) if self.calls.get(&key).and_then(|c| c.id.as_deref()) == Some(new) => key,
                _ => {
                    let index = self.calls.keys().next_back().map_or(0, |k| k.saturating_add(1));
                    self.new_key(index)?
                }
            },
        };
        self.last_key = Some(key);
        let pending = self.calls.entry(key).or_default();
        if let Some(id) = id {
            pending.id.get_or_insert_with(|| id.to_string());
        }
        if let Some(function) = call.get("function").filter(|f| f.is_object()) {
            if let Some(name) = function.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()) {
                pending.name = name.to_string();
            }
            let fragment = match function.get("arguments") {
                None | Some(Value::Null) => return Ok(()),
                Some(Value::String(fragment)) => std::borrow::Cow::Borrowed(fragment.as_str()),
                // A few servers send the arguments as an object rather than a string.
                Some(other) => std::borrow::Cow::Owned(other.to_string()),
            };
            ParseError::check_arguments(&pending.name, pending.arguments.len(), fragment.len())?;
            pending.arguments.push_str(&fragment);
        }
        Ok(())
    }

    /// A fresh key for a call the server gave `index`; keys keep the server's order.
    fn new_key(&mut self, index: u64) -> Result<u64, ParseError> {
        ParseError::check_calls(self.calls.len())?;
        if self.calls.contains_key(&index) {
            return self.next_key(index);
        }
        self.calls.insert(index, PendingCall { index, ..PendingCall::default() });
        Ok(index)
    }

    /// A key after every key in use (for a second call reusing an index).
    fn next_key(&mut self, index: u64) -> Result<u64, ParseError> {
        ParseError::check_calls(self.calls.len())?;
        let key = self.calls.keys().next_back().map_or(index, |k| k.saturating_add(1).max(index));
        self.calls.insert(key, PendingCall { index, ..PendingCall::default() });
        Ok(key)
    }

    /// Ends the choice for `reason`: emits the tool calls, once.
    fn end_choice(&mut self, reason: &str) -> Result<Vec<ModelEvent>, ParseError> {
        if self.reason.is_some() {
            return Ok(Vec::new());
        }
        let mut events = Vec::new();
        for (key, call) in std::mem::take(&mut self.calls) {
            if call.name.is_empty() {
                return Err(ParseError::Malformed(format!("tool call {} has no function name", call.index)));
            }
            events.push(ModelEvent::ToolCall {
                id: call.id.unwrap_or_else(|| format!("call_{key}")),
                name: call.name,
                input: http::parse_arguments(&call.arguments),
            });
        }
        // Some servers (older Ollama) say `stop` after calling tools.
        let reason = if !events.is_empty() && reason == "stop" { "tool_calls" } else { reason };
        self.reason = Some(reason.to_string());
        Ok(events)
    }

    /// `Finish`, once, when the choice has ended.
    fn finish_event(&mut self) -> Option<ModelEvent> {
        if self.finished {
            return None;
        }
        let reason = self.reason.clone()?;
        self.finished = true;
        Some(ModelEvent::Finish { reason, usage: self.usage })
    }
}

impl StreamParser for OpenAiStreamParser {
    fn push(&mut self, event: &str, data: &str) -> Result<Vec<ModelEvent>, ParseError> {
        if event == "error" {
            return Err(ParseError::Provider(provider_error_text(
                &serde_json::from_str(data).unwrap_or_else(|_| json!(data)),
            )));
        }
        self.push_data(data)
    }

    fn finish(&mut self) -> Result<Vec<ModelEvent>, ParseError> {
        if self.reason.is_some() {
            // The usage did not come, or the body ended without `[DONE]`.
            Ok(self.finish_event().into_iter().collect())
        } else {
            Err(ParseError::Malformed(
                "the stream ended before the answer was finished (no finish_reason or [DONE])".into(),
            ))
        }
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

/// The token usage of a chunk's `usage` object (`null` in most chunks).
fn usage(usage: Option<&Value>) -> Option<Usage> {
    let usage = usage?;
    let count = |field: &str| usage.get(field).and_then(Value::as_u64);
    let (input, output) = (count("prompt_tokens"), count("completion_tokens"));
    (input.is_some() || output.is_some())
        .then(|| Usage { input_tokens: input.unwrap_or(0), output_tokens: output.unwrap_or(0) })
}

fn first_choice(chunk: &Value) -> Option<&Value> {
    let choices = chunk.get("choices")?.as_array()?;
    choices.iter().find(|c| c.get("index").and_then(Value::as_u64) == Some(0)).or_else(|| choices.first())
}

/// The message of an `error` value inside a stream: a string or `{message, type, code}`.
fn provider_error_text(error: &Value) -> String {
    if let Some(text) = error.as_str() {
        return text.to_string();
    }
    let error = error.get("error").unwrap_or(error);
    if let Some(text) = error.as_str() {
        return text.to_string();
    }
    let message = error.get("message").and_then(Value::as_str).unwrap_or("unknown error");
    match error.get("type").and_then(Value::as_str) {
        Some(kind) => format!("{kind}: {message}"),
        None => message.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests {
    use super::*;
    use crate::provider::http::test_support;

    fn chunk(delta: Value, finish: Option<&str>) -> String {
        json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).to_string()
    }

    fn call_fragment(index: u64, id: Option<&str>, name: Option<&str>, args: &str) -> String {
        let mut function = json!({"arguments": args});
        if let Some(name) = name {
            function["name"] = json!(name);
        }
        let mut call = json!({"index": index, "function": function});
        if let Some(id) = id {
            call["id"] = json!(id);
            call["type"] = json!("function");
        }
        chunk(json!({"tool_calls": [call]}), None)
    }

    fn run(payloads: &[String]) -> Result<Vec<ModelEvent>, ParseError> {
        test_support::run(OpenAiStreamParser::new(), payloads)
    }

    #[test]
    fn endless_arguments_and_calls_end_the_stream() {
        // Arguments that never end: refused once past the limit, not kept growing.
        let piece = "x".repeat(64 * 1024);
        let mut payloads = vec![call_fragment(0, Some("call_a"), Some("write"), "{\"text\": \"")];
        payloads.extend((0..20).map(|_| call_fragment(0, None, None, &piece)));
        let error = run(&payloads).unwrap_err().to_string();
        assert!(error.contains("the arguments of tool call `write` are larger than 1024 KiB"), "{error}");
        // Calls that never end.
        let calls: Vec<String> =
            (0..100).map(|i| call_fragment(i, Some(&format!("call_{i}")), Some("add"), "{}")).collect();
        let error = run(&calls).unwrap_err().to_string();
        assert!(error.contains("more than 64 tool calls"), "{error}");
    }

    #[test]
    fn arguments_split_at_every_offset() {
        let args = r#"{"path": "dir/ä ö.txt", "lines": [1, 2], "deep": {"x": null}}"#;
        let expected: Value = serde_json::from_str(args).unwrap();
        for cut in 0..=args.len() {
            if !args.is_char_boundary(cut) {
                // Each fragment is a JSON string, so a split is always between characters.
                continue;
            }
            let (a, b) = args.split_at(cut);
            let events = run(&[
                call_fragment(1, Some("call_a"), Some("read_file"), ""),
                call_fragment(1, None, None, a),
                call_fragment(1, None, None, b),
                chunk(json!({}), Some("tool_calls")),
                "[DONE]".to_string(),
            ])
            .unwrap();
            assert_eq!(
                events,
                vec![
                    ModelEvent::ToolCall { id: "call_a".into(), name: "read_file".into(), input: expected.clone() },
                    ModelEvent::Finish { reason: "tool_calls".into(), usage: None },
                ],
                "split at {cut}"
            );
        }
    }

    #[test]
    fn every_byte_split_in_three() {
        let args = r#"{"a":"bc","d":[1]}"#;
        let expected: Value = serde_json::from_str(args).unwrap();
        for i in 0..=args.len() {
            for j in i..=args.len() {
                let events = run(&[
                    call_fragment(0, Some("c"), Some("t"), &args[..i]),
                    call_fragment(0, None, None, &args[i..j]),
                    call_fragment(0, None, None, &args[j..]),
                    chunk(json!({}), Some("tool_calls")),
                ])
                .unwrap();
                assert_eq!(
                    events[0],
                    ModelEvent::ToolCall { id: "c".into(), name: "t".into(), input: expected.clone() }
                );
            }
        }
    }

    #[test]
    fn parallel_calls_interleaved_keep_index_order() {
        let events = run(&[
            chunk(json!({"content": "Two things."}), None),
            call_fragment(0, Some("id0"), Some("first"), "{\"a\":"),
            call_fragment(1, Some("id1"), Some("second"), ""),
            call_fragment(1, None, None, "{\"b\":2}"),
            call_fragment(0, None, None, "1}"),
            chunk(json!({}), Some("tool_calls")),
            "[DONE]".into(),
        ])
        .unwrap();
        assert_eq!(
            events,
            vec![
                ModelEvent::TextDelta("Two things.".into()),
                ModelEvent::ToolCall { id: "id0".into(), name: "first".into(), input: json!({"a": 1}) },
                ModelEvent::ToolCall { id: "id1".into(), name: "second".into(), input: json!({"b": 2}) },
                ModelEvent::Finish { reason: "tool_calls".into(), usage: None },
            ]
        );
    }

    #[test]
    fn empty_and_bad_arguments() {
        let events = run(&[
            call_fragment(0, Some("a"), Some("none"), ""),
            call_fragment(1, Some("b"), Some("bad"), "{\"unclosed\": "),
            chunk(json!({}), Some("tool_calls")),
        ])
        .unwrap();
        assert_eq!(events[0], ModelEvent::ToolCall { id: "a".into(), name: "none".into(), input: json!({}) });
        assert_eq!(
            events[1],
            ModelEvent::ToolCall { id: "b".into(), name: "bad".into(), input: json!("{\"unclosed\": ") }
        );
    }

    #[test]
    fn reused_index_with_new_id_is_a_new_call() {
        let events = run(&[
            call_fragment(0, Some("a"), Some("one"), "{}"),
            call_fragment(0, Some("b"), Some("two"), "{\"x\":1}"),
            chunk(json!({}), Some("stop")),
        ])
        .unwrap();
        assert_eq!(events.len(), 3);
        assert_eq!(events[1], ModelEvent::ToolCall { id: "b".into(), name: "two".into(), input: json!({"x": 1}) });
        // `stop` after tool calls is reported as `tool_calls`.
        assert_eq!(events[2], ModelEvent::Finish { reason: "tool_calls".into(), usage: None });
    }

    #[test]
    fn missing_index_appends_to_the_last_call() {
        let calls = |call: Value| chunk(json!({"tool_calls": [call]}), None);
        let events = run(&[
            calls(json!({"id": "x", "function": {"name": "f", "arguments": "{\"k\""}})),
            calls(json!({"function": {"arguments": ":true}"}})),
            calls(json!({"id": "y", "function": {"name": "g", "arguments": "{}"}})),
            "[DONE]".into(),
        ])
        .unwrap();
        assert_eq!(events[0], ModelEvent::ToolCall { id: "x".into(), name: "f".into(), input: json!({"k": true}) });
        assert_eq!(events[1], ModelEvent::ToolCall { id: "y".into(), name: "g".into(), input: json!({}) });
        assert_eq!(events[2], ModelEvent::Finish { reason: "tool_calls".into(), usage: None });
    }

    #[test]
    fn errors_and_truncation() {
        assert!(matches!(run(&["{not json".into()]), Err(ParseError::Malformed(_))));
        assert!(matches!(run(&["[1,2]".into()]), Err(ParseError::Malformed(_))));
        assert_eq!(
            run(&[json!({"error": {"message": "overloaded", "type": "server_error"}}).to_string()]),
            Err(ParseError::Provider("server_error: overloaded".into()))
        );
        assert!(matches!(run(&[chunk(json!({"content": "cut"}), None)]), Err(ParseError::Malformed(_))));
        assert!(matches!(
            run(&[call_fragment(0, Some("a"), None, "{}"), "[DONE]".into()]),
            Err(ParseError::Malformed(_))
        ));
    }

    fn usage_chunk(prompt: u64, completion: u64) -> String {
        json!({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
            .to_string()
    }

    /// Each payload's events, one list per payload, then those of the end of the body.
    fn run_stepwise(payloads: &[String]) -> Vec<Vec<ModelEvent>> {
        let mut parser = OpenAiStreamParser::new();
        let mut steps: Vec<_> = payloads.iter().map(|p| parser.push("message", p).unwrap()).collect();
        steps.push(parser.finish().unwrap());
        steps
    }

    #[test]
    fn finish_comes_once_with_the_usage_that_follows_it() {
        let finish = |usage| ModelEvent::Finish { reason: "stop".into(), usage };
        let counted = Some(Usage { input_tokens: 15, output_tokens: 5 });
        let mut stop = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": null});
        let text = chunk(json!({"content": "ok"}), None);
        // OpenAI and Azure: `usage: null` on every chunk, the finish, a chunk for the
        // choice after it (Azure's content filter results), the usage with no choices.
        let late_choice = json!({"choices": [{"index": 0, "finish_reason": null, "content_filter_results": {}}]});
        let steps = run_stepwise(&[
            text.clone(),
            stop.to_string(),
            late_choice.to_string(),
            usage_chunk(15, 5),
            "[DONE]".into(),
        ]);
        assert_eq!(
            steps,
            vec![vec![ModelEvent::TextDelta("ok".into())], vec![], vec![], vec![finish(counted)], vec![], vec![]]
        );
        // llama.cpp: the usage on the finish chunk itself.
        stop["usage"] = json!({"prompt_tokens": 15, "completion_tokens": 5});
        let steps = run_stepwise(&[stop.to_string(), "[DONE]".into()]);
        assert_eq!(steps, vec![vec![finish(counted)], vec![], vec![]]);
        // No usage: `[DONE]` right after the finish, or the end of the body.
        stop["usage"] = Value::Null;
        assert_eq!(run_stepwise(&[stop.to_string(), "[DONE]".into()]), vec![vec![], vec![finish(None)], vec![]]);
        assert_eq!(run_stepwise(&[stop.to_string()]), vec![vec![], vec![finish(None)]]);
        // Tool calls come at the finish, the usage does not hold them back.
        let steps = run_stepwise(&[
            call_fragment(0, Some("c"), Some("t"), "{}"),
            chunk(json!({}), Some("tool_calls")),
            usage_chunk(7, 3),
        ]);
        assert_eq!(
            steps,
            vec![
                vec![],
                vec![ModelEvent::ToolCall { id: "c".into(), name: "t".into(), input: json!({}) }],
                vec![ModelEvent::Finish {
                    reason: "tool_calls".into(),
                    usage: Some(Usage { input_tokens: 7, output_tokens: 3 })
                }],
                vec![],
            ]
        );
    }
}
