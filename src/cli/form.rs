//! A form an MCP server asks the person to fill in (elicitation), in the terminal: its
//! fields described in a line each (`trellis pending`), and filled in one line per field
//! at the interactive prompt ([`Form`]).
//!
//! A form's schema is flat: each field a string, number, integer or boolean, a string of
//! a few options (`enum`, `oneOf`), or several of them (an array, typed comma-separated). What the person types is read as the field's type; the
//! whole answer is checked against the schema by the dialog, which says what is wrong.

use serde_json::{Map, Value};
use trellis_builtins::dialog::Interaction;
use trellis_builtins::sources::elicit;

use crate::session::Reply;
use crate::terminal::safe_line;

/// One field of a form.
#[derive(Debug, Clone)]
struct Field {
    name: String,
    /// `string`, `number`, `integer` or `boolean`.
    kind: String,
    required: bool,
    /// Its description or title, if the schema gives one.
    about: Option<String>,
    /// For a choice, the options.
    options: Vec<String>,
    /// The field's own schema.
    schema: Value,
}

/// The fields of the form schema `schema`, in the order the schema lists them.
fn fields(schema: &Value) -> Vec<Field> {
    let required: Vec<&str> =
        schema["required"].as_array().map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    let Some(properties) = schema["properties"].as_object() else { return Vec::new() };
    properties
        .iter()
        .map(|(name, field)| Field {
            name: name.clone(),
            kind: field["type"].as_str().unwrap_or("string").to_string(),
            required: required.contains(&name.as_str()),
            about: field["description"].as_str().or(field["title"].as_str()).map(str::to_string),
            options: elicit::field_options(field),
            schema: field.clone(),
        })
        .collect()
}

impl Field {
    /// `name (integer, required): about [a | b]`, escaped.
    fn describe(&self) -> String {
        let mut line = format!("{} ({}", safe_line(&self.name), safe_line(&self.kind));
        if self.required {
            line.push_str(", required");
        }
        line.push(')');
        if let Some(about) = &self.about {
            line.push_str(&format!(": {}", safe_line(about)));
        }
        if !self.options.is_empty() {
            let options: Vec<_> = self.options.iter().map(|o| safe_line(o)).collect();
            line.push_str(&format!(" [{}]", options.join(" | ")));
        }
        line
    }

    /// `typed` as a value of this field; why it is not one.
    fn read(&self, typed: &str) -> Result<Value, String> {
        elicit::field_value(&self.name, &self.schema, typed)
    }
}

/// The lines `trellis pending` shows for a tool's question: what it asks, and the form's
/// fields or the URL to visit.
pub fn describe(waiting: &Interaction) -> String {
    let (tool, call, prompt) = (safe_line(&waiting.tool), safe_line(&waiting.call_id), safe_line(&waiting.prompt));
    if let Some(url) = waiting.input["url"].as_str() {
        return format!(
            "{tool} asks you to visit a URL (call {call}): {prompt}\n  {}\n  once done there, answer with \
             `--answer done`; or `--decline`, `--cancel`",
            safe_line(url)
        );
    }
    let mut lines = vec![format!("{tool} asks you to fill in a form (call {call}): {prompt}")];
    lines.extend(fields(&waiting.input["schema"]).iter().map(|f| format!("  {}", f.describe())));
    lines.push(
        "  answer with `--output '{\"FIELD\": VALUE, ...}'` (or `--answer` for one field); or `--decline`, `--cancel`"
            .into(),
    );
    lines.join("\n")
}

/// A tool's question being answered at the interactive prompt, a line per field.
pub struct Form {
    /// The call that asks.
    pub call_id: String,
    fields: Vec<Field>,
    url: bool,
    at: usize,
    filled: Map<String, Value>,
}

/// What a line typed into a [`Form`] leads to.
pub enum Step {
    /// Ask this next (the next field, or the same one again after what is wrong).
    Ask(String),
    /// The form is done: send this.
    Done(Reply),
}

impl Form {
    /// The form of `waiting` (a tool's question), and what to print before its first line.
    pub fn start(waiting: &Interaction) -> (Form, String) {
        let url = waiting.input["url"].is_string();
        let form = Form {
            call_id: waiting.call_id.clone(),
            fields: fields(&waiting.input["schema"]),
            url,
            at: 0,
            filled: Map::new(),
        };
        let (tool, prompt) = (safe_line(&waiting.tool), safe_line(&waiting.prompt));
        let header = if url {
            let shown = safe_line(waiting.input["url"].as_str().unwrap_or_default()).into_owned();
            format!("{tool} asks you to visit a URL: {prompt}\n  {shown}\n(/decline or /cancel to refuse)")
        } else {
            format!("{tool} asks: {prompt}\n(a line per field; /decline or /cancel to refuse)")
        };
        (form, header)
    }

    /// The line to ask now.
    pub fn prompt(&self) -> String {
        match self.fields.get(self.at) {
            _ if self.url => "press Enter once done there: ".to_string(),
            Some(field) if field.required => format!("  {}: ", field.describe()),
            Some(field) => format!("  {} (Enter to skip): ", field.describe()),
            None => String::new(),
        }
    }

    /// Takes the line `typed`.
    pub fn take(&mut self, typed: &str) -> Step {
        match typed {
            "/decline" => return Step::Done(Reply::Decline),
            "/cancel" => return Step::Done(Reply::Cancel),
            _ if self.url => return Step::Done(Reply::Output(Value::Null)),
            _ => {}
        }
        let Some(field) = self.fields.get(self.at) else { return self.done() };
        if typed.is_empty() {
            if field.required {
                return Step::Ask(format!("{} is required\n{}", safe_line(&field.name), self.prompt()));
            }
        } else {
            match field.read(typed) {
                Ok(value) => {
                    self.filled.insert(field.name.clone(), value);
                }
                Err(why) => return Step::Ask(format!("{}\n{}", safe_line(&why), self.prompt())),
            }
        }
        self.at += 1;
        if self.at < self.fields.len() {
            Step::Ask(self.prompt())
        } else {
            self.done()
        }
    }

    fn done(&mut self) -> Step {
        Step::Done(Reply::Output(Value::Object(std::mem::take(&mut self.filled))))
    }
}
