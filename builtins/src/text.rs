//! Text for messages and logs: cutting long text, naming JSON types, and holding back
//! a warning that repeats (text from outside, such as a server's junk lines, must not
//! flood the user's terminal).

use std::time::{Duration, Instant};

/// The first `max` characters of `text`, with `…` when cut.
pub fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// Text from outside (a name a client sent, a line a server wrote) as a message or log
/// shows it: its first [`ECHOED`] characters and, when cut, how long it was.
pub fn echo(text: &str) -> String {
    echo_bytes(text.as_bytes())
}

/// [`echo`] of bytes that may not be UTF-8 (a line a server wrote); only their start is
/// decoded, however long they are.
pub fn echo_bytes(bytes: &[u8]) -> String {
    // A character is at most 4 bytes: this holds the first ECHOED characters, and more.
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(4 * ECHOED + 4)]);
    match head.char_indices().nth(ECHOED) {
        Some((cut, _)) => format!("{}… ({} bytes in all)", &head[..cut], bytes.len()),
        None => head.into_owned(),
    }
}

/// How many characters of outside text [`echo`] shows.
pub const ECHOED: usize = 200;

/// Lets a warning through at most [`SHOWN_PER_WINDOW`] times per [`WINDOW`], counting
/// those it holds back; one static per kind of warning.
///
/// ```
/// use trellis_builtins::text::Throttle;
/// static JUNK: Throttle = Throttle::new();
/// if let Some(held) = JUNK.admit() {
///     eprintln!("warning: a junk line{}", Throttle::held_back(held));
/// }
/// ```
pub struct Throttle(parking_lot::Mutex<Window>);

/// How many warnings of one kind are shown per [`WINDOW`].
pub const SHOWN_PER_WINDOW: u32 = 10;
/// The window of [`Throttle`].
pub const WINDOW: Duration = Duration::from_secs(60);

struct Window {
    start: Option<Instant>,
    shown: u32,
    held: u64,
}

impl Throttle {
    /// A throttle that has let nothing through yet.
    pub const fn new() -> Self {
        Throttle(parking_lot::const_mutex(Window { start: None, shown: 0, held: 0 }))
    }

    /// Whether to show one more warning of this kind now: `Some(n)` with how many were
    /// held back since the last one shown, or `None` to hold this one back.
    pub fn admit(&self) -> Option<u64> {
        let mut window = self.0.lock();
        let now = Instant::now();
        if window.start.is_none_or(|start| now.duration_since(start) >= WINDOW) {
            let held = std::mem::take(&mut window.held);
            (window.start, window.shown) = (Some(now), 1);
            return Some(held);
        }
        if window.shown < SHOWN_PER_WINDOW {
            window.shown += 1;
            return Some(0);
        }
        window.held += 1;
        None
    }

    /// What to add to a warning shown after `held` were held back: nothing, or how many.
    pub fn held_back(held: u64) -> String {
        match held {
            0 => String::new(),
            n => format!(" ({n} more like it were not shown)"),
        }
    }
}

impl Default for Throttle {
    fn default() -> Self {
        Self::new()
    }
}

/// The JSON type of a value, for messages (`found an object`).
pub(crate) fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_text_is_echoed_short_and_a_repeated_warning_is_held_back() {
        let long = "é".repeat(1000);
        let echoed = echo(&long);
        assert!(echoed.starts_with(&"é".repeat(ECHOED)) && echoed.ends_with("… (2000 bytes in all)"), "{echoed}");
        assert_eq!(echo("short"), "short");
        let junk = [b'x'; 1 << 20];
        assert!(echo_bytes(&junk).ends_with("… (1048576 bytes in all)"));

        let throttle = Throttle::new();
        let shown = (0..1000).filter(|_| throttle.admit().is_some()).count();
        assert_eq!(shown, SHOWN_PER_WINDOW as usize, "ten a minute");
        // A new window: the first through says how many were held back.
        throttle.0.lock().start = Instant::now().checked_sub(WINDOW);
        assert_eq!(throttle.admit(), Some(990));
        assert_eq!(Throttle::held_back(990), " (990 more like it were not shown)");
    }

    #[test]
    fn truncates_on_character_boundaries() {
        assert_eq!(truncate("héllo", 2), "hé…");
        assert_eq!(truncate("héllo", 5), "héllo");
        assert_eq!(json_kind(&serde_json::json!([])), "an array");
    }
}
