//! @-mentions: which charms a chat message names.

/// An `@word` that names no charm.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown charm @{word}; the charms are: {known}")]
pub struct UnknownMention {
    /// The word after `@`.
    pub word: String,
    /// The names that can be mentioned, comma-separated.
    pub known: String,
}

/// The charm names mentioned with `@` in `text`, in order of first mention, matched
/// case-insensitively; the longest name wins when names share a prefix (`@Todo list`
/// prefers "Todo list" over "Todo"). An `@` inside a word (`me@example.com`) is not a
/// mention; an `@word` that names no charm is an error.
///
/// ```
/// use trellis_patterns::chatbot::mentions;
///
/// let names = ["Counter", "Todo", "Todo list"];
/// assert_eq!(mentions("@counter add 5 to @Todo list", &names)?, ["Counter", "Todo list"]);
/// assert!(mentions("@Nope", &names).is_err());
/// # Ok::<(), trellis_patterns::chatbot::UnknownMention>(())
/// ```
pub fn mentions(text: &str, names: &[&str]) -> Result<Vec<String>, UnknownMention> {
    let mut sorted: Vec<&str> = names.to_vec();
    sorted.sort_by_key(|n| std::cmp::Reverse(n.len()));
    let mut found: Vec<String> = Vec::new();
    for (at, _) in text.match_indices('@') {
        if text[..at].ends_with(|c: char| c.is_alphanumeric()) {
            continue;
        }
        let rest = &text[at + 1..];
        let hit = sorted.iter().find(|name| {
            rest.len() >= name.len()
                && rest.is_char_boundary(name.len())
                && rest[..name.len()].eq_ignore_ascii_case(name)
                && !rest[name.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
        });
        match hit {
            Some(name) => {
                if !found.iter().any(|f| f == name) {
                    found.push(name.to_string());
                }
            }
            None => {
                let word: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '-').collect();
                if !word.is_empty() {
                    return Err(UnknownMention { word, known: names.join(", ") });
                }
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::mentions;

    #[test]
    fn mentions_match_names_case_insensitively_and_prefer_longer_names() {
        let names = ["Counter", "Todo", "Todo list"];
        assert_eq!(mentions("@counter add 5", &names).unwrap(), ["Counter"]);
        assert_eq!(mentions("put it on @Todo list now", &names).unwrap(), ["Todo list"]);
        assert_eq!(mentions("@Todo and @Counter and @Todo", &names).unwrap(), ["Todo", "Counter"]);
        assert!(mentions("mail me at a@ b", &names).unwrap().is_empty());
        assert!(mentions("write to me@example.com", &names).unwrap().is_empty());
        let err = mentions("@Nope do it", &names).unwrap_err().to_string();
        assert!(err.contains("@Nope") && err.contains("Counter"), "{err}");
        assert!(mentions("@Counters", &names).is_err(), "a longer word is not the name");
    }
}
