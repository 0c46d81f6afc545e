//! `request_human_input`: the built-in client-authority tool through which the model asks
//! the user a question, for a confirmation, or to choose from options.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{Ask, Client, ClientContext, DefinedTool, ToolBuilder};
use crate::ask::InteractionKind;

/// The name it is registered under, and the key the chatbot offers it by.
pub const HUMAN_INPUT_TOOL: &str = "request_human_input";

/// What kind of answer the model asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AnswerKind {
    /// A free-text answer.
    #[default]
    Question,
    /// Yes or no.
    Confirmation,
    /// One of `options`.
    Choice,
}

/// Ask the user something and wait for the answer.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct HumanInput {
    /// question: a free-text answer; confirmation: yes or no; choice: one of `options`.
    #[serde(default, rename = "type")]
    pub kind: AnswerKind,
    /// What to ask the user, in full.
    pub message: String,
    /// For a choice: the answers the user picks from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl HumanInput {
    /// What the interaction presents. A choice with nothing to choose from can only be
    /// answered in words.
    fn ask(&self) -> Ask {
        let kind = match self.kind {
            AnswerKind::Question => InteractionKind::Question,
            AnswerKind::Confirmation => InteractionKind::Confirmation,
            AnswerKind::Choice if self.options.is_empty() => InteractionKind::Question,
            AnswerKind::Choice => InteractionKind::Choice,
        };
        Ask { kind, prompt: self.message.clone(), options: self.options.clone() }
    }

    /// The result the model reads for `given`; an answer of the wrong shape is refused,
    /// saying what it must be.
    fn check(&self, given: &Value) -> Result<Value, String> {
        let text = given.as_str().map(str::trim);
        Ok(match self.ask().kind {
            InteractionKind::Confirmation => {
                let yes = match (given.as_bool(), text.map(str::to_lowercase).as_deref()) {
                    (Some(yes), _) => yes,
                    (None, Some("yes" | "y" | "true")) => true,
                    (None, Some("no" | "n" | "false")) => false,
                    _ => return Err("the answer to a confirmation is yes or no".into()),
                };
                json!({ "confirmed": yes })
            }
            InteractionKind::Choice => match text.and_then(|t| self.options.iter().find(|o| o.eq_ignore_ascii_case(t)))
            {
                Some(option) => json!({ "choice": option }),
                None => return Err(format!("the answer to this choice is one of: {}", self.options.join(", "))),
            },
            _ => match text.filter(|t| !t.is_empty()) {
                Some(text) => json!({ "answer": text }),
                None => return Err("the answer to a question is some text".into()),
            },
        })
    }
}

/// The `request_human_input` tool: client authority; the client asks the person, the
/// server phase checks the answer's shape (yes or no, one of the options, some text).
pub fn human_input() -> DefinedTool {
    ToolBuilder::<HumanInput>::new(
        HUMAN_INPUT_TOOL,
        "Ask the user a question, for a confirmation, or to choose from options, and wait for the answer. \
         Use it when you need information or a decision only the user has.",
    )
    .authority(Client)
    .client(|input: HumanInput, person: &mut dyn ClientContext| {
        Ok(match input.ask().kind {
            InteractionKind::Confirmation => Value::Bool(person.confirm(&input.message)?),
            InteractionKind::Choice => Value::String(person.choose(&input.message, &input.options)?),
            _ => Value::String(person.ask(&input.message)?),
        })
    })
    .server(|input: HumanInput, answer: Value| Ok(input.check(&answer)?))
    .presents(HumanInput::ask)
    .build()
}
