//! [`DialogHandle`]: one dialog driven from Rust (tests, the CLI, the chatbot handle).

use std::time::Duration;

use serde_json::json;
use trellis_runner::Link;

use super::interaction::{self, Interaction};
use super::resolve::Resolve;
use super::{DialogCells, DialogOutput};
use crate::message::Message;

/// Drives one dialog from Rust (tests, the CLI): send messages, wait for replies, read
/// the conversation.
#[derive(Clone)]
pub struct DialogHandle {
    rt: trellis_runner::Runtime,
    base: Link,
}

impl DialogHandle {
    /// The dialog whose outputs live at `base` (the key given to `b.builtin`).
    pub fn new(rt: trellis_runner::Runtime, base: Link) -> Self {
        DialogHandle { rt, base }
    }

    fn cells(&self) -> DialogCells {
        DialogCells::at(self.base.clone())
    }

    /// Sends a user message without waiting for the reply.
    pub async fn send(&self, message: Message) -> trellis_runner::Result<()> {
        let json = serde_json::to_value(message).map_err(trellis_runner::Error::Serialize)?;
        self.rt.send(&self.base.child(DialogOutput::AddMessage.key()), json).await.map(drop)
    }

    /// Sends a user message and waits (up to `timeout`) until the reply is complete.
    pub async fn say(&self, text: &str, timeout: Duration) -> trellis_runner::Result<()> {
        self.send(Message::user(text)).await?;
        self.wait(timeout).await
    }

    /// Waits until no request of this dialog is running.
    pub async fn wait(&self, timeout: Duration) -> trellis_runner::Result<()> {
        self.rt.settled(&self.base, timeout).await
    }

    /// Stops the running request, if any.
    pub async fn cancel(&self) -> trellis_runner::Result<()> {
        self.rt.send(&self.base.child(DialogOutput::CancelGeneration.key()), json!({})).await.map(drop)
    }

    /// The conversation so far.
    pub fn messages(&self) -> Vec<Message> {
        self.cells().messages().get(&self.rt).unwrap_or_default()
    }

    /// How many of the conversation's first messages the model reads as a summary (see
    /// the dialog's `context_budget`); 0 when none was compacted.
    pub fn compacted(&self) -> usize {
        let messages = self.messages();
        self.cells().compaction.get(&self.rt).ok().flatten().filter(|c| c.covers(&messages)).map_or(0, |c| c.upto)
    }

    /// What the person should know that is no failure, if anything (see
    /// [`DialogOutput::Notice`](super::DialogOutput::Notice)).
    pub fn notice(&self) -> Option<String> {
        self.cells().notice.get(&self.rt).ok().flatten()
    }

    /// How each running call outside the space goes (a long task's stage): the call, its
    /// tool as people know it, and what it said last.
    pub fn progress(&self) -> Vec<Progress> {
        let told = super::elicitation::progress_cell(&self.cells()).get(&self.rt).unwrap_or_default();
        if told.is_empty() {
            return Vec::new();
        }
        let messages = self.messages();
        let calls = messages.iter().rev().flat_map(|m| m.content.iter()).filter_map(|part| match part {
            crate::message::Part::ToolCall { id, name, .. } => Some((id.as_str(), name.as_str())),
            _ => None,
        });
        let wires: std::collections::HashMap<&str, &str> = calls.collect();
        let catalog = self.cells().catalog.latest();
        told.into_iter()
            .map(|(call, text)| {
                let wire = wires.get(call.as_str()).copied().unwrap_or(call.as_str());
                let tool = catalog.as_ref().and_then(|c| c.get(wire)).map_or(wire, |t| t.display.as_str()).to_string();
                Progress { call, tool, text }
            })
            .collect()
    }

    /// The tools (display names) allowed to run without asking in this conversation.
    pub fn allowed(&self) -> Vec<String> {
        super::interaction::allowed_cell(&self.cells()).get(&self.rt).unwrap_or_default()
    }

    /// Makes `tool`'s calls ask for approval again; an error if it was not allowed.
    pub async fn disallow(&self, tool: &str) -> trellis_runner::Result<()> {
        let event = serde_json::json!({ "tool": tool });
        self.rt.send(&self.base.child(super::DialogOutput::Disallow.key()), event).await.map(drop)
    }

    /// The messages sent while the reply runs, waiting to join the conversation.
    pub fn queued(&self) -> Vec<Message> {
        self.cells().queued.get(&self.rt).unwrap_or_default()
    }

    /// Whether this process resumed the dialog's last request, one a stopped process left
    /// (it may have ended since).
    pub fn resumed_here(&self) -> bool {
        self.cells().resumed_by.get(&self.rt).is_ok_and(|by| by == super::recover::this_process())
    }

    /// Whether a reply is being generated.
    pub fn pending(&self) -> bool {
        self.cells().pending.get(&self.rt).unwrap_or(false)
    }

    /// Why the last request failed, if it did.
    pub fn error(&self) -> Option<String> {
        self.cells().error.get(&self.rt).ok().flatten()
    }

    /// The calls waiting for a person's answer or the client, and display effects not
    /// acknowledged yet.
    pub fn interactions(&self) -> Vec<Interaction> {
        interaction::interactions_cell(&self.cells()).get(&self.rt).unwrap_or_default()
    }

    /// The calls the conversation waits for (display effects left out): what is pending.
    pub fn waiting(&self) -> Vec<Interaction> {
        self.interactions().into_iter().filter(Interaction::blocks).collect()
    }

    /// Waits (up to `timeout`) until the dialog is done or waits again, and returns the
    /// messages from index `from` on: what followed a message or an answer.
    pub async fn follow(&self, from: usize, timeout: Duration) -> trellis_runner::Result<Vec<Message>> {
        self.wait(timeout).await?;
        let mut messages = self.messages();
        Ok(messages.split_off(from.min(messages.len())))
    }

    /// Answers a waiting call; once none waits, the request goes on (wait for it with
    /// [`DialogHandle::wait`]). A call that is not waiting is refused.
    pub async fn resolve(&self, answer: Resolve) -> trellis_runner::Result<()> {
        let json = serde_json::to_value(answer).map_err(trellis_runner::Error::Serialize)?;
        self.rt.send(&self.base.child(DialogOutput::Resolve.key()), json).await.map(drop)
    }

    /// Puts back everything request `request` (the latest when `None`) changed in the
    /// space, in one transaction made as `by`, and tells the model in the conversation.
    /// Refused, with what was written since, when someone wrote one of those values again.
    pub fn undo(
        &self,
        request: Option<super::RequestId>,
        by: trellis_runner::Writer,
    ) -> Result<super::UndoneRequest, super::UndoError> {
        super::undo::undo(&self.rt, &self.cells(), request, by)
    }

    /// Removes this conversation's watches (they end with it: a chatbot's clear calls this).
    pub fn end_watches(&self) -> Result<Vec<crate::watch::Watch>, crate::watch::WatchError> {
        crate::watch::remove_all(&self.rt, &self.base)
    }

    /// What this conversation's watches fired that it has not been told yet.
    pub fn fired(&self) -> Vec<crate::watch::Fired> {
        crate::watch::waiting(&self.rt, &self.base)
    }

    /// Tells the conversation what its watches fired, as one message that starts a turn
    /// (wait for it with [`DialogHandle::wait`]); returns what it told, nothing when none
    /// fired.
    pub async fn deliver_watches(&self) -> trellis_runner::Result<Vec<crate::watch::Fired>> {
        super::watching::deliver(&self.rt, &self.base).await
    }

    /// The text of the reply being streamed.
    pub fn partial(&self) -> String {
        self.cells().partial.get(&self.rt).unwrap_or_default()
    }

    /// Whether a call of `name` (a wire or display name) would find its tool now: among
    /// the dialog's tools and those of the sources attached to this runtime.
    pub fn offers(&self, name: &str) -> bool {
        use trellis_runner::Read;
        let tools_at = self.cells().inputs.child(super::DialogInput::Tools.key());
        let tools = self.rt.read(&tools_at).map(|v| v.to_json()).unwrap_or_default();
        crate::catalog::Catalog::build(&self.rt, &tools).get(name).is_some()
    }

    /// The tool catalog as a UI shows it.
    pub fn flattened_tools(&self) -> serde_json::Value {
        use trellis_runner::Read;
        self.rt.read(&self.base.child(DialogOutput::FlattenedTools.key())).map(|v| v.to_json()).unwrap_or_default()
    }
}

/// How a running call outside the space goes (see [`DialogHandle::progress`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// The model's call id.
    pub call: String,
    /// The tool as people know it (`ev.simulate-research-query`).
    pub tool: String,
    /// What it said last.
    pub text: String,
}
