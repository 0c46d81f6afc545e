//! A round's tool calls: each taken one step on through [`Catalog::begin`], the round
//! stored waiting when some need a person or the client, or its results appended.

use trellis_runner::{Runtime, Writer};

use super::context::{self, READ_RESULT};
use super::elicitation::{Call, DialogPerson};
use super::interaction::{self, AfterClient, Held, HeldCall, Interaction, Phase};
use super::recover;
use super::request::{input, is_current};
use super::{DialogCells, DialogInput, RequestId, Shared};
use crate::ask::InteractionKind;
use crate::catalog::{Catalog, ToolTarget};
use crate::invoke::{Approved, Invocation, Step, Waiting};
use crate::message::{Message, ToolOutput};
use crate::tool::person_only;

/// Takes every call of a round that has no result yet one step on (all through
/// [`Catalog::begin`], one after another in the order the model gave them): if some now
/// wait for a person or the client, the round is stored waiting and this returns false;
/// else the round's results are appended and this returns whether the request goes on.
pub(super) async fn settle_round(
    shared: &Shared,
    rt: &Runtime,
    cells: &DialogCells,
    id: RequestId,
    catalog: &Catalog,
    mut held: Held,
) -> Result<bool, String> {
    let by = super::undo::writer(rt, cells, id);
    let steps = steps(shared, (rt, &by), cells, catalog, &held).await?;
    let mut asked = Vec::new();
    // The charms the round's calls read or wrote: the model saw their data.
    let mut read = Vec::new();
    for (call, step) in held.calls.iter_mut().filter(|call| call.output.is_none()).zip(steps) {
        let tool = catalog.get(&call.name);
        let display = tool.map_or(call.name.as_str(), |t| t.display.as_str()).to_string();
        let interaction = |kind, phase, prompt: String, options, input, client_tool| Interaction {
            call_id: call.id.clone(),
            tool: display.clone(),
            wire: call.name.clone(),
            arguments: call.input.clone(),
            kind,
            phase,
            prompt,
            options,
            input,
            client_tool,
            person_only: match kind {
                InteractionKind::Approval => tool.map(|t| t.person_only.clone()).unwrap_or_default(),
                _ => Vec::new(),
            },
            preview: None,
            asked_at: interaction::now_ms(),
        };
        match step {
            Step::Done(invocation) => {
                // `Charm.key`: the charm as the model knows it.
                let charm =
                    tool.filter(|t| t.charm.is_some()).and_then(|t| Some((t.display.rsplit_once('.')?.0, &t.target)));
                if let (Some((name, ToolTarget::Handler { stream: at } | ToolTarget::Read { charm: at })), false) =
                    (charm, matches!(invocation.output, ToolOutput::ErrorText(_)))
                {
                    read.push((name.to_owned(), at.doc.clone()));
                }
                if let (Some(effect), Some(ToolTarget::Defined(defined))) = (invocation.effect, tool.map(|t| &t.target))
                {
                    let prompt = format!("{display} has a result to show");
                    let name = Some(defined.name().to_string());
                    asked.push(interaction(
                        InteractionKind::DisplayEffect,
                        Phase::Display,
                        prompt,
                        Vec::new(),
                        effect,
                        name,
                    ));
                }
                call.output = Some(match call.edited {
                    true => told_edited(invocation.output, &call.input),
                    false => invocation.output,
                });
            }
            Step::Wait(Waiting { ask, state, input, arguments, defined, preview }) => {
                let phase = if ask.kind == InteractionKind::Approval { Phase::Approval } else { Phase::Client };
                if phase == Phase::Client {
                    call.after_client = Some(AfterClient { tool: defined.clone(), arguments, state });
                }
                let shown = if phase == Phase::Client { input } else { serde_json::Value::Null };
                let mut asking = interaction(ask.kind, phase, ask.prompt, ask.options, shown, defined);
                // Asked again (the state moved since the last preview): a new answer first.
                call.approved = false;
                if let Some(preview) = preview {
                    let (shown, previewed) = *preview;
                    call.previewed = Some(previewed);
                    asking.preview = Some(shown);
                } else {
                    call.previewed = None;
                }
                asked.push(asking);
            }
        }
    }
    super::stale::record(rt, cells, &read);
    // What an approval's call would change, once the round's other calls ran (they may
    // change it): a handler's preview, unless it has one already (the state moved).
    for asking in asked.iter_mut().filter(|a| a.phase == Phase::Approval && a.preview.is_none()) {
        let (Some(tool), Some(call)) =
            (catalog.get(&asking.wire), held.calls.iter_mut().find(|c| c.id == asking.call_id))
        else {
            continue;
        };
        if let Some((shown, changed)) = tool.preview(rt, &call.input, shared.settings.tool_timeout).await {
            asking.preview = Some(shown);
            call.previewed = Some(changed);
        }
    }
    if asked.iter().any(|i| i.kind == InteractionKind::ClientExecution) {
        held.client_rounds += 1;
        let limit = input(rt, cells, DialogInput::MaxToolRounds).as_u64().unwrap_or(DEFAULT_MAX_TOOL_ROUNDS);
        if limit != 0 && u64::from(held.client_rounds) > limit {
            return stop_client_loop(shared, rt, cells, id, held, &asked, limit).map(|_| false);
        }
    }
    if asked.iter().any(Interaction::blocks) {
        // The request ends here, waiting; `resolve` starts it again.
        if interaction::ask(rt, cells, id, Some(&held), &asked)? {
            shared.time_out_waiting(rt, cells, &asked);
        }
        return Ok(false);
    }
    if !asked.is_empty() && !interaction::ask(rt, cells, id, None, &asked)? {
        return Ok(false);
    }
    let results = held.results();
    rt.transact(|tx| {
        if !is_current(tx, cells, id)? {
            return Ok(false);
        }
        cells.push_results(tx, results.clone(), shared.settings.files)?;
        recover::clear(tx, cells)?;
        interaction::forget(tx, cells)?;
        super::elicitation::end_progress(tx, cells)?;
        Ok(true)
    })
    .map_err(|e| format!("could not store the results: {e}"))
}

/// A call of the dialog's own [`READ_RESULT`]: a page of a result the conversation kept.
fn read_result(rt: &Runtime, cells: &DialogCells, arguments: &serde_json::Value) -> Result<Invocation, String> {
    let messages = cells.messages().get(rt).map_err(|e| format!("the messages are not valid: {e}"))?;
    let cap = context::cap_of(&input(rt, cells, DialogInput::ToolResultCap));
    Ok(Invocation { output: context::read_result(&messages, arguments, cap), summary: None, effect: None })
}

/// Takes each call of `held` that has no result one step on; the steps in call order.
///
/// Calls of tools outside the space (a source's: an MCP server's, say) run side by side,
/// at most [`DialogSettings::parallel_calls`](super::DialogSettings::parallel_calls) at
/// once. The others run one after another in the model's order (beside those), because
/// each result tells what its call changed: two increments of one counter run at once
/// would each report the other's change too (`count: 0 → 2` twice), and could catch the
/// charm between a commit and its derived values.
async fn steps(
    shared: &Shared,
    (rt, by): (&Runtime, &Writer),
    cells: &DialogCells,
    catalog: &Catalog,
    held: &Held,
) -> Result<Vec<Step>, String> {
    use futures::{StreamExt, TryStreamExt};
    let open = held.calls.iter().filter(|call| call.output.is_none()).enumerate();
    let (outside, inside): (Vec<_>, Vec<_>) = open.partition(|(_, call)| {
        catalog.get(&call.name).is_some_and(|tool| matches!(tool.target, ToolTarget::Source { .. }))
    });
    let in_order = async {
        let mut done = Vec::with_capacity(inside.len());
        for (at, call) in inside {
            done.push((at, one_step(shared, (rt, by), cells, catalog, (held.request, held.message), call).await?));
        }
        Ok::<_, String>(done)
    };
    let parallel = shared.settings.parallel_calls.max(1);
    // Boxed: a closure making these futures would have to be general over lifetimes.
    let calls: Vec<futures::future::BoxFuture<'_, Result<(usize, Step), String>>> = outside
        .into_iter()
        .map(|(at, call)| {
            let step = one_step(shared, (rt, by), cells, catalog, (held.request, held.message), call);
            Box::pin(async move { step.await.map(|step| (at, step)) }) as futures::future::BoxFuture<'_, _>
        })
        .collect();
    let side_by_side = futures::stream::iter(calls).buffer_unordered(parallel).try_collect::<Vec<_>>();
    let (in_order, side_by_side) = futures::future::join(in_order, side_by_side).await;
    let mut all = in_order?;
    all.extend(side_by_side?);
    all.sort_by_key(|(at, _)| *at);
    Ok(all.into_iter().map(|(_, step)| step).collect())
}

/// Takes one call of request `request`'s round of the assistant message at `message` one
/// step on.
async fn one_step(
    shared: &Shared,
    (rt, by): (&Runtime, &Writer),
    cells: &DialogCells,
    catalog: &Catalog,
    (request, message): (RequestId, usize),
    call: &HeldCall,
) -> Result<Step, String> {
    if call.name == READ_RESULT && catalog.get(READ_RESULT).is_none() {
        return Ok(Step::Done(read_result(rt, cells, &call.input)?));
    }
    if call.name == crate::watch::WATCH_TOOL && catalog.get(crate::watch::WATCH_TOOL).is_none() {
        let max = shared.settings.max_watches;
        return Ok(Step::Done(super::watching::call((rt, max), cells, catalog, &call.input)));
    }
    let tool = catalog.get(&call.name);
    // Approved now, or a tool that asks allowed in this conversation.
    let asks = tool.is_some_and(|tool| tool.approval_for(&call.input).is_some());
    // A tool with fields only a person sets asks every time, allowed or not.
    let person_only = tool.map_or(&[][..], |tool| &tool.person_only[..]);
    let allowed = asks
        && person_only.is_empty()
        && tool
            .is_some_and(|tool| interaction::allowed_cell(cells).get(rt).unwrap_or_default().contains(&tool.display));
    if call.approved
        && !person_only.is_empty()
        && (!call.edited || person_only::missing(person_only, Some(&call.input)).is_some())
    {
        let asked = person_only::reason(person_only).unwrap_or_default();
        return Ok(Step::Done(Invocation::error(format!("not run: {asked}, and the user did not set it"))));
    }
    let approval = match (&call.previewed, call.approved && !call.edited) {
        (Some(previewed), true) => Some(Approved::of_preview(previewed.clone())),
        _ => (call.approved || allowed).then(Approved::by_the_user),
    };
    // A handler records that it ran; a call outside the space that could have an effect,
    // and runs now (rather than waiting for a person or the client), is marked before it
    // starts (see `recover`).
    let receipt = recover::receipt(cells, message, call.index);
    let runs_now = approval.is_some() || !asks;
    let outside = tool.is_some_and(|tool| !tool.repeatable() && !matches!(tool.target, ToolTarget::Client) && runs_now);
    let display = tool.map_or(call.name.as_str(), |tool| tool.display.as_str());
    let by = super::undo::for_call(by, &call.id, display);
    if outside {
        recover::mark_started(rt, cells, message, call.index)?;
        if let Some(journal) = &by.journal {
            let effect = format!("{display} (call {})", call.id);
            rt.journal_effect(journal, &by, &effect).map_err(|e| format!("could not journal {effect}: {e}"))?;
        }
    }
    let timeout = shared.settings.tool_timeout;
    let named = (call.name.as_str(), Some(call.id.as_str()));
    let asks_person = tool.is_some_and(|tool| matches!(tool.target, ToolTarget::Source { .. }));
    let display = display.to_string();
    let acting = rt.acting_as(by);
    let step = catalog.begin_call(&acting, named, call.input.clone(), approval, timeout, Some(&receipt));
    if !asks_person {
        return Ok(step.await);
    }
    // A tool outside the space may ask the person something while it runs.
    let asking = Call { id: call.id.clone(), display, wire: call.name.clone(), arguments: call.input.clone() };
    let person = DialogPerson::new(rt, cells, request, asking, shared.settings.wait_timeout);
    Ok(crate::sources::elicit::with_person(std::sync::Arc::new(person), step).await)
}

/// A call's output, with what the model must know of it: the person changed its arguments
/// to `input` before approving it.
fn told_edited(output: ToolOutput, input: &serde_json::Value) -> ToolOutput {
    let note = format!("the user changed this call's arguments to {input} before approving it");
    match output {
        ToolOutput::Json(serde_json::Value::Object(mut answer)) => {
            answer.insert("arguments_changed".into(), serde_json::Value::String(note));
            ToolOutput::Json(serde_json::Value::Object(answer))
        }
        ToolOutput::ErrorText(text) => ToolOutput::ErrorText(format!("({note}) {text}")),
        other => ToolOutput::Text(format!("({note}) {}", other.as_text())),
    }
}

/// Rounds of a request that may wait for the client when `max_tool_rounds` is not given.
const DEFAULT_MAX_TOOL_ROUNDS: u64 = 5;

/// Ends a request whose client tool loop reached `max_tool_rounds`: the calls that would
/// wait for the client get a result saying so, and the conversation says it stopped.
fn stop_client_loop(
    shared: &Shared,
    rt: &Runtime,
    cells: &DialogCells,
    id: RequestId,
    mut held: Held,
    asked: &[Interaction],
    limit: u64,
) -> Result<bool, String> {
    let why = format!("not run: this request reached max_tool_rounds ({limit} rounds waiting for the client)");
    for call in held.calls.iter_mut().filter(|c| c.output.is_none()) {
        call.output = Some(ToolOutput::ErrorText(why.clone()));
    }
    let stop = format!(
        "I stopped: the tools run by your client were called for {limit} rounds (max_tool_rounds) without reaching an \
         answer. Tell me to continue if you want me to go on."
    );
    let effects: Vec<Interaction> = asked.iter().filter(|i| !i.blocks()).cloned().collect();
    if !effects.is_empty() {
        interaction::ask(rt, cells, id, None, &effects)?;
    }
    rt.transact(|tx| {
        if !is_current(tx, cells, id)? {
            return Ok(false);
        }
        cells.push_results(tx, held.results(), shared.settings.files)?;
        recover::clear(tx, cells)?;
        cells.messages().push(tx, Message::assistant(stop.clone()))?;
        Ok(true)
    })
    .map_err(|e| format!("could not store the results: {e}"))
}
