//! Reading `tools` entries: each `{handler}`, `{charm}`, `{pattern}` or `{tool}` entry becomes
//! drafts of tools (names not yet assigned), or a [`Problem`] saying why it could not.

use std::sync::Arc;

use serde_json::{json, Map, Value};
use trellis_runner::{Link, Path, NAME};

use super::identity::{Identities, Identity};
use super::reads::{Field, Kind, Reader, Shape};
use super::schema_cache::{OutputSchema, SchemaCache, StreamSchema};
use super::{summary, EntryError, Problem, Tool, ToolTarget, UNCHECKED_NOTE};
use crate::naming::{self, FastMap};
use crate::schema::{description_of, prepare_input_schema, InputShape, PreparedSchema, SchemaError};
use crate::text::json_kind as kind;
use crate::tool::limits::LimitError;
use crate::tool::{ToolRegistry, HUMAN_INPUT_TOOL};
use crate::validation::LazyValidator;

/// A tool before wire names are assigned.
pub(super) struct Draft {
    pub(super) display: String,
    pub(super) identity: Identity,
    pub(super) description: String,
    /// The prepared input schema, shared with the other tools that have the same one.
    pub(super) schema: Arc<Value>,
    pub(super) shape: InputShape,
    pub(super) target: ToolTarget,
    pub(super) entry: Arc<str>,
    pub(super) charm: Option<Arc<str>>,
    pub(super) unchecked: bool,
    /// Why a person must approve each call, when the stream says so.
    pub(super) approval: Option<String>,
    /// The fields of the event only a person may set.
    pub(super) person_only: Vec<String>,
    /// The prepared schema of what the handler returns, when it returns something.
    pub(super) output_schema: Option<Arc<Value>>,
}

/// Collects the tools and problems of all entries, reading the runtime through `reader`.
pub(super) struct Extraction<'a> {
    /// The tools so far, without their wire names (assigned once all are known).
    pub(super) tools: Vec<Tool>,
    /// Each tool's identity (what its wire name derives from), in step with `tools`.
    pub(super) identities: Identities,
    /// One validator per prepared schema (by address), so that the tools sharing a schema
    /// (the handlers of many charms of one pattern) share its compiled form. Every schema
    /// here is held by a tool in `tools` until the build ends, so no address is reused.
    validators: FastMap<usize, LazyValidator>,
    pub(super) problems: Vec<Problem>,
    pub(super) schemas: SchemaCache<StreamSchema>,
    /// The result schemas of handlers that answer, prepared as output schemas.
    outputs: SchemaCache<OutputSchema>,
    pub(super) reader: Reader<'a>,
    /// Where `{"tool"}` entries find their tools.
    pub(super) registry: &'a ToolRegistry,
    /// How many `{"client"}` entries were taken.
    client_tools: usize,
}

impl<'a> Extraction<'a> {
    pub(super) fn new(reader: Reader<'a>, registry: &'a ToolRegistry) -> Self {
        Extraction {
            tools: Vec::new(),
            identities: Identities::default(),
            validators: FastMap::default(),
            problems: Vec::new(),
            schemas: SchemaCache::default(),
            outputs: SchemaCache::default(),
            reader,
            registry,
            client_tools: 0,
        }
    }

    /// Adds a tool.
    pub(super) fn push(&mut self, draft: Draft) {
        let Draft {
            display,
            identity,
            description,
            schema,
            shape,
            target,
            entry,
            charm,
            unchecked,
            approval,
            person_only,
            output_schema,
        } = draft;
        // The address as a plain number: the map only tells schemas apart, never reads them.
        let validator = self.validators.entry(Arc::as_ptr(&schema) as usize).or_default().clone();
        self.identities.push(&identity);
        self.tools.push(Tool {
            display,
            wire: String::new(),
            description,
            input_schema: schema,
            output_schema,
            shape,
            target,
            entry,
            charm,
            unchecked,
            approval,
            person_only,
            suffixed: false,
            validator,
        });
    }

    pub(super) fn problem(&mut self, entry: &str, error: EntryError) {
        tracing::warn!(entry, %error, "tool entry skipped");
        self.problems.push(Problem { entry: entry.to_string(), error });
    }
}

pub(super) fn extract_entry(key: &str, entry: &Value, out: &mut Extraction) {
    // An entry may itself be a link (to an entry object stored elsewhere).
    let linked;
    let entry = match Link::from_json(entry) {
        Some(link) => match out.reader.read(&link) {
            Ok(value) => {
                linked = value.to_json();
                &linked
            }
            Err(message) => return out.problem(key, unreadable(&link, message)),
        },
        None => entry,
    };
    let Value::Object(fields) = entry else {
        return out.problem(key, EntryError::NotAnObject(kind(entry)));
    };
    let description = fields.get("description").and_then(Value::as_str).map(str::trim).filter(|d| !d.is_empty());
    let targets: Vec<&str> = ["handler", "pattern", "charm", TOOL_ENTRY, HUMAN_INPUT_ENTRY, CLIENT_ENTRY]
        .into_iter()
        .filter(|t| fields.get(*t).is_some_and(|v| !v.is_null()))
        .collect();
    match targets.as_slice() {
        ["handler"] => handler_entry(key, &fields["handler"], description, out),
        [HUMAN_INPUT_ENTRY] => defined_entry(key, HUMAN_INPUT_TOOL, description, out),
        [CLIENT_ENTRY] => client_entry(key, &fields[CLIENT_ENTRY], out),
        [TOOL_ENTRY] => match fields[TOOL_ENTRY].as_str() {
            Some(name) => defined_entry(key, name, description, out),
            None => out.problem(
                key,
                EntryError::Defined(format!("`tool` must be a tool's name, found {}", kind(&fields[TOOL_ENTRY]))),
            ),
        },
        ["charm"] => {
            let read = fields.get("read").and_then(Value::as_bool).unwrap_or(false);
            charm_entry(key, &fields["charm"], description, read, out)
        }
        ["pattern"] => pattern_entry(key, fields, description, out),
        [] => out.problem(key, EntryError::Target("none".into())),
        many => out.problem(key, EntryError::Target(many.join(" and "))),
    }
}

/// `{"handler": LINK}`: one tool named by the entry key.
fn handler_entry(key: &str, value: &Value, description: Option<&str>, out: &mut Extraction) {
    let Some(link) = Link::from_json(value) else {
        let found = short(value);
        return out.problem(key, EntryError::NotALink { field: "handler", also: "", found });
    };
    let (stream, marker) = match out.reader.resolve(&link) {
        Ok(found) => found,
        Err(message) => return out.problem(key, unreadable(&link, message)),
    };
    let kind = Kind::of(&marker);
    if kind == Kind::Data && out.reader.handler(&stream).is_none() {
        return out.problem(key, EntryError::NotAStream(stream.to_string()));
    }
    let charm = out.reader.is_charm(&stream.doc).then(|| stream.doc.clone());
    let charm_name = charm.as_ref().map(|_| out.reader.charm_name(&stream.doc));
    let source = out.source(stream, &kind);
    let description = description.map(str::to_string);
    out.push_stream_tool(&key.into(), key.to_string(), source, description, charm_name.as_deref(), charm);
}

/// `{"charm": LINK}`: one tool per top-level stream of the charm's result.
fn charm_entry(key: &str, value: &Value, description: Option<&str>, read: bool, out: &mut Extraction) {
    let link = match (Link::from_json(value), value) {
        (Some(link), _) => link,
        (None, Value::String(id)) => match out.reader.find_charm(id) {
            Ok(doc) => Link::new(doc, Path::root()),
            Err(message) => return out.problem(key, EntryError::Unreadable { at: id.clone(), message }),
        },
        (None, other) => {
            let also = " or a charm id (was the map read with its links resolved?)";
            return out.problem(key, EntryError::NotALink { field: "charm", also, found: short(other) });
        }
    };
    // Only the top level is read: its streams are markers, and nested links (data fields
    // pointing elsewhere) are not followed for detection.
    let (root, fields) = match out.reader.shape(&link) {
        Ok((root, Shape::Fields(fields))) => (root, fields),
        Ok((root, Shape::NotAnObject(found))) => {
            return out.problem(key, EntryError::NotACharm { at: root.to_string(), found })
        }
        Err(message) => return out.problem(key, unreadable(&link, message)),
    };
    let name = out
        .reader
        .read(&root.child(NAME))
        .ok()
        .and_then(|n| n.as_str().map(str::to_string))
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| key.to_string());
    // Shared by the tools of this charm: one text each, not one per tool.
    let (entry, charm): (Arc<str>, Option<Arc<str>>) =
        (key.into(), out.reader.is_charm(&root.doc).then(|| root.doc.clone()));
    if read {
        out.push_read_tool(&entry, &name, &root, &fields, charm.clone());
    }
    for (field, kind) in &fields {
        if *kind == Kind::Data {
            continue;
        }
        let source = out.source(root.child(field.clone()), kind);
        let description = description.map(|d| format!("{d} - {field}"));
        let display = naming::display_name(&name, field);
        out.push_stream_tool(&entry, display, source, description, Some(&name), charm.clone());
    }
}

/// A stream that becomes a tool: where it is, its schemas, its approval policy.
struct StreamSource {
    stream: Link,
    schema: Arc<StreamSchema>,
    /// What its handler returns, when the marker says.
    output: Option<Arc<OutputSchema>>,
    approval: Option<String>,
    person_only: Vec<String>,
}

impl Extraction<'_> {
    /// What the stream at `stream`, of `kind` (its marker; data when the handler is only
    /// registered), offers as a tool.
    fn source(&mut self, stream: Link, kind: &Kind) -> StreamSource {
        let marker = kind.stream();
        let schema = self.schemas.of_stream(&mut self.reader, &stream, marker.schema);
        let output = marker.result.map(|result| self.outputs.prepare(&stream, result));
        let approval = marker.approval.map(str::to_string);
        StreamSource { stream, schema, output, approval, person_only: marker.person_only }
    }

    /// Adds the read tool of a charm: `Charm.read` (`Charm.read_data` when the charm has
    /// a handler called `read`), taking an optional `path` into the charm's data.
    fn push_read_tool(&mut self, entry: &Arc<str>, name: &str, root: &Link, fields: &[Field], charm: Option<Arc<str>>) {
        let data: Vec<&str> = fields.iter().filter(|(_, kind)| *kind == Kind::Data).map(|(k, _)| &**k).collect();
        let key = if fields.iter().any(|(k, _)| &**k == "read") { "read_data" } else { "read" };
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "Where to read, as keys separated by `/` (for example `items/0/title`); leave it out to read all the data."
                }
            }
        });
        self.push(Draft {
            display: naming::display_name(name, key),
            identity: Identity::Text(format!("{root}#read")),
            description: format!("Read {name}'s data without changing it. Its fields: {}.", data.join(", ")),
            schema: Arc::new(schema),
            shape: InputShape::Object,
            target: ToolTarget::Read { charm: root.clone() },
            entry: Arc::clone(entry),
            charm,
            unchecked: false,
            approval: None,
            person_only: Vec::new(),
            output_schema: None,
        });
    }

    /// Adds the tool of one stream. `description` is the entry's (already combined with
    /// the key for charm entries); without it the schema's description is used, else a
    /// generic "`key` handler from `owner`" (the charm's name).
    fn push_stream_tool(
        &mut self,
        entry: &Arc<str>,
        display: String,
        source: StreamSource,
        description: Option<String>,
        owner: Option<&str>,
        charm: Option<Arc<str>>,
    ) {
        let StreamSource { stream, schema, output, approval, person_only } = source;
        let (prepared, shape) = match &schema.prepared {
            Ok((prepared, shape)) => (prepared.clone(), *shape),
            Err(source) => return self.problem(entry, EntryError::Schema { tool: display, source: source.clone() }),
        };
        let output_schema = match output.as_deref() {
            None => None,
            Some(Ok(output)) => Some(output.clone()),
            Some(Err(source)) => {
                return self.problem(entry, EntryError::ResultSchema { tool: display, source: source.clone() })
            }
        };
        let key = stream.path.segments().last().map_or("", |s| &**s);
        let mut description = description.or_else(|| schema.description.clone()).unwrap_or_else(|| match owner {
            Some(owner) => format!("{key} handler from {owner}"),
            None => format!("{key} handler"),
        });
        if schema.unchecked {
            description = format!("{description} {UNCHECKED_NOTE}");
        }
        if let Some(reason) = &approval {
            description = format!("{description} (Each call waits for the user's approval: {reason}.)");
        }
        let approval = match crate::tool::person_only::reason(&person_only) {
            Some(only) => {
                description = format!("{description} ({only}: what you give there is shown to them as a suggestion.)");
                Some(approval.map_or(only.clone(), |reason| format!("{reason}; {only}")))
            }
            None => approval,
        };
        self.push(Draft {
            display,
            identity: Identity::Stream(stream.clone()),
            description,
            schema: prepared,
            shape,
            target: ToolTarget::Handler { stream },
            entry: Arc::clone(entry),
            charm,
            unchecked: schema.unchecked,
            approval,
            person_only,
            output_schema,
        });
    }
}

/// The field of a `{"tool": "name"}` entry: a tool defined with the builder.
pub const TOOL_ENTRY: &str = "tool";

/// The field of a `{"client": {...}}` entry: a client tool's definition.
pub const CLIENT_ENTRY: &str = "client";

/// `{"client": {"description", "parameters"}}`: a client tool named by the entry's key.
fn client_entry(key: &str, definition: &Value, out: &mut Extraction) {
    let limits = out.registry.client_limits();
    if out.client_tools >= limits.max_tools {
        return out.problem(key, LimitError::Tools(limits.max_tools).into());
    }
    let (description, schema) = match limits.check(key, definition) {
        Ok(checked) => checked,
        Err(error) => return out.problem(key, error.into()),
    };
    out.client_tools += 1;
    out.push(Draft {
        display: key.to_string(),
        identity: Identity::Text(format!("{CLIENT_ENTRY}:{key}")),
        description,
        schema: Arc::new(schema),
        shape: InputShape::Object,
        target: ToolTarget::Client,
        entry: key.into(),
        charm: None,
        unchecked: false,
        approval: None,
        person_only: Vec::new(),
        output_schema: None,
    });
}

/// The field of a `{"human_input": true}` entry: the built-in `request_human_input` tool.
pub const HUMAN_INPUT_ENTRY: &str = "human_input";

/// `{"tool": "name"}`: the registered tool `name`, displayed as the entry's key.
fn defined_entry(key: &str, name: &str, description: Option<&str>, out: &mut Extraction) {
    let Some(tool) = out.registry.get(name) else {
        let known = out.registry.names().join(", ");
        return out
            .problem(key, EntryError::Defined(format!("no tool named `{name}` is registered (registered: {known})")));
    };
    let mut description = description.unwrap_or(tool.description()).to_string();
    // Every catalog that lists it knows a call may need approval (MCP marks it
    // destructive); whether one does is decided per call (`Tool::approval_for`).
    let approval = tool.approval_reason().map(str::to_string);
    match (tool.approval_marker(), &approval) {
        (Some(reason), _) => {
            description = format!("{description} (Each call waits for the user's approval: {reason}.)")
        }
        (None, Some(reason)) => {
            description = format!("{description} (Some calls wait for the user's approval: {reason}.)")
        }
        (None, None) => {}
    }
    out.push(Draft {
        display: key.to_string(),
        identity: Identity::Text(format!("{TOOL_ENTRY}:{name}:{key}")),
        description,
        schema: tool.input_schema().clone(),
        shape: tool.shape(),
        target: ToolTarget::Defined(tool),
        entry: key.into(),
        charm: None,
        unchecked: false,
        approval,
        person_only: Vec::new(),
        output_schema: None,
    });
}

/// `{"pattern": "id"}`, `{"pattern": {"id": .., "extraParams": {..}}}` (or `extraParams`
/// beside `pattern`).
fn pattern_entry(key: &str, fields: &Map<String, Value>, description: Option<&str>, out: &mut Extraction) {
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
    let Some(pattern) = out.reader.pattern(id) else {
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
    out.push(Draft {
        display: key.to_string(),
        identity: Identity::Text(format!("pattern:{key}")),
        description,
        schema: Arc::new(prepared.schema),
        shape: prepared.shape,
        target: ToolTarget::Pattern { id: id.to_string(), prefilled },
        entry: key.into(),
        charm: None,
        unchecked: false,
        approval: None,
        person_only: Vec::new(),
        output_schema: None,
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

fn unreadable(link: &Link, message: String) -> EntryError {
    EntryError::Unreadable { at: link.to_string(), message }
}

/// A value for an error message: compact and cut short.
fn short(value: &Value) -> String {
    summary::compact(value, 60)
}
