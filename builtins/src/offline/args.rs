//! Filling a tool's arguments from the words of a message.
//!
//! Per property of the (object) input schema, in this order: `const` values; enums by
//! matching the words of an option; booleans from yes/no/true/false/on/off; integers and
//! numbers from the numbers in the message (a number right next to a word of the property's
//! name goes to that property, the rest go in schema order); strings from quoted text
//! (same rule); and, for a schema with exactly one required string property, the rest of
//! the message once mentions and the words that picked the tool are removed. Unfilled
//! properties take their schema `default`; unfilled optional ones are left out.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use super::words::{is_stopword, name_words, relatedness, stem, Parsed, Token};

/// What a property holds, as far as filling it is concerned.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Integer,
    Number,
    Text,
    Boolean,
    Choice(Vec<Value>),
    Fixed(Value),
    Other,
}

impl Kind {
    fn label(&self) -> &'static str {
        match self {
            Kind::Integer => "a whole number",
            Kind::Number => "a number",
            Kind::Text => "some text",
            Kind::Boolean => "yes or no",
            Kind::Choice(_) => "one of its options",
            Kind::Fixed(_) | Kind::Other => "a value",
        }
    }
}

/// Arguments for `schema` from the `parsed` message, or the required properties that could
/// not be filled (as "`name` (what it takes)"). `name_stems` are the message words that
/// matched the tool's name; they are not part of free text.
pub(super) fn fill(
    schema: &Value,
    parsed: &Parsed,
    name_stems: &HashSet<String>,
) -> Result<Map<String, Value>, Vec<String>> {
    let empty = Map::new();
    let properties = schema.get("properties").and_then(Value::as_object).unwrap_or(&empty);
    let required: HashSet<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut props: Vec<(&str, Kind, Vec<String>)> = properties
        .iter()
        .map(|(name, s)| (name.as_str(), kind(s, 0), name_words(name).iter().map(|w| stem(w)).collect()))
        .collect();
    // Required properties get the values first: "add a note \"call mom\"" fills the
    // required `title`, not the optional `body` that sorts before it.
    props.sort_by_key(|(name, _, _)| !required.contains(name));

    let mut filler = Filler { parsed, used: HashSet::new(), args: Map::new() };
    for (name, kind, _) in &props {
        match kind {
            Kind::Fixed(value) => filler.set(name, value.clone(), None),
            Kind::Choice(options) => filler.choose(name, options),
            _ => {}
        }
    }
    let booleans: Vec<&str> = props.iter().filter(|p| p.1 == Kind::Boolean).map(|p| p.0).collect();
    for name in booleans {
        let found = filler.unused(|t| match t {
            Token::Word(w) if ["yes", "true", "on"].contains(&w.as_str()) => Some(json!(true)),
            Token::Word(w) if ["no", "false", "off"].contains(&w.as_str()) => Some(json!(false)),
            _ => None,
        });
        if let Some((index, value)) = found.into_iter().next() {
            filler.set(name, value, Some(index));
        }
    }
    let numeric: Vec<_> = props.iter().filter(|p| matches!(p.1, Kind::Integer | Kind::Number)).collect();
    filler.distribute(&numeric, |t, kind| match t {
        Token::Number(n) => number_value(*n, *kind == Kind::Integer),
        _ => None,
    });
    let texts: Vec<_> = props.iter().filter(|p| p.1 == Kind::Text).collect();
    filler.distribute(&texts, |t, _| match t {
        Token::Quoted(q) => Some(json!(q)),
        _ => None,
    });
    let required_texts: Vec<&str> = texts.iter().map(|p| p.0).filter(|name| required.contains(name)).collect();
    if let [only] = required_texts[..] {
        if !filler.args.contains_key(only) {
            if let Some(text) = free_text(parsed, &filler.used, name_stems) {
                filler.set(only, json!(text), None);
            }
        }
    }

    let mut args = filler.args;
    let mut missing = Vec::new();
    for (name, kind, _) in &props {
        if args.contains_key(*name) {
            continue;
        }
        if let Some(default) = properties.get(*name).and_then(|s| s.get("default")) {
            args.insert((*name).to_owned(), default.clone());
        } else if required.contains(name) {
            missing.push(format!("`{name}` ({})", kind.label()));
        }
    }
    if missing.is_empty() {
        Ok(args)
    } else {
        Err(missing)
    }
}

/// Fills arguments, remembering which tokens it used.
struct Filler<'a> {
    parsed: &'a Parsed,
    used: HashSet<usize>,
    args: Map<String, Value>,
}

impl Filler<'_> {
    fn set(&mut self, name: &str, value: Value, token: Option<usize>) {
        self.used.extend(token);
        self.args.insert(name.to_owned(), value);
    }

    /// Unused tokens that `read` turns into a value, with their index.
    fn unused<F: Fn(&Token) -> Option<Value>>(&self, read: F) -> Vec<(usize, Value)> {
        let tokens = self.parsed.tokens.iter().enumerate();
        tokens.filter(|(i, _)| !self.used.contains(i)).filter_map(|(i, (t, _))| read(t).map(|v| (i, v))).collect()
    }

    /// Gives each property a value: first a value written next to a word of the property's
    /// name, then the remaining values in order.
    fn distribute<F>(&mut self, props: &[&(&str, Kind, Vec<String>)], read: F)
    where
        F: Fn(&Token, &Kind) -> Option<Value>,
    {
        let mut open: Vec<_> = props.iter().filter(|p| !self.args.contains_key(p.0)).collect();
        open.retain(|(name, kind, words)| {
            let near = self.unused(|t| read(t, kind)).into_iter().find(|(i, _)| self.next_to(*i, words));
            near.map(|(i, value)| self.set(name, value, Some(i))).is_none()
        });
        for (name, kind, _) in open {
            if let Some((i, value)) = self.unused(|t| read(t, kind)).into_iter().next() {
                self.set(name, value, Some(i));
            }
        }
    }

    /// Whether the token at `index` is right next to one of `words`.
    fn next_to(&self, index: usize, words: &[String]) -> bool {
        let neighbours = [index.checked_sub(1), Some(index + 1)];
        neighbours.into_iter().flatten().any(|n| match self.parsed.tokens.get(n) {
            Some((Token::Word(w), _)) => words.iter().any(|p| relatedness(&stem(w), p) == 2),
            _ => false,
        })
    }

    /// Picks the enum option whose words all appear in the message (the longest such).
    fn choose(&mut self, name: &str, options: &[Value]) {
        let words: Vec<(usize, String)> = self
            .parsed
            .tokens
            .iter()
            .enumerate()
            .filter_map(|(i, (t, _))| match t {
                Token::Word(w) => Some((i, stem(w))),
                _ => None,
            })
            .collect();
        let mut best: Option<(usize, Value, Vec<usize>)> = None;
        for option in options {
            let Some(text) = option.as_str() else {
                continue;
            };
            let wanted: Vec<String> = name_words(text).iter().map(|w| stem(w)).collect();
            let hits: Vec<usize> =
                wanted.iter().filter_map(|w| words.iter().find(|(_, s)| s == w).map(|(i, _)| *i)).collect();
            let better = !matches!(&best, Some((n, _, _)) if wanted.len() <= *n);
            if !wanted.is_empty() && hits.len() == wanted.len() && better {
                best = Some((wanted.len(), option.clone(), hits));
            }
        }
        if let Some((_, value, hits)) = best {
            self.used.extend(hits);
            self.args.insert(name.to_owned(), value);
        }
    }
}

/// What a property schema holds; looks through `anyOf`/`oneOf` for the first non-null kind.
fn kind(schema: &Value, depth: usize) -> Kind {
    if let Some(value) = schema.get("const") {
        return Kind::Fixed(value.clone());
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        return Kind::Choice(options.clone());
    }
    let type_name = match schema.get("type") {
        Some(Value::String(t)) => Some(t.as_str()),
        Some(Value::Array(types)) => types.iter().filter_map(Value::as_str).find(|t| *t != "null"),
        _ => None,
    };
    match type_name {
        Some("integer") => Kind::Integer,
        Some("number") => Kind::Number,
        Some("string") => Kind::Text,
        Some("boolean") => Kind::Boolean,
        Some(_) => Kind::Other,
        None if depth < 4 => ["anyOf", "oneOf"]
            .iter()
            .filter_map(|k| schema.get(*k).and_then(Value::as_array))
            .flatten()
            .map(|variant| kind(variant, depth + 1))
            .find(|k| *k != Kind::Other)
            .unwrap_or(Kind::Other),
        None => Kind::Other,
    }
}

/// A number as JSON: an integer when it is whole, `None` for a fraction where an integer
/// is wanted.
fn number_value(n: f64, integer: bool) -> Option<Value> {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        Some(json!(n as i64))
    } else if integer {
        None
    } else {
        serde_json::Number::from_f64(n).map(Value::Number)
    }
}

/// Words that lead from a thing to the place it goes ("milk *to my* shopping list").
const DESTINATION: &[&str] = &["to", "on", "onto", "into", "in", "from", "off", "for"];
/// Words between such a preposition and the place.
const DETERMINERS: &[&str] = &["my", "the", "your", "our", "a", "an", "this", "that"];
/// Nouns that name the place with the charm's name ("shopping *list*").
const CONTAINERS: &[&str] = &["list", "lists", "board", "notes", "page"];

/// Drops a trailing "to my" (a preposition and determiners) from what is kept: it led to
/// the charm's name, which says where the text goes, not what it is.
fn drop_destination(kept: &mut Vec<(bool, &str)>) {
    let word = |text: &str| text.to_lowercase().trim_matches(|c: char| !c.is_alphanumeric()).to_string();
    let mut end = kept.len();
    while end > 0 && DETERMINERS.contains(&word(kept[end - 1].1).as_str()) {
        end -= 1;
    }
    if end > 0 && DESTINATION.contains(&word(kept[end - 1].1).as_str()) {
        kept.truncate(end - 1);
    }
}

/// The message without mentions, used tokens and the words that picked the tool, trimmed
/// of stopwords at both ends, and without the phrase that names where it goes ("to my
/// shopping list"); `None` when nothing is left.
fn free_text(parsed: &Parsed, used: &HashSet<usize>, name_stems: &HashSet<String>) -> Option<String> {
    // Tokens are in chunk order: each chunk takes its own from the front, so every token
    // is looked at once.
    let mut tokens = parsed.tokens.iter().enumerate().peekable();
    let mut kept: Vec<(bool, &str)> = Vec::new();
    let mut after_name = false;
    for (c, text) in parsed.chunks.iter().enumerate() {
        let mut any = false;
        let mut dropped = false;
        let mut all_name_words = true;
        let mut filler = true;
        while let Some((i, (token, _))) = tokens.next_if(|(_, (_, chunk))| *chunk == c) {
            any = true;
            dropped |= used.contains(&i) || matches!(token, Token::Mention(_));
            all_name_words &= matches!(token, Token::Word(w) if name_stems.contains(&stem(w)));
            filler &= matches!(token, Token::Word(w) if is_stopword(w));
        }
        let name_words = any && all_name_words;
        if name_words {
            drop_destination(&mut kept);
            after_name = true;
            continue;
        }
        // "… to my shopping list": the noun after the charm's name is part of the place.
        let container =
            after_name && CONTAINERS.contains(&text.to_lowercase().trim_matches(|c: char| !c.is_alphanumeric()));
        after_name = false;
        if !(dropped || container) {
            kept.push((filler, text.as_str()));
        }
    }
    let start = kept.iter().position(|(filler, _)| !filler)?;
    let end = kept.iter().rposition(|(filler, _)| !filler)?;
    Some(kept[start..=end].iter().map(|(_, text)| *text).collect::<Vec<_>>().join(" "))
}

#[cfg(test)]
mod tests {
    use super::super::words::parse;
    use super::*;

    fn fill_from(schema: Value, text: &str, name_stems: &[&str]) -> Result<Value, Vec<String>> {
        let stems = name_stems.iter().map(|s| stem(s)).collect();
        fill(&schema, &parse(text), &stems).map(Value::Object)
    }

    #[test]
    fn numbers_go_next_to_their_names_then_in_order() {
        let schema = json!({ "type": "object", "properties": {
            "count": { "type": "integer" }, "sides": { "type": "integer" } } });
        assert_eq!(fill_from(schema.clone(), "roll 3 dice with 6 sides", &[]), Ok(json!({ "count": 3, "sides": 6 })));
        assert_eq!(fill_from(schema.clone(), "sides 20, 2 of them", &[]), Ok(json!({ "count": 2, "sides": 20 })));
        assert_eq!(fill_from(schema, "roll 1.5", &[]), Ok(json!({})));
    }

    #[test]
    fn enums_booleans_defaults_and_consts() {
        let schema = json!({ "type": "object", "properties": {
            "mode": { "enum": ["fast", "very slow"] },
            "loud": { "type": ["boolean", "null"] },
            "step": { "type": "integer", "default": 1 },
            "kind": { "const": "x" },
            "extra": { "type": "string" }
        }});
        assert_eq!(
            fill_from(schema, "go very slow, loud: yes", &[]),
            Ok(json!({ "mode": "very slow", "loud": true, "step": 1, "kind": "x" }))
        );
    }

    #[test]
    fn a_single_required_string_takes_the_rest_of_the_message() {
        let schema = json!({ "type": "object", "properties": { "text": { "type": "string" } }, "required": ["text"] });
        let stems = ["add", "note"];
        assert_eq!(fill_from(schema.clone(), "@Notes add a note buy milk", &stems), Ok(json!({ "text": "buy milk" })));
        assert_eq!(fill_from(schema.clone(), "add a note 'buy eggs' now", &stems), Ok(json!({ "text": "buy eggs" })));
        let stems = ["add", "shopping"];
        assert_eq!(fill_from(schema.clone(), "add milk to my shopping list", &stems), Ok(json!({ "text": "milk" })));
        assert_eq!(
            fill_from(schema.clone(), "add fresh bread on the shopping list please", &stems),
            Ok(json!({ "text": "fresh bread" }))
        );
        let stems = ["add", "note"];
        let missing = fill_from(schema, "@Notes add a note", &stems);
        assert_eq!(missing, Err(vec!["`text` (some text)".to_owned()]));
    }

    #[test]
    fn optional_unfillable_properties_are_left_out() {
        let schema = json!({ "type": "object", "properties": {
            "tags": { "type": "array" }, "n": { "anyOf": [{ "type": "null" }, { "type": "number" }] } } });
        assert_eq!(fill_from(schema, "set it to -2.5", &[]), Ok(json!({ "n": -2.5 })));
    }
}
