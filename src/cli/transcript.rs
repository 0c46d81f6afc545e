//! How the terminal shows a conversation (`chat`, interactive mode, a server's chat): messages, tool calls and tool results as
//! transcript lines. Text from the model, tools and charm names is escaped for the
//! terminal here (see [`safe`], [`safe_line`]).

use trellis_builtins::dialog::{Interaction, InteractionKind};
use trellis_builtins::message::{Message, Part, Role, ToolOutput};
use trellis_builtins::text::truncate;

use crate::session::Session;
use crate::terminal::{safe, safe_json, safe_line};

/// Renders messages as a transcript for people.
pub fn transcript(session: &Session, messages: &[Message]) -> String {
    transcript_named(&|wire| session.display_name(wire), messages)
}

/// [`transcript`] with tools' display names from `display` (by wire name).
pub fn transcript_named(display: &dyn Fn(&str) -> String, messages: &[Message]) -> String {
    let mut lines = Vec::new();
    for message in messages {
        for part in &message.content {
            lines.push(line_named(display, message.role, part));
        }
    }
    lines.join("\n")
}

/// One part of a message as a transcript line: `you: …`, `assistant: …`, a tool call
/// (`  → Counter.increment {"amount":5}`) or a tool result (`  ← count: 0 → 5`).
pub fn line(session: &Session, role: Role, part: &Part) -> String {
    line_named(&|wire| session.display_name(wire), role, part)
}

/// [`line`] with tools' display names from `display` (by wire name).
fn line_named(display: &dyn Fn(&str) -> String, role: Role, part: &Part) -> String {
    match (role, part) {
        (Role::User, Part::Text { text }) => format!("you: {}", safe(text)),
        (_, Part::Text { text }) => format!("{ASSISTANT}{}", safe(text)),
        (Role::User, Part::File(file)) => format!("you attached {}", safe_line(&file.describe())),
        (_, Part::File(file)) => format!("{ASSISTANT}[{}]", safe_line(&file.describe())),
        // The input is JSON, whose strings serde has escaped already; a line, not pages.
        (_, Part::ToolCall { name, input, .. }) => {
            format!("  → {} {}", safe_line(&display(name)), truncate(&input.to_string(), MAX_INPUT_SHOWN))
        }
        (_, Part::ToolResult { output, .. }) => format!("  ← {}", safe_line(&describe(output))),
    }
}

/// How many characters of a tool call's arguments a transcript shows.
const MAX_INPUT_SHOWN: usize = 500;

/// What starts the model's text in a transcript.
pub const ASSISTANT: &str = "assistant: ";

/// One line for a tool result.
fn describe(output: &ToolOutput) -> String {
    match output {
        ToolOutput::Json(json) => match json.get("summary").and_then(|s| s.as_str()) {
            Some(summary) => summary.to_string(),
            None => json.to_string(),
        },
        ToolOutput::Text(text) => text.clone(),
        ToolOutput::ErrorText(text) => format!("error: {text}"),
        ToolOutput::Content(_) => output.as_text(),
    }
}

/// The calls waiting for the user, with how to answer them.
pub fn waiting(interactions: &[Interaction], how: &str) -> String {
    let mut lines: Vec<String> = interactions
        .iter()
        .map(|i| {
            let (call, prompt) = (safe_line(&i.call_id), safe_line(&i.prompt));
            match i.kind {
                InteractionKind::Approval => {
                    let arguments = safe_json(&i.arguments.to_string()).into_owned();
                    let asked = format!(
                        "waiting for your approval: {} {arguments} (call {call}): {prompt}",
                        safe_line(&i.tool)
                    );
                    [asked].into_iter().chain(preview_lines(i)).collect::<Vec<_>>().join("\n")
                }
                InteractionKind::Question => format!("the model asks (call {call}): {prompt}"),
                InteractionKind::Confirmation => format!("the model asks, yes or no (call {call}): {prompt}"),
                InteractionKind::Choice => {
                    let options: Vec<_> = i.options.iter().map(|o| safe_line(o)).collect();
                    format!("the model asks you to choose (call {call}): {prompt} [{}]", options.join(" | "))
                }
                InteractionKind::ClientExecution => format!(
                    "waiting for the client to run {} (call {call}): {prompt}; its input: {}",
                    safe_line(&i.tool),
                    safe_line(&i.input.to_string())
                ),
                InteractionKind::DisplayEffect => {
                    format!("{} shows (call {call}): {}", safe_line(&i.tool), safe_line(&i.input.to_string()))
                }
                InteractionKind::Elicitation => super::form::describe(i),
            }
        })
        .collect();
    lines.push(how.to_string());
    lines.join("\n")
}

/// How a running call goes, as a transcript line (`  ⋯ Tool: stage`), escaped.
pub fn progress_line(progress: &trellis_builtins::dialog::Progress) -> String {
    format!("  ⋯ {}: {}", safe_line(&progress.tool), safe_line(&progress.text))
}

/// What a call waiting for approval would change, a line each (`  Notes.notes[0]: ... →
/// removed`), escaped: the values come from the space and the model.
pub fn preview_lines(interaction: &Interaction) -> Vec<String> {
    let lines = interaction.preview.iter().flat_map(|preview| preview.lines.iter());
    lines.map(|line| format!("  {}", safe_line(line))).collect()
}

/// The tokens the conversation's answers used, as `/usage` shows them: the total over the
/// answers whose provider reported usage, and the last such answer.
pub fn usage(messages: &[Message]) -> String {
    let reported: Vec<_> = messages.iter().filter_map(|m| m.usage).collect();
    let Some(last) = reported.last() else {
        return "usage: no answer reported token usage (the offline and scripted models count none)".into();
    };
    let (input, output) = reported
        .iter()
        .fold((0u64, 0u64), |(i, o), u| (i.saturating_add(u.input_tokens), o.saturating_add(u.output_tokens)));
    format!(
        "usage: {input} input and {output} output tokens over {} answers; the last: {} in, {} out",
        reported.len(),
        last.input_tokens,
        last.output_tokens
    )
}

#[cfg(test)]
mod tests {
    use trellis_builtins::message::Message;
    use trellis_builtins::model::Usage;

    #[test]
    fn usage_sums_the_answers_that_report_it() {
        let mut first = Message::assistant("a");
        first.usage = Some(Usage { input_tokens: 100, output_tokens: 7 });
        let mut second = Message::assistant("b");
        second.usage = Some(Usage { input_tokens: 120, output_tokens: 5 });
        let messages = [Message::user("q"), first, Message::assistant("unreported"), second];
        assert_eq!(
            super::usage(&messages),
            "usage: 220 input and 12 output tokens over 2 answers; the last: 120 in, 5 out"
        );
        assert!(super::usage(&[Message::user("q")]).contains("no answer reported"));
    }
}
