//! Stored documents back from JSON text, however deeply they nest.
//!
//! serde_json refuses input nested more than 128 containers deep, but a space may hold
//! such a document: writes allow up to [`MAX_DOC_DEPTH`](crate::limits::MAX_DOC_DEPTH),
//! and spaces written before the depth limits existed may hold anything a value entering
//! then could produce. A space that holds one must still open, so a document the normal
//! parse refuses for its depth is parsed again without serde_json's limit, on a thread
//! whose stack is large enough for the depth the text was measured to have.

use serde::Deserialize;

use super::StorageError;
use crate::limits::MAX_DOC_DEPTH;
use crate::value::Value;

/// serde_json's recursion limit: text nested less deeply failed for another reason.
const SERDE_JSON_LIMIT: usize = 128;

/// The stack of the thread that parses a deep document. Parsing and converting use a
/// few hundred bytes to a few kilobytes per level (more in debug builds); this leaves a
/// wide margin at [`MAX_DOC_DEPTH`]. It is reserved address space, touched only as used.
const DEEP_STACK: usize = 256 << 20;

/// Parses the JSON text of stored document `id` as every backend must: documents nested
/// past serde_json's limit still load (up to [`MAX_DOC_DEPTH`]), and text that is not JSON
/// is [`StorageError::Corrupt`], one too deep [`StorageError::TooDeep`].
pub fn parse_document(id: &str, text: &str) -> Result<Value, StorageError> {
    let error = match serde_json::from_str(text) {
        Ok(value) => return Ok(value),
        Err(error) => error,
    };
    let depth = nesting(text);
    if depth < SERDE_JSON_LIMIT {
        return Err(StorageError::Corrupt { id: id.to_owned(), source: error });
    }
    if depth > MAX_DOC_DEPTH {
        return Err(StorageError::TooDeep { id: id.to_owned(), depth, limit: MAX_DOC_DEPTH });
    }
    let io =
        |source| StorageError::Io { path: id.to_owned(), action: "start a thread to read a deep document", source };
    std::thread::scope(|scope| {
        let parser = std::thread::Builder::new()
            .name("trellis-deep-json".to_owned())
            .stack_size(DEEP_STACK)
            // The intermediate serde_json value is dropped on this thread too: dropping
            // recurses as deep as parsing.
            .spawn_scoped(scope, || parse_unbounded(text))
            .map_err(io)?;
        match parser.join() {
            Ok(parsed) => parsed.map_err(|source| StorageError::Corrupt { id: id.to_owned(), source }),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

fn parse_unbounded(text: &str) -> Result<Value, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(text);
    deserializer.disable_recursion_limit();
    let json = serde_json::Value::deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(Value::from(json))
}

/// The deepest nesting of arrays and objects in JSON text (brackets inside strings do
/// not count). Text that is not JSON gets some number; the parse then reports it.
fn nesting(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for byte in text.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrays(levels: usize) -> String {
        format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn nesting_skips_brackets_in_strings() {
        assert_eq!(nesting(r#"{"a": ["[[[", {"b": "\"]]{"}]}"#), 3);
        assert_eq!(nesting("1"), 0);
    }

    #[test]
    fn deeper_than_serde_json_allows_still_parses() {
        assert!(serde_json::from_str::<serde_json::Value>(&arrays(200)).is_err(), "past serde_json's own limit");
        let value = parse_document("d", &arrays(200)).expect("parsed without the recursion limit");
        assert_eq!(value.to_string(), arrays(200));
    }

    #[test]
    fn beyond_the_document_limit_is_refused_by_name() {
        let err = parse_document("d", &arrays(MAX_DOC_DEPTH + 1)).expect_err("too deep to load");
        assert!(matches!(err, StorageError::TooDeep { ref id, .. } if id == "d"), "{err}");
        let err = parse_document("d", "{not json").expect_err("broken");
        assert!(matches!(err, StorageError::Corrupt { .. }), "{err}");
        let err = parse_document("d", &format!("{}x", "[".repeat(300))).expect_err("deep and broken");
        assert!(matches!(err, StorageError::Corrupt { .. }), "{err}");
    }
}
