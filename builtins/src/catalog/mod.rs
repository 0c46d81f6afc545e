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
//! each with an optional `"description"`; an entry may also be a link to such an object.
//! A top-level field of a charm that is a link to a stream elsewhere (an alias) is not
//! followed: only the charm's own stream markers become tools. A bad entry (or one bad handler of a charm) is
//! skipped with a warning and listed in [`Catalog::problems`]; it never hides the others.
//!
//! Every tool gets a wire name from [`naming::WireNames`], keyed by the stream's location
//! (document + path), so two charms with the same NAME stay two tools. Its input schema
//! is the handler's event schema through [`schema::prepare_input_schema`]. Calling a tool
//! is [`Catalog::invoke`] (see the `invoke` module).
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
//!     b.handler("increment", move |tx, e: Increment| Ok(count.update(tx, |n| n + e.amount)?));
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

pub mod naming;
pub mod schema;

mod invoke;
mod summary;

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, OnceLock};

use serde_json::{json, Map, Value};
use trellis_runner::link::{is_stream, STREAM_KEY};
use trellis_runner::{Link, Read, Runtime, Value as Stored, NAME};

use crate::model::ToolSpec;

/// The fields of a stored object.
type StoredMap = imbl::OrdMap<Arc<str>, Stored>;
use naming::WireNames;
use schema::{description_of, prepare_input_schema, InputShape, PreparedSchema, SchemaError};

pub use invoke::Invocation;

/// Appended to the description of a tool whose handler declares no event schema.
pub const UNCHECKED_NOTE: &str = "(no input schema: arguments are passed through unchecked)";

/// The tools of one dialog, in a deterministic order, with their wire names.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    tools: Vec<Tool>,
    by_wire: HashMap<String, usize>,
    /// Display name → index; `None` when several tools share the display name.
    by_display: HashMap<String, Option<usize>>,
    problems: Vec<Problem>,
    /// Run handlers on the calling task rather than Tokio's blocking pool.
    inline_handlers: bool,
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
    /// The prepared input schema (always an object schema).
    pub input_schema: Value,
    /// Whether the arguments are the event or wrap it in `value`.
    pub shape: InputShape,
    /// What calling the tool does.
    pub target: ToolTarget,
    /// The key of the `tools` entry this tool came from.
    pub entry: String,
    /// The charm whose handler this is, when the stream belongs to a charm.
    pub charm: Option<String>,
    /// The handler declares no event schema: arguments only have to be an object.
    pub unchecked: bool,
    /// The wire name carries a disambiguation suffix (shared or over-long name).
    pub suffixed: bool,
    /// The compiled input schema, built on first use so that building a catalog stays cheap.
    validator: Arc<OnceLock<Result<jsonschema::Validator, String>>>,
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
    #[error("an entry must be an object with `handler`, `pattern` or `charm`, found {0}")]
    NotAnObject(&'static str),
    /// The entry names no target, or more than one.
    #[error("an entry needs exactly one of `handler`, `pattern` or `charm`, found {0}")]
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
}

/// A tool before wire names are assigned.
struct Draft {
    display: String,
    identity: String,
    description: String,
    prepared: PreparedSchema,
    target: ToolTarget,
    entry: String,
    charm: Option<String>,
    unchecked: bool,
}

/// Collects the tools and problems of all entries.
#[derive(Default)]
struct Extraction {
    drafts: Vec<Draft>,
    problems: Vec<Problem>,
    schemas: SchemaCache,
}

impl Extraction {
    fn problem(&mut self, entry: &str, error: EntryError) {
        tracing::warn!(entry, %error, "tool entry skipped");
        self.problems.push(Problem { entry: entry.to_string(), error });
    }
}

impl Catalog {
    /// Builds the catalog from the `tools` map of `llm_dialog` (see the module docs).
    ///
    /// Never fails as a whole: bad entries are skipped, logged and listed in
    /// [`Catalog::problems`]. `null` gives an empty catalog. Entries are taken in key
    /// order, and a charm's tools in key order, so the catalog is deterministic.
    pub fn build(rt: &Runtime, tools: &Value) -> Catalog {
        let mut out = Extraction::default();
        match tools {
            Value::Null => {}
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                for key in keys {
                    if let Some(entry) = map.get(key) {
                        extract_entry(rt, key, entry, &mut out);
                    }
                }
            }
            other => out.problem("", EntryError::NotAMap(kind(other))),
        }
        Catalog::from_drafts(out)
    }

    fn from_drafts(out: Extraction) -> Catalog {
        let Extraction { drafts, problems, .. } = out;
        // The same stream listed twice under the same name is one tool.
        let mut seen = HashSet::new();
        let keep: Vec<bool> = drafts
            .iter()
            .map(|d| {
                let fresh = seen.insert((d.display.as_str(), d.identity.as_str()));
                if !fresh {
                    tracing::debug!(tool = %d.display, "duplicate tool dropped");
                }
                fresh
            })
            .collect();
        drop(seen);
        let drafts: Vec<Draft> = drafts.into_iter().zip(keep).filter_map(|(d, keep)| keep.then_some(d)).collect();
        let names = WireNames::assign(drafts.iter().map(|d| (d.display.as_str(), d.identity.as_str())));
        let mut catalog = Catalog { problems, ..Catalog::default() };
        for (draft, entry) in drafts.into_iter().zip(names.entries()) {
            let index = catalog.tools.len();
            catalog.by_wire.insert(entry.wire.clone(), index);
            catalog.by_display.entry(draft.display.clone()).and_modify(|slot| *slot = None).or_insert(Some(index));
            catalog.tools.push(Tool {
                display: draft.display,
                wire: entry.wire.clone(),
                description: draft.description,
                input_schema: draft.prepared.schema,
                shape: draft.prepared.shape,
                target: draft.target,
                entry: draft.entry,
                charm: draft.charm,
                unchecked: draft.unchecked,
                suffixed: entry.suffixed,
                validator: Arc::default(),
            });
        }
        catalog
    }

    /// Runs handler tools on the calling task instead of Tokio's blocking pool.
    ///
    /// By default a handler runs on the blocking pool, so a call's timeout fires even
    /// while a slow synchronous handler runs, and a slow handler never stalls the caller's
    /// worker thread. Inline, a call saves the hand-off between threads (about 20 µs on a
    /// small machine) but its timeout only covers waiting (for a busy engine, for
    /// durability), never a handler that is running. For benchmarks and trusted handlers.
    pub fn inline_handlers(mut self, inline: bool) -> Self {
        self.inline_handlers = inline;
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
    /// entry, charm?}]`.
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
                    if let (Some(charm), Value::Object(map)) = (&t.charm, &mut item) {
                        map.insert("charm".into(), json!(charm));
                    }
                    item
                })
                .collect(),
        )
    }

    /// The tool with this wire name, or else this display name (when only one tool has it).
    pub fn get(&self, wire_or_display: &str) -> Option<&Tool> {
        let index = match self.by_wire.get(wire_or_display) {
            Some(&i) => i,
            None => (*self.by_display.get(wire_or_display)?)?,
        };
        self.tools.get(index)
    }
}

fn extract_entry(rt: &Runtime, key: &str, entry: &Value, out: &mut Extraction) {
    // An entry may itself be a link (to an entry object stored elsewhere).
    let linked;
    let entry = match Link::from_json(entry) {
        Some(link) => match rt.read(&link) {
            Ok(value) => {
                linked = value.to_json();
                &linked
            }
            Err(e) => return out.problem(key, unreadable(&link, e)),
        },
        None => entry,
    };
    let Value::Object(fields) = entry else {
        return out.problem(key, EntryError::NotAnObject(kind(entry)));
    };
    let description = fields.get("description").and_then(Value::as_str).map(str::trim).filter(|d| !d.is_empty());
    let targets: Vec<&str> =
        ["handler", "pattern", "charm"].into_iter().filter(|t| fields.get(*t).is_some_and(|v| !v.is_null())).collect();
    match targets.as_slice() {
        ["handler"] => handler_entry(rt, key, &fields["handler"], description, out),
        ["charm"] => {
            let read = fields.get("read").and_then(Value::as_bool).unwrap_or(false);
            charm_entry(rt, key, &fields["charm"], description, read, out)
        }
        ["pattern"] => pattern_entry(rt, key, fields, description, out),
        [] => out.problem(key, EntryError::Target("none".into())),
        many => out.problem(key, EntryError::Target(many.join(" and "))),
    }
}

/// `{"handler": LINK}`: one tool named by the entry key.
fn handler_entry(rt: &Runtime, key: &str, value: &Value, description: Option<&str>, out: &mut Extraction) {
    let Some(link) = Link::from_json(value) else {
        let found = short(value);
        return out.problem(key, EntryError::NotALink { field: "handler", also: "", found });
    };
    let (stream, marker) = match rt.resolve(&link) {
        Ok(found) => found,
        Err(e) => return out.problem(key, unreadable(&link, e)),
    };
    if !is_stream(&marker) && rt.handler(&stream).is_none() {
        return out.problem(key, EntryError::NotAStream(stream.to_string()));
    }
    let schema = out.schemas.of_stream(rt, &stream, &marker);
    let charm = rt.charms().record(&stream.doc).map(|_| stream.doc.to_string());
    let charm_name = charm.as_ref().map(|id| rt.charms().name(id));
    let description = description.map(str::to_string);
    out.push_stream_tool(key, key.to_string(), stream, schema, description, charm_name.as_deref(), charm);
}

/// `{"charm": LINK}`: one tool per top-level stream of the charm's result.
fn charm_entry(rt: &Runtime, key: &str, value: &Value, description: Option<&str>, read: bool, out: &mut Extraction) {
    let link = match (Link::from_json(value), value) {
        (Some(link), _) => link,
        (None, Value::String(id)) => match rt.charms().find(id) {
            Ok(doc) => rt.charms().result(&doc),
            Err(e) => return out.problem(key, EntryError::Unreadable { at: id.clone(), message: e.to_string() }),
        },
        (None, other) => {
            let also = " or a charm id (was the map read with its links resolved?)";
            return out.problem(key, EntryError::NotALink { field: "charm", also, found: short(other) });
        }
    };
    // Only the top level is read: its streams are markers, and nested links (data fields
    // pointing elsewhere) are not followed for detection.
    let (root, result) = match rt.resolve(&link) {
        Ok(found) => found,
        Err(e) => return out.problem(key, unreadable(&link, e)),
    };
    let Some(fields) = result.as_object() else {
        return out.problem(key, EntryError::NotACharm { at: root.to_string(), found: result.kind() });
    };
    let name = rt
        .read(&root.child(NAME))
        .ok()
        .and_then(|n| n.as_str().map(str::to_string))
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| key.to_string());
    let charm = rt.charms().record(&root.doc).map(|_| root.doc.to_string());
    if read {
        out.push_read_tool(key, &name, &root, fields, charm.clone());
    }
    for (field, value) in fields {
        if field.starts_with('$') || !is_stream(value) {
            continue;
        }
        let stream = root.child(field.clone());
        let schema = out.schemas.of_stream(rt, &stream, value);
        let description = description.map(|d| format!("{d} - {field}"));
        let display = naming::display_name(&name, field);
        out.push_stream_tool(key, display, stream, schema, description, Some(&name), charm.clone());
    }
}

impl Extraction {
    /// Adds the read tool of a charm: `Charm.read` (`Charm.read_data` when the charm has
    /// a handler called `read`), taking an optional `path` into the charm's data.
    fn push_read_tool(&mut self, entry: &str, name: &str, root: &Link, fields: &StoredMap, charm: Option<String>) {
        let data: Vec<&str> =
            fields.iter().filter(|(k, v)| !k.starts_with('$') && !is_stream(v)).map(|(k, _)| &**k).collect();
        let key = if fields.contains_key("read") { "read_data" } else { "read" };
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Where to read, as keys separated by `/` (for example `items/0/title`); leave it out to read all the data."
                }
            }
        });
        self.drafts.push(Draft {
            display: naming::display_name(name, key),
            identity: format!("{root}#read"),
            description: format!("Read {name}'s data without changing it. Its fields: {}.", data.join(", ")),
            prepared: PreparedSchema { schema, shape: InputShape::Object },
            target: ToolTarget::Read { charm: root.clone() },
            entry: entry.to_string(),
            charm,
            unchecked: false,
        });
    }

    /// Adds the tool of one stream. `description` is the entry's (already combined with
    /// the key for charm entries); without it the schema's description is used, else a
    /// generic "`key` handler from `owner`" (the charm's name).
    #[allow(clippy::too_many_arguments)]
    fn push_stream_tool(
        &mut self,
        entry: &str,
        display: String,
        stream: Link,
        schema: StreamSchema,
        description: Option<String>,
        owner: Option<&str>,
        charm: Option<String>,
    ) {
        let prepared = match schema.prepared {
            Ok(prepared) => prepared,
            Err(source) => return self.problem(entry, EntryError::Schema { tool: display, source }),
        };
        let key = stream.path.segments().last().map(|s| s.to_string()).unwrap_or_default();
        let mut description = description.or(schema.description).unwrap_or_else(|| match owner {
            Some(owner) => format!("{key} handler from {owner}"),
            None => format!("{key} handler"),
        });
        if schema.unchecked {
            description = format!("{description} {UNCHECKED_NOTE}");
        }
        self.drafts.push(Draft {
            display,
            identity: stream.to_string(),
            description,
            prepared,
            target: ToolTarget::Handler { stream },
            entry: entry.to_string(),
            charm,
            unchecked: schema.unchecked,
        });
    }
}

/// A stream's event schema, prepared as an input schema.
#[derive(Clone)]
struct StreamSchema {
    prepared: Result<PreparedSchema, SchemaError>,
    /// The schema's own description.
    description: Option<String>,
    /// The handler declares no schema.
    unchecked: bool,
}

impl StreamSchema {
    fn of(raw: &Value) -> StreamSchema {
        StreamSchema { prepared: prepare_input_schema(raw), description: description_of(raw), unchecked: raw.is_null() }
    }
}

/// Prepared schemas by content. The charms of one pattern share their handlers' schemas,
/// so a catalog of many such charms prepares each schema once.
#[derive(Default)]
struct SchemaCache(HashMap<u64, Vec<(Stored, StreamSchema)>>);

impl SchemaCache {
    /// The schema of the stream at `stream`, whose stored value is `marker`: the schema
    /// in the marker, else the running handler's, else none (an unchecked tool).
    fn of_stream(&mut self, rt: &Runtime, stream: &Link, marker: &Stored) -> StreamSchema {
        let stored = marker
            .as_object()
            .and_then(|m| m.get(STREAM_KEY))
            .and_then(Stored::as_object)
            .and_then(|inner| inner.get("schema"))
            .filter(|schema| !matches!(schema, Stored::Null));
        match stored {
            Some(schema) => self.prepare(schema),
            None => StreamSchema::of(&rt.handler(stream).and_then(|h| h.schema).unwrap_or(Value::Null)),
        }
    }

    fn prepare(&mut self, schema: &Stored) -> StreamSchema {
        let mut hasher = Fnv::default();
        hash_stored(schema, &mut hasher, 0);
        let bucket = self.0.entry(hasher.finish()).or_default();
        if let Some((_, prepared)) = bucket.iter().find(|(known, _)| known == schema) {
            return prepared.clone();
        }
        let prepared = StreamSchema::of(&schema.to_json());
        bucket.push((schema.clone(), prepared.clone()));
        prepared
    }
}

/// FNV-1a: much cheaper than SipHash on the short keys and strings schemas are made of;
/// the cache compares values on a hash match, so the weaker hash is safe.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// Hashes a stored value (down to a bounded depth: equal values still hash alike).
fn hash_stored(value: &Stored, hasher: &mut impl Hasher, depth: usize) {
    if depth > schema::MAX_DEPTH {
        return;
    }
    match value {
        Stored::Null => 0u8.hash(hasher),
        Stored::Bool(b) => (1u8, b).hash(hasher),
        Stored::Number(n) => (2u8, n).hash(hasher),
        Stored::String(s) => (3u8, s).hash(hasher),
        Stored::Array(items) => {
            (4u8, items.len()).hash(hasher);
            items.iter().for_each(|item| hash_stored(item, hasher, depth + 1));
        }
        Stored::Object(map) => {
            (5u8, map.len()).hash(hasher);
            for (key, item) in map {
                key.hash(hasher);
                hash_stored(item, hasher, depth + 1);
            }
        }
    }
}

/// `{"pattern": "id"}`, `{"pattern": {"id": .., "extraParams": {..}}}` (or `extraParams`
/// beside `pattern`).
fn pattern_entry(
    rt: &Runtime,
    key: &str,
    fields: &Map<String, Value>,
    description: Option<&str>,
    out: &mut Extraction,
) {
    let spec = &fields["pattern"];
    let (id, params) = match spec {
        Value::String(id) => (id.as_str(), fields.get("extraParams")),
        Value::Object(inner) => match inner.get("id").and_then(Value::as_str) {
            Some(id) => (id, inner.get("extraParams").or_else(|| fields.get("extraParams"))),
            None => return out.problem(key, EntryError::Pattern("`pattern` object needs a string `id`".into())),
        },
        other => {
            let message =
                format!("`pattern` must be a pattern id or {{\"id\", \"extraParams\"}}, found {}", kind(other));
            return out.problem(key, EntryError::Pattern(message));
        }
    };
    let prefilled = match params {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(other) => {
            let message = format!("`extraParams` must be an object, found {}", kind(other));
            return out.problem(key, EntryError::Pattern(message));
        }
    };
    let Some(pattern) = rt.patterns().get(id) else {
        return out.problem(key, EntryError::Pattern(format!("unknown pattern `{id}`")));
    };
    let prepared = match pattern_schema(pattern.argument_schema(), &prefilled) {
        Ok(prepared) => prepared,
        Err(source) => return out.problem(key, EntryError::Schema { tool: key.to_string(), source }),
    };
    let description = description
        .map(str::to_string)
        .or_else(|| Some(pattern.about().trim().to_string()).filter(|d| !d.is_empty()))
        .or_else(|| description_of(pattern.argument_schema()))
        .unwrap_or_else(|| format!("Runs the {id} pattern and returns its result"));
    out.drafts.push(Draft {
        display: key.to_string(),
        identity: format!("pattern:{key}"),
        description,
        prepared,
        target: ToolTarget::Pattern { id: id.to_string(), prefilled },
        entry: key.to_string(),
        charm: None,
        unchecked: false,
    });
}

/// A pattern's argument schema as an input schema, without the pre-filled properties.
fn pattern_schema(raw: &Value, prefilled: &Map<String, Value>) -> Result<PreparedSchema, SchemaError> {
    // Preparation drops a top-level `result` property (the field the runtime injects into
    // handler events); in a pattern's argument it is a real parameter, so hide it.
    const HIDDEN: &str = "\u{0}result";
    let has_result = raw.pointer("/properties/result").is_some();
    let mut prepared = if has_result {
        let mut raw = raw.clone();
        rename_property(&mut raw, "result", HIDDEN);
        let mut prepared = prepare_input_schema(&raw)?;
        rename_property(&mut prepared.schema, HIDDEN, "result");
        prepared
    } else {
        prepare_input_schema(raw)?
    };
    if prepared.shape == InputShape::Object {
        if let Some(Value::Object(properties)) = prepared.schema.get_mut("properties") {
            properties.retain(|name, _| !prefilled.contains_key(name));
        }
        if let Some(Value::Array(required)) = prepared.schema.get_mut("required") {
            required.retain(|name| !name.as_str().is_some_and(|n| prefilled.contains_key(n)));
        }
        if let Value::Object(map) = &mut prepared.schema {
            if map.get("required").and_then(Value::as_array).is_some_and(Vec::is_empty) {
                map.remove("required");
            }
        }
    }
    Ok(prepared)
}

/// Renames a top-level property (and its `required` entry) of an object schema.
fn rename_property(schema: &mut Value, from: &str, to: &str) {
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        if let Some(value) = properties.remove(from) {
            properties.insert(to.to_string(), value);
        }
    }
    if let Some(Value::Array(required)) = schema.get_mut("required") {
        for name in required.iter_mut() {
            if name == from {
                *name = json!(to);
            }
        }
    }
}

fn unreadable(link: &Link, error: trellis_runner::Error) -> EntryError {
    EntryError::Unreadable { at: link.to_string(), message: error.to_string() }
}

/// The JSON type of a value, for messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A value for an error message: compact and cut short.
fn short(value: &Value) -> String {
    summary::compact(value, 60)
}

#[cfg(test)]
mod tests;
