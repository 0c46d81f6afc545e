//! The locations of one dialog's state, and where each of them lives.

use std::sync::Arc;

use trellis_runner::{Cell, Link};

use super::{Compaction, DialogInput, DialogOutput, RequestId};
use crate::catalog::CatalogCache;
use crate::files::{self, FileLimits};
use crate::message::{Message, Part, Role};

/// The locations of one dialog's state.
#[derive(Debug, Clone)]
pub(crate) struct DialogCells {
    pub base: Link,
    pub inputs: Link,
    pub pending: Cell<bool>,
    pub request: Cell<RequestId>,
    pub error: Cell<Option<String>>,
    pub partial: Cell<String>,
    /// The value the last request ended with (see `result_schema`).
    pub result: Cell<serde_json::Value>,
    /// The conversation's oldest turns, compacted (see `context_budget`).
    pub compaction: Cell<Option<Compaction>>,
    /// What the person should know that is no failure (see `DialogOutput::Notice`).
    pub notice: Cell<Option<String>>,
    /// How many starts in a row resumed the current request (see `recover`).
    pub resumes: Cell<u32>,
    /// The process that resumed the current request last (see `recover::this_process`).
    pub resumed_by: Cell<String>,
    /// Messages sent while the reply runs (see `DialogInput::WhileRunning`).
    pub queued: Cell<Vec<Message>>,
    /// The dialog's tool catalog, shared by its requests and `flattened_tools`.
    pub catalog: Arc<CatalogCache>,
}

impl DialogCells {
    pub(super) fn at(base: Link) -> Self {
        DialogCells {
            inputs: base.child("inputs"),
            pending: Cell::from_link(base.child(DialogOutput::Pending.key())),
            request: Cell::from_link(base.child(DialogOutput::Request.key())),
            error: Cell::from_link(base.child(DialogOutput::Error.key())),
            partial: Cell::from_link(Self::beside_of(&base, "live").child(DialogOutput::Partial.key())),
            result: Cell::from_link(base.child(DialogOutput::Result.key())),
            compaction: Cell::from_link(base.child(DialogOutput::Compaction.key())),
            notice: Cell::from_link(base.child(DialogOutput::Notice.key())),
            resumes: Cell::from_link(base.child("resumes")),
            resumed_by: Cell::from_link(base.child("resumed_by")),
            queued: Cell::from_link(base.child(DialogOutput::Queued.key())),
            catalog: Arc::default(),
            base,
        }
    }

    /// A document of the dialog's own, named `name`, for values written while a request
    /// runs: the streamed reply (`live`), the marks of a round's calls (`calls`).
    ///
    /// It is kept apart from the charm's document, which holds the conversation: storage
    /// writes whole documents, so a delta written beside the messages would rewrite the
    /// whole conversation each time, and a long reply would go quadratic.
    pub fn beside(&self, name: &str) -> Link {
        Self::beside_of(&self.base, name)
    }

    fn beside_of(base: &Link, name: &str) -> Link {
        let path: Vec<&str> = base.path.segments().iter().map(|s| &**s).collect();
        Link::new(format!("{}.{}.{name}", base.doc, path.join(".")), trellis_runner::Path::root())
    }

    /// The messages cell: the `messages` input if it is a link, else the dialog's own.
    pub fn messages(&self) -> Cell<Vec<Message>> {
        Cell::from_link(self.inputs.child(DialogInput::Messages.key()))
    }

    /// Appends a tool message of `results`, the files they carry kept in documents of
    /// their own.
    pub fn push_results(
        &self,
        tx: &trellis_runner::Tx,
        results: Vec<Part>,
        limits: FileLimits,
    ) -> trellis_runner::Result<()> {
        let mut message = Message::new(Role::Tool, results);
        files::keep_results(tx, &mut message, limits)?;
        self.messages().push(tx, message)
    }
}
