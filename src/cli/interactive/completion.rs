//! The line editor's helper: Tab completes `@` mentions with the space's charm names
//! (whole names, spaces included), `/commands`, and model strings after `/model`.

use std::borrow::Cow;

use rustyline::completion::{Completer, Pair};
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::{Cmd, ConditionalEventHandler, Context, Event, EventContext, Movement, RepeatCount};
use trellis_patterns::chatbot::Chatbot;

/// The slash commands, as completed and listed by `/help`.
pub const COMMANDS: &[&str] =
    &["/help", "/tools", "/clear", "/model", "/usage", "/attach", "/approve", "/disallow", "/deny", "/answer", "/quit"];

/// Beginnings of model strings, completed after `/model `.
const MODELS: &[&str] = &["offline", "scripted:", "openai:", "anthropic:", "ollama:"];

/// Completes against the charms the chatbot can mention as they are when Tab is pressed.
pub struct Helper {
    chat: Chatbot,
}

impl Helper {
    pub fn new(chat: Chatbot) -> Self {
        Helper { chat }
    }
}

impl Completer for Helper {
    type Candidate = Pair;

    fn complete(&self, line: &str, pos: usize, _ctx: &Context<'_>) -> rustyline::Result<(usize, Vec<Pair>)> {
        // A name with control characters (stored before names were checked) is not
        // offered: the editor would print it raw, and nobody types it anyway.
        let mut names = self.chat.mentionable();
        names.retain(|name| !name.contains(char::is_control));
        Ok(candidates(line, pos, &names))
    }
}

impl Hinter for Helper {
    type Hint = String;
}

impl Highlighter for Helper {
    fn highlight<'l>(&self, line: &'l str, _pos: usize) -> Cow<'l, str> {
        Cow::Borrowed(line)
    }
}

impl Validator for Helper {}

impl rustyline::Helper for Helper {}

/// What Tab offers for `line` with the cursor at byte `pos`: where the replaced text
/// starts and the candidates.
pub fn candidates(line: &str, pos: usize, names: &[String]) -> (usize, Vec<Pair>) {
    let Some(head) = line.get(..pos) else {
        return (pos, Vec::new());
    };
    if head.starts_with('/') {
        return match head.split_once(' ') {
            None => (0, matching(COMMANDS.iter().copied(), head, "")),
            Some(("/model", rest)) => {
                let typed = rest.trim_start();
                (pos - typed.len(), matching(MODELS.iter().copied(), typed, ""))
            }
            Some(_) => (pos, Vec::new()),
        };
    }
    // The mention being typed starts at an `@`; names may hold spaces, so try each `@`
    // from the nearest back, skipping those inside a word (`me@example.org`).
    for (at, _) in head.rmatch_indices('@') {
        if head[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric()) {
            continue;
        }
        let found = matching(names.iter().map(String::as_str), &head[at + 1..], "@");
        if !found.is_empty() {
            return (at, found);
        }
    }
    (pos, Vec::new())
}

/// The words that start with `typed` (ignoring ASCII case, as mentions do), sorted,
/// without duplicates, each with `prefix` in front.
fn matching<'a>(words: impl Iterator<Item = &'a str>, typed: &str, prefix: &str) -> Vec<Pair> {
    let mut hits: Vec<&str> = words
        .filter(|w| {
            w.len() >= typed.len() && w.is_char_boundary(typed.len()) && w[..typed.len()].eq_ignore_ascii_case(typed)
        })
        .collect();
    hits.sort_unstable();
    hits.dedup();
    hits.into_iter().map(|w| Pair { display: format!("{prefix}{w}"), replacement: format!("{prefix}{w}") }).collect()
}

/// Ctrl-C at the prompt: clears a line that has text; on an empty line it interrupts
/// (the prompt loop counts those to leave).
pub struct CtrlC;

impl ConditionalEventHandler for CtrlC {
    fn handle(&self, _evt: &Event, _n: RepeatCount, _positive: bool, ctx: &EventContext) -> Option<Cmd> {
        if ctx.line().is_empty() {
            None
        } else {
            Some(Cmd::Kill(Movement::WholeBuffer))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{candidates, COMMANDS};

    fn complete(line: &str, names: &[&str]) -> (usize, Vec<String>) {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let (start, found) = candidates(line, line.len(), &names);
        (start, found.into_iter().map(|p| p.replacement).collect())
    }

    #[test]
    fn mentions_complete_to_whole_names() {
        let names = ["Counter", "Todo", "Todo list", "Notes", "Todo"];
        assert_eq!(complete("@Cou", &names), (0, vec!["@Counter".to_string()]));
        assert_eq!(complete("add 5 to @cou", &names), (9, vec!["@Counter".to_string()]));
        assert_eq!(complete("@To", &names), (0, vec!["@Todo".to_string(), "@Todo list".to_string()]));
        assert_eq!(complete("@Todo l", &names), (0, vec!["@Todo list".to_string()]));
        assert_eq!(complete("@", &names).1.len(), 4, "all names, once each");
        assert!(complete("@Zz", &names).1.is_empty());
        assert!(complete("me@Cou", &names).1.is_empty(), "not inside a word");
        assert!(complete("plain text", &names).1.is_empty());
    }

    #[test]
    fn commands_and_models_complete() {
        assert_eq!(complete("/mo", &[]), (0, vec!["/model".to_string()]));
        assert_eq!(complete("/", &[]).1.len(), COMMANDS.len());
        assert_eq!(complete("/model op", &[]), (7, vec!["openai:".to_string()]));
        assert!(complete("/tools x", &[]).1.is_empty());
    }
}
