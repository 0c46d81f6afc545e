//! How deeply values may nest: one limit for values entering the runtime, one for whole
//! documents, so that whatever the runtime accepts it can also load again.
//!
//! Reading JSON text back (storage, the CLI, model replies) goes through parsers with a
//! recursion limit (serde_json's is 128 nested containers). A value is stored inside a
//! document at some path, so it ends up deeper in the stored text than it was on its
//! own. Values from outside (events, pattern arguments, messages, tool inputs) are
//! therefore held to [`MAX_DEPTH`], well below that limit, and every write keeps the
//! whole document within [`MAX_DOC_DEPTH`], which storage is built to load.

use crate::error::{Error, Result};
use crate::value::{Path, Value};

pub use crate::limits::{MAX_DEPTH, MAX_DOC_DEPTH};

/// How much of the path to a too-deep spot an error shows.
const SHOWN_PATH: usize = 120;

/// Checks that a value entering the runtime nests at most [`MAX_DEPTH`] containers.
///
/// Call it where outside data comes in (a builtin does for messages and tool inputs);
/// the runtime checks events and pattern arguments itself.
pub fn check_depth(json: &serde_json::Value) -> Result<()> {
    check_depth_of(json, "the value")
}

/// Like [`check_depth`], with `what` naming the value in the error (e.g. "the event for
/// counter/increment").
pub fn check_depth_of(json: &serde_json::Value, what: impl std::fmt::Display) -> Result<()> {
    match too_deep(json, MAX_DEPTH) {
        None => Ok(()),
        Some(at) => Err(Error::TooDeep { what: what.to_string(), at: shown(&at), limit: MAX_DEPTH }),
    }
}

/// Checks that writing `value` at `path` keeps its document within [`MAX_DOC_DEPTH`].
#[inline]
pub(crate) fn check_write(value: &Value, path: &Path, what: impl std::fmt::Display) -> Result<()> {
    if !value.is_container() && path.segments().len() <= MAX_DOC_DEPTH {
        return Ok(()); // most writes: a number or a text, which nests nothing
    }
    check_nesting(value, path, what)
}

/// [`check_write`] of a container, or at a path too deep already.
fn check_nesting(value: &Value, path: &Path, what: impl std::fmt::Display) -> Result<()> {
    let too_deep_at = |at: &Path| Error::TooDeep { what: what.to_string(), at: shown(at), limit: MAX_DOC_DEPTH };
    if path.segments().len() > MAX_DOC_DEPTH {
        // The containers on the way are too many already, whatever is written.
        return Err(too_deep_at(path));
    }
    if !value.is_container() {
        return Ok(()); // most writes: a number or a text, which nests nothing
    }
    let room = MAX_DOC_DEPTH.saturating_sub(path.segments().len());
    match too_deep(value, room) {
        None => Ok(()),
        Some(at) => Err(too_deep_at(&path.join(at.segments()))),
    }
}

/// A JSON tree whose nesting can be measured.
trait Tree {
    fn is_container(&self) -> bool;
    fn children(&self) -> impl Iterator<Item = (Step<'_>, &Self)>;
}

/// One step into a container: an object key or an array index.
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

impl Step<'_> {
    fn segment(&self) -> String {
        match self {
            Step::Key(key) => (*key).to_string(),
            Step::Index(i) => i.to_string(),
        }
    }
}

impl Tree for serde_json::Value {
    fn is_container(&self) -> bool {
        self.is_object() || self.is_array()
    }

    fn children(&self) -> impl Iterator<Item = (Step<'_>, &Self)> {
        let fields = self.as_object().into_iter().flatten().map(|(k, v)| (Step::Key(k), v));
        let items = self.as_array().into_iter().flatten().enumerate().map(|(i, v)| (Step::Index(i), v));
        fields.chain(items)
    }
}

impl Tree for Value {
    fn is_container(&self) -> bool {
        matches!(self, Value::Object(_) | Value::Array(_))
    }

    fn children(&self) -> impl Iterator<Item = (Step<'_>, &Self)> {
        let fields = self.as_object().into_iter().flatten().map(|(k, v)| (Step::Key(k), v));
        let items = match self {
            Value::Array(items) => Some(&***items),
            _ => None,
        };
        fields.chain(items.into_iter().flatten().enumerate().map(|(i, v)| (Step::Index(i), v)))
    }
}

/// The path to the first container nested deeper than `limit`, if there is one. The
/// recursion stops there, so it never goes deeper than `limit + 1` frames.
fn too_deep<T: Tree>(value: &T, limit: usize) -> Option<Path> {
    /// The path from `value` to the spot, innermost step first; nothing is allocated
    /// unless the limit is crossed.
    fn walk<T: Tree>(value: &T, room: usize) -> Option<Vec<String>> {
        if !value.is_container() {
            return None;
        }
        if room == 0 {
            return Some(Vec::new());
        }
        value.children().find_map(|(step, child)| {
            let mut trail = walk(child, room - 1)?;
            trail.push(step.segment());
            Some(trail)
        })
    }
    walk(value, limit).map(|trail| Path::new(trail.into_iter().rev()))
}

/// A path for an error message, cut short: a path this deep is long, and its keys are
/// outside data.
fn shown(path: &Path) -> String {
    let text = path.to_string();
    match text.char_indices().nth(SHOWN_PATH) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// `levels` arrays nested in each other around a number.
    fn nested(levels: usize) -> serde_json::Value {
        (0..levels).fold(json!(1), |inner, _| json!([inner]))
    }

    #[test]
    fn the_limit_counts_containers() {
        assert!(check_depth(&json!(5)).is_ok());
        assert!(check_depth(&nested(MAX_DEPTH)).is_ok());
        let err = check_depth(&nested(MAX_DEPTH + 1)).expect_err("one level too deep");
        assert!(matches!(&err, Error::TooDeep { limit, .. } if *limit == MAX_DEPTH), "{err}");
        assert!(err.to_string().contains("more than 64 levels"), "{err}");
    }

    #[test]
    fn the_error_names_where_the_value_is_too_deep() {
        let mut value = nested(MAX_DEPTH);
        value = json!({"ok": 1, "deep": {"x": value}});
        let err = check_depth_of(&value, "the event for c/increment").expect_err("too deep");
        let text = err.to_string();
        assert!(text.starts_with("the event for c/increment: nested more than 64 levels"), "{text}");
        assert!(text.contains("(at /deep/x/0/0/0"), "{text}");
    }

    #[test]
    fn writes_count_the_path_they_are_written_at() {
        let value = Value::from(nested(10));
        assert!(check_write(&value, &Path::new(["a"; MAX_DOC_DEPTH - 10]), "w").is_ok());
        let err = check_write(&value, &Path::new(["a"; MAX_DOC_DEPTH - 9]), "w").expect_err("document too deep");
        assert!(matches!(err, Error::TooDeep { limit: MAX_DOC_DEPTH, .. }));
        let scalar = Value::from(1);
        assert!(check_write(&scalar, &Path::new(["a"; MAX_DOC_DEPTH]), "w").is_ok());
        let err = check_write(&scalar, &Path::new(["a"; MAX_DOC_DEPTH + 1]), "w").expect_err("a number, too deep");
        assert!(matches!(err, Error::TooDeep { limit: MAX_DOC_DEPTH, .. }));
    }
}
