//! A model that replays a script of turns: deterministic answers for tests and demos.
//!
//! A script is a JSON array; each request consumes the next turn:
//!
//! ```json
//! [
//!   {"tool_calls": [{"name": "Counter.increment", "arguments": {"by": 2}}], "text": "Adding two."},
//!   {"text": "Done: the counter is at 2."}
//! ]
//! ```
//!
//! Tool names may be wire names or display names (`Counter.increment`); a display name is
//! resolved against the tools of the request (see [`ScriptedModel`]).

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{Part, Role};
use crate::model::{EventStream, Model, ModelError, ModelEvent, ModelRequest, ToolSpec};

/// One scripted answer: text, tool calls, or both (text is streamed first).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// The answer's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Tools to call, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ScriptedCall>,
}

/// One scripted tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    /// Wire name or display name of the tool.
    pub name: String,
    /// The arguments; `{}` when left out.
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

impl Turn {
    /// A turn that only answers `text`.
    pub fn text(text: impl Into<String>) -> Self {
        Turn { text: Some(text.into()), tool_calls: Vec::new() }
    }

    /// A turn that only calls one tool.
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        Turn::default().with_tool_call(name, arguments)
    }

    /// This turn with one more tool call.
    pub fn with_tool_call(mut self, name: impl Into<String>, arguments: Value) -> Self {
        self.tool_calls.push(ScriptedCall { name: name.into(), arguments });
        self
    }
}

/// The largest script file a scripted model reads (16 MiB).
const MAX_SCRIPT_BYTES: u64 = 16 << 20;

/// Replays [`Turn`]s, one per request.
///
/// Tool names are resolved against the request's tools: an exact wire name wins; else
/// the name sanitised like wire names (every character outside `[a-zA-Z0-9_-]` becomes
/// `_`) is matched as a prefix of a wire name (an exact match first, then the shortest);
/// else the name is passed through unchanged, so the dialog can answer "unknown tool".
/// Call ids are `call_1`, `call_2`, ... across the whole script.
///
/// The script's place is the later of the turns this instance replayed and the answers
/// already in the conversation (its assistant messages), and call ids likewise count the
/// calls already made: a process that resumes a stored conversation (after a restart, or
/// a second `trellis` command answering a waiting call) goes on where the script left off.
///
/// ```
/// use futures::StreamExt;
/// use trellis_builtins::model::{Model, ModelEvent, ModelRequest};
/// use trellis_builtins::scripted::{ScriptedModel, Turn};
///
/// # futures::executor::block_on(async {
/// let model = ScriptedModel::from_turns(vec![Turn::text("Hello there")]);
/// let events: Vec<_> = model.stream(ModelRequest::default()).await.unwrap().collect().await;
/// let text: String = events
///     .iter()
///     .filter_map(|e| match e {
///         Ok(ModelEvent::TextDelta(t)) => Some(t.as_str()),
///         _ => None,
///     })
///     .collect();
/// assert_eq!(text, "Hello there");
/// assert!(model.stream(ModelRequest::default()).await.is_err()); // used up
/// # });
/// ```
#[derive(Debug)]
pub struct ScriptedModel {
    /// Where the script came from, for the model name and errors.
    source: Option<String>,
    turns: Vec<Turn>,
    /// Turns replayed (or skipped because the conversation had them already).
    turns_taken: AtomicU64,
    /// Tool calls made, for the next call id.
    calls_made: AtomicU64,
}

impl ScriptedModel {
    /// A model replaying `turns`.
    pub fn from_turns(turns: Vec<Turn>) -> Self {
        ScriptedModel { source: None, turns, turns_taken: AtomicU64::new(0), calls_made: AtomicU64::new(0) }
    }

    /// A model replaying the JSON script at `path`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let path = path.as_ref();
        let cannot = |why: String| ModelError::Script(format!("cannot read script {}: {why}", path.display()));
        // A script names a file: a FIFO or a device would block or never end.
        let meta = std::fs::metadata(path).map_err(|e| cannot(e.to_string()))?;
        if !meta.is_file() {
            return Err(cannot("it is not a regular file".into()));
        }
        if meta.len() > MAX_SCRIPT_BYTES {
            return Err(cannot(format!(
                "it is {} bytes, more than the {MAX_SCRIPT_BYTES} a script may have",
                meta.len()
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| cannot(e.to_string()))?;
        let mut model = Self::from_json(&text).map_err(|e| match e {
            ModelError::Script(message) => ModelError::Script(format!("{}: {message}", path.display())),
            other => other,
        })?;
        model.source = Some(path.display().to_string());
        Ok(model)
    }

    /// A model replaying the JSON script `json`.
    pub fn from_json(json: &str) -> Result<Self, ModelError> {
        let turns: Vec<Turn> = serde_json::from_str(json).map_err(|e| {
            // Where, not what: serde's message quotes the text it met, and a file named
            // as a script may hold a secret.
            let what = match e.classify() {
                serde_json::error::Category::Syntax | serde_json::error::Category::Io => "not JSON",
                serde_json::error::Category::Data => "JSON, but not turns",
                serde_json::error::Category::Eof => "cut short",
            };
            ModelError::Script(format!(
                "not a valid script ({what} at line {} column {}); expected a JSON array of turns such as \
                 [{{\"text\": \"...\"}}, {{\"tool_calls\": [{{\"name\": \"...\", \"arguments\": {{}}}}]}}]",
                e.line(),
                e.column()
            ))
        })?;
        Ok(Self::from_turns(turns))
    }

    /// Turns not yet replayed.
    pub fn remaining(&self) -> usize {
        let taken = usize::try_from(self.turns_taken.load(Ordering::SeqCst)).unwrap_or(usize::MAX);
        self.turns.len().saturating_sub(taken)
    }

    fn answer(&self, request: &ModelRequest) -> Result<Vec<ModelEvent>, ModelError> {
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let answered = count(request.messages.iter().filter(|m| m.role == Role::Assistant).count());
        let called = count(
            request.messages.iter().flat_map(|m| &m.content).filter(|p| matches!(p, Part::ToolCall { .. })).count(),
        );
        let index = claim(&self.turns_taken, answered, 1);
        let turn = usize::try_from(index).ok().and_then(|i| self.turns.get(i)).ok_or_else(|| {
            let source = self.source.as_deref().map(|s| format!(" {s}")).unwrap_or_default();
            ModelError::Script(format!(
                "the script{source} is used up: it has {} turn(s) and the model was asked for turn {}; \
                 add a turn to the script",
                self.turns.len(),
                index.saturating_add(1)
            ))
        })?;
        let mut events: Vec<ModelEvent> =
            text_deltas(turn.text.as_deref().unwrap_or_default()).into_iter().map(ModelEvent::TextDelta).collect();
        let first_call = claim(&self.calls_made, called, count(turn.tool_calls.len()));
        for (number, call) in (first_call + 1..).zip(&turn.tool_calls) {
            events.push(ModelEvent::ToolCall {
                id: format!("call_{number}"),
                name: resolve_tool_name(&call.name, &request.tools),
                input: call.arguments.clone(),
            });
        }
        let reason = if turn.tool_calls.is_empty() { "stop" } else { "tool_calls" };
        events.push(ModelEvent::Finish { reason: reason.to_string(), usage: None });
        Ok(events)
    }
}

/// Takes `n` places from `counter`, starting no earlier than `at_least`; returns where
/// they start.
fn claim(counter: &AtomicU64, at_least: u64, n: u64) -> u64 {
    let mut start = 0;
    let updated = counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |current| {
        start = current.max(at_least);
        Some(start.saturating_add(n))
    });
    debug_assert!(updated.is_ok(), "the update always returns Some");
    start
}

impl Model for ScriptedModel {
    /// A script answers the turns it was written for: a summary would take one of them.
    fn summarizes(&self) -> bool {
        false
    }

    fn name(&self) -> String {
        match &self.source {
            Some(source) => format!("scripted:{source}"),
            None => "scripted".to_string(),
        }
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> Pin<Box<dyn Future<Output = Result<EventStream, ModelError>> + Send + '_>> {
        let answer = self.answer(&request);
        Box::pin(async move {
            let events = answer?;
            let stream: EventStream = Box::pin(futures::stream::iter(events.into_iter().map(Ok)));
            Ok(stream)
        })
    }
}

/// The wire name `name` refers to among `tools` (see [`ScriptedModel`]).
pub fn resolve_tool_name(name: &str, tools: &[ToolSpec]) -> String {
    if tools.iter().any(|t| t.name == name) {
        return name.to_string();
    }
    let sanitised: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    tools
        .iter()
        .filter(|t| t.name.starts_with(&sanitised))
        .min_by_key(|t| t.name.len())
        .map_or_else(|| name.to_string(), |t| t.name.clone())
}

/// `text` in up to three pieces split after spaces, so consumers see real streaming.
fn text_deltas(text: &str) -> Vec<String> {
    if text.is_empty() {
        return Vec::new();
    }
    let words: Vec<&str> = text.split_inclusive(char::is_whitespace).collect();
    let per_delta = words.len().div_ceil(3).max(1);
    words.chunks(per_delta).map(|chunk| chunk.concat()).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests {
    use super::*;
    use futures::StreamExt;
    use serde_json::json;

    fn tool(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            display_name: name.into(),
            description: String::new(),
            input_schema: json!({"type": "object"}).into(),
        }
    }

    async fn events(model: &ScriptedModel, tools: Vec<ToolSpec>) -> Result<Vec<ModelEvent>, ModelError> {
        let stream = model.stream(ModelRequest { tools, ..ModelRequest::default() }).await?;
        stream.collect::<Vec<_>>().await.into_iter().collect()
    }

    #[test]
    fn replays_turns_and_maps_display_names() {
        futures::executor::block_on(async {
            let model = ScriptedModel::from_json(
                r#"[{"tool_calls": [{"name": "Counter.increment", "arguments": {"by": 2}}, {"name": "read_file"},
                                    {"name": "Nope.nothing"}], "text": "Adding two."},
                    {"text": "Done."}]"#,
            )
            .unwrap();
            let tools = vec![tool("Counter_increment_2"), tool("Counter_increment"), tool("read_file")];
            let first = events(&model, tools.clone()).await.unwrap();
            assert_eq!(
                first,
                vec![
                    ModelEvent::TextDelta("Adding ".into()),
                    ModelEvent::TextDelta("two.".into()),
                    ModelEvent::ToolCall {
                        id: "call_1".into(),
                        name: "Counter_increment".into(),
                        input: json!({"by": 2})
                    },
                    ModelEvent::ToolCall { id: "call_2".into(), name: "read_file".into(), input: json!({}) },
                    ModelEvent::ToolCall { id: "call_3".into(), name: "Nope.nothing".into(), input: json!({}) },
                    ModelEvent::Finish { reason: "tool_calls".into(), usage: None },
                ]
            );
            let second = events(&model, tools.clone()).await.unwrap();
            assert_eq!(
                second,
                vec![ModelEvent::TextDelta("Done.".into()), ModelEvent::Finish { reason: "stop".into(), usage: None }]
            );
            assert_eq!(model.remaining(), 0);
            let error = events(&model, tools).await.unwrap_err();
            assert!(
                matches!(&error, ModelError::Script(m) if m.contains("used up") && m.contains("turn 3")),
                "{error}"
            );
        });
    }

    /// A fresh model (a new process) given a conversation that has answers already goes
    /// on where the script left off, numbering calls after the ones made.
    #[test]
    fn a_fresh_model_goes_on_where_the_conversation_left_off() {
        let model = ScriptedModel::from_turns(vec![
            Turn::tool_call("a", json!({})),
            Turn::tool_call("b", json!({})),
            Turn::text("done"),
        ]);
        let call = Part::ToolCall { id: "call_1".into(), name: "a".into(), input: json!({}) };
        let messages =
            vec![crate::message::Message::user("go"), crate::message::Message::new(Role::Assistant, vec![call])];
        let request = ModelRequest { messages, ..ModelRequest::default() };
        let second = futures::executor::block_on(async {
            model.stream(request).await.unwrap().collect::<Vec<_>>().await.into_iter().collect::<Result<Vec<_>, _>>()
        })
        .unwrap();
        assert!(
            matches!(&second[0], ModelEvent::ToolCall { id, name, .. } if id == "call_2" && name == "b"),
            "{second:?}"
        );
        assert_eq!(model.remaining(), 1);
    }

    #[test]
    fn prefix_match_for_disambiguated_wire_names() {
        // The catalog may append a suffix to keep names unique.
        assert_eq!(resolve_tool_name("Notes.add", &[tool("Notes_add_x1f")]), "Notes_add_x1f");
        assert_eq!(resolve_tool_name("Notes.add", &[]), "Notes.add");
    }

    #[test]
    fn text_is_streamed_in_pieces_that_add_up() {
        for text in ["one", "one two", "a b c d e f g", "  spaced  out ", "ünï cödé wörds here"] {
            let deltas = text_deltas(text);
            assert!(!deltas.is_empty() && deltas.len() <= 3, "{text}: {deltas:?}");
            assert!(deltas.iter().all(|d| !d.is_empty()));
            assert_eq!(deltas.concat(), text);
        }
        assert!(text_deltas("").is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn a_script_that_is_a_device_or_too_large_is_refused_before_reading() {
        // `/dev/zero` never ends: reading it would exhaust memory (a model string can come
        // over `trellis serve`'s API).
        let error = ScriptedModel::from_file("/dev/zero").unwrap_err();
        assert!(error.to_string().contains("not a regular file"), "{error}");
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.json");
        std::fs::File::create(&big).unwrap().set_len(MAX_SCRIPT_BYTES + 1).unwrap();
        let error = ScriptedModel::from_file(&big).unwrap_err();
        assert!(error.to_string().contains("more than the"), "{error}");
    }

    #[test]
    fn bad_scripts_are_clear_errors() {
        let error = ScriptedModel::from_json(r#"[{"txt": "typo"}]"#).unwrap_err();
        assert!(error.to_string().contains("not turns at line 1 column 7"), "{error}");
        let error = ScriptedModel::from_json(r#"["sk-secret"]"#).unwrap_err();
        assert!(!error.to_string().contains("sk-secret"), "what a file holds is not told: {error}");
        let error = ScriptedModel::from_file("/nonexistent/script.json").unwrap_err();
        assert!(error.to_string().contains("/nonexistent/script.json"), "{error}");
    }
}
