//! One model answer: opening its stream and reading it.
//!
//! The answer's text streams into `partial`, written at most as often as `Throttle`
//! allows and cut at the dialog's `max_reply_bytes`; its tool calls are collected, each
//! checked as it arrives: a call whose arguments nest too deeply or are too large is
//! refused and its arguments are not kept. A provider that refuses a request for its
//! images or documents is asked again with a note of each (`open`). Kept apart from the
//! rounds so that a round reads as its steps, not as the details of a stream.

use std::time::{Duration, Instant};

use futures::StreamExt;
use trellis_runner::Runtime;

use super::request::is_current;
use super::{DialogCells, RequestId, Shared};
use crate::message::Part;
use crate::model::{ModelError, ModelEvent, ModelRequest, MAX_TOOL_ARGUMENTS, MAX_TOOL_CALLS};

/// How often, at most, the streamed text of a reply is written to `partial`.
const PARTIAL_EVERY: Duration = Duration::from_millis(50);

/// Words of a provider's refusal that say it was the images or documents it refused.
const REFUSED_MEDIA: [&str; 6] = ["image", "vision", "multimodal", "mmproj", "pdf", "file"];

/// Starts the model's answer to `request`. A provider that refuses a request carrying
/// images or documents for them is asked again with a placeholder for each, and so is every
/// later request to that model; the person is told once, in the dialog's `notice`.
pub(super) async fn open(
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
pub(super) struct Opened {
    stream: crate::model::EventStream,
    /// The wire name and display name of each tool offered.
    shown_as: Vec<(String, String)>,
}

/// Streams one answer: its text (shown in `partial` as it arrives) and its tool calls.
pub(super) async fn answer(
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
pub(super) struct Call {
    /// The call as the conversation keeps it.
    pub(super) part: Part,
    /// Why it is refused without running, when its arguments cannot be kept.
    pub(super) refused: Option<String>,
}

impl Call {
    pub(super) fn id(&self) -> &str {
        match &self.part {
            Part::ToolCall { id, .. } => id,
            _ => "",
        }
    }

    pub(super) fn name(&self) -> &str {
        match &self.part {
            Part::ToolCall { name, .. } => name,
            _ => "",
        }
    }

    pub(super) fn input(&self) -> &serde_json::Value {
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
pub(super) struct Answer {
    pub(super) text: String,
    pub(super) calls: Vec<Call>,
    pub(super) usage: Option<crate::model::Usage>,
    /// The text reached the reply limit and the rest was not read.
    pub(super) cut: bool,
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
}
