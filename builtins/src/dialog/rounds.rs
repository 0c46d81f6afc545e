//! The rounds of a request: model answers and tool calls until the model is done.
//!
//! Each round reads the inputs (links followed), takes the catalog from the dialog's
//! `CatalogCache` (built again only when its tools changed), and sends the model what
//! `context::fill` makes of the conversation (the turns after a compaction, results
//! capped; see `compact` for when one is made) with the tools `sources::offered` picks (all
//! of the catalog, or what the runtime's `ToolSelector` keeps, a forced tool always among
//! them) and the tool choice (the first round only; later rounds are `auto`). The answer
//! (read by the `answer` module) is appended with its usage, and its tool calls go through
//! `calls`, their results appended after it. With a `result_schema`, an answer holding a
//! value that fits ends the request, and one that does not fit is sent back to be
//! corrected. Where the request starts and ends is the `request` module's.

use tracing::Instrument;
use trellis_runner::Runtime;

use super::answer::{answer, open, Answer};
use super::calls;
use super::compact::{self, Compaction};
use super::context;
use super::interaction::{Held, HeldCall};
use super::request::{append, input, is_current};
use super::result;
use super::{DialogCells, DialogInput, RequestId, Shared};
use crate::catalog::Catalog;
use crate::message::{Message, Part, Role, ToolOutput};
use crate::model::{ModelRequest, ToolChoice};
use crate::structured::ResultFormat;

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

/// Runs rounds `first..=max_rounds` of request `id`, `client_rounds` of which waited for
/// the client already.
pub(super) async fn run(
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
