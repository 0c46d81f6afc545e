//! Running a call by what its tool is: a handler's event sent within the timeout (on a
//! handler thread, see `workers`), or only previewed; a pattern's charm made, settled and
//! stopped; a defined tool's server phase on a blocking thread; a read of a charm's data;
//! a source's tool. Every call reaches here through `Tool::step`, its arguments checked
//! and its approval settled by the module above, so nothing here decides whether a call
//! may run, only how it does.

use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tracing::Instrument;
use trellis_runner::{DocId, Error, Link, Path, Previewed, Runtime, Sent};

use super::{workers, Invocation, Preview, Step, Waiting};
use crate::ask::InteractionKind;
use crate::catalog::summary::{handler_answer, snapshot};
use crate::catalog::{Calling, Tool, ToolTarget};
use crate::message::ToolOutput;
use crate::tool::{Ask, Start, ToolError, ToolRef};

impl Tool {
    /// What a call of this tool (a handler's) with `arguments` would change now: shown,
    /// and the paths behind it. `None` for a tool that is no handler.
    pub async fn preview(&self, rt: &Runtime, arguments: &Value, timeout: Duration) -> Option<(Preview, Previewed)> {
        let ToolTarget::Handler { stream } = &self.target else { return None };
        let event = self.shape.event_from_arguments(arguments.clone());
        Some(match send_within(rt, stream, event, timeout, false, None, Sending::Preview).await {
            Ok(sent) => (Preview::of(rt, &sent.previewed.changes), sent.previewed),
            Err(Failed::Moved(now)) => (Preview::of(rt, &now.changes), now),
            Err(Failed::Text(error)) => (Preview::failed(error), Previewed::default()),
        })
    }

    /// Runs this tool's first step with checked arguments, approval settled, inside a
    /// `tool_call` tracing span, as `calling` says; a handler approved on a preview
    /// commits only what was `previewed`.
    pub(super) async fn step(
        &self,
        rt: &Runtime,
        arguments: Value,
        timeout: Duration,
        calling: Calling,
        receipt: Option<&Link>,
        previewed: Option<Previewed>,
    ) -> Step {
        let span = tracing::info_span!("tool_call", tool = %self.display, wire = %self.wire);
        async {
            let invocation = match &self.target {
                ToolTarget::Handler { stream } => {
                    let sending = previewed.map_or(Sending::Commit, Sending::Expect);
                    match self.call_handler(rt, stream, arguments.clone(), timeout, calling, receipt, sending).await {
                        Ok(invocation) => invocation,
                        Err(now) => {
                            let reason = self.approval_for(&arguments).unwrap_or_default();
                            let reason = format!("the state changed since you saw it; {reason}");
                            return self.wait_for_approval(rt, reason, arguments, Some(now));
                        }
                    }
                }
                ToolTarget::Pattern { id, prefilled } => self.run_pattern(rt, id, prefilled, arguments, timeout).await,
                ToolTarget::Read { charm } => read_data(rt, charm, &arguments),
                ToolTarget::Defined(tool) => match run_blocking(tool.clone(), arguments.clone(), timeout).await {
                    Ok(Start::Done { output, effect }) => {
                        Invocation { output: ToolOutput::Json(output), summary: None, effect }
                    }
                    Ok(Start::Client { state, input, ask }) => {
                        tracing::debug!("tool call waits for the client");
                        let defined = Some(tool.name().to_string());
                        return Step::Wait(Waiting { ask, state, input, arguments, defined, preview: None });
                    }
                    Err(error) => Invocation::error(format!("`{}` failed: {error}", self.display)),
                },
                ToolTarget::Source { source, tool, .. } => call_source(rt, source, tool, arguments, timeout).await,
                ToolTarget::Client => {
                    let prompt = self.description.clone();
                    let ask = Ask { kind: InteractionKind::ClientExecution, prompt, options: Vec::new() };
                    let input = arguments.clone();
                    return Step::Wait(Waiting {
                        ask,
                        state: Value::Null,
                        input,
                        arguments,
                        defined: None,
                        preview: None,
                    });
                }
            };
            match &invocation.output {
                ToolOutput::ErrorText(error) => tracing::info!(%error, "tool call failed"),
                _ => tracing::debug!(summary = invocation.summary.as_deref().unwrap_or(""), "tool call done"),
            }
            Step::Done(invocation)
        }
        .instrument(span)
        .await
    }

    /// Sends the call's event; `Err`: sent as previewed, it would now change this instead
    /// (nothing was written).
    #[allow(clippy::too_many_arguments)]
    async fn call_handler(
        &self,
        rt: &Runtime,
        stream: &Link,
        arguments: Value,
        timeout: Duration,
        calling: Calling,
        receipt: Option<&Link>,
        sending: Sending,
    ) -> Result<Invocation, Previewed> {
        let event = self.shape.event_from_arguments(arguments);
        let result = Link::new(stream.doc.clone(), Path::root());
        let before = snapshot(rt, &result).unwrap_or(Value::Null);
        let sent = match send_within(rt, stream, event, timeout, calling.inline, receipt, sending).await {
            Ok(sent) => sent,
            Err(Failed::Moved(now)) => return Err(now),
            Err(Failed::Text(message)) => return Ok(Invocation::error(format!("`{}` {message}", self.display))),
        };
        let (after, note) = match snapshot(rt, &result) {
            Ok(after) => (after, None),
            Err(error) => (Value::Null, Some(format!("the handler ran, but its result cannot be read: {error}"))),
        };
        let note = match sent.replayed {
            // Its change is in `before` already: the summary cannot tell it.
            true => Some("this call ran before the process restarted: its change was applied then, once".to_string()),
            false => note,
        };
        let (mut output, summary) = handler_answer(&before, after, sent.returned, calling.snapshot_limit);
        if let (Some(note), Value::Object(map)) = (note, &mut output) {
            map.insert("note".into(), json!(note));
        }
        Ok(Invocation::json(output, Some(summary)))
    }

    async fn run_pattern(
        &self,
        rt: &Runtime,
        id: &str,
        prefilled: &Map<String, Value>,
        arguments: Value,
        timeout: Duration,
    ) -> Invocation {
        let started = Instant::now();
        if tokio::runtime::Handle::try_current().is_err() {
            return Invocation::error(format!("`{}` cannot run: tool calls need a Tokio runtime", self.display));
        }
        let mut argument = self.shape.event_from_arguments(arguments);
        match &mut argument {
            Value::Object(map) => map.extend(prefilled.iter().map(|(k, v)| (k.clone(), v.clone()))),
            Value::Null => argument = Value::Object(prefilled.clone()),
            _ => {}
        }
        let charm = match rt.charms().create(id, argument) {
            Ok(charm) => Instance { rt: rt.clone(), id: charm },
            Err(error) => return Invocation::error(format!("`{}` failed: {error}", self.display)),
        };
        let result = rt.charms().result(&charm.id);
        let remaining = timeout.saturating_sub(started.elapsed());
        if rt.settled(&result, remaining).await.is_err() {
            return Invocation::error(format!(
                "`{}` timed out after {timeout:?}: the result of the {id} pattern did not settle; the instance was stopped",
                self.display
            ));
        }
        match snapshot(rt, &result) {
            Ok(result) => Invocation::json(json!({ "result": result }), None),
            Err(error) => Invocation::error(format!("`{}` ran, but its result cannot be read: {error}", self.display)),
        }
    }
}

/// A charm a pattern tool created; stopped when the call ends, however it ends (returned,
/// failed, timed out or cancelled). The runtime has no charm deletion yet, so its record
/// and data stay in the space.
struct Instance {
    rt: Runtime,
    id: DocId,
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Err(error) = self.rt.charms().remove(&self.id) {
            tracing::warn!(charm = %self.id, %error, "could not remove a pattern tool's charm");
        }
    }
}

/// How [`send_within`] sends.
enum Sending {
    Commit,
    /// Rolled back: what it would change.
    Preview,
    /// Committed only if it changes exactly this.
    Expect(Previewed),
}

/// Why [`send_within`] sent nothing.
enum Failed {
    /// Sent as previewed, it would now change this instead.
    Moved(Previewed),
    Text(String),
}

/// Sends `event` and waits for the handler's commit, at most `timeout`; the error is the
/// rest of a sentence starting with the tool's name.
async fn send_within(
    rt: &Runtime,
    stream: &Link,
    event: Value,
    timeout: Duration,
    inline: bool,
    receipt: Option<&Link>,
    sending: Sending,
) -> Result<Sent, Failed> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(Failed::Text("cannot run: tool calls need a Tokio runtime".into()));
    }
    let (rt, stream, receipt) = (rt.clone(), stream.clone(), receipt.cloned());
    let send = async move {
        match (sending, &receipt) {
            (Sending::Preview, _) => rt.preview(&stream, event).await,
            (Sending::Expect(expected), receipt) => {
                rt.send_as_previewed(&stream, event, receipt.as_ref(), expected).await
            }
            (Sending::Commit, Some(receipt)) => rt.send_once(&stream, event, receipt).await,
            (Sending::Commit, None) => rt.send(&stream, event).await,
        }
    };
    let outcome = if inline {
        tokio::time::timeout(timeout, send).await.map(Some)
    } else {
        // The handler runs synchronously inside `send`: on a worker thread it cannot
        // keep the timer below from firing.
        let job = workers::run(move || futures::executor::block_on(send));
        tokio::time::timeout(timeout, workers::result(job)).await
    };
    match outcome {
        Ok(Some(Ok(sent))) => Ok(sent),
        Ok(Some(Err(Error::Moved { now, .. }))) => Err(Failed::Moved(now)),
        Ok(Some(Err(error))) => Err(Failed::Text(format!("failed: {error}"))),
        Ok(None) => Err(Failed::Text("failed: the handler stopped unexpectedly (it panicked)".into())),
        Err(_) if inline => Err(Failed::Text(format!("timed out after {timeout:?} waiting for the handler to run"))),
        Err(_) => Err(Failed::Text(format!(
            "timed out after {timeout:?}; the handler could not be interrupted and may still finish and apply its change"
        ))),
    }
}

/// Runs a defined tool's first server phase on a blocking thread, at most `timeout`
/// (like a handler, it cannot be interrupted; after a timeout its result is dropped).
async fn run_blocking(tool: ToolRef, arguments: Value, timeout: Duration) -> Result<Start, ToolError> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err("cannot run: tool calls need a Tokio runtime".into());
    }
    let job = tokio::task::spawn_blocking(move || tool.start(arguments));
    match tokio::time::timeout(timeout, job).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(_)) => Err("its server phase stopped unexpectedly (it panicked)".into()),
        Err(_) => Err(format!("timed out after {timeout:?}").into()),
    }
}

/// A read tool's call: the plain snapshot at `path` below the charm's result.
fn read_data(rt: &Runtime, charm: &Link, arguments: &Value) -> Invocation {
    let path = arguments.get("path").and_then(Value::as_str).unwrap_or("");
    let at = path.split('/').map(str::trim).filter(|s| !s.is_empty()).fold(charm.clone(), |at, key| at.child(key));
    match snapshot(rt, &at) {
        Ok(Value::Null) if !path.is_empty() => {
            Invocation::error(format!("there is nothing at `{path}`; call it without `path` to see all the data"))
        }
        Ok(value) => Invocation::json(json!({ "value": value }), None),
        Err(e) => Invocation::error(format!("cannot read `{path}`: {e}")),
    }
}

/// Calls `tool` of the attached source `source`, giving up after `timeout`.
async fn call_source(rt: &Runtime, source: &str, tool: &str, arguments: Value, timeout: Duration) -> Invocation {
    let Some(found) = crate::sources::attached(rt).into_iter().find(|s| s.name() == source) else {
        return Invocation::error(format!("the tool source `{source}` was detached; `{source}.{tool}` is gone"));
    };
    // The time the call waits for the person's answer to the tool's question is not its own.
    let output = match crate::sources::elicit::within(timeout, found.call(tool, arguments, timeout)).await {
        Some(output) => output,
        None => ToolOutput::ErrorText(format!(
            "`{source}.{tool}` did not answer within {timeout:?}; it may still be running in `{source}`"
        )),
    };
    Invocation { output, summary: None, effect: None }
}
