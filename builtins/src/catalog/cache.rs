//! Reusing a catalog while nothing it was built from changed.

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;
use trellis_runner::Runtime;

use super::reads::Reads;
use super::Catalog;
use crate::tool::ToolRegistry;

/// The last catalog built for one `tools` map, reused while what its build read is
/// unchanged: the `tools` map itself, every link it followed, each charm's stream markers
/// and field names, each charm's NAME and record, registered handlers and patterns (see
/// the `reads` module). Data values are not part of it: a counter going up keeps the
/// catalog, a charm renamed, attached, detached or given a new handler does not.
///
/// One cache serves one runtime (a dialog keeps one, shared by its requests and its
/// `flattened_tools`). Checking costs a fraction of a build: the same reads, compared
/// mostly by pointer, without preparing schemas or allocating names.
#[derive(Default)]
pub struct CatalogCache {
    last: Mutex<Option<Arc<Cached>>>,
    /// The defined tools `{"tool"}` entries name; the built-in ones when `None`.
    registry: Option<ToolRegistry>,
}

struct Cached {
    tools: Value,
    /// The registry's generation when built: a tool registered since may fill an entry.
    generation: u64,
    /// The attached tool sources and their versions.
    sources: crate::sources::Stamp,
    reads: Reads,
    catalog: Arc<Catalog>,
}

impl std::fmt::Debug for CatalogCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tools = self.last.lock().as_ref().map(|c| c.catalog.len());
        f.debug_struct("CatalogCache").field("cached_tools", &tools).finish()
    }
}

impl CatalogCache {
    /// A cache whose catalogs take `{"tool"}` entries from `registry`.
    pub fn with_tools(registry: ToolRegistry) -> Self {
        CatalogCache { last: Mutex::default(), registry: Some(registry) }
    }

    /// The catalog built last, if any: what the dialog's latest round offered (to check a
    /// person's edited arguments against, where no runtime is at hand).
    pub fn latest(&self) -> Option<Arc<Catalog>> {
        self.last.lock().as_ref().map(|cached| cached.catalog.clone())
    }

    /// The catalog of `tools` (see [`Catalog::build`]): the last one when nothing it was
    /// built from changed, else a fresh one, which is kept for next time.
    pub fn get(&self, rt: &Runtime, tools: &Value) -> Arc<Catalog> {
        // The runtime is read without the lock held: `flattened_tools` asks from inside
        // the engine, and nothing here should wait on what the engine holds. Two callers
        // at once may both build; either result is current.
        let registry = self.registry.as_ref().unwrap_or_else(|| ToolRegistry::shared_standard());
        let generation = registry.generation();
        let last = self.last.lock().clone();
        if let Some(cached) = last {
            if cached.tools == *tools
                && cached.generation == generation
                && cached.sources == crate::sources::stamp(rt)
                && cached.reads.still_hold(rt)
            {
                #[cfg(debug_assertions)]
                check(&cached, rt, tools, registry);
                return cached.catalog.clone();
            }
        }
        let sources = crate::sources::stamp(rt);
        let (catalog, reads) = Catalog::build_reading(rt, tools, registry);
        let catalog = Arc::new(catalog);
        let cached = Cached { tools: tools.clone(), generation, sources, reads, catalog: catalog.clone() };
        *self.last.lock() = Some(Arc::new(cached));
        catalog
    }
}

/// Panics unless the catalog `cached` kept is what building it afresh gives, unless the
/// space moved on meanwhile (debug builds check every catalog reused).
#[cfg(debug_assertions)]
fn check(cached: &Cached, rt: &Runtime, tools: &Value, registry: &ToolRegistry) {
    let (fresh, _) = Catalog::build_reading(rt, tools, registry);
    if !cached.reads.still_hold(rt) {
        // A commit came between the cache's look and the fresh build: either is current.
        return;
    }
    let same = fresh.flattened() == cached.catalog.flattened() && fresh.problems() == cached.catalog.problems();
    assert!(same, "the catalog cache reused a catalog that building it afresh does not give");
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use trellis_runner::{Pattern, Runtime};

    use super::*;

    /// Add to the count.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Increment {
        amount: i64,
    }

    /// Back to zero.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Reset {}

    /// A counter; `with_reset` adds a `reset` handler (a new version of the pattern).
    fn counter(with_reset: bool) -> Pattern {
        Pattern::new("counter", move |b, _: Value| {
            b.name("Counter")?;
            let count = b.state("count", 0i64)?;
            b.handler("increment", move |tx, e: Increment| count.update(tx, |n| n + e.amount))?;
            if with_reset {
                b.handler("reset", move |tx, _: Reset| count.set(tx, 0))?;
            }
            Ok(())
        })
    }

    fn runtime_with(charms: usize) -> (Runtime, Vec<String>) {
        let rt = Runtime::in_memory();
        rt.register_pattern(counter(false));
        let ids = (0..charms).map(|_| rt.charms().create("counter", json!({})).expect("create").to_string()).collect();
        (rt, ids)
    }

    fn tools(rt: &Runtime, ids: &[&str]) -> Value {
        let entries = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (format!("c{i}"), json!({ "charm": rt.charms().result(&(*id).into()).to_json() })));
        Value::Object(entries.collect())
    }

    fn displays(catalog: &Catalog) -> Vec<&str> {
        catalog.tools().iter().map(|t| t.display.as_str()).collect()
    }

    #[tokio::test]
    async fn an_unchanged_catalog_is_reused_even_when_data_changed() {
        let (rt, ids) = runtime_with(2);
        let tools = tools(&rt, &[&ids[0], &ids[1]]);
        let cache = CatalogCache::default();
        let first = cache.get(&rt, &tools);
        assert!(Arc::ptr_eq(&first, &cache.get(&rt, &tools)), "nothing changed");
        let wire = first.tools()[0].wire.clone();
        let call = first.invoke(&rt, &wire, json!({"amount": 2}), Duration::from_secs(5)).await;
        assert!(!call.is_error(), "{call:?}");
        assert!(Arc::ptr_eq(&first, &cache.get(&rt, &tools)), "a count going up is not a tool change");
    }

    #[test]
    fn attaching_and_detaching_a_charm_gives_a_fresh_catalog() {
        let (rt, ids) = runtime_with(2);
        let cache = CatalogCache::default();
        let one = cache.get(&rt, &tools(&rt, &[&ids[0]]));
        assert_eq!(one.len(), 1);
        let two = cache.get(&rt, &tools(&rt, &[&ids[0], &ids[1]]));
        assert_eq!(two.len(), 2, "the attached charm's tool is there");
        assert!(two.tools().iter().all(|t| t.suffixed), "two charms named Counter: both suffixed");
        let again = cache.get(&rt, &tools(&rt, &[&ids[1]]));
        assert_eq!(again.len(), 1, "the detached charm's tool is gone");
        assert_eq!(again.tools()[0].charm.as_deref(), Some(ids[1].as_str()));
        assert!(!again.tools()[0].suffixed, "its name is plain again");
    }

    #[test]
    fn renaming_a_charm_gives_a_fresh_catalog() {
        let (rt, ids) = runtime_with(1);
        let cache = CatalogCache::default();
        // Both forms of entry: a link to the result, and the charm's name.
        let tools = json!({
            "linked": { "charm": rt.charms().result(&ids[0].as_str().into()).to_json() },
            "named": { "charm": "Counter" },
        });
        assert_eq!(displays(&cache.get(&rt, &tools)), ["Counter.increment"]);
        rt.charms().rename(&ids[0], "Tally").expect("rename");
        let renamed = cache.get(&rt, &tools);
        assert_eq!(displays(&renamed), ["Tally.increment"], "the link follows the rename");
        assert_eq!(renamed.problems().len(), 1, "no charm is named Counter any more: {:?}", renamed.problems());
        assert!(Arc::ptr_eq(&renamed, &cache.get(&rt, &tools)), "and is reused after that");
    }

    #[test]
    fn a_handler_added_to_a_charm_gives_a_fresh_catalog() {
        let (rt, ids) = runtime_with(1);
        let tools = tools(&rt, &[&ids[0]]);
        let cache = CatalogCache::default();
        let before = cache.get(&rt, &tools);
        assert_eq!(displays(&before), ["Counter.increment"]);
        // A new version of the pattern, picked up when the charm starts again.
        rt.charms().stop(&ids[0]).expect("stop");
        rt.register_pattern(counter(true));
        rt.charms().start(&ids[0]).expect("start");
        let after = cache.get(&rt, &tools);
        assert_eq!(displays(&after), ["Counter.increment", "Counter.reset"]);
    }

    #[test]
    fn a_handler_whose_event_changed_gives_a_fresh_catalog() {
        let (rt, ids) = runtime_with(1);
        let tools = tools(&rt, &[&ids[0]]);
        let cache = CatalogCache::default();
        let before = cache.get(&rt, &tools);
        assert!(before.tools()[0].input_schema["properties"].get("amount").is_some());
        // Same handler key, new event type: only the stream marker's schema differs.
        rt.charms().stop(&ids[0]).expect("stop");
        rt.register_pattern(Pattern::new("counter", |b, _: Value| {
            b.name("Counter")?;
            let count = b.state("count", 0i64)?;
            b.handler("increment", move |tx, _: Reset| count.update(tx, |n| n + 1))?;
            Ok(())
        }));
        rt.charms().start(&ids[0]).expect("start");
        let after = cache.get(&rt, &tools);
        assert!(after.tools()[0].input_schema["properties"].get("amount").is_none(), "the new event has no amount");
        assert_eq!(after.tools()[0].description, "Back to zero.");
    }

    #[test]
    fn a_changed_pattern_gives_a_fresh_catalog_for_pattern_tools() {
        let (rt, _) = runtime_with(0);
        let tools = json!({ "count": { "pattern": "counter" } });
        let cache = CatalogCache::default();
        let before = cache.get(&rt, &tools);
        assert!(Arc::ptr_eq(&before, &cache.get(&rt, &tools)));
        rt.register_pattern(counter(true));
        assert!(!Arc::ptr_eq(&before, &cache.get(&rt, &tools)), "the pattern was registered again");
    }
}
