//! Testing patterns: which tools charms yield, and what a dialog does with them.
//!
//! [`TestSpace`] is an in-memory runtime with your patterns (and the `llm_dialog`
//! builtin); [`Tools`] is what the model would see, with assertions whose failure shows
//! the expected and actual tool lists side by side.
//!
//! ```
//! use trellis::patterns::counter::counter;
//! use trellis::testing::TestSpace;
//!
//! let space = TestSpace::with_patterns([counter()]);
//! let counter = space.charm("counter");
//! let tools = space.tools_of(&[&counter]);
//! tools.assert_displays(&["Counter.decrement", "Counter.increment", "Counter.reset"]);
//! assert!(tools.get("Counter.increment").description.contains("Increase"));
//! ```

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{json, Value};
use trellis_builtins::catalog::Catalog;
use trellis_builtins::dialog::{DialogHandle, LlmDialog, LLM_DIALOG};
use trellis_builtins::message::{Message, ToolOutput};
use trellis_builtins::model::{Model, ModelError};
use trellis_builtins::scripted::{ScriptedModel, Turn};
use trellis_patterns::chatbot::{Chatbot, ChatbotField};
use trellis_runner::{DocId, Pattern, Read as _, Runtime};

/// How long [`TestSpace::run_dialog`] waits for the whole conversation.
const DIALOG_WAIT: Duration = Duration::from_secs(30);

/// The pattern `run_dialog` instantiates: a dialog with the tools and model given.
const DIALOG_PATTERN: &str = "trellis-testing-dialog";

/// Scripted models by their model string, one per `run_dialog` call.
type Scripts = Arc<Mutex<HashMap<String, Arc<dyn Model>>>>;

/// An in-memory space with the patterns under test.
///
/// Its helpers panic with a clear message instead of returning errors: they are for
/// tests, where a failed step is a failed test.
pub struct TestSpace {
    rt: Runtime,
    scripts: Scripts,
}

impl TestSpace {
    /// A space with `patterns`, the chatbot pattern and the `llm_dialog` builtin (with
    /// the real model strings, plus the scripts of [`TestSpace::run_dialog`]).
    pub fn with_patterns(patterns: impl IntoIterator<Item = Pattern>) -> TestSpace {
        let rt = Runtime::in_memory();
        let scripts = Scripts::default();
        let known = Arc::clone(&scripts);
        let resolver = move |spec: &str| -> Result<Arc<dyn Model>, ModelError> {
            match known.lock().get(spec) {
                Some(model) => Ok(Arc::clone(model)),
                None => trellis_builtins::provider::model_from_str(spec),
            }
        };
        rt.register_builtin(Arc::new(LlmDialog::with_resolver(Arc::new(resolver))));
        rt.register_pattern(trellis_patterns::chatbot::chatbot());
        rt.register_pattern(Pattern::new(DIALOG_PATTERN, |b, inputs: Value| {
            b.builtin("dialog", LLM_DIALOG, inputs)?;
            Ok(())
        }));
        for pattern in patterns {
            rt.register_pattern(pattern);
        }
        TestSpace { rt, scripts }
    }

    /// The runtime, for anything the helpers do not cover.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// A new charm of `pattern` with an empty argument.
    pub fn charm(&self, pattern: &str) -> DocId {
        self.charm_with(pattern, json!({}))
    }

    /// A new charm of `pattern` with `argument`.
    pub fn charm_with(&self, pattern: &str, argument: Value) -> DocId {
        match self.rt.charms().create(pattern, argument) {
            Ok(id) => id,
            Err(e) => panic!("cannot create a charm of `{pattern}`: {e}"),
        }
    }

    /// The `tools` map that offers the handlers of `charms` (as mentions do, without
    /// read tools).
    fn tools_map(&self, charms: &[&DocId]) -> Value {
        let entries = charms
            .iter()
            .map(|charm| (format!("@{charm}"), json!({ "charm": self.rt.charms().result(charm).to_json() })))
            .collect();
        Value::Object(entries)
    }

    /// The tools the model sees when `charms` are mentioned, in catalog order.
    pub fn tools_of(&self, charms: &[&DocId]) -> Tools {
        Tools::from_catalog(&Catalog::build(&self.rt, &self.tools_map(charms)))
    }

    /// Calls the tool displayed as `display` among those of `charms` the way a model's
    /// tool call does, and returns what the model reads: for a handler,
    /// `{"returned", "summary", "result"}` (see [`Catalog::invoke`]). Panics with the
    /// error text when the call fails.
    ///
    /// ```
    /// use trellis::patterns::dice::dice;
    /// use trellis::testing::TestSpace;
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let space = TestSpace::with_patterns([dice()]);
    /// let dice = space.charm("dice");
    /// let answer = space.call_tool(&[&dice], "Dice.roll", serde_json::json!({"sides": 6})).await;
    /// let roll = answer["returned"]["total"].as_u64().unwrap();
    /// assert!((1..=6).contains(&roll));
    /// let tools = space.tools_of(&[&dice]);
    /// let returns = tools.get("Dice.roll").output_schema.as_ref().expect("roll answers");
    /// assert_eq!(returns["properties"]["total"]["type"], "integer");
    /// # });
    /// ```
    pub async fn call_tool(&self, charms: &[&DocId], display: &str, arguments: Value) -> Value {
        let catalog = Catalog::build(&self.rt, &self.tools_map(charms));
        let invocation = catalog.invoke(&self.rt, display, arguments, DIALOG_WAIT).await;
        match invocation.output {
            ToolOutput::Json(answer) => answer,
            ToolOutput::ErrorText(error) => panic!("the call of `{display}` failed: {error}"),
            text => Value::String(text.as_text()),
        }
    }

    /// The tools a chatbot charm offers now: its static tools plus those of its
    /// attachments (read tools included), as its dialog builds them.
    pub fn chatbot_tools(&self, chatbot: &Chatbot) -> Tools {
        let dialog = self.rt.charms().result(chatbot.charm()).child(ChatbotField::Dialog.key());
        let tools = self.rt.read(&dialog.child("inputs").child("tools")).map(|v| v.to_json()).unwrap_or_default();
        Tools::from_catalog(&Catalog::build(&self.rt, &tools))
    }

    /// Runs one user `message` through a dialog whose tools are the handlers of
    /// `charms`, with a scripted model playing `script` (tool names may be display
    /// names); returns the whole conversation, the user's message first.
    pub async fn run_dialog(&self, charms: &[&DocId], script: Vec<Turn>, message: &str) -> Vec<Message> {
        let model = {
            let mut scripts = self.scripts.lock();
            let model = format!("testing-script-{}", scripts.len());
            scripts.insert(model.clone(), Arc::new(ScriptedModel::from_turns(script)));
            model
        };
        let charm = self.charm_with(DIALOG_PATTERN, json!({ "tools": self.tools_map(charms), "model": model }));
        let dialog = DialogHandle::new(self.rt.clone(), self.rt.charms().result(&charm).child("dialog"));
        if let Err(e) = dialog.say(message, DIALOG_WAIT).await {
            panic!("the dialog did not finish: {e}");
        }
        if let Some(error) = dialog.error() {
            panic!("the dialog failed: {error}; the conversation so far: {:#?}", dialog.messages());
        }
        dialog.messages()
    }
}

/// One tool as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInfo {
    /// The name people see: `Charm.handler`.
    pub display: String,
    /// The name sent to providers.
    pub wire: String,
    /// The description the model reads.
    pub description: String,
    /// The prepared input schema.
    pub schema: Value,
    /// The prepared schema of what it returns, for a handler that answers.
    pub output_schema: Option<Value>,
}

/// The tools of a catalog, in catalog order, with assertions for tests.
#[derive(Debug, Clone, PartialEq)]
pub struct Tools(pub Vec<ToolInfo>);

impl Tools {
    fn from_catalog(catalog: &Catalog) -> Tools {
        if let Some(problem) = catalog.problems().first() {
            panic!("a tool entry was skipped: {problem}");
        }
        Tools(
            catalog
                .tools()
                .iter()
                .map(|t| ToolInfo {
                    display: t.display.clone(),
                    wire: t.wire.clone(),
                    description: t.description.clone(),
                    schema: (*t.input_schema).clone(),
                    output_schema: t.output_schema.as_deref().cloned(),
                })
                .collect(),
        )
    }

    /// The display names, in catalog order.
    pub fn displays(&self) -> Vec<&str> {
        self.0.iter().map(|t| t.display.as_str()).collect()
    }

    /// The tool displayed as `display`; panics, listing the tools, when there is none.
    pub fn get(&self, display: &str) -> &ToolInfo {
        match self.0.iter().find(|t| t.display == display) {
            Some(tool) => tool,
            None => panic!("no tool `{display}`; the tools are: {}", self.displays().join(", ")),
        }
    }

    /// Asserts that the display names are exactly `expected` (in any order); on failure
    /// shows both lists side by side.
    pub fn assert_displays(&self, expected: &[&str]) {
        let mut actual = self.displays();
        actual.sort_unstable();
        let mut wanted = expected.to_vec();
        wanted.sort_unstable();
        if actual != wanted {
            panic!("the tools differ from what was expected:\n{}", side_by_side(&wanted, &actual));
        }
    }
}

/// Two sorted name lists in two columns, each line marked where they differ.
fn side_by_side(expected: &[&str], actual: &[&str]) -> String {
    let width = expected.iter().map(|n| n.len()).max().unwrap_or(0).max("expected".len());
    let mut out = format!("  {:<width$} | actual\n", "expected");
    let (mut e, mut a) = (expected.iter().peekable(), actual.iter().peekable());
    loop {
        let (left, right) = match (e.peek(), a.peek()) {
            (None, None) => break,
            (Some(x), Some(y)) if x == y => (e.next(), a.next()),
            (Some(x), Some(y)) if x < y => (e.next(), None),
            (Some(_), None) => (e.next(), None),
            _ => (None, a.next()),
        };
        let mark = if left.is_some() && right.is_some() { ' ' } else { '!' };
        let _ = writeln!(out, "{mark} {:<width$} | {}", left.copied().unwrap_or(""), right.copied().unwrap_or(""));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::side_by_side;

    #[test]
    fn the_failure_message_lines_up_both_lists() {
        let text = side_by_side(&["A.a", "A.b", "A.c"], &["A.a", "A.c", "A.d"]);
        assert_eq!(text, "  expected | actual\n  A.a      | A.a\n! A.b      | \n  A.c      | A.c\n!          | A.d\n");
    }
}
