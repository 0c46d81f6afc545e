//! One request: rounds of model answers and tool calls until the model is done.
//!
//! `add_message` (a handler) appends the message and bumps the dialog's `request`; its
//! after-commit hook starts the request as a tokio task the runtime tracks (`start`).
//! Each round reads the inputs (links followed), takes the catalog from the dialog's
//! `CatalogCache` (built again only when its tools changed), and sends the model what
//! `context::fill` makes of the conversation (the turns after a compaction, results
//! capped; see `compact` for when one is made) with the tools `sources::offered` picks (all of the
//! catalog, or what the runtime's `ToolSelector` keeps, a forced tool always among them)
//! and the tool choice (the first round only; later rounds are `auto`). The answer's text
//! streams into `partial`, written at most as often as `Throttle` allows and cut at the
//! dialog's `max_reply_bytes`; the assistant message is appended with its usage, and its
//! tool calls go through `calls`, their results appended after it. A call whose arguments
//! nest too deeply or are too large is refused and its arguments are not kept.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tracing::Instrument;
use trellis_runner::{Read, Runtime};

use super::calls;
use super::compact::{self, Compaction};
use super::context;
use super::interaction::{self, Held, HeldCall};
use super::result;
use super::{DialogCells, DialogInput, RequestId, Shared};
use crate::catalog::Catalog;
use crate::message::{Message, Part, Role, ToolOutput};
use crate::model::{ModelError, ModelEvent, ModelRequest, ToolChoice, MAX_TOOL_ARGUMENTS, MAX_TOOL_CALLS};
use crate::structured::ResultFormat;

/// How often, at most, the streamed text of a reply is written to `partial`.
const PARTIAL_EVERY: Duration = Duration::from_millis(50);

/// Where a request task begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Begin {
    /// With the model's first answer to a new message.
    Fresh,
    /// With the calls of a round that waited for a person, now all answered.
    Resume,
    /// Where the process stopped in it (see `recover`).
    Recover,
}

/// Appends `messages` and starts a new request with them, once `tx` commits.
pub(super) fn begin(
    shared: &Arc<Shared>,
    cells: &DialogCells,
    tx: &trellis_runner::Tx,
    messages: Vec<Message>,
) -> trellis_runner::Result<()> {
    for message in messages {
        cells.messages().push(tx, message)?;
    }
    let request = cells.request.get(tx)?.next();
    cells.request.set(tx, request)?;
    cells.pending.set(tx, true)?;
    cells.error.set(tx, None)?;
    cells.partial.set(tx, String::new())?;
    cells.result.set(tx, serde_json::Value::Null)?;
    cells.notice.set(tx, None)?;
    let (shared, cells) = (shared.clone(), cells.clone());
    tx.after_commit(move |rt| start(shared, rt.clone(), cells, request, Begin::Fresh));
    Ok(())
}

/// Starts request `id` of a dialog on tokio, tracked by the runtime (so `idle` and
/// `settled` wait for it) and abortable by `cancel_generation`.
pub(super) fn start(shared: Arc<Shared>, rt: Runtime, cells: DialogCells, id: RequestId, begin: Begin) {
    if tokio::runtime::Handle::try_current().is_err() {
        let message = "llm_dialog needs a tokio runtime to run requests".to_string();
        finish(&shared, &rt, &cells, id, Some(message));
        return;
    }
    let span = tracing::info_span!("llm_request", dialog = %cells.base, request = id.0);
    let task_rt = rt.clone();
    let task_cells = cells.clone();
    let task_shared = shared.clone();
    let handle = rt.spawn_tracked(
        cells.base.doc.clone(),
        async move {
            // Ends the request even if `run` panics: `pending` must never stay true.
            let guard = Finish {
                shared: task_shared.clone(),
                rt: task_rt.clone(),
                cells: task_cells.clone(),
                id,
                error: Some("the request stopped unexpectedly".into()),
            };
            let outcome = match begin {
                Begin::Fresh => run(&task_shared, &task_rt, &task_cells, id, 1, 0).await,
                Begin::Resume => resume(&task_shared, &task_rt, &task_cells, id).await,
                Begin::Recover => recover(&task_shared, &task_rt, &task_cells, id).await,
            };
            task_shared.forget(&task_cells.base, id);
            let mut guard = guard;
            guard.error = outcome.err();
        }
        .instrument(span)
        .instrument(crate::traced::agent(&cells.base.doc)),
    );
    shared.remember(cells.base, id, handle.abort_handle());
}

/// Finishes request `id` when dropped: on completion, on a panic, and on abort (where the
/// request is no longer current, so nothing changes).
struct Finish {
    shared: Arc<Shared>,
    rt: Runtime,
    cells: DialogCells,
    id: RequestId,
    error: Option<String>,
}

impl Drop for Finish {
    fn drop(&mut self) {
        finish(&self.shared, &self.rt, &self.cells, self.id, self.error.take());
    }
}

/// Whether `id` is still the dialog's current request.
pub(super) fn is_current(tx: &impl Read, cells: &DialogCells, id: RequestId) -> trellis_runner::Result<bool> {
    Ok(cells.request.get(tx)? == id)
}

/// Ends the request: clears `pending` and records its error unless a newer request took
/// over; messages queued while it ran start the next one. Only then is the error logged: a
/// request cancelled or superseded stops short by design (its task is aborted mid-way), and
/// nobody waits for its outcome.
fn finish(shared: &Arc<Shared>, rt: &Runtime, cells: &DialogCells, id: RequestId, error: Option<String>) {
    let result = rt.transact(|tx| {
        let current = is_current(tx, cells, id)?;
        if current {
            cells.pending.set(tx, false)?;
            cells.partial.set(tx, String::new())?;
            cells.error.set(tx, error.clone())?;
            cells.resumes.set(tx, 0)?;
            let queued = cells.queued.get(tx).unwrap_or_default();
            if !queued.is_empty() {
                cells.queued.set(tx, Vec::new())?;
                begin(shared, cells, tx, queued)?;
            }
        }
        Ok(current)
    });
    match (result, &error) {
        (Ok(true), Some(error)) => tracing::warn!(%error, "llm request failed"),
        (Ok(_), _) => {}
        (Err(e), _) => rt.report(e),
    }
    // A watch's message that could not start a turn while a call waited tries again.
    let idle = !cells.pending.get(rt).unwrap_or(true) && !super::interaction::is_waiting(rt, cells).unwrap_or(true);
    if shared.settings.resume && idle {
        super::watching::deliver_soon(rt, &cells.base);
    }
}

/// Appends the answer that ended a request with `value`, and stores the value in the
/// dialog's `result`, if the request is still current.
fn store_result(
    rt: &Runtime,
    cells: &DialogCells,
    id: RequestId,
    message: Message,
    value: serde_json::Value,
) -> Result<(), String> {
    rt.transact(|tx| {
        if is_current(tx, cells, id)? {
            cells.messages().push(tx, message.clone())?;
            cells.partial.set(tx, String::new())?;
            cells.result.set(tx, value.clone())?;
        }
        Ok(())
    })
    .map_err(|e| format!("could not store the result: {e}"))
}

/// Stores a compaction of the conversation if the request is still current; false when it
/// was superseded.
fn store_compaction(rt: &Runtime, cells: &DialogCells, id: RequestId, compaction: &Compaction) -> Result<bool, String> {
    rt.transact(|tx| {
        let current = is_current(tx, cells, id)?;
        if current {
            cells.compaction.set(tx, Some(compaction.clone()))?;
        }
        Ok(current)
    })
    .map_err(|e| format!("could not store the compaction: {e}"))
}

/// Takes the messages sent while the request runs into the conversation, unless the
/// dialog's `while_running` is `queue` (then the reply's end does); false when the request
/// was superseded.
fn steer(rt: &Runtime, cells: &DialogCells, id: RequestId) -> Result<bool, String> {
    let nothing = cells.queued.get(rt).map_or(true, |queued| queued.is_empty());
    if nothing || input(rt, cells, DialogInput::WhileRunning).as_str() == Some("queue") {
        return Ok(true);
    }
    rt.transact(|tx| {
        if !is_current(tx, cells, id)? {
            return Ok(false);
        }
        let queued = cells.queued.get(tx).unwrap_or_default();
        if !queued.is_empty() {
            cells.queued.set(tx, Vec::new())?;
            for message in queued {
                cells.messages().push(tx, message)?;
            }
        }
        Ok(true)
    })
    .map_err(|e| format!("could not take the queued messages in: {e}"))
}

/// Appends a message if the request is still current; false when it was superseded.
fn append(rt: &Runtime, cells: &DialogCells, id: RequestId, message: Message) -> Result<bool, String> {
    rt.transact(|tx| {
        if !is_current(tx, cells, id)? {
            return Ok(false);
        }
        cells.messages().push(tx, message.clone())?;
        cells.partial.set(tx, String::new())?;
        Ok(true)
    })
    .map_err(|e| format!("could not store the reply: {e}"))
}

/// Reads an input that may be a literal or a link; `null` when absent.
pub(super) fn input(rt: &Runtime, cells: &DialogCells, key: DialogInput) -> serde_json::Value {
    rt.read(&cells.inputs.child(key.key())).map(|v| v.to_json()).unwrap_or_default()
}

/// Goes on with a round whose waiting calls are all answered: runs the approved ones,
/// appends the round's results, and continues with the next round.
async fn resume(shared: &Shared, rt: &Runtime, cells: &DialogCells, id: RequestId) -> Result<(), String> {
    let held = interaction::held_cell(cells).get(rt).map_err(|e| format!("the waiting round is not valid: {e}"))?;
    let Some(held) = held.filter(|held| held.request == id) else { return Ok(()) };
    go_on(shared, rt, cells, id, held).await
}

/// Goes on with a request its process stopped in: a round that had all its answers goes
/// on as [`resume`] does; else the calls of the last answer that have no result are taken
/// on (see `recover`), and the model is asked again.
async fn recover(shared: &Shared, rt: &Runtime, cells: &DialogCells, id: RequestId) -> Result<(), String> {
    tracing::info!("resuming a request the process stopped in");
    let held = interaction::held_cell(cells).get(rt).map_err(|e| format!("the waiting round is not valid: {e}"))?;
    let catalog = cells.catalog.get(rt, &input(rt, cells, DialogInput::Tools));
    if let Some(mut held) = held {
        held.request = id;
        super::recover::answer_cut(rt, cells, &catalog, &mut held);
        return go_on(shared, rt, cells, id, held).await;
    }
    let messages = cells.messages().get(rt).map_err(|e| format!("the messages are not valid: {e}"))?;
    match super::recover::cut_round(rt, cells, id, &messages, &catalog) {
        Some(held) => match calls::settle_round(shared, rt, cells, id, &catalog, held.clone()).await? {
            true => run(shared, rt, cells, id, held.round + 1, held.client_rounds).await,
            false => Ok(()),
        },
        None => run(shared, rt, cells, id, super::recover::answers_since_asked(&messages) + 1, 0).await,
    }
}

/// Runs the approved calls of a round whose answers are all in, appends its results, and
/// continues with the next round.
async fn go_on(
    shared: &Shared,
    rt: &Runtime,
    cells: &DialogCells,
    id: RequestId,
    mut held: Held,
) -> Result<(), String> {
    for call in held.calls.iter_mut().filter(|call| call.output.is_none() && !call.approved) {
        call.output = Some(ToolOutput::ErrorText("no answer was given for this call".into()));
    }
    let catalog = cells.catalog.get(rt, &input(rt, cells, DialogInput::Tools));
    if calls::settle_round(shared, rt, cells, id, &catalog, held.clone()).await? {
        run(shared, rt, cells, id, held.round + 1, held.client_rounds).await
    } else {
        Ok(())
    }
}

/// Runs rounds `first..=max_rounds` of request `id`, `client_rounds` of which waited for
/// the client already.
async fn run(
    shared: &Shared,
    rt: &Runtime,
    cells: &DialogCells,
    id: RequestId,
    first: u32,
    client_rounds: u32,
) -> Result<(), String> {
    let settings = shared.settings;
    let format = match input(rt, cells, DialogInput::ResultSchema) {
        serde_json::Value::Null => None,
        schema => Some(ResultFormat::new(schema)?),
    };
    let mut corrections = 0;
    for round in first..=settings.max_rounds {
        if !steer(rt, cells, id)? {
            return Ok(());
        }
        let messages = cells.messages().get(rt).map_err(|e| format!("the messages are not valid: {e}"))?;
        let model_spec = input(rt, cells, DialogInput::Model).as_str().unwrap_or("offline").to_string();
        let model = shared.model(&model_spec).map_err(|e| e.to_string())?;
        // Rebuilt only when the tools changed (a charm renamed, attached, ...).
        let catalog = cells.catalog.get(rt, &input(rt, cells, DialogInput::Tools));
        let system = input(rt, cells, DialogInput::System).as_str().map(str::to_string);
        let mut request = ModelRequest {
            system: None,
            messages: Vec::new(),
            tools: Vec::new(),
            max_tokens: input(rt, cells, DialogInput::MaxTokens).as_u64().and_then(|n| u32::try_from(n).ok()),
            // A forced choice holds for the first answer only: once the tool ran, the model
            // must be free to answer in words, or `required` would loop to the round cap.
            // `none` holds throughout: a later round (a correction of a result) calls no
            // tool either.
            tool_choice: match tool_choice(&input(rt, cells, DialogInput::ToolChoice), &catalog)? {
                ToolChoice::None => ToolChoice::None,
                chosen if round == first && first == 1 => chosen,
                _ => ToolChoice::Auto,
            },
            result: format.clone(),
        };
        request.tools = crate::sources::offered(rt, catalog.specs(), &messages, &request.tool_choice);
        if request.tool_choice != ToolChoice::None {
            request.tools.extend(super::watching::spec(&catalog));
        }
        let cap = context::cap_of(&input(rt, cells, DialogInput::ToolResultCap));
        let compaction = cells.compaction.get(rt).ok().flatten().filter(|c| c.covers(&messages));
        let mut cut = context::fill(&mut request, system.as_deref(), &messages, compaction.as_ref(), cap);
        let budget = compact::budget_of(&input(rt, cells, DialogInput::ContextBudget), model.context_window());
        if compact::estimate_tokens(&request) > budget {
            if let Some(new) = compact::compact((&*model, &model_spec), &messages, compaction.as_ref(), budget).await? {
                if !store_compaction(rt, cells, id, &new)? {
                    return Ok(());
                }
                cut = context::fill(&mut request, system.as_deref(), &messages, Some(&new), cap);
            }
        }
        if cut && catalog.get(context::READ_RESULT).is_none() {
            request.tools.push(context::read_result_spec());
        }
        if let Some(note) = super::stale::note(rt, cells) {
            request.system = Some(match request.system.take() {
                Some(system) => format!("{system}\n\n{note}"),
                None => note,
            });
        }
        // After the estimate: a file counts for its description there, not its bytes.
        crate::files::load(rt, &mut request.messages);
        if shared.is_text_only(&model_spec) {
            crate::files::withhold_media(&mut request.messages);
        }
        tracing::debug!(round, model = %model_spec, tools = request.tools.len(), "asking the model");
        let chat = crate::traced::Chat::start(&model_spec, &request);
        let answered = async {
            match open(shared, rt, cells, id, (&*model, &model_spec), request).await {
                Ok(stream) => answer(rt, cells, id, stream, settings.max_reply_bytes).await,
                Err(error) => Err(error),
            }
        }
        .instrument(chat.span())
        .await;
        crate::counted::model_request(&model_spec, answered.as_ref().map(|answer| answer.usage).map_err(|_| ()));
        chat.end(
            answered
                .as_ref()
                .map(|a| (a.usage, a.text.as_str(), a.calls.iter().map(|c| &c.part).collect()))
                .map_err(|_| ()),
        );
        let Answer { text, calls, usage, cut } = answered?;
        if cut {
            // Keep what arrived; calls announced after the cut were never completed.
            let mut message = Message::assistant(text);
            message.usage = usage;
            append(rt, cells, id, message)?;
            return Err(format!(
                "{} sent a reply longer than {} bytes; it was stopped there",
                model.name(),
                settings.max_reply_bytes
            ));
        }

        if let Some(format) = &format {
            let named: Vec<(&str, &serde_json::Value)> = calls.iter().map(|c| (c.name(), c.input())).collect();
            match result::ending(format, &text, &named) {
                result::Ending::NotYet => {}
                result::Ending::Value(value) => {
                    let mut message = result::kept(text, &value);
                    message.usage = usage;
                    return store_result(rt, cells, id, message, value);
                }
                result::Ending::Wrong(why) => {
                    let mut message = result::kept_wrong(text, &named);
                    message.usage = usage;
                    if corrections == result::MAX_CORRECTIONS {
                        append(rt, cells, id, message)?;
                        return Err(format!(
                            "{} gave no value that fits the result schema in {} tries; the last: {why}",
                            model.name(),
                            corrections + 1
                        ));
                    }
                    corrections += 1;
                    if !append(rt, cells, id, message)? || !append(rt, cells, id, result::correction(&why))? {
                        return Ok(());
                    }
                    continue;
                }
            }
        }
        let mut content = Vec::new();
        if !text.trim().is_empty() {
            content.push(Part::Text { text });
        }
        content.extend(calls.iter().map(|call| call.part.clone()));
        if content.is_empty() {
            return Err(format!("{} returned an empty answer", model.name()));
        }
        let mut message = Message::new(Role::Assistant, content);
        message.usage = usage;
        // Only this request appends while it runs: the message goes right after those read.
        let at = messages.len();
        if !append(rt, cells, id, message)? || calls.is_empty() {
            return Ok(());
        }

        let held = Held {
            request: id,
            round,
            calls: calls
                .iter()
                .enumerate()
                .map(|(index, call)| HeldCall {
                    id: call.id().to_string(),
                    name: call.name().to_string(),
                    input: call.input().clone(),
                    output: call.refused.clone().map(ToolOutput::ErrorText),
                    approved: false,
                    after_client: None,
                    index,
                    edited: false,
                    previewed: None,
                })
                .collect(),
            client_rounds,
            message: at,
        };
        if !calls::settle_round(shared, rt, cells, id, &catalog, held).await? {
            return Ok(());
        }
    }
    let stop = format!(
        "I stopped after {} rounds of tool calls without reaching an answer. Tell me to continue if you want me to go on.",
        settings.max_rounds
    );
    append(rt, cells, id, Message::assistant(stop)).map(drop)
}

/// The `tool_choice` input: `auto` (also when absent), `none`, `required`, or one tool by
/// display (or wire) name.
fn tool_choice(input: &serde_json::Value, catalog: &Catalog) -> Result<ToolChoice, String> {
    let name = match input {
        serde_json::Value::Null => return Ok(ToolChoice::Auto),
        serde_json::Value::String(name) => name.trim(),
        other => return Err(format!("tool_choice must be auto, none, required or a tool's name, not {other}")),
    };
    match name {
        "" | "auto" => Ok(ToolChoice::Auto),
        "none" => Ok(ToolChoice::None),
        "required" => Ok(ToolChoice::Required),
        tool => match catalog.get(tool) {
            Some(tool) => Ok(ToolChoice::Tool(tool.wire.clone())),
            None => {
                let known: Vec<&str> = catalog.tools().iter().map(|t| t.display.as_str()).collect();
                Err(format!(
                    "tool_choice names `{tool}`, which is not one of the tools ({}); mention its charm or choose auto",
                    if known.is_empty() { "there are none".to_string() } else { known.join(", ") }
                ))
            }
        },
    }
}

/// Words of a provider's refusal that say it was the images or documents it refused.
const REFUSED_MEDIA: [&str; 6] = ["image", "vision", "multimodal", "mmproj", "pdf", "file"];

/// Starts the model's answer to `request`. A provider that refuses a request carrying
/// images or documents for them is asked again with a placeholder for each, and so is every
/// later request to that model; the person is told once, in the dialog's `notice`.
async fn open(
    shared: &Shared,
    rt: &Runtime,
    cells: &DialogCells,
    id: RequestId,
    (model, spec): (&dyn crate::model::Model, &str),
    request: ModelRequest,
) -> Result<Opened, String> {
    // What the model was shown each tool as, to name a call in what it is told back.
    let shown_as = request.tools.iter().map(|t| (t.name.clone(), t.display_name.clone())).collect();
    let again = crate::files::carries_media(&request.messages).then(|| request.clone());
    let refused = match (model.stream(request).await, again) {
        (Ok(stream), _) => return Ok(Opened { stream, shown_as }),
        (Err(ModelError::Refused { message, .. }), Some(again))
            if REFUSED_MEDIA.iter().any(|word| message.to_lowercase().contains(word)) =>
        {
            (message, again)
        }
        (Err(error), _) => return Err(error.to_string()),
    };
    let (why, mut again) = refused;
    shared.make_text_only(spec);
    let turned = crate::files::withhold_media(&mut again.messages);
    let notice = format!(
        "{} does not take images or documents (it said: {}); it reads a note of each instead ({})",
        model.name(),
        crate::text::truncate(&why, 200),
        turned.join(", ")
    );
    rt.transact(|tx| {
        if is_current(tx, cells, id)? {
            cells.notice.set(tx, Some(notice.clone()))?;
        }
        Ok(())
    })
    .map_err(|e| format!("could not store the notice: {e}"))?;
    let stream = model.stream(again).await.map_err(|e| e.to_string())?;
    Ok(Opened { stream, shown_as })
}

/// A model's answer as it begins.
struct Opened {
    stream: crate::model::EventStream,
    /// The wire name and display name of each tool offered.
    shown_as: Vec<(String, String)>,
}

/// Streams one answer: its text (shown in `partial` as it arrives) and its tool calls.
async fn answer(
    rt: &Runtime,
    cells: &DialogCells,
    id: RequestId,
    opened: Opened,
    max_reply_bytes: usize,
) -> Result<Answer, String> {
    let Opened { mut stream, shown_as } = opened;
    let mut answer = Answer::default();
    let mut shown = Throttle::default();
    while let Some(event) = stream.next().await {
        match event.map_err(|e| e.to_string())? {
            ModelEvent::TextDelta(delta) => {
                if answer.text.len() + delta.len() > max_reply_bytes {
                    let room = max_reply_bytes.saturating_sub(answer.text.len());
                    let cut = (0..=room.min(delta.len())).rev().find(|&i| delta.is_char_boundary(i)).unwrap_or(0);
                    answer.text.push_str(&delta[..cut]);
                    answer.cut = true;
                    // Dropping the stream stops the provider's request.
                    break;
                }
                answer.text.push_str(&delta);
                if shown.due() {
                    let started = Instant::now();
                    let written = rt.transact(|tx| {
                        if is_current(tx, cells, id)? {
                            cells.partial.set(tx, answer.text.clone())?;
                        }
                        Ok(())
                    });
                    if let Err(e) = written {
                        tracing::warn!(error = %e, "could not show the partial reply");
                    }
                    shown.wrote(started.elapsed());
                }
            }
            ModelEvent::ToolCall { id, name, input } => {
                // Providers stop sooner; this holds for every model.
                if answer.calls.len() == MAX_TOOL_CALLS {
                    return Err(format!("the model's answer has more than {MAX_TOOL_CALLS} tool calls"));
                }
                let display = shown_as.iter().find(|(wire, _)| *wire == name).map(|(_, display)| display.clone());
                answer.calls.push(Call::checked(id, name, display, input));
            }
            ModelEvent::Finish { usage, .. } => {
                answer.usage = usage;
                break;
            }
        }
    }
    Ok(answer)
}

/// One tool call of an answer.
struct Call {
    /// The call as the conversation keeps it.
    part: Part,
    /// Why it is refused without running, when its arguments cannot be kept.
    refused: Option<String>,
}

impl Call {
    fn id(&self) -> &str {
        match &self.part {
            Part::ToolCall { id, .. } => id,
            _ => "",
        }
    }

    fn name(&self) -> &str {
        match &self.part {
            Part::ToolCall { name, .. } => name,
            _ => "",
        }
    }

    fn input(&self) -> &serde_json::Value {
        match &self.part {
            Part::ToolCall { input, .. } => input,
            _ => &serde_json::Value::Null,
        }
    }

    /// The call, unless its arguments nest deeper than values entering the runtime may,
    /// or are larger than [`MAX_TOOL_ARGUMENTS`]: then its arguments are not kept (the
    /// conversation must stay loadable, and it is sent again with every request) and the
    /// model is told why.
    /// `display`: the tool's name as the model was shown it, if it was offered one.
    fn checked(id: String, name: String, display: Option<String>, input: serde_json::Value) -> Call {
        let shown = display.as_deref().unwrap_or(&name);
        let refused = match trellis_runner::depth::check_depth_of(&input, format!("the arguments of `{shown}`")) {
            Err(error) => Some(("nested too deeply", error.to_string())),
            Ok(()) if serde_json::to_vec(&input).map_or(true, |json| json.len() > MAX_TOOL_ARGUMENTS) => Some((
                "too large",
                format!("the arguments of `{shown}` are larger than {} KiB; send less", MAX_TOOL_ARGUMENTS >> 10),
            )),
            Ok(()) => None,
        };
        match refused {
            None => Call { part: Part::ToolCall { id, name, input }, refused: None },
            Some((kept, why)) => {
                let input = serde_json::Value::String(format!("(not kept: {kept})"));
                Call { part: Part::ToolCall { id, name, input }, refused: Some(why) }
            }
        }
    }
}

/// What one model answer said.
#[derive(Default)]
struct Answer {
    text: String,
    calls: Vec<Call>,
    usage: Option<crate::model::Usage>,
    /// The text reached the reply limit and the rest was not read.
    cut: bool,
}

/// When the next `partial` write may happen.
///
/// Each write is a durable commit whose cost grows with the text, so the pause after a
/// write grows with what the write took: writes never take more than a fifth of the time,
/// and a long reply stays linear however slow storage is.
#[derive(Default)]
struct Throttle {
    next: Option<Instant>,
}

impl Throttle {
    fn due(&self) -> bool {
        self.next.is_none_or(|next| Instant::now() >= next)
    }

    fn wrote(&mut self, took: Duration) {
        self.next = Some(Instant::now() + PARTIAL_EVERY.max(took * 4));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Defect: the throttle took its time before the durable commit, so once a commit took
    /// longer than the interval every delta committed again.
    #[test]
    fn the_pause_after_a_partial_write_grows_with_the_write() {
        let mut throttle = Throttle::default();
        assert!(throttle.due(), "the first delta is shown at once");
        throttle.wrote(Duration::from_millis(1));
        assert!(!throttle.due(), "a fast write still waits the base interval");
        throttle.wrote(Duration::from_secs(10));
        let next = throttle.next.expect("a write sets the next time");
        assert!(next >= Instant::now() + Duration::from_secs(39), "a 10 s write pauses 40 s");
    }

    /// The request-id guard on its own, with no task to abort: a request that is no
    /// longer the dialog's current one writes nothing, neither a message nor its end.
    #[test]
    fn a_superseded_request_writes_nothing_though_it_is_never_aborted() {
        use super::super::{DialogCells, RequestId};
        let rt = Runtime::in_memory();
        let cells = DialogCells::at(trellis_runner::Link::new(rt.space().new_doc_id("dialog"), Default::default()));
        rt.transact(|tx| {
            cells.messages().set(tx, Vec::new())?;
            cells.pending.set(tx, true)?;
            cells.error.set(tx, None)?;
            // Request 1 was superseded (a new message, a cancel) by request 2.
            cells.request.set(tx, RequestId(2))
        })
        .expect("a dialog's state");

        assert_eq!(append(&rt, &cells, RequestId(1), Message::assistant("late")), Ok(false));
        let shared = super::super::LlmDialog::new().shared;
        finish(&shared, &rt, &cells, RequestId(1), Some("a late failure".into()));
        assert!(cells.messages().get(&rt).expect("messages").is_empty(), "no late message");
        assert!(cells.pending.get(&rt).expect("pending"), "the current request is still running");
        assert_eq!(cells.error.get(&rt).expect("error"), None, "no late error");

        assert_eq!(append(&rt, &cells, RequestId(2), Message::assistant("on time")), Ok(true));
        finish(&shared, &rt, &cells, RequestId(2), None);
        assert_eq!(cells.messages().get(&rt).expect("messages").len(), 1);
        assert!(!cells.pending.get(&rt).expect("pending"), "the current request ended");
    }
}
