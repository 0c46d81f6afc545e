//! Calling a tool: one model tool call in, exactly one [`ToolOutput`] out.
//!
//! The arguments are parsed (a JSON string is decoded) and validated against the tool's
//! input schema before anything runs, so a bad call never touches a charm. A handler tool
//! then sends the event (which starts a stopped charm) and waits for the handler's commit
//! and the computations it triggered; it returns `{"returned": VALUE, "summary": LINE,
//! "result": SNAPSHOT}`, where `returned` is what the handler answered (absent for a
//! handler that answers nothing) and the snapshot is the charm's whole result as plain
//! JSON while it is small, else only the fields that changed (see the `summary`
//! module's `handler_answer`). A pattern tool creates a charm of the pattern, waits until its result settled,
//! returns `{"result": SNAPSHOT}` and stops the charm again.
//!
//! Every failure (unknown tool, invalid JSON, schema violation, handler error or panic,
//! timeout) is an [`ToolOutput::ErrorText`] the model can read and act on.
//!
//! **Timeouts.** Handlers are synchronous and run inside [`Runtime::send`], so the send
//! runs on a handler thread (the `workers` module, kept awake between calls of a burst):
//! the timeout fires even while a slow handler runs (see [`Catalog::inline_handlers`]
//! for running on the caller's thread instead). A handler cannot be
//! interrupted, though: after a timeout it still finishes, and if it succeeds its change
//! is committed (the error text says so). Pattern tools are timed
//! while their result settles (async builtin work); building the charm is synchronous
//! and not covered. Calls need a Tokio runtime (any flavour).

pub(crate) mod preview;
mod targets;
mod workers;

pub use preview::{Preview, ShownChange};

use std::time::Duration;

use serde_json::{json, Value};
use tracing::Instrument;
use trellis_runner::{Link, Previewed, Runtime};

use crate::ask::InteractionKind;
use crate::catalog::{Calling, Catalog, Tool, ToolTarget};
use crate::message::ToolOutput;
use crate::tool::{Ask, ToolError};
use crate::validation::violations;

/// How many tool names the "unknown tool" text lists.
const MAX_LISTED: usize = 50;

/// Proof, for [`Catalog::invoke_approved`], that a person approved the call: only the
/// dialog's `resolve` handler (after checking the call was waiting for exactly that
/// approval) and front ends acting on a person's own command make one.
#[derive(Debug)]
pub struct Approved {
    /// What the person was shown the handler would change, when they were (see
    /// [`Preview`]): the call commits only that.
    previewed: Option<Previewed>,
}

impl Approved {
    /// The approval of a person who gave the command themselves (`trellis charm send`).
    pub fn by_the_user() -> Approved {
        Approved { previewed: None }
    }

    /// The approval of a person who was shown that the call changes `previewed`.
    pub fn of_preview(previewed: Previewed) -> Approved {
        Approved { previewed: Some(previewed) }
    }
}

/// The outcome of one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    /// What goes back to the model.
    pub output: ToolOutput,
    /// What changed, in one line (`count: 3 → 5`), for handler tools that ran.
    pub summary: Option<String>,
    /// For a server tool with a client phase: what the client displays (its input).
    pub effect: Option<Value>,
}

/// How the first step of a call ended: done, or waiting for a person or the client.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// The call has its result.
    Done(Invocation),
    /// The call waits; the dialog makes it a pending interaction.
    Wait(Waiting),
}

/// A call that waits for a person or the client.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    /// What the interaction presents.
    pub ask: Ask,
    /// Server-side state for the last phase (never shown to front ends).
    pub state: Value,
    /// What the client phase gets (the arguments, or what a handoff handed over).
    pub input: Value,
    /// The call's arguments, checked against the input schema.
    pub arguments: Value,
    /// The registered tool whose phases go on after the client (`None` for an approval).
    pub defined: Option<String>,
    /// For a handler waiting for approval: what it would change (shown), and the paths
    /// behind that (kept, so that approving commits exactly those).
    pub preview: Option<Box<(Preview, Previewed)>>,
}

impl Invocation {
    pub(crate) fn error(message: impl Into<String>) -> Self {
        Invocation { output: ToolOutput::ErrorText(message.into()), summary: None, effect: None }
    }

    fn json(output: Value, summary: Option<String>) -> Self {
        Invocation { output: ToolOutput::Json(output), summary, effect: None }
    }

    /// Whether the call failed.
    pub fn is_error(&self) -> bool {
        matches!(self.output, ToolOutput::ErrorText(_))
    }
}

impl Catalog {
    /// Calls the tool named `name` (wire name, or display name when unambiguous) with the
    /// model's `arguments` (see the module docs). Never panics on model input: every
    /// failure is an error text.
    ///
    /// A tool that needs a person's approval ([`Tool::approval`]) is refused here: the
    /// caller asks the person first and then uses [`Catalog::invoke_approved`].
    pub async fn invoke(&self, rt: &Runtime, name: &str, arguments: Value, timeout: Duration) -> Invocation {
        self.finished(name, self.begin(rt, name, arguments, None, timeout, None).await)
    }

    /// [`Catalog::invoke`] for a call a person approved.
    pub async fn invoke_approved(
        &self,
        rt: &Runtime,
        name: &str,
        arguments: Value,
        timeout: Duration,
        approval: Approved,
    ) -> Invocation {
        self.finished(name, self.begin(rt, name, arguments, Some(approval), timeout, None).await)
    }

    /// A call's outcome where nothing can wait: a call of `name` that waits is an error.
    fn finished(&self, name: &str, step: Step) -> Invocation {
        let tool = self.get(name).map_or(name, |t| t.display.as_str());
        match step {
            Step::Done(invocation) => invocation,
            Step::Wait(waiting) => Invocation::error(waits_here(tool, &waiting)),
        }
    }

    /// The first step of a call, the one path every call of a dialog takes: the arguments
    /// are checked; a call that needs approval and has none waits for it; a handler,
    /// pattern, read or server phase runs; a call that needs the client waits for it.
    ///
    /// With a `receipt`, a handler runs at most once for it (see `Runtime::send_once`):
    /// a call made again after a restart answers what the handler returned then.
    pub async fn begin(
        &self,
        rt: &Runtime,
        name: &str,
        arguments: Value,
        approval: Option<Approved>,
        timeout: Duration,
        receipt: Option<&Link>,
    ) -> Step {
        self.begin_call(rt, (name, None), arguments, approval, timeout, receipt).await
    }

    /// [`Catalog::begin`] of a call the model named `call_id` (its span says so), counted
    /// and traced (`crate::traced`) by its outcome.
    pub(crate) async fn begin_call(
        &self,
        rt: &Runtime,
        (name, call_id): (&str, Option<&str>),
        arguments: Value,
        approval: Option<Approved>,
        timeout: Duration,
        receipt: Option<&Link>,
    ) -> Step {
        let span = crate::traced::tool(self.get(name).map_or(name, |t| &t.display), call_id, &arguments);
        let step = self.first_step(rt, name, arguments, approval, timeout, receipt).instrument(span.clone()).await;
        let (outcome, output) = match &step {
            Step::Done(Invocation { output: output @ ToolOutput::ErrorText(_), .. }) => ("failed", Some(output)),
            Step::Done(Invocation { output, .. }) => ("done", Some(output)),
            Step::Wait(_) => ("waiting", None),
        };
        crate::counted::tool_call(outcome);
        crate::traced::tool_ended(&span, outcome, output);
        step
    }

    /// The call itself: see [`Catalog::begin`].
    async fn first_step(
        &self,
        rt: &Runtime,
        name: &str,
        arguments: Value,
        approval: Option<Approved>,
        timeout: Duration,
        receipt: Option<&Link>,
    ) -> Step {
        let Some(tool) = self.get(name) else {
            let span = tracing::info_span!("tool_call", tool = %name, wire = %name);
            let _enter = span.enter();
            tracing::info!("unknown tool");
            return Step::Done(Invocation::error(self.unknown_tool(name)));
        };
        let arguments = match tool.check_arguments(arguments) {
            Ok(arguments) => arguments,
            Err(message) => return Step::Done(Invocation::error(message)),
        };
        match (tool.approval_for(&arguments), approval) {
            (Some(reason), None) => tool.wait_for_approval(rt, reason, arguments, None),
            (_, approval) => {
                let previewed = approval.and_then(|approval| approval.previewed);
                tool.step(rt, arguments, timeout, self.calling, receipt, previewed).await
            }
        }
    }

    /// The error text for an unknown (or ambiguous) tool name, listing what exists.
    fn unknown_tool(&self, name: &str) -> String {
        if self.tools().is_empty() {
            return format!("unknown tool `{name}`: no tools are available");
        }
        let what = if self.tools().iter().filter(|t| t.display == name).nth(1).is_some() {
            format!("`{name}` names several tools; call one by its wire name")
        } else {
            format!("unknown tool `{name}`")
        };
        let mut listed: Vec<String> =
            self.tools()
                .iter()
                .take(MAX_LISTED)
                .map(|t| {
                    if t.wire == t.display {
                        format!("`{}`", t.wire)
                    } else {
                        format!("`{}` ({})", t.wire, t.display)
                    }
                })
                .collect();
        if self.tools().len() > MAX_LISTED {
            listed.push(format!("and {} more", self.tools().len() - MAX_LISTED));
        }
        format!("{what}. Available tools: {}", listed.join(", "))
    }
}

impl Tool {
    /// The JSON Schema of what a call of this tool answers, for a handler that returns
    /// something: `{"returned", "summary", "result" | "changed", "note"}` with `returned`
    /// of [`Tool::output_schema`] (what MCP's `outputSchema` carries).
    pub fn answer_schema(&self) -> Option<Value> {
        self.output_schema.as_deref().map(crate::catalog::summary::answer_schema)
    }

    /// Calls this tool on a person's own command (`trellis charm send`): their command is
    /// the approval. A tool that needs the client is refused (only a dialog waits for it).
    /// A handler tool's answer carries the charm's whole data, whatever its size.
    pub async fn invoke(&self, rt: &Runtime, arguments: Value, timeout: Duration) -> Invocation {
        self.invoke_with(rt, arguments, timeout, None).await
    }

    /// [`Tool::invoke`] whose handler runs at most once for `receipt` (see
    /// `Runtime::send_once`): the same call made again (its answer was lost, or the node
    /// that ran it died) answers without running the handler a second time.
    pub async fn invoke_once(&self, rt: &Runtime, arguments: Value, timeout: Duration, receipt: &Link) -> Invocation {
        self.invoke_with(rt, arguments, timeout, Some(receipt)).await
    }

    async fn invoke_with(
        &self,
        rt: &Runtime,
        arguments: Value,
        timeout: Duration,
        receipt: Option<&Link>,
    ) -> Invocation {
        let calling = Calling { inline: false, snapshot_limit: usize::MAX };
        match self.check_arguments(arguments) {
            Ok(arguments) => match self.step(rt, arguments, timeout, calling, receipt, None).await {
                Step::Done(invocation) => invocation,
                Step::Wait(waiting) => Invocation::error(waits_here(&self.display, &waiting)),
            },
            Err(message) => Invocation::error(message),
        }
    }

    /// Whether a call cut off by a restart may simply run again: a handler's (its receipt
    /// makes it run once), a read's, or that of a source's tool marked read-only or
    /// idempotent. Any other may have had its effect already.
    pub fn repeatable(&self) -> bool {
        match &self.target {
            ToolTarget::Handler { .. } | ToolTarget::Read { .. } => true,
            ToolTarget::Source { repeatable, .. } => *repeatable,
            ToolTarget::Pattern { .. } | ToolTarget::Defined(_) | ToolTarget::Client => false,
        }
    }

    /// Why a person must approve a call with these (checked) arguments, if they must:
    /// the stream's policy, or a defined tool's (which may depend on the arguments).
    pub fn approval_for(&self, arguments: &Value) -> Option<String> {
        match &self.target {
            ToolTarget::Defined(tool) => tool.approval_for(arguments),
            _ if !self.person_only.is_empty() => {
                let asked = crate::tool::person_only::ask(&self.person_only, arguments);
                Some(self.approval.as_ref().map_or(asked.clone(), |reason| format!("{reason}: {asked}")))
            }
            _ => self.approval.clone(),
        }
    }

    /// The call waits for a person's approval, for `reason`. A handler that was sent as
    /// previewed and would now change something else shows that (`moved`); a first
    /// preview is made by the dialog once the round's other calls ran ([`Tool::preview`]),
    /// as they may change what this one would.
    pub(super) fn wait_for_approval(
        &self,
        rt: &Runtime,
        reason: String,
        arguments: Value,
        moved: Option<Previewed>,
    ) -> Step {
        let preview = moved.map(|now| Box::new((Preview::of(rt, &now.changes), now)));
        let ask = Ask { kind: InteractionKind::Approval, prompt: reason, options: Vec::new() };
        Step::Wait(Waiting { ask, state: Value::Null, input: arguments.clone(), arguments, defined: None, preview })
    }

    /// Decodes the model's arguments (a JSON string is parsed; `null` and `""` mean `{}`)
    /// and validates them against the input schema; the error is the text for the model.
    pub fn check_arguments(&self, arguments: Value) -> Result<Value, ToolError> {
        let arguments = match arguments {
            Value::Null => json!({}),
            Value::String(text) if text.trim().is_empty() => json!({}),
            Value::String(text) => serde_json::from_str(&text).map_err(|e| {
                ToolError::new(format!(
                    "invalid JSON in the arguments of `{}`: {e}. Send a JSON object that matches the tool's input schema.",
                    self.display
                ))
            })?,
            other => other,
        };
        let validator = self.validator.get(&self.input_schema).map_err(|e| {
            ToolError::new(format!(
                "`{}` cannot be called: its input schema cannot be used for validation: {e}",
                self.display
            ))
        })?;
        match violations(validator, &arguments) {
            None => Ok(arguments),
            Some(listed) => {
                Err(ToolError::new(format!("invalid arguments for `{}`: {listed}.{CALL_AGAIN}", self.display)))
            }
        }
    }
}

/// What a model reads after its arguments' violations (a person who gave them is told
/// otherwise).
pub(crate) const CALL_AGAIN: &str = " Nothing was run; call it again with arguments that match its input schema.";

/// Why a call of `tool` that would wait cannot, where nothing waits (MCP, `charm send`).
fn waits_here(tool: &str, waiting: &Waiting) -> String {
    if waiting.ask.kind == InteractionKind::Approval {
        format!("`{tool}` needs the user's approval before it runs ({}), and none was given", waiting.ask.prompt)
    } else {
        format!("`{tool}` runs in the client or asks the user: only a chat, which waits for them, can call it")
    }
}
