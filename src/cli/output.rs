//! Printing results as text or JSON, made safe for a terminal (see `super::terminal`).

use std::borrow::Cow;
use std::io::Write;

use trellis_runner::Runtime;

use super::Format;
use crate::session::pattern_infos;
use crate::terminal::{safe, safe_json, safe_line};

/// Prints a JSON value (pretty) or a text rendering.
pub fn print(format: Format, json: &serde_json::Value, text: impl FnOnce() -> String) {
    if format.json {
        emit_json(json);
    } else {
        emit(&text());
    }
}

/// Writes a JSON value, pretty-printed, as one output.
pub fn emit_json(json: &serde_json::Value) {
    let text = serde_json::to_string_pretty(json).unwrap_or_else(|_| json.to_string());
    write_line(&safe_json(&text));
}

/// Writes one line of text (made safe) to standard output.
pub fn emit(line: &str) {
    write_line(&safe(line));
}

/// Writes `line` and a newline to standard output. When the reader went away
/// (`trellis ... | head`) the command stops quietly, as Unix tools do, instead of
/// panicking.
fn write_line(line: &str) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{line}").and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: cannot write the output: {e}");
        std::process::exit(1);
    }
}

/// `trellis patterns`.
pub fn patterns(rt: &Runtime, format: Format) -> anyhow::Result<()> {
    let json = serde_json::to_value(pattern_infos(rt))?;
    print(format, &json, || render_patterns(&json));
    Ok(())
}

/// The patterns as `trellis patterns` shows them, from their JSON.
pub(crate) fn render_patterns(patterns: &serde_json::Value) -> String {
    let field = |p: &serde_json::Value, key: &str| safe_line(p[key].as_str().unwrap_or_default()).into_owned();
    let list = patterns.as_array().map(Vec::as_slice).unwrap_or_default();
    list.iter().map(|p| format!("{:<10} {}", field(p, "id"), field(p, "description"))).collect::<Vec<_>>().join("\n")
}

/// The charms as `trellis charm list` shows them, from their JSON (id, name, pattern).
pub(crate) fn render_charms(charms: &serde_json::Value) -> String {
    let field = |c: &serde_json::Value, key: &str| safe_line(c[key].as_str().unwrap_or_default()).into_owned();
    let list = charms.as_array().map(Vec::as_slice).unwrap_or_default();
    let row =
        |c: &serde_json::Value| format!("{:<28} {:<16} {}", field(c, "id"), field(c, "name"), field(c, "pattern"));
    list.iter().map(row).collect::<Vec<_>>().join("\n")
}

/// Renders a charm result for people: streams shown as handlers, with their event fields.
pub fn render_result(result: &serde_json::Value) -> String {
    let Some(map) = result.as_object() else { return result.to_string() };
    let mut lines = Vec::new();
    for (key, value) in map {
        let shown = match trellis_runner::link::stream_schema(value) {
            Some(schema) => {
                let fields: Vec<Cow<'_, str>> = schema
                    .and_then(|s| s.get("properties"))
                    .and_then(|p| p.as_object())
                    .map(|p| p.keys().map(|k| safe_line(k)).collect())
                    .unwrap_or_default();
                format!("handler({})", fields.join(", "))
            }
            None => value.to_string(),
        };
        lines.push(format!("{}: {shown}", safe_line(key)));
    }
    lines.join("\n")
}
