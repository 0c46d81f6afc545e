//! Tool sources: tools that live outside the space (an MCP server's, a plugin's), offered
//! to every dialog beside the charms' tools, and which of them a request offers
//! (`selection`).
//!
//! A [`ToolSource`] says what tools it has now ([`ToolSource::tools`]), bumps
//! [`ToolSource::version`] when they change (so a dialog's
//! [`CatalogCache`](crate::catalog::CatalogCache) builds a fresh catalog), and runs a call. [`attach`] makes a source part of a runtime: from then
//! on every catalog built for that runtime (every `llm_dialog`, `trellis tools`) lists its
//! tools, displayed `source.tool` and given wire names by the same table as charm tools
//! ([`naming`]), so a source tool that shares a name with a charm's handler or another
//! source's tool gets a suffix and never replaces it. [`detach`] takes it away again.
//! A source whose tools change calls [`announce_change`], so what is derived from the
//! catalog in the space (a dialog's `flattened_tools`) derives again.
//!
//! What a source says of its tools (read-only, destructive) is a hint from outside: unless
//! the source is [`ToolSource::trusted`], a tool that is not marked read-only, or is marked
//! destructive, gets a [`Tool::approval`](crate::catalog::Tool::approval) reason, so a dialog asks
//! the person before each call (the tool protocol's approval path).
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use serde_json::{json, Value};
//! use trellis_builtins::sources::{self, CallFuture, SourceTool, ToolSource};
//! use trellis_builtins::catalog::Catalog;
//! use trellis_builtins::message::ToolOutput;
//!
//! /// Adds two numbers, in process.
//! struct Calculator;
//!
//! impl ToolSource for Calculator {
//!     fn name(&self) -> &str { "calc" }
//!     fn tools(&self) -> Arc<[SourceTool]> {
//!         let schema = json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}});
//!         Arc::new([SourceTool::new("add", "Add two numbers.", schema).read_only(true)])
//!     }
//!     fn version(&self) -> u64 { 0 }
//!     fn trusted(&self) -> bool { false }
//!     fn call(&self, _tool: &str, args: Value, _timeout: Duration) -> CallFuture {
//!         let sum = args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0);
//!         Box::pin(async move { ToolOutput::Json(json!(sum)) })
//!     }
//! }
//!
//! let rt = trellis_runner::Runtime::in_memory();
//! sources::attach(&rt, Arc::new(Calculator))?;
//! let catalog = Catalog::build(&rt, &Value::Null);
//! let add = catalog.get("calc.add").expect("attached sources are in every catalog");
//! assert_eq!(add.wire, "calc_add");
//! assert!(add.approval.is_none(), "marked read-only");
//! # Ok::<(), sources::SourceError>(())
//! ```

pub mod elicit;
pub mod selection;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use trellis_runner::{Link, Path, Read as _, Runtime};

use self::selection::ToolSelector;
use crate::message::{Message, ToolOutput};
use crate::model::{ToolChoice, ToolSpec};
use crate::naming;

/// What a call of a source's tool gives back, some time later.
pub type CallFuture = Pin<Box<dyn Future<Output = ToolOutput> + Send>>;

/// A provider of tools that are not charms: an MCP server, a plugin.
pub trait ToolSource: Send + Sync + 'static {
    /// The source's name: tools are displayed `name.tool`. Unique among attached sources.
    fn name(&self) -> &str;

    /// The tools it offers now.
    fn tools(&self) -> Arc<[SourceTool]>;

    /// A number that changes whenever [`ToolSource::tools`] changes (a counter will do).
    fn version(&self) -> u64;

    /// Whether the user trusts the source's hints: a trusted source's tools run without
    /// asking, an untrusted one's only when marked read-only and not destructive.
    fn trusted(&self) -> bool;

    /// Calls `tool` (its name in the source) with `arguments`, already checked against
    /// its input schema. Failures are [`ToolOutput::ErrorText`] the model can read. The
    /// caller stops waiting after `timeout` (dropping the future); a source may use it to
    /// bound its own work.
    fn call(&self, tool: &str, arguments: Value, timeout: Duration) -> CallFuture;
}

/// One tool of a source, as the source describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceTool {
    /// Its name in the source (what [`ToolSource::call`] receives).
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// The JSON schema of its arguments.
    pub input_schema: Value,
    /// The source says the tool changes nothing (a hint).
    pub read_only: bool,
    /// The source says the tool may destroy something (a hint).
    pub destructive: bool,
    /// The source says a second call with the same arguments has no further effect (a
    /// hint): a call cut off by a restart may run again.
    pub idempotent: bool,
}

impl SourceTool {
    /// A tool that is not marked read-only (so it may change things) and not destructive.
    pub fn new(name: impl Into<String>, description: impl Into<String>, input_schema: Value) -> Self {
        SourceTool {
            name: name.into(),
            description: description.into(),
            input_schema,
            read_only: false,
            destructive: false,
            idempotent: false,
        }
    }

    /// Marks the tool read-only (or not).
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Marks the tool destructive (or not).
    pub fn destructive(mut self, destructive: bool) -> Self {
        self.destructive = destructive;
        self
    }

    /// Marks the tool idempotent (or not).
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// Why a person must approve each call of this tool of `source`: never when the
    /// source is trusted; otherwise unless the tool is marked read-only and not destructive.
    pub fn approval(&self, source: &str, trusted: bool) -> Option<String> {
        if trusted {
            None
        } else if self.destructive {
            Some(format!("the untrusted tool source `{source}` marks `{}` as destructive", self.name))
        } else if !self.read_only {
            Some(format!("the untrusted tool source `{source}` does not mark `{}` as read-only", self.name))
        } else {
            None
        }
    }
}

/// Why a source could not be attached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// Another attached source has the name.
    #[error("a tool source named `{0}` is already attached; detach it first or choose another name")]
    Taken(String),
    /// The name cannot be a tool-name prefix.
    #[error("a tool source name must be 1 to 64 characters without `.` or control characters, found `{0}`")]
    BadName(String),
}

/// The sources attached to a runtime, kept in its extension slot
/// ([`Runtime::extension`]): the catalog finds them from the runtime alone (every dialog
/// builds its own catalog).
#[derive(Default)]
struct Registry(Mutex<Attached>);

#[derive(Default)]
struct Attached {
    sources: Vec<Arc<dyn ToolSource>>,
    /// Chooses the tools of each request; all are offered without one.
    selector: Option<Arc<dyn ToolSelector>>,
    /// Bumped on every attach and detach.
    generation: u64,
}

/// Runs `f` on what is attached to `rt`.
fn with_entry<R>(rt: &Runtime, f: impl FnOnce(&mut Attached) -> R) -> R {
    f(&mut rt.extension::<Registry>().0.lock())
}

/// The space's document counting the changes of its sources' tools (see
/// [`announce_change`]).
pub const SOURCES_DOC: &str = "tool-sources";

/// The count of changes of the sources' tools: what reads it derives again after each.
pub(crate) fn changes() -> Link {
    Link::new(SOURCES_DOC, Path::new(["changes"]))
}

/// Tells `rt` that the tools of its sources changed: what is derived from the catalog in
/// the space (each dialog's `flattened_tools`) derives again. [`attach`] and [`detach`]
/// announce themselves; a source whose tools change (its [`ToolSource::version`] went up)
/// calls this. A space that refuses the write is logged: catalogs built for requests are
/// current anyway, only the derived list waits for the next change.
pub fn announce_change(rt: &Runtime) {
    let at = changes();
    let counted = rt.transact(|tx| {
        let seen = tx.read(&at)?.to_json().as_i64().unwrap_or(0);
        tx.write(&at, trellis_runner::Value::from(seen.wrapping_add(1)))
    });
    if let Err(error) = counted {
        tracing::warn!(%error, "could not note that the tools of the sources changed");
    }
}

/// Offers `source`'s tools in every catalog built for `rt` from now on.
pub fn attach(rt: &Runtime, source: Arc<dyn ToolSource>) -> Result<(), SourceError> {
    let name = source.name().to_string();
    if name.is_empty()
        || name.chars().count() > naming::MAX_WIRE_LEN
        || name.contains('.')
        || name.contains(char::is_control)
    {
        return Err(SourceError::BadName(name));
    }
    with_entry(rt, |entry| {
        if entry.sources.iter().any(|s| s.name() == name) {
            return Err(SourceError::Taken(name));
        }
        entry.sources.push(source);
        entry.generation += 1;
        Ok(())
    })?;
    announce_change(rt);
    Ok(())
}

/// Takes the source called `name` away from `rt`'s catalogs; it is returned (to shut it
/// down) if it was attached.
pub fn detach(rt: &Runtime, name: &str) -> Option<Arc<dyn ToolSource>> {
    let detached = with_entry(rt, |entry| {
        let index = entry.sources.iter().position(|s| s.name() == name)?;
        entry.generation += 1;
        Some(entry.sources.remove(index))
    })?;
    announce_change(rt);
    Some(detached)
}

/// The sources attached to `rt`, in the order they were attached.
pub fn attached(rt: &Runtime) -> Vec<Arc<dyn ToolSource>> {
    with_entry(rt, |entry| entry.sources.clone())
}

/// Lets `selector` choose the tools each request of `rt`'s dialogs offers (`None`: all).
pub fn select_with(rt: &Runtime, selector: Option<Arc<dyn ToolSelector>>) {
    with_entry(rt, |entry| entry.selector = selector);
}

/// The tools a request offers the model: what `rt`'s selector chooses from `specs` (a
/// catalog's) given the conversation so far, or all of them. A tool the request forces
/// (`choice`) is offered whatever the selector says.
pub fn offered(rt: &Runtime, specs: Vec<ToolSpec>, conversation: &[Message], choice: &ToolChoice) -> Vec<ToolSpec> {
    let Some(selector) = with_entry(rt, |entry| entry.selector.clone()) else { return specs };
    let mut chosen = selector.select(&specs, conversation);
    let forced = match choice {
        ToolChoice::Tool(wire) => specs.iter().position(|s| s.name == *wire),
        _ => None,
    };
    if let Some(index) = forced {
        if !chosen.contains(&index) {
            chosen.push(index);
            chosen.sort_unstable();
        }
    }
    let mut specs: Vec<Option<ToolSpec>> = specs.into_iter().map(Some).collect();
    chosen.into_iter().filter_map(|index| specs.get_mut(index).and_then(Option::take)).collect()
}

/// What the sources of a runtime looked like when a catalog was built: a catalog is
/// current while the stamp is equal.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Stamp(u64, Vec<u64>);

/// The current [`Stamp`] of `rt`'s sources.
pub(crate) fn stamp(rt: &Runtime) -> Stamp {
    // The sources are asked without the registry's lock held: a source may look at it.
    let (generation, sources) = with_entry(rt, |entry| (entry.generation, entry.sources.clone()));
    Stamp(generation, sources.iter().map(|s| s.version()).collect())
}
