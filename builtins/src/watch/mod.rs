//! Standing watches: a conversation asks to be told when a condition over a charm's
//! fields turns true (`count > 10`), and a message with its note comes back when it does.
//!
//! Every watch of the space is kept in one document, [`WATCHES_DOC`], with what it last
//! found (`holds`). Each process that opens the space [`arm`]s them: a computation per
//! watch (a derived cell in [`STATE_DOC`]) evaluates the condition whenever the charm
//! changes, in whatever process changes it, and a commit that sees it turn from false to
//! true records one firing: the message waits in the document (`fired`) until the
//! conversation takes it. A process that runs the conversation is told at once
//! ([`on_fired`]) and starts a turn with it; otherwise the next one to run it does.
//! Since `holds` is stored with the firing, a watch fires once per crossing, across
//! restarts and processes.

mod arm;
pub mod condition;
mod store;

pub use arm::{arm, off, on_fired};
pub use condition::{Condition, ConditionError, MAX_CONDITION};
pub use store::{
    add, put_back, remove, remove_all, take_fired, waiting, watches, Fired, NewWatch, Watch, WatchError,
    MAX_TOLD_PER_HOUR,
};

/// The document that keeps the space's watches and the messages they fired.
pub const WATCHES_DOC: &str = "watches";

/// The document of the watches' derived cells: what each condition gives now.
pub const STATE_DOC: &str = "watch-state";

/// How many watches one conversation keeps by default (a watch past it is refused; see
/// `DialogSettings::max_watches`).
pub const MAX_WATCHES: usize = 20;

/// How many fired messages wait, per space, for their conversations; the oldest go first.
pub const MAX_FIRED: usize = 100;

/// The name of the tool a conversation offers to set a watch.
pub const WATCH_TOOL: &str = "watch";
