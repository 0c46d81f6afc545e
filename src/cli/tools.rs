//! `trellis tools`: the tool catalog some charms yield, as the model would see it.

use trellis_runner::Runtime;

use super::output::print;
use super::Format;
use crate::session::flattened;
use crate::terminal::{indented, safe_line};

/// `trellis tools ID|NAME...`.
pub fn run(rt: &Runtime, charms: &[String], format: Format) -> anyhow::Result<()> {
    let flattened = flattened(rt, charms)?;
    print(format, &flattened, || render(&flattened));
    Ok(())
}

/// Renders a flattened catalog for people: display name, wire name, description, the
/// input schema's properties, and what the tool returns when it answers.
pub fn render(flattened: &serde_json::Value) -> String {
    let tools = flattened.as_array().map(Vec::as_slice).unwrap_or_default();
    if tools.is_empty() {
        return "no tools (mention a charm with @Name to give its handlers to the model)".to_string();
    }
    let mut out = Vec::new();
    for tool in tools {
        let field = |key: &str, missing: &'static str| safe_line(tool[key].as_str().unwrap_or(missing)).into_owned();
        out.push(format!(
            "{}  (wire name {})\n    {}",
            field("display", "?"),
            field("wire", "?"),
            indented(tool["description"].as_str().unwrap_or(""), "    ")
        ));
        if let Some(props) = tool["input_schema"]["properties"].as_object() {
            for (name, schema) in props {
                let kind = schema["type"].as_str().unwrap_or("any");
                let about = schema["description"].as_str().unwrap_or("");
                out.push(format!("    - {} ({}) {}", safe_line(name), safe_line(kind), safe_line(about)));
            }
        }
        if let Some(output) = tool.get("output_schema") {
            out.push(returns(output));
        }
    }
    out.join("\n")
}

/// `returns (object) The note added: id (integer), text (string)`: the type of what a
/// tool returns, its description, and its fields when it has some.
fn returns(schema: &serde_json::Value) -> String {
    let kind = |schema: &serde_json::Value| safe_line(schema["type"].as_str().unwrap_or("any")).into_owned();
    let mut line = format!("    returns ({})", kind(schema));
    if let Some(about) = schema["description"].as_str() {
        line = format!("{line} {}", safe_line(about.trim_end_matches('.')));
    }
    if let Some(props) = schema["properties"].as_object() {
        let fields: Vec<String> = props.iter().map(|(name, s)| format!("{} ({})", safe_line(name), kind(s))).collect();
        line = format!("{line}: {}", fields.join(", "));
    }
    line
}
