//! Reading a message the offline model's way: tokens, stems, synonyms and tool scores.

use std::collections::HashSet;
use std::sync::LazyLock;

use crate::model::ToolSpec;

/// Words that carry no intent; ignored when scoring and trimmed from free text.
const STOPWORDS: &[&str] = &[
    "a", "an", "the", "to", "of", "by", "for", "in", "on", "at", "with", "and", "or", "my", "me", "i", "it", "is",
    "be", "this", "that", "please", "can", "you", "could", "would", "do", "some", "from", "into", "its", "your", "not",
    "saying", "called", "named",
];

/// Small, hand-picked groups of words treated as meaning the same thing. Kept short on
/// purpose: the offline model should be predictable, not clever.
const SYNONYMS: &[&[&str]] = &[
    &["add", "increment", "increase", "plus", "more", "raise", "bump"],
    &["subtract", "decrement", "decrease", "minus", "less", "lower", "reduce"],
    &["remove", "delete", "erase", "drop", "discard"],
    &["reset", "clear", "zero", "restart"],
    &["roll", "dice", "die", "throw"],
    &["set", "change", "update", "put"],
    &["create", "new", "make", "write"],
    &["show", "get", "list", "read", "view", "display"],
    &["note", "memo", "reminder"],
    &["toggle", "switch", "flip"],
];

/// One piece of a message.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Token {
    /// `@Name`, without the `@`.
    Mention(String),
    /// The inside of "...", “...” or '...'.
    Quoted(String),
    /// A lowercase word.
    Word(String),
    /// A number as written.
    Number(f64),
}

/// A message split into tokens, remembering which whitespace-separated chunk each came
/// from so free text can be rebuilt with its original spelling.
#[derive(Debug, Default)]
pub(super) struct Parsed {
    /// Tokens with their chunk index, in message order (so chunk indexes never go down).
    pub tokens: Vec<(Token, usize)>,
    /// The chunks as written (a quoted string is one chunk).
    pub chunks: Vec<String>,
}

impl Parsed {
    /// Stems of the message's words that are not stopwords.
    pub fn stems(&self) -> Vec<String> {
        let mut seen = HashSet::new();
        self.tokens
            .iter()
            .filter_map(|(t, _)| match t {
                Token::Word(w) if !is_stopword(w) => Some(stem(w)),
                _ => None,
            })
            .filter(|s| seen.insert(s.clone()))
            .collect()
    }

    /// The `@` mentions, in order.
    pub fn mentions(&self) -> Vec<&str> {
        self.tokens
            .iter()
            .filter_map(|(t, _)| match t {
                Token::Mention(m) => Some(m.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// Splits `text` into mentions, quoted strings, words and numbers.
pub(super) fn parse(text: &str) -> Parsed {
    let chars: Vec<char> = text.chars().collect();
    let closers = Closers::new(&chars);
    let mut parsed = Parsed::default();
    let mut chunk = String::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let at_chunk_start = chunk.is_empty();
        let index = parsed.chunks.len();
        if c.is_whitespace() {
            if !chunk.is_empty() {
                parsed.chunks.push(std::mem::take(&mut chunk));
            }
            i += 1;
        } else if c == '@' && at_chunk_start {
            let end = (i + 1..chars.len()).find(|&j| chars[j].is_whitespace()).unwrap_or(chars.len());
            let name: String = chars[i + 1..end].iter().collect();
            chunk.extend(&chars[i..end]);
            parsed.tokens.push((Token::Mention(name), index));
            i = end;
        } else if let Some(end) = closers.closing(&chars, i, at_chunk_start) {
            chunk.extend(&chars[i..=end]);
            parsed.tokens.push((Token::Quoted(chars[i + 1..end].iter().collect()), index));
            i = end + 1;
        } else if c.is_ascii_digit()
            || (c == '-'
                && chars.get(i + 1).is_some_and(char::is_ascii_digit)
                && (i == 0 || !chars[i - 1].is_alphanumeric()))
        {
            let mut end = i + 1;
            while end < chars.len() && chars[end].is_ascii_digit() {
                end += 1;
            }
            if chars.get(end) == Some(&'.') && chars.get(end + 1).is_some_and(char::is_ascii_digit) {
                end += 2;
                while end < chars.len() && chars[end].is_ascii_digit() {
                    end += 1;
                }
            }
            let written: String = chars[i..end].iter().collect();
            if let Ok(n) = written.parse::<f64>() {
                parsed.tokens.push((Token::Number(n), index));
            }
            chunk.push_str(&written);
            i = end;
        } else if c.is_alphabetic() {
            let end = (i..chars.len()).find(|&j| !chars[j].is_alphabetic()).unwrap_or(chars.len());
            let word: String = chars[i..end].iter().collect();
            chunk.push_str(&word);
            parsed.tokens.push((Token::Word(word.to_lowercase()), index));
            i = end;
        } else {
            chunk.push(c);
            i += 1;
        }
    }
    if !chunk.is_empty() {
        parsed.chunks.push(chunk);
    }
    parsed
}

/// For every position of a message, where the next character that can close each kind
/// of quote is. Computed once, in one pass from the end, so finding where a quote closes
/// never scans the rest of the message again: a message full of quotes that never close
/// stays linear.
struct Closers {
    /// The next `"`.
    straight: Vec<usize>,
    /// The next `”` or `"` (what closes a `“`).
    curly: Vec<usize>,
    /// The next `'` that is not followed by a letter or digit, so "don't" closes nothing.
    single: Vec<usize>,
}

impl Closers {
    /// The tables for `chars`; `chars.len()` stands for "none".
    fn new(chars: &[char]) -> Closers {
        let n = chars.len();
        let mut closers = Closers { straight: vec![n; n + 1], curly: vec![n; n + 1], single: vec![n; n + 1] };
        for j in (0..n).rev() {
            let c = chars[j];
            let ends_word = !chars.get(j + 1).is_some_and(|next| next.is_alphanumeric());
            closers.straight[j] = if c == '"' { j } else { closers.straight[j + 1] };
            closers.curly[j] = if c == '”' || c == '"' { j } else { closers.curly[j + 1] };
            closers.single[j] = if c == '\'' && ends_word { j } else { closers.single[j + 1] };
        }
        closers
    }

    /// Where the quote opened at `start` closes, if `chars[start]` opens one. A `'` only
    /// opens at the start of a chunk.
    fn closing(&self, chars: &[char], start: usize, at_chunk_start: bool) -> Option<usize> {
        let next = match chars[start] {
            '"' => &self.straight,
            '“' => &self.curly,
            '\'' if at_chunk_start => &self.single,
            _ => return None,
        };
        Some(next[start + 1]).filter(|&end| end < chars.len())
    }
}

/// The words of a tool's display name, a property name or an option: split on `.`, `_`,
/// `-`, spaces, digits and camelCase, lowercased.
pub(super) fn name_words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        if !c.is_alphabetic() {
            words.extend((!current.is_empty()).then(|| std::mem::take(&mut current)));
            previous_lower = false;
            continue;
        }
        if c.is_uppercase() && previous_lower {
            words.push(std::mem::take(&mut current));
        }
        previous_lower = c.is_lowercase();
        current.extend(c.to_lowercase());
    }
    words.extend((!current.is_empty()).then_some(current));
    words
}

/// Whether `word` (lowercase) is a stopword.
pub(super) fn is_stopword(word: &str) -> bool {
    STOPWORDS.contains(&word)
}

/// A crude stem: drops common English endings so "adding", "added" and "adds" meet "add".
pub(super) fn stem(word: &str) -> String {
    let len = word.chars().count();
    let mut stem = if len > 5 && word.ends_with("ing") {
        word[..word.len() - 3].to_owned()
    } else if len > 4 && word.ends_with("ies") {
        format!("{}y", &word[..word.len() - 3])
    } else if len > 4 && word.ends_with("ed") {
        word[..word.len() - 2].to_owned()
    } else if len > 3 && word.ends_with('s') && !word.ends_with("ss") {
        word[..word.len() - 1].to_owned()
    } else {
        word.to_owned()
    };
    if stem.chars().count() > 3 && stem.ends_with('e') {
        stem.pop();
    }
    stem
}

/// How two stems relate: 2 when equal, 1 when synonyms, 0 otherwise.
pub(super) fn relatedness(a: &str, b: &str) -> u32 {
    if a == b {
        return 2;
    }
    // Stemmed once per process: scoring calls this for every message word against every
    // word of every tool.
    static GROUPS: LazyLock<Vec<Vec<String>>> =
        LazyLock::new(|| SYNONYMS.iter().map(|group| group.iter().map(|w| stem(w)).collect()).collect());
    let synonyms = GROUPS.iter().any(|stems| stems.iter().any(|s| s == a) && stems.iter().any(|s| s == b));
    u32::from(synonyms)
}

/// How well a message's stems match a tool, and which of them matched its name.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Score {
    /// Name matches weigh 4 (3 by synonym), description matches 2 (1 by synonym).
    pub total: u32,
    /// Message stems that matched the tool's name.
    pub name_stems: HashSet<String>,
}

/// Scores `tool` (its display name and description) against the message `stems`.
pub(super) fn score(stems: &[String], tool: &ToolSpec) -> Score {
    let name: Vec<String> = name_words(super::display(tool)).iter().map(|w| stem(w)).collect();
    let description: Vec<String> = parse(&tool.description)
        .tokens
        .into_iter()
        .filter_map(|(t, _)| match t {
            Token::Word(w) if !is_stopword(&w) => Some(stem(&w)),
            _ => None,
        })
        .collect();
    let best = |stem: &str, words: &[String]| words.iter().map(|w| relatedness(stem, w)).max().unwrap_or(0);
    let mut result = Score::default();
    for s in stems {
        let in_name = best(s, &name);
        let in_description = best(s, &description);
        if in_name > 0 {
            result.name_stems.insert(s.clone());
        }
        result.total += [0, 3, 4][in_name as usize] + in_description;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_mentions_quotes_words_and_numbers() {
        let parsed = parse("@Counter, add -5 and 2.5 to \"my list\" don't 'x y'");
        let tokens: Vec<Token> = parsed.tokens.into_iter().map(|(t, _)| t).collect();
        assert_eq!(
            tokens,
            [
                Token::Mention("Counter,".into()),
                Token::Word("add".into()),
                Token::Number(-5.0),
                Token::Word("and".into()),
                Token::Number(2.5),
                Token::Word("to".into()),
                Token::Quoted("my list".into()),
                Token::Word("don".into()),
                Token::Word("t".into()),
                Token::Quoted("x y".into()),
            ]
        );
        assert_eq!(parsed.chunks[6], "\"my list\"");
    }

    #[test]
    fn splits_names_and_stems_words() {
        assert_eq!(name_words("Notes.addNote"), ["notes", "add", "note"]);
        assert_eq!(name_words("Todo list.add_item"), ["todo", "list", "add", "item"]);
        assert_eq!(name_words("Dice.roll2D6"), ["dice", "roll", "d"]);
        assert_eq!(stem("adding"), "add");
        assert_eq!(stem("notes"), stem("note"));
        assert_eq!(stem("decreased"), stem("decrease"));
        assert_eq!(relatedness(&stem("add"), &stem("increment")), 1);
        assert_eq!(relatedness(&stem("rolled"), &stem("roll")), 2);
        assert_eq!(relatedness("add", "roll"), 0);
    }
}
