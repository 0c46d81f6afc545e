//! The offline model: the embedded default, so `trellis chat` works with no network and no
//! key.
//!
//! It is not a language model and says so. For each request it looks at the end of the
//! conversation:
//!
//! - after tool results, it reports them in plain words (`Done: Counter.increment → …`);
//! - asked what it is (or for help), it explains itself, lists its tools and how to switch
//!   to a real provider;
//! - otherwise it picks the tool whose name and description best match the words of the
//!   last user message (`@Name` mentions narrow the choice to that charm's tools), fills
//!   the arguments from the message (see `args`) and calls it; when nothing matches it
//!   says it cannot help offline;
//! - it follows the request's tool choice: `none` calls nothing, one named tool is called
//!   whatever the words, `required` calls the best match or else the first tool.
//!
//! It names tools as people see them (`Counter.increment`, [`ToolSpec::display_name`]),
//! and matches mentions against those names; only the tool call itself carries the wire
//! name.

mod args;
mod words;

use std::future::Future;
use std::pin::Pin;

use crate::message::{FilePart, Message, Part, Role, ToolOutput};
use crate::model::{EventStream, Model, ModelError, ModelEvent, ModelRequest, ToolChoice, ToolSpec};

use self::words::{parse, score};

/// How to switch to a real provider, shown whenever the offline model explains itself.
const REAL_PROVIDERS: &str = "For a real model, start Trellis with `--model openai:gpt-4o-mini` \
(needs OPENAI_API_KEY), `--model anthropic:claude-3-5-haiku-latest` (needs ANTHROPIC_API_KEY) \
or `--model ollama:llama3.2` (a local Ollama server, no key).\n";

/// Questions about the model itself, matched as whole words anywhere in the message.
const ABOUT_PHRASES: &[&str] = &[
    "who are you",
    "what are you",
    "what can you do",
    "what do you do",
    "how do you work",
    "what model",
    "which model",
    "what is this",
];

/// Messages that, on their own, ask for an introduction.
const ABOUT_MESSAGES: &[&str] = &["help", "help me", "hi", "hello", "hey"];

/// Longest rendering of a tool result or description quoted back.
const MAX_QUOTE: usize = 300;

/// Most tools listed in an explanation.
const MAX_LISTED: usize = 20;

/// Trellis's offline model (`--model offline`): picks tools by matching words.
#[derive(Debug, Clone, Copy, Default)]
pub struct OfflineModel;

impl OfflineModel {
    /// The offline model.
    pub fn new() -> Self {
        OfflineModel
    }

    /// Everything the model answers to `request`, in order, ending with a `Finish`.
    pub fn answer(&self, request: &ModelRequest) -> Vec<ModelEvent> {
        if let Some(reply) = reply_to_results(request) {
            return say(&reply);
        }
        let last_user = request.messages.iter().rev().find(|m| m.role == Role::User);
        let user_text = last_user.map(|m| m.text()).unwrap_or_default();
        let unseen: Vec<String> = last_user.into_iter().flat_map(Message::files).map(FilePart::describe).collect();
        if !unseen.is_empty() {
            let note = format!(
                "I cannot see images or read files: the offline model reads text only, so all that reached me of \
                 {} is its name and size.\n",
                unseen.join(", ")
            );
            if user_text.trim().is_empty() {
                return say(&format!("{note}{REAL_PROVIDERS}"));
            }
            let mut events = self.answer_text(request, &user_text);
            events.insert(0, ModelEvent::TextDelta(note));
            return events;
        }
        self.answer_text(request, &user_text)
    }

    /// The answer to the words of the last user message.
    fn answer_text(&self, request: &ModelRequest, user_text: &str) -> Vec<ModelEvent> {
        if asks_about_itself(user_text) {
            return say(&about(&request.tools));
        }
        if request.tool_choice == ToolChoice::None {
            return say(&format!(
                "Tools are turned off for this message (tool choice `none`), and calling tools is all I \
                 can do offline.\n{REAL_PROVIDERS}"
            ));
        }
        pick_tool(request, user_text)
    }
}

impl Model for OfflineModel {
    fn name(&self) -> String {
        "offline".into()
    }

    fn summarizes(&self) -> bool {
        false
    }

    /// A request for a value of a schema is refused at once: matching words against tool
    /// names gives no such value, and three tries would only say so three times.
    fn stream(
        &self,
        request: ModelRequest,
    ) -> Pin<Box<dyn Future<Output = Result<EventStream, ModelError>> + Send + '_>> {
        if request.result.is_some() {
            let why = "the offline model cannot answer with a value of a result schema; choose a real model with \
                       --model (openai:MODEL, anthropic:MODEL or ollama:MODEL)";
            return Box::pin(std::future::ready(Err(ModelError::Config(why.into()))));
        }
        let events = self.answer(&request);
        Box::pin(async move {
            let stream: EventStream = Box::pin(futures::stream::iter(events.into_iter().map(Ok)));
            Ok(stream)
        })
    }
}

/// Chooses a tool for `text` and calls it, or explains why it cannot.
fn pick_tool(request: &ModelRequest, text: &str) -> Vec<ModelEvent> {
    let parsed = parse(text);
    let mentions: Vec<&str> = parsed.mentions().into_iter().map(mention_as_name).filter(|m| !m.is_empty()).collect();
    let forced = match &request.tool_choice {
        ToolChoice::Tool(wire) => Some(wire.as_str()),
        _ => None,
    };
    let candidates: Vec<&ToolSpec> = request
        .tools
        .iter()
        .filter(|tool| forced.is_none_or(|wire| tool.name == wire))
        .filter(|tool| forced.is_some() || mentions.is_empty() || mentions.iter().any(|m| mentioned(display(tool), m)))
        .collect();
    if candidates.is_empty() && !mentions.is_empty() {
        let named = mentions.iter().map(|m| format!("@{m}")).collect::<Vec<_>>().join(", ");
        return say(&format!("I have no tools for {named}.\n{}{REAL_PROVIDERS}", tool_list(&request.tools)));
    }

    let stems = parsed.stems();
    let mut best: Option<(&ToolSpec, words::Score)> = None;
    for tool in &candidates {
        let s = score(&stems, tool);
        if s.total > best.as_ref().map_or(0, |(_, b)| b.total) {
            best = Some((*tool, s));
        }
    }
    // A mention (or a forced tool choice) that leaves exactly one tool is a clear enough
    // choice on its own.
    if let (None, [only], false) = (&best, &candidates[..], mentions.is_empty() && forced.is_none()) {
        best = Some((*only, words::Score::default()));
    }
    // `required`: some tool must be called; the first is as good a guess as any.
    if let (None, ToolChoice::Required, Some(first)) = (&best, &request.tool_choice, candidates.first()) {
        best = Some((*first, words::Score::default()));
    }
    // A question about a mentioned charm ("what is on my @Todo?") reads it.
    if best.is_none() && !mentions.is_empty() && is_question(text) {
        let readers: Vec<&&ToolSpec> = candidates.iter().filter(|t| display(t).ends_with(".read")).collect();
        if let [only] = readers[..] {
            best = Some((*only, words::Score::default()));
        }
    }
    let Some((tool, chosen)) = best else {
        return say(&format!(
            "Sorry, I can't help with that offline. I'm Trellis's offline model: I only pick a \
             tool by matching the words of your message against tool names and descriptions, \
             and none matched.\n{}{REAL_PROVIDERS}",
            tool_list(&request.tools)
        ));
    };

    match args::fill(&tool.input_schema, &parsed, &chosen.name_stems) {
        Ok(arguments) => {
            let input = serde_json::Value::Object(arguments);
            let calls_so_far =
                request.messages.iter().flat_map(|m| &m.content).filter(|p| matches!(p, Part::ToolCall { .. })).count();
            vec![
                ModelEvent::TextDelta(format!("Calling {} with {input}.\n", display(tool))),
                ModelEvent::ToolCall { id: format!("offline_{}", calls_so_far + 1), name: tool.name.clone(), input },
                ModelEvent::Finish { reason: "tool_calls".into(), usage: None },
            ]
        }
        Err(missing) => say(&format!(
            "I would call {}, but I couldn't find {} in your message.\nWrite numbers as \
             digits and put text in quotes.\n",
            display(tool),
            missing.join(" and "),
        )),
    }
}

/// Whether a message asks something rather than asking for something to be done.
fn is_question(text: &str) -> bool {
    let first = text.split_whitespace().find(|w| !w.starts_with('@')).unwrap_or("").to_lowercase();
    text.trim_end().ends_with('?')
        || ["what", "which", "show", "list", "how", "who", "where", "when"].contains(&first.as_str())
}

/// A mention as written, without the punctuation that follows it (`@Counter,`) or a
/// possessive (`@Counter's count`).
fn mention_as_name(mention: &str) -> &str {
    let mention = mention.trim_end_matches(|c: char| !c.is_alphanumeric());
    ["'s", "\u{2019}s"].iter().find_map(|possessive| mention.strip_suffix(possessive)).unwrap_or(mention)
}

/// Whether the display name `tool` belongs to `mention`, ignoring case: it starts with the
/// mention, followed by its end or by something other than a letter or digit (so `@Count`
/// is not `Counter.increment`, while `@Counter`, `@counter.increment` and, for a charm
/// named "Todo list", `@Todo` are).
fn mentioned(tool: &str, mention: &str) -> bool {
    let (tool, mention) = (tool.to_lowercase(), mention.to_lowercase());
    tool.strip_prefix(&mention).is_some_and(|rest| !rest.starts_with(char::is_alphanumeric))
}

/// The name people see for `tool`; a spec built without one (deserialised, or by hand)
/// only has its wire name.
fn display(tool: &ToolSpec) -> &str {
    if tool.display_name.is_empty() {
        &tool.name
    } else {
        &tool.display_name
    }
}

/// Plain words for the tool results ending the conversation, if it ends with them.
fn reply_to_results(request: &ModelRequest) -> Option<String> {
    let last = request.messages.last().filter(|m| m.role == Role::Tool)?;
    // A result carries the wire name; people know the tool by its display name.
    let shown = |wire: &str| request.tools.iter().find(|t| t.name == wire).map_or(wire, display).to_owned();
    let lines: Vec<String> = last
        .content
        .iter()
        .filter_map(|part| match part {
            Part::ToolResult { name, output, .. } => Some(match (shown(name), output) {
                // A read tool's answer: the data itself, as `field: value` pairs.
                (name, ToolOutput::Json(value)) if value.get("summary").is_none() && value.get("value").is_some() => {
                    format!("{name} shows: {}\n", render_fields(&value["value"]))
                }
                (name, ToolOutput::Json(value)) => format!("Done: {name} → {}\n", render_json(value)),
                (name, ToolOutput::Text(text)) => format!("Done: {name} → {}\n", clip(text.trim())),
                (name, ToolOutput::ErrorText(error)) => {
                    format!("That failed: {name} → {}\n", clip(error.trim()))
                }
                (name, output @ ToolOutput::Content(_)) => format!(
                    "Done: {name} → {} (I read only its text: the offline model cannot see images or files)\n",
                    clip(output.as_text().trim())
                ),
            }),
            _ => None,
        })
        .collect();
    (!lines.is_empty()).then(|| lines.concat())
}

/// A tool's JSON output in a few words: its `summary` when it has one.
fn render_json(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value.get("summary").unwrap_or(value) {
        Value::String(s) => clip(s),
        Value::Array(items) if items.iter().all(Value::is_string) => {
            clip(&items.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("; "))
        }
        Value::Null => "done".into(),
        other => clip(&other.to_string()),
    }
}

/// Data for people: an object's fields as `key: value` (internal `$` keys left out).
fn render_fields(value: &serde_json::Value) -> String {
    match value.as_object() {
        Some(map) => clip(
            &map.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        None => clip(&value.to_string()),
    }
}

/// Whether `text` asks what the model is or for help (an empty message counts; a bare
/// `@mention` does not: it picks that charm's tool).
fn asks_about_itself(text: &str) -> bool {
    let tokens = parse(text).tokens;
    if tokens.is_empty() {
        return true;
    }
    let words: Vec<String> = tokens
        .into_iter()
        .filter_map(|(t, _)| match t {
            words::Token::Word(w) => Some(w),
            _ => None,
        })
        .collect();
    let joined = words.join(" ");
    let padded = format!(" {joined} ");
    ABOUT_MESSAGES.contains(&joined.as_str()) || ABOUT_PHRASES.iter().any(|p| padded.contains(&format!(" {p} ")))
}

/// The honest introduction.
fn about(tools: &[ToolSpec]) -> String {
    format!(
        "I'm Trellis's offline model, not a language model: I run without network or API key.\n\
         I pick a tool by matching the words of your message against tool names and \
         descriptions, and fill its arguments from your message (numbers as digits, text in \
         quotes, yes/no, option names). Mention a charm with @Name to narrow the choice.\n\
         {}{REAL_PROVIDERS}",
        tool_list(tools)
    )
}

/// The tools, one line each.
fn tool_list(tools: &[ToolSpec]) -> String {
    if tools.is_empty() {
        return "I have no tools right now: @-mention a charm to give me its handlers.\n".into();
    }
    let mut list = String::from("Tools I can call:\n");
    for tool in tools.iter().take(MAX_LISTED) {
        let description = tool.description.lines().next().unwrap_or_default().trim();
        list.push_str(&format!("- {}: {}\n", display(tool), clip(description)));
    }
    if tools.len() > MAX_LISTED {
        list.push_str(&format!("- … and {} more\n", tools.len() - MAX_LISTED));
    }
    list
}

/// `text` cut to [`MAX_QUOTE`] characters.
fn clip(text: &str) -> String {
    crate::text::truncate(text, MAX_QUOTE)
}

/// `text` streamed a line at a time, then `Finish { reason: "stop" }`.
fn say(text: &str) -> Vec<ModelEvent> {
    text.split_inclusive('\n')
        .map(|line| ModelEvent::TextDelta(line.to_owned()))
        .chain([ModelEvent::Finish { reason: "stop".into(), usage: None }])
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::message::Message;

    /// A tool shown as `display` (`Counter.increment`), called by its wire name
    /// (`Counter_increment`).
    fn tool(display: &str, description: &str, schema: serde_json::Value) -> ToolSpec {
        ToolSpec {
            name: display.replace('.', "_"),
            display_name: display.into(),
            description: description.into(),
            input_schema: schema.into(),
        }
    }

    fn amount() -> serde_json::Value {
        json!({ "type": "object", "properties": { "amount": { "type": "integer", "default": 1 } } })
    }

    fn counter_tools(charm: &str) -> Vec<ToolSpec> {
        vec![
            tool(&format!("{charm}.increment"), "Increase the count by `amount` (default 1).", amount()),
            tool(&format!("{charm}.decrement"), "Decrease the count by `amount` (default 1).", amount()),
            tool(
                &format!("{charm}.reset"),
                "Set the count back to zero.",
                json!({ "type": "object", "properties": {} }),
            ),
        ]
    }

    fn notes_tool() -> ToolSpec {
        let schema = json!({ "type": "object", "properties": { "text": { "type": "string" } }, "required": ["text"] });
        tool("Notes.addNote", "Add a note to the list.", schema)
    }

    fn ask(tools: Vec<ToolSpec>, text: &str) -> Vec<ModelEvent> {
        OfflineModel.answer(&ModelRequest { messages: vec![Message::user(text)], tools, ..Default::default() })
    }

    fn call_of(events: &[ModelEvent]) -> Option<(String, serde_json::Value)> {
        events.iter().find_map(|e| match e {
            ModelEvent::ToolCall { name, input, .. } => Some((name.clone(), input.clone())),
            _ => None,
        })
    }

    fn text_of(events: &[ModelEvent]) -> String {
        events
            .iter()
            .filter_map(|e| match e {
                ModelEvent::TextDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    fn finish_of(events: &[ModelEvent]) -> Option<&str> {
        match events.last() {
            Some(ModelEvent::Finish { reason, .. }) => Some(reason),
            _ => None,
        }
    }

    #[test]
    fn mention_and_verb_pick_increment_with_its_amount() {
        let events = ask(counter_tools("Counter"), "@Counter add 5");
        assert_eq!(call_of(&events), Some(("Counter_increment".into(), json!({ "amount": 5 }))));
        assert_eq!(events[0], ModelEvent::TextDelta("Calling Counter.increment with {\"amount\":5}.\n".into()));
        assert!(matches!(&events[1], ModelEvent::ToolCall { id, .. } if id == "offline_1"));
        assert_eq!(finish_of(&events), Some("tool_calls"));
        let events = ask(counter_tools("Counter"), "please subtract 2");
        assert_eq!(call_of(&events), Some(("Counter_decrement".into(), json!({ "amount": 2 }))));
        let events = ask(counter_tools("Counter"), "reset the counter");
        assert_eq!(call_of(&events), Some(("Counter_reset".into(), json!({}))));
    }

    #[test]
    fn dice_get_both_numbers() {
        let schema = json!({ "type": "object", "properties": {
            "count": { "type": "integer" }, "sides": { "type": "integer" } }, "required": ["count", "sides"] });
        let mut tools = counter_tools("Counter");
        tools.push(tool("Dice.roll", "Roll `count` dice with `sides` sides.", schema));
        let events = ask(tools.clone(), "roll 3 dice with 6 sides");
        assert_eq!(call_of(&events), Some(("Dice_roll".into(), json!({ "count": 3, "sides": 6 }))));
        // Without names next to them, numbers go in schema property order.
        let events = ask(tools, "throw 2 d 20");
        assert_eq!(call_of(&events), Some(("Dice_roll".into(), json!({ "count": 2, "sides": 20 }))));
    }

    #[test]
    fn quoted_text_fills_a_note() {
        let mut tools = counter_tools("Counter");
        tools.push(notes_tool());
        let events = ask(tools.clone(), "add a note \"buy milk\"");
        assert_eq!(call_of(&events), Some(("Notes_addNote".into(), json!({ "text": "buy milk" }))));
        let events = ask(tools, "@Notes add a note");
        assert_eq!(call_of(&events), None);
        assert!(text_of(&events).contains("`text`"), "{}", text_of(&events));
    }

    #[test]
    fn unmatched_messages_get_an_honest_no() {
        let events = ask(counter_tools("Counter"), "what's the weather in Paris?");
        let text = text_of(&events);
        assert_eq!(call_of(&events), None);
        assert!(text.contains("can't help with that offline"), "{text}");
        assert!(text.contains("- Counter.reset: Set the count back to zero."), "{text}");
        assert!(text.contains("--model openai:gpt-4o-mini"), "{text}");
        assert_eq!(finish_of(&events), Some("stop"));
        assert!(events.len() > 3, "text streams in several deltas");
    }

    #[test]
    fn explains_itself() {
        for question in ["What are you?", "who are you", "help", "what can you do"] {
            let text = text_of(&ask(counter_tools("Counter"), question));
            for needle in [
                "offline model",
                "matching the words",
                "Counter.increment",
                "OPENAI_API_KEY",
                "ANTHROPIC_API_KEY",
                "ollama:llama3.2",
            ] {
                assert!(text.contains(needle), "{question}: {needle} missing in {text}");
            }
        }
        assert!(text_of(&ask(vec![], "help")).contains("no tools right now"));
        assert!(!asks_about_itself("what are your tools good for"));
    }

    #[test]
    fn answers_from_tool_results() {
        let call = Message::new(
            Role::Assistant,
            vec![Part::ToolCall {
                id: "offline_1".into(),
                name: "Counter_increment".into(),
                input: json!({ "amount": 2 }),
            }],
        );
        let result = |output| {
            Message::new(
                Role::Tool,
                vec![Part::ToolResult { id: "offline_1".into(), name: "Counter_increment".into(), output }],
            )
        };
        let answer = |output| {
            let messages = vec![Message::user("@Counter add 2"), call.clone(), result(output)];
            let events =
                OfflineModel.answer(&ModelRequest { messages, tools: counter_tools("Counter"), ..Default::default() });
            assert_eq!(finish_of(&events), Some("stop"));
            text_of(&events)
        };
        let summary = json!({ "result": { "count": 5 }, "summary": "count: 3 → 5" });
        assert_eq!(answer(ToolOutput::Json(summary)), "Done: Counter.increment → count: 3 → 5\n");
        let read = json!({ "value": { "$NAME": "Counter", "count": 5, "label": "Count: 5" } });
        assert_eq!(answer(ToolOutput::Json(read)), "Counter.increment shows: count: 5, label: \"Count: 5\"\n");
        assert_eq!(answer(ToolOutput::Json(json!({ "count": 5 }))), "Done: Counter.increment → {\"count\":5}\n");
        assert_eq!(answer(ToolOutput::Text("ok".into())), "Done: Counter.increment → ok\n");
        assert_eq!(
            answer(ToolOutput::ErrorText("amount must be an integer".into())),
            "That failed: Counter.increment → amount must be an integer\n"
        );

        // A new request after the answer numbers its call after the earlier one.
        let messages =
            vec![Message::user("add 1"), call, result(ToolOutput::Text("ok".into())), Message::user("add 2")];
        let events =
            OfflineModel.answer(&ModelRequest { messages, tools: counter_tools("Counter"), ..Default::default() });
        assert!(matches!(&events[1], ModelEvent::ToolCall { id, .. } if id == "offline_2"));
    }

    #[test]
    fn a_quoted_text_fills_the_required_property_first() {
        let schema = json!({
            "type": "object",
            "properties": { "body": { "type": "string", "default": "" }, "title": { "type": "string" } },
            "required": ["title"]
        });
        let events = ask(vec![tool("Notes.add", "Add a note.", schema)], "@Notes add a note \"call mom\"");
        assert_eq!(call_of(&events), Some(("Notes_add".into(), json!({ "title": "call mom", "body": "" }))));
    }

    #[test]
    fn a_question_about_a_mentioned_charm_reads_it() {
        let mut tools = counter_tools("Notes");
        tools.push(tool(
            "Notes.read",
            "Read Notes's data without changing it.",
            json!({ "type": "object", "properties": {} }),
        ));
        let events = ask(tools.clone(), "what is on my @Notes?");
        assert_eq!(call_of(&events).map(|c| c.0), Some("Notes_read".into()));
        assert_eq!(call_of(&ask(tools, "@Notes please")), None, "not a question: no guess");
    }

    #[test]
    fn mentions_restrict_to_one_charm() {
        let mut tools = counter_tools("Counter");
        tools.extend(counter_tools("Tally"));
        assert_eq!(
            call_of(&ask(tools.clone(), "@tally, add 4")),
            Some(("Tally_increment".into(), json!({ "amount": 4 })))
        );
        assert_eq!(call_of(&ask(tools.clone(), "add 4")), Some(("Counter_increment".into(), json!({ "amount": 4 }))));
        for possessive in ["add 4 to @Tally's count", "add 4 to @Tally\u{2019}s count"] {
            assert_eq!(
                call_of(&ask(tools.clone(), possessive)),
                Some(("Tally_increment".into(), json!({ "amount": 4 })))
            );
        }
        let events = ask(tools.clone(), "@Count add 4");
        assert_eq!(call_of(&events), None);
        assert!(text_of(&events).contains("no tools for @Count"), "{}", text_of(&events));
        // Mentions match display names, whatever the wire name (suffixed for twins).
        let suffixed =
            ToolSpec { name: "Counter_increment-0a1b2c".into(), ..tool("Counter.increment", "Increase.", amount()) };
        let twins = vec![notes_tool(), suffixed];
        assert_eq!(
            call_of(&ask(twins.clone(), "@counter.increment")),
            Some(("Counter_increment-0a1b2c".into(), json!({ "amount": 1 })))
        );
        assert_eq!(
            call_of(&ask(twins, "@Counter bump")),
            Some(("Counter_increment-0a1b2c".into(), json!({ "amount": 1 })))
        );
        // A charm name with a space: the mention's first word is enough.
        let todo = vec![notes_tool(), tool("Todo list.add", "Add an item.", amount())];
        assert_eq!(call_of(&ask(todo, "@Todo list add 2")), Some(("Todo list_add".into(), json!({ "amount": 2 }))));
    }

    /// What the model says names tools as the trace does; only the call carries the wire
    /// name.
    #[test]
    fn speaks_of_tools_by_display_name_never_by_wire_name() {
        let wired = |display: &str, wire: &str| ToolSpec {
            name: wire.into(),
            ..tool(display, "Increase the count.", amount())
        };
        let tools = vec![wired("Counter.increment", "wire_one"), wired("Tally.increment", "wire_two")];
        let events = ask(tools.clone(), "@Counter add 3");
        assert_eq!(call_of(&events), Some(("wire_one".into(), json!({ "amount": 3 }))));
        assert_eq!(text_of(&events), "Calling Counter.increment with {\"amount\":3}.\n");
        let listed = text_of(&ask(tools.clone(), "help"));
        assert!(listed.contains("- Counter.increment: ") && listed.contains("- Tally.increment: "), "{listed}");
        let result = Message::new(
            Role::Tool,
            vec![Part::ToolResult {
                id: "offline_1".into(),
                name: "wire_two".into(),
                output: ToolOutput::Text("ok".into()),
            }],
        );
        let messages = vec![Message::user("@Tally add 1"), result];
        let done =
            text_of(&OfflineModel.answer(&ModelRequest { messages, tools: tools.clone(), ..Default::default() }));
        assert_eq!(done, "Done: Tally.increment → ok\n");
        for text in [listed, done, text_of(&ask(tools, "@Nobody add 1"))] {
            assert!(!text.contains("wire_"), "{text}");
        }
    }

    #[test]
    fn random_messages_always_end_with_a_finish() {
        let pieces = [
            "@",
            "@Counter",
            "\"",
            "'",
            "“",
            "-",
            "-3",
            "2.5",
            ".",
            "add",
            "note",
            "ïñ",
            "日本",
            " ",
            "  ",
            "yes",
            "what are you",
            "roll",
            "\u{0}",
            "é'",
            "'x'",
        ];
        let mut tools = counter_tools("Counter");
        tools.push(notes_tool());
        let mut next = crate::test_rng::xorshift(0x1234_5678_9abc_def1);
        for _ in 0..2000 {
            let mut text = String::new();
            for _ in 0..8 {
                text.push_str(pieces[(next() % pieces.len() as u64) as usize]);
            }
            let events = ask(tools.clone(), &text);
            assert!(finish_of(&events).is_some(), "{text:?}");
            assert!(events.iter().all(|e| !matches!(e, ModelEvent::TextDelta(t) if t.is_empty())), "{text:?}");
        }
    }

    /// A message of about 1 MB (a mention, then chunks that open quotes that never close,
    /// and many chunks for the free text) is answered well within a generous deadline: the
    /// work is linear in the message. The quadratic version took 56 s in release.
    #[test]
    fn a_megabyte_message_is_answered_in_linear_time() {
        const SIZE: usize = 1 << 20;
        for shape in ["'x ", "“y ", "buy milk "] {
            let mut text = String::from("@Notes add a note ");
            while text.len() < SIZE {
                text.push_str(shape);
            }
            let (done, answered) = std::sync::mpsc::channel();
            let tools = vec![notes_tool()];
            let asked = text.clone();
            std::thread::spawn(move || done.send(ask(tools, &asked)));
            let events = answered
                .recv_timeout(std::time::Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("no answer within 60 s for {shape:?} × {}", SIZE / shape.len()));
            let (name, input) = call_of(&events).expect("the note is added");
            assert_eq!(name, "Notes_addNote");
            assert!(input["text"].as_str().is_some_and(|t| t.len() > SIZE / 2), "{shape:?}");
        }
    }

    #[test]
    fn streams_through_the_model_trait() {
        let model = OfflineModel::new();
        assert_eq!(model.name(), "offline");
        let request = ModelRequest {
            messages: vec![Message::user("@Counter add 5")],
            tools: counter_tools("Counter"),
            ..Default::default()
        };
        let events: Vec<ModelEvent> = futures::executor::block_on(async {
            use futures::StreamExt;
            let stream = model.stream(request).await.expect("offline never fails");
            stream.map(|e| e.expect("no stream errors")).collect().await
        });
        assert_eq!(call_of(&events), Some(("Counter_increment".into(), json!({ "amount": 5 }))));
    }

    #[test]
    fn follows_the_tool_choice() {
        let with = |choice: ToolChoice, text: &str| {
            OfflineModel.answer(&ModelRequest {
                messages: vec![Message::user(text)],
                tools: counter_tools("Counter"),
                tool_choice: choice,
                ..Default::default()
            })
        };
        let none = with(ToolChoice::None, "@Counter add 5");
        assert_eq!(call_of(&none), None);
        assert!(text_of(&none).contains("tool choice `none`"), "{}", text_of(&none));
        let forced = with(ToolChoice::Tool("Counter_reset".into()), "add 5");
        assert_eq!(call_of(&forced), Some(("Counter_reset".into(), json!({}))));
        assert_eq!(call_of(&with(ToolChoice::Auto, "sing me a song")), None);
        let required = with(ToolChoice::Required, "sing me a song");
        assert_eq!(call_of(&required).map(|(name, _)| name), Some("Counter_increment".into()));
    }
}
