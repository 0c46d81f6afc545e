//! [`Resolve`]: the event of a dialog's `resolve` stream, one answer to one waiting call.
//!
//! An answer is one of a few exclusive things ([`Resolution`]): an approval, a denial, an
//! answer to a question, a client's output, or a timeout. On the wire it keeps the flat
//! shape front ends and stored conversations already use (`{"call_id", "approved"}`,
//! `{"call_id", "answer"}`, ...); a wire answer that says two of them at once (approved
//! and an answer, an answer and an output, a reason beside an answer) is refused with a
//! clear error rather than read one way or another.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

/// A person's answer, or the client's output, for one waiting call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Wire", into = "Wire")]
pub struct Resolve {
    /// The call answered (an [`Interaction::call_id`](super::Interaction::call_id)).
    pub call_id: String,
    /// What the answer is.
    pub resolution: Resolution,
    /// The tool the answer is for (display name); when given, it must be the waiting
    /// call's, so an answer meant for another call is refused.
    pub tool: Option<String>,
    /// When given, the [`Interaction::asked_at`](super::Interaction::asked_at) of the call
    /// meant: an answer for an earlier call that had the same id is refused.
    pub asked_at: Option<u64>,
    /// With an approval: later calls of the same tool in this conversation run without
    /// asking (until revoked, see the dialog's `allowed`).
    pub always: bool,
    /// With an approval: the arguments the call runs with instead of the model's (checked
    /// against the tool's schema; the model is told they were changed).
    pub input: Option<serde_json::Value>,
}

/// What an answer to a waiting call is.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolution {
    /// Let the call run (an approval).
    Approved,
    /// Refuse the call, or decline to answer; the model is told why.
    Denied {
        /// Why (told to the model).
        reason: Option<String>,
    },
    /// The answer to a question, a confirmation or a choice.
    Answered(serde_json::Value),
    /// The client phase's output (checked against the tool's client-output schema, then
    /// by its server phase); for a question, a confirmation or a choice it stands for the
    /// answer.
    Output(serde_json::Value),
    /// Dismissed without an answer either way (MCP's `cancel` of a tool's question);
    /// for a call that waits it is a denial.
    Cancelled,
    /// No answer came in time (the dialog's wait timeout): the model is told so.
    TimedOut {
        /// What the wait was (told to the model).
        reason: Option<String>,
    },
}

impl Resolve {
    /// An answer to `call_id`.
    pub fn new(call_id: impl Into<String>, resolution: Resolution) -> Resolve {
        Resolve { call_id: call_id.into(), resolution, tool: None, asked_at: None, always: false, input: None }
    }

    /// Approves `call_id`.
    pub fn approve(call_id: impl Into<String>) -> Resolve {
        Resolve::new(call_id, Resolution::Approved)
    }

    /// Denies `call_id` (or declines to answer it), saying why.
    pub fn deny(call_id: impl Into<String>, reason: impl Into<String>) -> Resolve {
        Resolve::new(call_id, Resolution::Denied { reason: Some(reason.into()) })
    }

    /// Answers the question, confirmation or choice of `call_id`.
    pub fn answer(call_id: impl Into<String>, answer: serde_json::Value) -> Resolve {
        Resolve::new(call_id, Resolution::Answered(answer))
    }

    /// Gives the client's `output` for `call_id`.
    pub fn output(call_id: impl Into<String>, output: serde_json::Value) -> Resolve {
        Resolve::new(call_id, Resolution::Output(output))
    }

    /// The same answer, meant for the tool displayed `tool` only.
    pub fn for_tool(mut self, tool: impl Into<String>) -> Resolve {
        self.tool = Some(tool.into());
        self
    }

    /// The same approval, for every later call of the tool in this conversation too.
    pub fn always(mut self) -> Resolve {
        self.always = true;
        self
    }

    /// The same approval, with `input` as the call's arguments.
    pub fn with_input(mut self, input: serde_json::Value) -> Resolve {
        self.input = Some(input);
        self
    }

    /// The same answer, meant for the call asked at `asked_at` only.
    pub fn asked_at(mut self, asked_at: u64) -> Resolve {
        self.asked_at = Some(asked_at);
        self
    }
}

/// The wire shape of [`Resolve`]: flat fields, each optional.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "Resolve")]
struct Wire {
    /// The call answered.
    call_id: String,
    /// For an approval: whether the call may run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    approved: bool,
    /// For a question, a confirmation or a choice: the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    answer: Option<serde_json::Value>,
    /// For a client execution: the client phase's output. For a question, confirmation
    /// or choice it stands for `answer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    output: Option<serde_json::Value>,
    /// Why it was denied, or why there is no answer (told to the model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// The tool the answer is for (display name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool: Option<String>,
    /// The `asked_at` of the call meant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    asked_at: Option<u64>,
    /// No answer came in time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    timed_out: bool,
    /// Dismissed without an answer either way.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    cancelled: bool,
    /// With `approved`: allow the tool's later calls in this conversation without asking.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    always: bool,
    /// With `approved`: the arguments to run the call with instead of the model's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    input: Option<serde_json::Value>,
}

impl TryFrom<Wire> for Resolve {
    type Error = String;

    fn try_from(wire: Wire) -> Result<Resolve, String> {
        let Wire { call_id, approved, answer, output, reason, tool, asked_at, timed_out, cancelled, always, input } =
            wire;
        if (always || input.is_some()) && !approved {
            return Err(format!(
                "the answer to call `{call_id}` gives `always` or `input` without `approved`; they go with an approval"
            ));
        }
        let given =
            [approved, answer.is_some(), output.is_some(), timed_out, cancelled].into_iter().filter(|&g| g).count();
        if given > 1 {
            return Err(format!(
                "the answer to call `{call_id}` says more than one of `approved`, `answer`, `output`, `timed_out` \
                 and `cancelled`; send one"
            ));
        }
        let resolution = match (approved, answer, output, timed_out) {
            (_, _, _, true) => Resolution::TimedOut { reason },
            _ if cancelled && reason.is_none() => Resolution::Cancelled,
            _ if cancelled => {
                return Err(format!("the answer to call `{call_id}` gives a `reason` beside `cancelled`; send one"))
            }
            (true, ..) if reason.is_none() => Resolution::Approved,
            (false, Some(answer), ..) if reason.is_none() => Resolution::Answered(answer),
            (false, None, Some(output), _) if reason.is_none() => Resolution::Output(output),
            (false, None, None, false) => Resolution::Denied { reason },
            _ => {
                return Err(format!(
                    "the answer to call `{call_id}` gives a `reason` beside an approval, an answer or an output; \
                     a reason goes with a denial"
                ))
            }
        };
        Ok(Resolve { call_id, resolution, tool, asked_at, always, input })
    }
}

impl From<Resolve> for Wire {
    fn from(resolve: Resolve) -> Wire {
        let Resolve { call_id, resolution, tool, asked_at, always, input } = resolve;
        let wire = Wire { call_id, tool, asked_at, always, input, ..Wire::default() };
        match resolution {
            Resolution::Approved => Wire { approved: true, ..wire },
            Resolution::Denied { reason } => Wire { reason, ..wire },
            Resolution::Answered(answer) => Wire { answer: Some(answer), ..wire },
            Resolution::Output(output) => Wire { output: Some(output), ..wire },
            Resolution::TimedOut { reason } => Wire { timed_out: true, reason, ..wire },
            Resolution::Cancelled => Wire { cancelled: true, ..wire },
        }
    }
}

impl JsonSchema for Resolve {
    fn schema_name() -> Cow<'static, str> {
        Wire::schema_name()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        Wire::json_schema(generator)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_resolution_keeps_its_flat_wire_shape_both_ways() {
        let cases = [
            (Resolve::approve("c"), json!({"call_id": "c", "approved": true})),
            (Resolve::deny("c", "no"), json!({"call_id": "c", "reason": "no"})),
            (
                Resolve::answer("c", json!("Blue")).for_tool("Ask.colour"),
                json!({"call_id": "c", "answer": "Blue", "tool": "Ask.colour"}),
            ),
            (
                Resolve::output("c", json!({"ok": true})).asked_at(7),
                json!({"call_id": "c", "output": {"ok": true}, "asked_at": 7}),
            ),
            (
                Resolve::new("c", Resolution::TimedOut { reason: Some("60 s".into()) }),
                json!({"call_id": "c", "timed_out": true, "reason": "60 s"}),
            ),
            (Resolve::new("c", Resolution::Denied { reason: None }), json!({"call_id": "c"})),
            (
                Resolve::approve("c").always().with_input(json!({"id": 2})),
                json!({"call_id": "c", "approved": true, "always": true, "input": {"id": 2}}),
            ),
        ];
        for (resolve, wire) in cases {
            assert_eq!(serde_json::to_value(&resolve).unwrap(), wire);
            assert_eq!(serde_json::from_value::<Resolve>(wire).unwrap(), resolve);
        }
        // What older front ends sent, `approved: false` spelled out, reads the same.
        let denial: Resolve =
            serde_json::from_value(json!({"call_id": "c", "approved": false, "reason": "no"})).unwrap();
        assert_eq!(denial, Resolve::deny("c", "no"));
    }

    #[test]
    fn a_wire_answer_that_says_two_things_is_refused_saying_why() {
        for both in [
            json!({"call_id": "c", "approved": true, "answer": "yes"}),
            json!({"call_id": "c", "answer": "a", "output": "b"}),
            json!({"call_id": "c", "timed_out": true, "approved": true}),
        ] {
            let error = serde_json::from_value::<Resolve>(both).unwrap_err().to_string();
            assert!(error.contains("more than one of"), "{error}");
        }
        let error = serde_json::from_value::<Resolve>(json!({"call_id": "c", "answer": "a", "reason": "r"}))
            .unwrap_err()
            .to_string();
        assert!(error.contains("a reason goes with a denial"), "{error}");
        let error = serde_json::from_value::<Resolve>(json!({"call_id": "c", "reason": "r", "always": true}))
            .unwrap_err()
            .to_string();
        assert!(error.contains("they go with an approval"), "{error}");
    }
}
