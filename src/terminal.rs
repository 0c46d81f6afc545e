//! Making text safe for a terminal: the one place that decides how.
//!
//! Every byte the CLI writes passes [`safe`] (through [`super::output::emit`] and
//! [`write_text`]) or, for JSON, [`safe_json`], so text from a model, a tool or a stored
//! charm cannot clear the screen, move the cursor or overwrite a line. Names and one-line
//! summaries also pass [`safe_line`], so they cannot start a line of their own.

use std::borrow::Cow;
use std::io::Write;

/// `text` as it may reach a terminal: every control character (C0, DEL, C1) except
/// newline and tab is shown as a Rust escape (`\u{1b}`, `\r`). An escape sequence loses
/// its ESC and so prints as plain characters. So are the bidirectional controls
/// ([`reorders`]), which would show a line's characters in another order than written.
pub fn safe(text: &str) -> Cow<'_, str> {
    escape(text, |c| (c.is_control() && c != '\n' && c != '\t') || reorders(c), |c, out| out.extend(c.escape_default()))
}

/// Like [`safe`], for text that must stay on its line (a name, a one-line summary):
/// newlines and tabs are escaped too, and so are the characters that show as nothing
/// ([`invisible`]), so that `h.ok\u{200b}` cannot pass for `h.ok`.
pub fn safe_line(text: &str) -> Cow<'_, str> {
    escape(text, |c| c.is_control() || reorders(c) || invisible(c), |c, out| out.extend(c.escape_default()))
}

/// Text of several lines (a tool's description) kept as lines under `indent`: each line is
/// made [`safe_line`] and every line after the first starts with `indent`.
pub fn indented(text: &str, indent: &str) -> String {
    let lines: Vec<Cow<'_, str>> = text.lines().map(|line| safe_line(line.trim_end())).collect();
    lines.join(&format!("\n{indent}"))
}

/// Serialised JSON as it may reach a terminal, still valid JSON: serde escapes C0 inside
/// strings but leaves DEL and C1 raw, so those become `\u007f`, `\u009b`. (Outside
/// strings JSON only has spaces and, pretty-printed, newlines.)
pub fn safe_json(json: &str) -> Cow<'_, str> {
    escape(
        json,
        |c| (c.is_control() && c != '\n') || reorders(c),
        |c, out| out.push_str(&format!("\\u{:04x}", u32::from(c))),
    )
}

/// Writes `text` (made [`safe`]) to `out`, without a newline: for text that streams.
pub fn write_text(out: &mut impl Write, text: &str) -> std::io::Result<()> {
    out.write_all(safe(text).as_bytes())
}

/// Standard error for the log: each write is made [`safe`] first, so a log line quoting
/// what an MCP server or a model said cannot drive the terminal.
pub struct SafeStderr;

impl Write for SafeStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The log formats each event whole before writing it, so a write holds whole
        // characters. A closed standard error (a parent that stopped reading) drops the
        // line: failing here would make the log report the failure on that same closed
        // stream, which panics, in whatever task was logging.
        let _ = std::io::stderr().lock().write_all(safe(&String::from_utf8_lossy(buf)).as_bytes());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// Whether `c` is a bidirectional formatting character: an embedding, override or
/// isolate (U+202A-U+202E, U+2066-U+2069) or a direction mark (U+200E, U+200F, U+061C).
/// A name holding one can show as another name ("Trojan Source").
fn reorders(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
}

/// Whether `c` shows as nothing although it is there: a zero-width space (U+200B), word
/// joiner (U+2060), zero-width no-break space (U+FEFF), soft hyphen (U+00AD) or Mongolian
/// vowel separator (U+180E). The joiners that shape emoji and scripts (U+200C, U+200D) are
/// not among them.
fn invisible(c: char) -> bool {
    matches!(c, '\u{200b}' | '\u{2060}' | '\u{feff}' | '\u{00ad}' | '\u{180e}')
}

/// `text` with each character `escaped` picks written by `write`.
fn escape(text: &str, escaped: impl Fn(char) -> bool, write: impl Fn(char, &mut String)) -> Cow<'_, str> {
    if !text.chars().any(&escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if escaped(c) {
            write(c, &mut out);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_is_kept() {
        let hostile = "a\u{1b}[2J\ryou\u{9b}\u{7f}\u{0}\tb\nc → é";
        assert_eq!(safe(hostile), concat!(r"a\u{1b}[2J\ryou\u{9b}\u{7f}\u{0}", "\tb\nc → é"));
        assert_eq!(safe_line(hostile), r"a\u{1b}[2J\ryou\u{9b}\u{7f}\u{0}\tb\nc → é");
        assert!(matches!(safe("plain → text\n"), Cow::Borrowed(_)), "nothing to escape: no copy");
    }

    #[test]
    fn a_descriptions_lines_stay_lines_under_its_indent() {
        assert_eq!(indented("First line.  \nSecond\r\u{1b}[2J.\n", "    "), "First line.\n    Second\\r\\u{1b}[2J.");
        assert_eq!(indented("one", "  "), "one");
    }

    #[test]
    fn bidirectional_controls_are_escaped_and_joiners_kept() {
        let hostile = "rtl\u{202e}live\u{2066}x\u{2069}\u{200f}";
        assert_eq!(safe(hostile), r"rtl\u{202e}live\u{2066}x\u{2069}\u{200f}");
        assert_eq!(safe_line(hostile), safe(hostile));
        let json = serde_json::to_string(&serde_json::json!({ "name": hostile })).unwrap_or_default();
        assert_eq!(safe_json(&json), r#"{"name":"rtl\u202elive\u2066x\u2069\u200f"}"#);
        // A family emoji is joined by U+200D: it stays as it is.
        let family = "\u{1f468}\u{200d}\u{1f469}\u{200d}\u{1f467} العربية";
        assert!(matches!(safe(family), Cow::Borrowed(_)));
        assert!(matches!(safe_line(family), Cow::Borrowed(_)));
    }

    #[test]
    fn a_name_cannot_hide_a_character_that_shows_as_nothing() {
        assert_eq!(safe_line("h.ok\u{200b}"), r"h.ok\u{200b}");
        assert_eq!(safe_line("so\u{ad}ft\u{feff}\u{2060}"), r"so\u{ad}ft\u{feff}\u{2060}");
        assert_eq!(safe("a text may hold\u{200b} one"), "a text may hold\u{200b} one");
    }

    #[test]
    fn json_stays_json() {
        let value = serde_json::json!({"name": "x\u{1b}\u{9b}\u{7f}\ny"});
        let text = serde_json::to_string_pretty(&value).unwrap_or_default();
        let shown = safe_json(&text);
        assert!(!shown.contains(|c: char| c.is_control() && c != '\n'), "{shown}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&shown).ok(), Some(value));
    }
}
