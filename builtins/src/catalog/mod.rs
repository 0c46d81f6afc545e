//! The tool catalog: the tools a dialog offers, with their display and wire names.
//!
//! [`Catalog::build`] reads the `tools` map of `llm_dialog`, whose entries are
//!
//! - `{"handler": LINK}`: one tool, named by the entry's key, sending to that stream;
//! - `{"charm": LINK}` (or a charm id): one tool per top-level stream of the charm's
//!   result, displayed as `Charm.key` ([`naming::display_name`]); keys starting with `$`
//!   (`$NAME`, `$UI`, `$ID`) and data fields are not tools;
//! - `{"pattern": "id"}` or `{"pattern": {"id": "id", "extraParams": {...}}}`: one tool
//!   that runs a fresh charm of the pattern; pre-filled `extraParams` are applied on every
//!   call and removed from the advertised schema;
//!
//! - `{"tool": "name"}`: a tool defined with [`ToolBuilder`](crate::tool::ToolBuilder) and
//!   registered by that name in the [`ToolRegistry`] the catalog is built with
//!   (`{"human_input": true}` is `{"tool": "request_human_input"}`);
//! - `{"client": {"description": .., "parameters": SCHEMA}}`: a client tool, named by the
//!   entry's key, checked against the registry's [`ClientToolLimits`](crate::tool::limits::ClientToolLimits)
//!   (a broken rule is a problem naming it); the client executes it;
//!
//! each with an optional `"description"`; an entry may also be a link to such an object.
//! A top-level field of a charm that is a link to a stream elsewhere (an alias) is not
//! followed: only the charm's own stream markers become tools. A bad entry (or one bad handler of a charm) is
//! skipped with a warning and listed in [`Catalog::problems`]; it never hides the others.
//!
//! Every tool gets a wire name from [`naming::WireNames`], keyed by the stream's location
//! (document + path), so two charms with the same NAME stay two tools. Its input schema
//! is the handler's event schema through [`schema::prepare_input_schema`](crate::schema::prepare_input_schema). Calling a tool
//! is [`Catalog::invoke`] (see [`crate::invoke`]).
//!
//! ```
//! use trellis_builtins::catalog::Catalog;
//! use trellis_runner::prelude::*;
//!
//! /// Add to the count.
//! #[derive(Deserialize, JsonSchema)]
//! struct Increment { amount: i64 }
//!
//! let rt = Runtime::in_memory();
//! rt.register_pattern(Pattern::new("counter", |b, _: serde_json::Value| {
//!     b.name("Counter")?;
//!     let count = b.state("count", 0i64)?;
//!     b.handler("increment", move |tx, e: Increment| Ok(count.update(tx, |n| n + e.amount)?))?;
//!     Ok(())
//! }));
//! let id = rt.charms().create("counter", serde_json::json!({}))?;
//! let tools = serde_json::json!({ "Counter": { "charm": rt.charms().result(&id).to_json() } });
//! let catalog = Catalog::build(&rt, &tools);
//! let tool = catalog.get("Counter.increment").expect("one tool per handler");
//! assert_eq!(tool.wire, "Counter_increment");
//! assert_eq!(tool.description, "Add to the count.");
//! # Ok::<(), trellis_runner::Error>(())
//! ```

mod cache;
mod entries;
mod identity;
mod reads;
mod schema_cache;
mod source_tools;
pub(crate) mod summary;

use std::sync::Arc;

use serde_json::{json, Map, Value};
use trellis_runner::{Link, Runtime};

use crate::model::ToolSpec;
use crate::naming::{self, FastSet};
use crate::schema::{InputShape, SchemaError};
use crate::tool::{ToolRef, ToolRegistry};
use crate::validation::LazyValidator;
use entries::{extract_entry, Extraction};
use identity::Identities;
use reads::{Reader, Reads};

pub use cache::CatalogCache;
pub use entries::{CLIENT_ENTRY, HUMAN_INPUT_ENTRY, TOOL_ENTRY};
pub use summary::SNAPSHOT_LIMIT;

/// Appended to the description of a tool whose handler declares no event schema.
pub const UNCHECKED_NOTE: &str = "(no input schema: arguments are passed through unchecked)";

/// The tools of one dialog, in a deterministic order, with their wire names.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    tools: Vec<Tool>,
    problems: Vec<Problem>,
    /// How calls run: see [`Calling`].
    pub(crate) calling: Calling,
}

/// How a call runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Calling {
    /// A handler runs on the calling task rather than a handler thread (see
    /// [`Catalog::inline_handlers`]).
    pub(crate) inline: bool,
    /// See [`Catalog::snapshot_limit`].
    pub(crate) snapshot_limit: usize,
}

impl Default for Calling {
    fn default() -> Self {
        Calling { inline: false, snapshot_limit: SNAPSHOT_LIMIT }
    }
}

/// One tool: what the model sees and what calling it does.
#[derive(Debug, Clone)]
pub struct Tool {
    /// The name shown to people: `Charm.key` for charm tools, the entry key otherwise.
    pub display: String,
    /// The name sent to providers (`^[a-zA-Z0-9_-]{1,64}$`), unique in the catalog.
    pub wire: String,
    /// What the tool does, for the model.
    pub description: String,
    /// The prepared input schema (always an object schema), shared by the tools that
    /// have the same one (the handlers of many charms of one pattern).
    pub input_schema: Arc<Value>,
    /// The prepared schema of what the handler returns (the `returned` of a call's
    /// result), for handler tools whose handler answers.
    pub output_schema: Option<Arc<Value>>,
    /// Whether the arguments are the event or wrap it in `value`.
    pub shape: InputShape,
    /// What calling the tool does.
    pub target: ToolTarget,
    /// The key of the `tools` entry this tool came from (shared by the tools of the entry).
    pub entry: Arc<str>,
    /// The charm whose handler this is, when the stream belongs to a charm (shared by the
    /// tools of the charm).
    pub charm: Option<Arc<str>>,
    /// The handler declares no event schema: arguments only have to be an object.
    pub unchecked: bool,
    /// Why a person must approve calls a model makes (the stream's policy, see
    /// `Builder::require_approval`, or a defined tool's `Approval`); `None` when calls
    /// run at once. For a defined tool whose policy looks at the arguments, whether a
    /// given call waits is [`Tool::approval_for`].
    pub approval: Option<String>,
    /// The fields of a handler's event only a person may set (see
    /// `Builder::person_only`): a call waits for a person, who gives them.
    pub person_only: Vec<String>,
    /// The wire name carries a disambiguation suffix (shared or over-long name).
    pub suffixed: bool,
    /// The compiled input schema, built on first use so that building a catalog stays
    /// cheap, and shared by the tools of the catalog that share `input_schema`.
    pub(crate) validator: LazyValidator,
}

/// What calling a tool does.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolTarget {
    /// Send the arguments as an event to a stream (a charm's handler).
    Handler {
        /// The stream, links already followed.
        stream: Link,
    },
    /// Run a fresh charm of a pattern with the arguments and return its settled result.
    Pattern {
        /// The pattern's id.
        id: String,
        /// Arguments fixed by the entry (`extraParams`), applied over the model's.
        prefilled: Map<String, Value>,
    },
    /// Read (part of) a charm's data; changes nothing.
    Read {
        /// The charm's result.
        charm: Link,
    },
    /// A tool defined with [`ToolBuilder`](crate::tool::ToolBuilder): its phases run on
    /// the server, and a call that needs the client waits in a dialog.
    Defined(ToolRef),
    /// A client tool: a definition the client sent (`{"client": {...}}`); the server never
    /// runs it: a call waits in a dialog for the client's output, which is the result.
    Client,
    /// Call a tool of an attached [`ToolSource`](crate::sources::ToolSource) (an MCP server's).
    Source {
        /// The source's name.
        source: String,
        /// The tool's name in the source.
        tool: String,
        /// The source marks the tool read-only or idempotent: a call cut off by a restart
        /// may run again.
        repeatable: bool,
    },
}

/// A `tools` entry, or one handler of it, that did not become a tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The key of the `tools` entry (empty when the map itself is wrong).
    pub entry: String,
    /// What was wrong.
    pub error: EntryError,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tool entry `{}`: {}", self.entry, self.error)
    }
}

/// Why a `tools` entry (or one of its handlers) was skipped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryError {
    /// The `tools` value is not a map.
    #[error("`tools` must be a map of name to entry, found {0}")]
    NotAMap(&'static str),
    /// The entry is not an object.
    #[error("an entry must be an object with `handler`, `pattern`, `charm` or `tool`, found {0}")]
    NotAnObject(&'static str),
    /// The entry names no target, or more than one.
    #[error("an entry needs exactly one of `handler`, `pattern`, `charm` or `tool`, found {0}")]
    Target(String),
    /// `handler`/`charm` is not a link (or charm id).
    #[error("`{field}` must be a link{also}, found {found}")]
    NotALink {
        /// The field.
        field: &'static str,
        /// Other accepted forms.
        also: &'static str,
        /// What it was.
        found: String,
    },
    /// Following the link failed.
    #[error("cannot read {at}: {message}")]
    Unreadable {
        /// Where.
        at: String,
        /// The runtime's error.
        message: String,
    },
    /// A `handler` link points at something that is not a stream.
    #[error("{0} is not a stream")]
    NotAStream(String),
    /// A `charm` link points at something that is not a charm's result object.
    #[error("{at} is not a charm result (found {found})")]
    NotACharm {
        /// Where.
        at: String,
        /// What was there.
        found: &'static str,
    },
    /// A client tool's definition breaks a rule.
    #[error("{0}")]
    ClientTool(#[from] crate::tool::limits::LimitError),
    /// No defined tool has this name, or `tool` is malformed.
    #[error("{0}")]
    Defined(String),
    /// No pattern with this id is registered, or `pattern` is malformed.
    #[error("{0}")]
    Pattern(String),
    /// The handler's (or pattern's) schema cannot be used as an input schema.
    #[error("the input schema of `{tool}` cannot be used: {source}")]
    Schema {
        /// The tool's display name.
        tool: String,
        /// What was wrong.
        source: SchemaError,
    },
    /// The schema of what the handler returns cannot be used as an output schema.
    #[error("the result schema of `{tool}` cannot be used: {source}")]
    ResultSchema {
        /// The tool's display name.
        tool: String,
        /// What was wrong.
        source: SchemaError,
    },
}

impl Catalog {
    /// Builds the catalog from the `tools` map of `llm_dialog` (see the module docs).
    ///
    /// Never fails as a whole: bad entries are skipped, logged and listed in
    /// [`Catalog::problems`]. `null` gives an empty catalog. Entries are taken in key
    /// order, and a charm's tools in key order, so the catalog is deterministic.
    /// `{"tool"}` entries name the built-in tools ([`ToolRegistry::standard`]).
    pub fn build(rt: &Runtime, tools: &Value) -> Catalog {
        Catalog::build_with(rt, Reader::new(rt, false), tools, ToolRegistry::shared_standard()).0
    }

    /// [`Catalog::build`] with the defined tools `{"tool"}` entries name.
    pub fn build_with_tools(rt: &Runtime, tools: &Value, registry: &ToolRegistry) -> Catalog {
        Catalog::build_with(rt, Reader::new(rt, false), tools, registry).0
    }

    /// Builds the catalog, and says what it read (see [`CatalogCache`]).
    fn build_reading(rt: &Runtime, tools: &Value, registry: &ToolRegistry) -> (Catalog, Reads) {
        Catalog::build_with(rt, Reader::new(rt, true), tools, registry)
    }

    fn build_with(rt: &Runtime, reader: Reader<'_>, tools: &Value, registry: &ToolRegistry) -> (Catalog, Reads) {
        let mut out = Extraction::new(reader, registry);
        match tools {
            Value::Null => {}
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                for key in keys {
                    if let Some(entry) = map.get(key) {
                        extract_entry(key, entry, &mut out);
                    }
                }
            }
            other => out.problem("", EntryError::NotAMap(crate::text::json_kind(other))),
        }
        source_tools::extract_all(rt, &mut out);
        let Extraction { tools, identities, problems, reader, .. } = out;
        (Catalog::from_tools(tools, identities, problems), reader.into_reads())
    }

    /// The catalog of `tools` (whose identities are `identities`), with their wire names.
    fn from_tools(mut tools: Vec<Tool>, mut identities: Identities, problems: Vec<Problem>) -> Catalog {
        if let Some(keep) = duplicates(&tools, &identities) {
            // `retain` visits the elements once each, in order.
            let mut kept = keep.iter();
            tools.retain(|_| kept.next() == Some(&true));
            identities.retain(&keep);
        }
        let names = naming::DisplayNames::group(tools.iter().map(|tool| tool.display.as_str()));
        let wires = naming::assign(&names, |index| identities.get(index));
        drop(names);
        for (tool, wire) in tools.iter_mut().zip(wires) {
            tool.suffixed = wire.contains('-');
            tool.wire = wire;
        }
        Catalog { tools, problems, calling: Calling::default() }
    }

    /// Runs handler tools on the calling task instead of a handler thread.
    ///
    /// By default a handler runs on a handler thread (kept awake between the calls of a
    /// burst), so a call's timeout fires even while a slow synchronous handler runs, and a
    /// slow handler never stalls the caller's worker thread. Inline, a call saves the
    /// hand-off between threads (a few µs) but its timeout only covers waiting (for a busy
    /// engine, for durability), never a handler that is running. For trusted handlers.
    pub fn inline_handlers(mut self, inline: bool) -> Self {
        self.calling.inline = inline;
        self
    }

    /// How many bytes of JSON a charm's data may take for a handler tool's answer to
    /// carry it whole ([`SNAPSHOT_LIMIT`] by default); past that, the model reads the
    /// fields that changed and reads the rest with the charm's read tool.
    pub fn snapshot_limit(mut self, bytes: usize) -> Self {
        self.calling.snapshot_limit = bytes;
        self
    }

    /// The tools, in catalog order.
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// How many tools there are.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether there are no tools.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The entries (or handlers) that were skipped, and why.
    pub fn problems(&self) -> &[Problem] {
        &self.problems
    }

    /// The tools as the model sees them.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|t| ToolSpec {
                name: t.wire.clone(),
                display_name: t.display.clone(),
                description: t.description.clone(),
                input_schema: t.input_schema.clone(),
            })
            .collect()
    }

    /// The catalog as a UI shows it: `[{display, wire, description, input_schema,
    /// output_schema?, entry, charm?, client?}]` (`client: true` for a definition a
    /// client sent; `output_schema` for a handler that answers).
    pub fn flattened(&self) -> Value {
        Value::Array(
            self.tools
                .iter()
                .map(|t| {
                    let mut item = json!({
                        "display": t.display,
                        "wire": t.wire,
                        "description": t.description,
                        "input_schema": t.input_schema,
                        "entry": t.entry,
                    });
                    if let Value::Object(map) = &mut item {
                        if let Some(output) = &t.output_schema {
                            map.insert("output_schema".into(), Value::clone(output));
                        }
                        if let Some(charm) = &t.charm {
                            map.insert("charm".into(), json!(charm));
                        }
                        if matches!(t.target, ToolTarget::Client) {
                            map.insert("client".into(), Value::Bool(true));
                        }
                    }
                    item
                })
                .collect(),
        )
    }

    /// The tool with this wire name, or else this display name (when only one tool has it).
    ///
    /// A scan: an index by name saved under 2% on every benchmark row (a call is
    /// microseconds, a scan of a dialog's tools nanoseconds), so it went.
    pub fn get(&self, wire_or_display: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.wire == wire_or_display).or_else(|| {
            let mut displayed = self.tools.iter().filter(|t| t.display == wire_or_display);
            match (displayed.next(), displayed.next()) {
                (Some(tool), None) => Some(tool),
                _ => None,
            }
        })
    }
}

/// Which tools to keep, when some are the same stream listed twice under the same name
/// (one tool); `None` when every tool is kept.
fn duplicates(tools: &[Tool], identities: &Identities) -> Option<Vec<bool>> {
    // Two tools are the same only if their identities are: most catalogs have no
    // repeated identity, and display names are compared only when one repeats.
    let mut seen = FastSet::with_capacity_and_hasher(identities.len(), Default::default());
    if identities.iter().all(|identity| seen.insert(identity)) {
        return None;
    }
    let mut seen = FastSet::with_capacity_and_hasher(tools.len(), Default::default());
    let keep = tools.iter().zip(identities.iter()).map(|(tool, identity)| {
        let fresh = seen.insert((tool.display.as_str(), identity));
        if !fresh {
            tracing::debug!(tool = %tool.display, "duplicate tool dropped");
        }
        fresh
    });
    Some(keep.collect())
}

#[cfg(test)]
mod tests;
