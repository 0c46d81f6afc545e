//! The runtime's errors. Each message says what happened and, where it can, what to do.

use crate::link::{DocId, Link};
use crate::storage::StorageError;
use crate::value::PathError;

/// A boxed error from user code (handlers, derives, pattern builders).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in the runtime.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Another transaction changed what this one read; retried automatically up to a bound.
    #[error("transaction conflict on document {doc}")]
    Conflict {
        /// The document that changed underneath.
        doc: DocId,
    },
    /// A transaction kept conflicting.
    #[error("transaction still conflicted after {attempts} attempts (last on document {doc}); the data is contended, try again")]
    TooManyConflicts {
        /// How many times it ran.
        attempts: u32,
        /// The document of the last conflict.
        doc: DocId,
    },
    /// A write crossed a value that cannot hold children.
    #[error(transparent)]
    Path(#[from] PathError),
    /// Links formed a loop (or a chain longer than any real one).
    #[error("link loop while reading {0}: links point at each other")]
    LinkLoop(Link),
    /// A value nests deeper than the runtime accepts (see [`crate::depth`]).
    #[error("{what}: nested more than {limit} levels deep (at {at}); values nested deeper are refused so that the space stays loadable, so send a flatter value")]
    TooDeep {
        /// What the value is, e.g. "the event for counter/increment".
        what: String,
        /// The path inside it where the limit is crossed (shortened).
        at: String,
        /// The limit that applies.
        limit: usize,
    },
    /// A charm name that cannot be shown safely or at all.
    #[error("charm name {shown} is not allowed: {reason}; use 1 to {max} characters without control characters", max = crate::limits::MAX_NAME_CHARS)]
    BadName {
        /// The name, quoted and escaped (shortened if long).
        shown: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A handler, computation or pattern refused with its own message: what
    /// `Err("…".into())` or `Err(format!(…).into())` makes, and what a boxed error from
    /// user code becomes.
    #[error("{0}")]
    Refused(String),
    /// A value did not have the shape the Rust type expects.
    #[error("value at {at} does not fit the expected type: {source}")]
    Shape {
        /// Where the value was read.
        at: Link,
        /// What serde said.
        #[source]
        source: serde_json::Error,
    },
    /// A value could not be serialised.
    #[error("cannot store value: {0}")]
    Serialize(#[source] serde_json::Error),
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A change committed in memory could not be made durable: it was undone, with
    /// everything committed after it, and readers see the space as storage holds it.
    #[error("the change was not saved: {0}; it was undone (the space is as it was last saved), so sending it again applies it once")]
    NotSaved(StorageError),
    /// An event went to a stream that has no handler and no charm to start.
    #[error("no handler for stream {0}: it does not belong to a charm that can be started")]
    NoHandler(Link),
    /// The event did not fit the handler's event type.
    #[error("event for {stream} does not fit the handler's event type: {message}")]
    BadEvent {
        /// The stream.
        stream: Link,
        /// What was wrong.
        message: String,
    },
    /// A handler returned an error; its transaction was rolled back.
    #[error("handler {stream} failed: {message}")]
    HandlerFailed {
        /// The stream.
        stream: Link,
        /// The handler's error.
        message: String,
    },
    /// A handler panicked; its transaction was rolled back and the runtime kept running.
    #[error("handler {stream} panicked: {message}; its changes were rolled back")]
    HandlerPanicked {
        /// The stream.
        stream: Link,
        /// The panic message.
        message: String,
    },
    /// A computation failed or panicked; its output kept its previous value.
    #[error("computation `{name}` failed: {message}")]
    ComputationFailed {
        /// The computation's name.
        name: String,
        /// What went wrong.
        message: String,
    },
    /// A computation kept re-triggering itself.
    #[error("computation `{name}` re-ran {runs} times in one update: it depends on its own output (a cycle); stopped")]
    Cycle {
        /// The computation's name.
        name: String,
        /// How often it ran.
        runs: u32,
    },
    /// A handler sent as previewed ([`Runtime::send_as_previewed`](crate::Runtime::send_as_previewed))
    /// would now change something else: the state moved since the preview.
    #[error("the state changed since you saw it: what {stream}'s handler read has moved; nothing was written")]
    Moved {
        /// The stream.
        stream: Link,
        /// A fresh preview: what the handler would change now, and what it read.
        now: crate::runtime::Previewed,
    },
    /// An undo ([`Runtime::undo`](crate::Runtime::undo)) that cannot be made.
    #[error("cannot undo: {0}")]
    NotUndoable(String),
    /// An undo refused: paths it would put back were written again since; nothing changed.
    #[error("cannot undo: {} written again since, and nothing was changed: {}", plural(later.len()), later.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    UndoRefused {
        /// The paths written again, and by whom.
        later: Vec<crate::runtime::Later>,
    },
    /// A handler or computation waited on `send`: it would wait for itself.
    #[error("an event to {0} was sent and awaited from inside a handler or computation, which would wait forever; write through the transaction instead, or send from `Tx::after_commit`")]
    Reentrant(Link),
    /// Code run after a commit (a builtin's hook) panicked; the commit itself stands.
    #[error("a hook run after a commit panicked: {0}")]
    HookPanicked(String),
    /// Several charms have this name.
    #[error("`{name}` names {} charms; use one of their ids: {}", ids.len(), ids.join(", "))]
    AmbiguousCharm {
        /// The name.
        name: String,
        /// The charms that have it.
        ids: Vec<String>,
    },
    /// No pattern with this id is registered.
    #[error("unknown pattern `{0}`; {list} to see the registered ones", list = actions::LIST_PATTERNS)]
    UnknownPattern(String),
    /// No charm with this id.
    #[error("unknown charm `{0}`; {list} to see the ones in this space", list = actions::LIST_CHARMS)]
    UnknownCharm(String),
    /// The argument did not fit the pattern's argument type.
    #[error("argument for pattern `{pattern}` is invalid: {message}")]
    BadArgument {
        /// The pattern.
        pattern: String,
        /// What was wrong.
        message: String,
    },
    /// A pattern's builder failed.
    #[error("pattern `{pattern}` failed to start: {message}")]
    PatternFailed {
        /// The pattern.
        pattern: String,
        /// What went wrong.
        message: String,
    },
    /// No builtin with this id is registered.
    #[error("unknown builtin `{0}`")]
    UnknownBuiltin(String),
    /// Waiting for something took too long.
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(std::time::Duration, String),
}

/// Shorthand for results with the runtime's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<&str> for Error {
    fn from(message: &str) -> Self {
        Error::Refused(message.to_string())
    }
}

impl From<String> for Error {
    fn from(message: String) -> Self {
        Error::Refused(message)
    }
}

/// A boxed error from user code: the runtime's own error comes back out as itself.
impl From<BoxError> for Error {
    fn from(error: BoxError) -> Self {
        match error.downcast::<Error>() {
            Ok(inner) => *inner,
            Err(other) => Error::Refused(other.to_string()),
        }
    }
}

/// What errors ask the user to do, in words a front end recognises to point at its own
/// command (the `trellis` command adds `` `trellis patterns` `` after
/// [`LIST_PATTERNS`](actions::LIST_PATTERNS)). A library error describes the action; only a
/// command knows the name it is run by.
pub mod actions {
    /// See which patterns are registered.
    pub const LIST_PATTERNS: &str = "list the patterns";
    /// See which charms the space has.
    pub const LIST_CHARMS: &str = "list the charms";
    /// Give a charm another name.
    pub const RENAME_CHARMS: &str = "rename all but one";
}

/// "1 path it wrote was" / "N paths it wrote were".
fn plural(n: usize) -> String {
    match n {
        1 => "1 path it wrote was".into(),
        n => format!("{n} paths it wrote were"),
    }
}
