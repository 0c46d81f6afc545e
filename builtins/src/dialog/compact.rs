//! A conversation kept within its budget: when a request would carry more than the
//! dialog's `context_budget` (estimated tokens; [`CONTEXT_BUDGET`] by default), the oldest
//! turns are compacted into a summary the model reads in their place.
//!
//! - The conversation itself is never rewritten: the turns stay in the space, and the
//!   dialog's `compaction` output says how many messages the summary stands for.
//! - A cut falls only where a user's turn starts, so a tool call is never parted from
//!   its result; the latest turn (with any call waiting for a person) is always kept whole.
//! - The same model writes the summary, from the last summary and the turns it now
//!   covers. A model that cannot (the offline and scripted ones, see
//!   [`Model::summarizes`]) has those turns listed instead.
//! - The kept turns take at most half the budget and the summary a quarter, so a
//!   compaction buys many rounds.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tracing::Instrument as _;

use crate::message::{Message, Part, Role, ToolOutput};
use crate::model::{Model, ModelEvent, ModelRequest};
use crate::naming::stable_hash;
use crate::text::truncate;

/// The budget, in estimated tokens, of a dialog whose `context_budget` is not given.
pub const CONTEXT_BUDGET: u64 = 100_000;

/// Bytes of JSON a token is estimated at (a common rule of thumb for English and code).
const BYTES_PER_TOKEN: u64 = 4;

/// The most characters a summary may have.
const MAX_SUMMARY: usize = 8_000;

/// The most characters of one message a summariser reads.
const MAX_SHOWN: usize = 1_000;

/// How many of the user's messages a listing names.
const MAX_LISTED: usize = 20;

/// What the summariser is told to do.
const SUMMARIZE: &str = "You compact a conversation between a user and an assistant with tools. \
Summarise the turns below for the assistant, who will read your summary instead of them: what the user \
asked, what was done with which tools and what came of it, and what is still open. Keep names, numbers and \
ids. Be brief: a few short paragraphs at most.";

/// The older turns of a conversation, as the model reads them from now on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Compaction {
    /// How many messages, from the first, the summary stands for.
    pub upto: usize,
    /// What the model reads in their place.
    pub summary: String,
    /// A hash of the last message it stands for: a conversation cleared and grown again
    /// past `upto` is not this one.
    pub last: u64,
}

impl Compaction {
    /// Whether this compaction is of `messages` (not of a conversation cleared since).
    pub fn covers(&self, messages: &[Message]) -> bool {
        self.upto > 0 && self.upto.checked_sub(1).and_then(|at| messages.get(at)).is_some_and(|m| hash(m) == self.last)
    }
}

/// The budget a dialog's `context_budget` input asks for; without one, three quarters of
/// the model's context window (the rest is room for the answer and for the estimate's
/// error), else [`CONTEXT_BUDGET`].
pub(super) fn budget_of(input: &Value, window: Option<u64>) -> u64 {
    let from_model = window.map(|window| window / 4 * 3);
    input.as_u64().filter(|n| *n > 0).or(from_model).unwrap_or(CONTEXT_BUDGET)
}

/// The tokens `request` is estimated at: its system prompt, messages and tools.
///
/// ```
/// use trellis_builtins::dialog::estimate_tokens;
/// use trellis_builtins::message::Message;
/// use trellis_builtins::model::ModelRequest;
///
/// let request = ModelRequest { messages: vec![Message::user("x".repeat(400))], ..Default::default() };
/// assert!((100..120).contains(&estimate_tokens(&request)));
/// ```
pub fn estimate_tokens(request: &ModelRequest) -> u64 {
    let bytes = request.system.as_deref().map_or(0, str::len)
        + request.messages.iter().map(json_len).sum::<usize>()
        + request.tools.iter().map(json_len).sum::<usize>();
    (bytes as u64).div_ceil(BYTES_PER_TOKEN)
}

/// Bytes of `value` as JSON.
fn json_len(value: &impl Serialize) -> usize {
    serde_json::to_string(value).map_or(0, |json| json.len())
}

/// The compaction that brings `messages` within `budget`, going on from `previous`; `None`
/// when nothing before the latest turn is left to compact.
pub(super) async fn compact(
    (model, spec): (&dyn Model, &str),
    messages: &[Message],
    previous: Option<&Compaction>,
    budget: u64,
) -> Result<Option<Compaction>, String> {
    let from = previous.map_or(0, |p| p.upto);
    let Some(upto) = cut(messages, from, budget / 2) else { return Ok(None) };
    let earlier = previous.map(|p| p.summary.as_str());
    let covered = &messages[from..upto];
    let summary = if model.summarizes() {
        summarize((model, spec), earlier, covered, budget).await?
    } else {
        listing(earlier, covered)
    };
    // A quarter of the budget at most, so the summary and the kept half leave room.
    let room = usize::try_from(budget / 4 * BYTES_PER_TOKEN).unwrap_or(usize::MAX).min(MAX_SUMMARY);
    Ok(Some(Compaction { upto, summary: truncate(&summary, room), last: hash(&messages[upto - 1]) }))
}

/// Where the turns kept whole start: the start of the oldest turn after `from` from which
/// the rest takes at most `keep` tokens, else the latest turn's; `None` when the latest
/// turn starts at `from` or before (nothing to compact).
fn cut(messages: &[Message], from: usize, keep: u64) -> Option<usize> {
    let starts_turn = |at: &usize| messages[*at].role == Role::User;
    let latest = (from + 1..messages.len()).rev().find(starts_turn)?;
    let mut rest = 0;
    let mut fits = latest;
    for at in (from + 1..messages.len()).rev() {
        rest += json_len(&messages[at]) as u64;
        if rest.div_ceil(BYTES_PER_TOKEN) > keep {
            break;
        }
        if starts_turn(&at) {
            fits = fits.min(at);
        }
    }
    Some(fits)
}

/// A summary of `covered` (after the `earlier` summary) by `model` (of the model string
/// `spec`), a model request counted and traced as the conversation's are.
async fn summarize(
    (model, spec): (&dyn Model, &str),
    earlier: Option<&str>,
    covered: &[Message],
    budget: u64,
) -> Result<String, String> {
    use futures::StreamExt;
    let mut shown = earlier.map(|e| format!("Summary so far:\n{e}\n\nThen:\n")).unwrap_or_default();
    for message in covered {
        shown.push_str(&truncate(&render(message), MAX_SHOWN));
        shown.push('\n');
    }
    // The summariser's own request keeps within three quarters of the budget (the summary
    // takes at most the last): past that, the newest part counts most.
    let room = usize::try_from(budget / 4 * 3 * BYTES_PER_TOKEN).unwrap_or(usize::MAX).saturating_sub(SUMMARIZE.len());
    if shown.len() > room {
        let from = shown.ceil_char_boundary(shown.len() - room);
        shown = format!("(earlier part left out)\n{}", &shown[from..]);
    }
    let request = ModelRequest {
        system: Some(SUMMARIZE.to_string()),
        messages: vec![Message::user(shown)],
        max_tokens: Some(u32::try_from(MAX_SUMMARY as u64 / BYTES_PER_TOKEN).unwrap_or(u32::MAX)),
        ..ModelRequest::default()
    };
    let failed = |e: crate::model::ModelError| format!("{} could not summarise the earlier turns: {e}", model.name());
    let chat = crate::traced::Chat::start(spec, &request);
    let summarized: Result<(String, Option<crate::model::Usage>), String> = async {
        let mut events = model.stream(request).await.map_err(failed)?;
        let (mut summary, mut usage) = (String::new(), None);
        while let Some(event) = events.next().await {
            match event.map_err(failed)? {
                ModelEvent::TextDelta(text) => {
                    summary.push_str(&text);
                    if summary.len() > MAX_SUMMARY {
                        break;
                    }
                }
                ModelEvent::Finish { usage: reported, .. } => usage = reported,
                _ => {}
            }
        }
        Ok((summary, usage))
    }
    .instrument(chat.span())
    .await;
    crate::counted::model_request(spec, summarized.as_ref().map(|(_, usage)| *usage).map_err(|_| ()));
    chat.end(summarized.as_ref().map(|(summary, usage)| (*usage, summary.as_str(), Vec::new())).map_err(|_| ()));
    let (summary, _) = summarized?;
    if summary.trim().is_empty() {
        return Err(format!("{} gave an empty summary of the earlier turns", model.name()));
    }
    Ok(summary)
}

/// What a model that cannot summarise reads for `covered`: how many messages were set
/// aside, and the user's words in them.
fn listing(earlier: Option<&str>, covered: &[Message]) -> String {
    let said: Vec<String> = covered
        .iter()
        .filter(|m| m.role == Role::User)
        .map(|m| format!("\"{}\"", truncate(m.text().trim(), 80)))
        .collect();
    let mut listed = said.iter().take(MAX_LISTED).cloned().collect::<Vec<_>>().join("; ");
    if said.len() > MAX_LISTED {
        listed.push_str(&format!("; and {} more", said.len() - MAX_LISTED));
    }
    let this = format!(
        "{} earlier messages were set aside to keep the conversation within its budget. The user had said: {listed}.",
        covered.len()
    );
    match earlier {
        Some(earlier) => format!("{earlier}\n{this}"),
        None => this,
    }
}

/// One message as a line of a transcript for the summariser.
fn render(message: &Message) -> String {
    let parts: Vec<String> = message
        .content
        .iter()
        .map(|part| match part {
            Part::Text { text } => text.clone(),
            Part::File(file) => format!("[{}]", file.describe()),
            Part::ToolCall { name, input, .. } => format!("[called {name} with {input}]"),
            Part::ToolResult { output: output @ ToolOutput::ErrorText(_), .. } => {
                format!("[failed: {}]", output.as_text())
            }
            Part::ToolResult { output, .. } => format!("[result: {}]", output.as_text()),
        })
        .collect();
    let who = match message.role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tools",
    };
    format!("{who}: {}", parts.join(" "))
}

fn hash(message: &Message) -> u64 {
    stable_hash(&serde_json::to_string(message).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_the_inputs_else_the_models_window_else_the_default() {
        assert_eq!(budget_of(&serde_json::json!(5000), Some(200_000)), 5000);
        assert_eq!(budget_of(&Value::Null, Some(200_000)), 150_000);
        assert_eq!(budget_of(&serde_json::json!(0), None), CONTEXT_BUDGET);
        let env = |var: &str| (var.ends_with("API_KEY")).then(|| "key".to_string());
        let window = |spec| crate::provider::model_from_str_with_env(spec, &env).expect("a model").context_window();
        assert_eq!(window("anthropic:claude-sonnet-4-5"), Some(200_000));
        assert_eq!(window("openai:gpt-4o-mini"), Some(128_000));
        assert_eq!(window("ollama:gpt-4o"), None, "Ollama's window is its num_ctx");
        assert_eq!(window("offline"), None);
    }

    /// `turns` turns of a user message, a tool call, its result and a reply.
    fn conversation(turns: usize) -> Vec<Message> {
        (0..turns)
            .flat_map(|n| {
                let id = format!("c{n}");
                [
                    Message::user(format!("add {n}")),
                    Message::new(
                        Role::Assistant,
                        vec![Part::ToolCall { id: id.clone(), name: "add".into(), input: serde_json::json!({"n": n}) }],
                    ),
                    Message::new(
                        Role::Tool,
                        vec![Part::ToolResult { id, name: "add".into(), output: ToolOutput::Text(format!("sum {n}")) }],
                    ),
                    Message::assistant(format!("added {n}")),
                ]
            })
            .collect()
    }

    #[test]
    fn a_cut_falls_where_a_turn_starts_and_keeps_the_latest_turn() {
        let messages = conversation(10);
        let upto = cut(&messages, 0, 300).unwrap();
        assert_eq!(messages[upto].role, Role::User, "a turn starts there");
        assert!(upto > 0 && upto < 36, "{upto}: some turns before the latest are kept");
        assert_eq!(cut(&messages, 0, 0), Some(36), "at least everything before the latest turn");
        assert_eq!(cut(&messages, 36, 0), None, "only the latest turn is left");
    }

    #[tokio::test]
    async fn a_model_that_cannot_summarise_gets_a_listing_that_goes_on() {
        let messages = conversation(30);
        let model = crate::offline::OfflineModel;
        let first = compact((&model, "offline"), &messages, None, 200).await.unwrap().unwrap();
        assert!(first.summary.contains("\"add 0\"") && first.covers(&messages), "{}", first.summary);
        let grown = conversation(60);
        let second = compact((&model, "offline"), &grown, Some(&first), 200).await.unwrap().unwrap();
        assert!(second.upto > first.upto && second.summary.starts_with(&first.summary));
        assert!(!second.covers(&conversation(5)), "not a cleared conversation's");
    }
}
