//! Tool sources: tools that live outside the space (an MCP server's, a plugin's), offered
//! to every dialog beside the charms' tools.
//!
//! A [`ToolSource`] says what tools it has now ([`ToolSource::tools`]), bumps
//! [`ToolSource::version`] when they change (so a dialog's [`CatalogCache`](super::CatalogCache) builds a
//! fresh catalog), and runs a call. [`attach`] makes a source part of a runtime: from then
//! on every catalog built for that runtime (every `llm_dialog`, `trellis tools`) lists its
//! tools, displayed `source.tool` and given wire names by the same table as charm tools
//! ([`naming`]), so a source tool that shares a name with a charm's handler or another
//! source's tool gets a suffix and never replaces it. [`detach`] takes it away again.
//! A source whose tools change calls [`announce_change`], so what is derived from the
//! catalog in the space (a dialog's `flattened_tools`) derives again.
//!
//! What a source says of its tools (read-only, destructive) is a hint from outside: unless
//! the source is [`ToolSource::trusted`], a tool that is not marked read-only, or is marked
//! destructive, gets a [`Tool::approval`](super::Tool::approval) reason, so a dialog asks
//! the person before each call (the tool protocol's approval path).
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use serde_json::{json, Value};
//! use trellis_builtins::catalog::sources::{self, CallFuture, SourceTool, ToolSource};
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

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use trellis_runner::{Link, Path, Read, Runtime, WeakRuntime};

use super::entries::{Draft, Extraction};
use super::identity::Identity;
use super::schema::prepare_input_schema;
use super::selection::ToolSelector;
use super::{naming, Catalog, EntryError, Invocation, ToolTarget};
use crate::message::{Message, ToolOutput};
use crate::model::{ToolChoice, ToolSpec};

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

/// The sources attached to each live runtime. A runtime has no slot for extensions, and
/// the catalog must find its sources from the runtime alone (every dialog builds its own
/// catalog), so they are kept here, keyed by the runtime's space.
static ATTACHED: Mutex<Vec<Attached>> = Mutex::new(Vec::new());

struct Attached {
    runtime: WeakRuntime,
    space: usize,
    sources: Vec<Arc<dyn ToolSource>>,
    /// Chooses the tools of each request; all are offered without one.
    selector: Option<Arc<dyn ToolSelector>>,
    /// Bumped on every attach and detach.
    generation: u64,
}

fn key(rt: &Runtime) -> usize {
    std::ptr::from_ref(rt.space()) as usize
}

/// Runs `f` on the entry of `rt`, made if missing; entries of dropped runtimes go first
/// (a new runtime may reuse a dropped one's address).
fn with_entry<R>(rt: &Runtime, f: impl FnOnce(&mut Attached) -> R) -> R {
    let mut all = ATTACHED.lock();
    all.retain(|a| a.runtime.upgrade().is_some());
    let space = key(rt);
    let index = match all.iter().position(|a| a.space == space) {
        Some(index) => index,
        None => {
            all.push(Attached { runtime: rt.downgrade(), space, sources: Vec::new(), selector: None, generation: 0 });
            all.len() - 1
        }
    };
    f(&mut all[index])
}

/// Runs `f` on the entry of `rt`, if it has one: reading makes none, so the catalogs of
/// runtimes without sources cost one lookup.
fn read_entry<R>(rt: &Runtime, f: impl FnOnce(&Attached) -> R) -> Option<R> {
    let all = ATTACHED.lock();
    let space = key(rt);
    // A dead runtime's entry at a reused address is not this runtime's.
    all.iter().find(|a| a.space == space && a.runtime.upgrade().is_some()).map(f)
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
    read_entry(rt, |entry| entry.sources.clone()).unwrap_or_default()
}

/// Lets `selector` choose the tools each request of `rt`'s dialogs offers (`None`: all).
pub fn select_with(rt: &Runtime, selector: Option<Arc<dyn ToolSelector>>) {
    with_entry(rt, |entry| entry.selector = selector);
}

/// The tools a request offers the model: what `rt`'s selector chooses from `catalog`
/// given the conversation so far, or all of them. A tool the request forces (`choice`) is
/// offered whatever the selector says.
pub fn offered(rt: &Runtime, catalog: &Catalog, conversation: &[Message], choice: &ToolChoice) -> Vec<ToolSpec> {
    let specs = catalog.specs();
    let Some(selector) = read_entry(rt, |entry| entry.selector.clone()).flatten() else { return specs };
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
pub(super) struct Stamp(u64, Vec<u64>);

/// The current [`Stamp`] of `rt`'s sources.
pub(super) fn stamp(rt: &Runtime) -> Stamp {
    // The sources are asked without the registry's lock held: a source may look at it.
    let (generation, sources) = read_entry(rt, |entry| (entry.generation, entry.sources.clone())).unwrap_or_default();
    Stamp(generation, sources.iter().map(|s| s.version()).collect())
}

/// Adds the tools of every source attached to `rt` to a catalog being built.
///
/// The space's own tools keep their names: a source's tool whose name would read as one of
/// theirs (`--mcp Counter=...` serving `increment`, beside the charm Counter) is shown as
/// `Counter.increment (tool source Counter)`, so each display name stays one tool's, and
/// the charm's wire name does not change because a source came.
pub(super) fn extract_all(rt: &Runtime, out: &mut Extraction) {
    let sources = attached(rt);
    if sources.is_empty() {
        return;
    }
    let own: std::collections::HashSet<String> = out.tools.iter().map(|t| naming::sanitize(&t.display)).collect();
    for source in sources {
        let name = source.name();
        let trusted = source.trusted();
        for tool in source.tools().iter() {
            let mut display = naming::display_name(name, &tool.name);
            if own.contains(&naming::sanitize(&display)) {
                display = format!("{display} (tool source {name})");
            }
            let prepared = match prepare_input_schema(&tool.input_schema) {
                Ok(prepared) => prepared,
                Err(error) => {
                    out.problem(name, EntryError::Schema { tool: display, source: error });
                    continue;
                }
            };
            let approval = tool.approval(name, trusted);
            let mut description = tool.description.trim().to_string();
            if description.is_empty() {
                description = format!("`{}` from {name}", tool.name);
            }
            if let Some(reason) = &approval {
                description = format!("{description} (Each call waits for the user's approval: {reason}.)");
            }
            out.push(Draft {
                identity: Identity::Text(format!("source:{name}/{}", tool.name)),
                display,
                description,
                schema: Arc::new(prepared.schema),
                shape: prepared.shape,
                target: ToolTarget::Source { source: name.to_string(), tool: tool.name.clone() },
                entry: name.into(),
                charm: None,
                unchecked: false,
                approval,
            });
        }
    }
}

/// Calls `tool` of the attached source `source`, giving up after `timeout`.
pub(super) async fn call(rt: &Runtime, source: &str, tool: &str, arguments: Value, timeout: Duration) -> Invocation {
    let Some(found) = attached(rt).into_iter().find(|s| s.name() == source) else {
        return Invocation::error(format!("the tool source `{source}` was detached; `{source}.{tool}` is gone"));
    };
    let output = match tokio::time::timeout(timeout, found.call(tool, arguments, timeout)).await {
        Ok(output) => output,
        Err(_) => ToolOutput::ErrorText(format!(
            "`{source}.{tool}` did not answer within {timeout:?}; it may still be running in `{source}`"
        )),
    };
    Invocation { output, summary: None, effect: None }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use serde_json::json;

    use super::*;
    use crate::catalog::CatalogCache;

    /// A source whose tools grow by one each time `grow` is called.
    struct Growing(AtomicU64, bool);

    impl ToolSource for Growing {
        fn name(&self) -> &str {
            "grow"
        }
        fn tools(&self) -> Arc<[SourceTool]> {
            let schema = json!({"type": "object"});
            (0..=self.0.load(Ordering::SeqCst))
                .map(|n| SourceTool::new(format!("t{n}"), "A tool.", schema.clone()).read_only(n == 0))
                .collect()
        }
        fn version(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
        fn trusted(&self) -> bool {
            self.1
        }
        fn call(&self, tool: &str, _arguments: Value, _timeout: Duration) -> CallFuture {
            let answer = format!("ran {tool}");
            Box::pin(async move { ToolOutput::Text(answer) })
        }
    }

    fn displays(catalog: &Catalog) -> Vec<&str> {
        catalog.tools().iter().map(|t| t.display.as_str()).collect()
    }

    #[tokio::test]
    async fn the_cached_catalog_follows_attach_change_and_detach() {
        let rt = Runtime::in_memory();
        let cache = CatalogCache::default();
        assert!(cache.get(&rt, &Value::Null).is_empty());
        let source = Arc::new(Growing(AtomicU64::new(0), false));
        attach(&rt, source.clone()).expect("attach");
        let first = cache.get(&rt, &Value::Null);
        assert_eq!(displays(&first), ["grow.t0"]);
        assert!(Arc::ptr_eq(&first, &cache.get(&rt, &Value::Null)), "unchanged: reused");
        let ran = first.invoke(&rt, "grow_t0", json!({}), Duration::from_secs(5)).await;
        assert_eq!(ran.output, ToolOutput::Text("ran t0".into()));

        source.0.fetch_add(1, Ordering::SeqCst);
        let grown = cache.get(&rt, &Value::Null);
        assert_eq!(displays(&grown), ["grow.t0", "grow.t1"], "a new version: a fresh catalog");
        let t1 = grown.get("grow.t1").expect("listed");
        assert!(t1.approval.as_deref().is_some_and(|a| a.contains("read-only")), "{:?}", t1.approval);

        assert!(matches!(attach(&rt, source.clone()), Err(SourceError::Taken(_))));
        assert!(detach(&rt, "grow").is_some());
        assert!(cache.get(&rt, &Value::Null).is_empty(), "detached: gone");
        let gone = grown.invoke(&rt, "grow_t0", json!({}), Duration::from_secs(5)).await;
        assert!(gone.is_error(), "an old catalog's call of a detached source fails in words: {gone:?}");
    }

    #[test]
    fn a_sources_tool_named_like_a_charms_is_told_apart_and_the_charms_names_stay() {
        /// Add to the count.
        #[derive(serde::Deserialize, schemars::JsonSchema)]
        struct Add {}
        let rt = Runtime::in_memory();
        rt.register_pattern(trellis_runner::Pattern::new("grow", |b, _: Value| {
            b.name("grow")?;
            let count = b.state("count", 0i64)?;
            b.handler("t0", move |tx, _: Add| count.update(tx, |n| n + 1))?;
            Ok(())
        }));
        let charm = rt.charms().create("grow", json!({})).expect("the charm grow");
        let tools = json!({"g": {"charm": rt.charms().result(&charm).to_json()}});
        let wire = |catalog: &Catalog, display: &str| catalog.get(display).map(|t| t.wire.clone());
        let before = Catalog::build(&rt, &tools);
        assert_eq!(wire(&before, "grow.t0").as_deref(), Some("grow_t0"));

        attach(&rt, Arc::new(Growing(AtomicU64::new(1), false))).expect("attach the source grow");
        let after = Catalog::build(&rt, &tools);
        let shown = displays(&after);
        assert!(shown.contains(&"grow.t0 (tool source grow)") && shown.contains(&"grow.t1"), "{shown:?}");
        let unique: std::collections::HashSet<&&str> = shown.iter().collect();
        assert_eq!(unique.len(), shown.len(), "one tool a display name: {shown:?}");
        assert_eq!(wire(&after, "grow.t0"), wire(&before, "grow.t0"), "the charm's wire name stays");
        let source_t0 = after.get("grow.t0 (tool source grow)").expect("the source's t0");
        assert!(matches!(&source_t0.target, ToolTarget::Source { tool, .. } if tool == "t0"));
    }

    #[test]
    fn a_trusted_source_runs_without_asking_and_names_are_checked() {
        let rt = Runtime::in_memory();
        let source = Arc::new(Growing(AtomicU64::new(1), true));
        attach(&rt, source).expect("attach");
        assert!(Catalog::build(&rt, &Value::Null).tools().iter().all(|t| t.approval.is_none()));
        struct Named(&'static str);
        impl ToolSource for Named {
            fn name(&self) -> &str {
                self.0
            }
            fn tools(&self) -> Arc<[SourceTool]> {
                Arc::new([])
            }
            fn version(&self) -> u64 {
                0
            }
            fn trusted(&self) -> bool {
                false
            }
            fn call(&self, _: &str, _: Value, _: Duration) -> CallFuture {
                Box::pin(async { ToolOutput::Text(String::new()) })
            }
        }
        for bad in ["", "a.b", "new\nline"] {
            assert!(matches!(attach(&rt, Arc::new(Named(bad))), Err(SourceError::BadName(_))), "{bad:?}");
        }
    }
}
