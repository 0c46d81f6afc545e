//! The tools of the sources attached to a runtime (`crate::sources`), as entries of a
//! catalog being built: displayed `source.tool`, named by the same table as the space's
//! own tools, and approved per call unless the source is trusted or the tool is marked
//! read-only and not destructive.

use std::sync::Arc;

use trellis_runner::Runtime;

use super::entries::{Draft, Extraction};
use super::identity::Identity;
use super::{EntryError, ToolTarget};
use crate::naming;
use crate::schema::prepare_input_schema;
use crate::sources;

/// Adds the tools of every source attached to `rt` to a catalog being built.
///
/// The space's own tools keep their names: a source's tool whose name would read as one of
/// theirs (`--mcp Counter=...` serving `increment`, beside the charm Counter) is shown as
/// `Counter.increment (tool source Counter)`, so each display name stays one tool's, and
/// the charm's wire name does not change because a source came.
pub(super) fn extract_all(rt: &Runtime, out: &mut Extraction) {
    let sources = sources::attached(rt);
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
                target: ToolTarget::Source {
                    source: name.to_string(),
                    tool: tool.name.clone(),
                    repeatable: tool.read_only || tool.idempotent,
                },
                entry: name.into(),
                charm: None,
                unchecked: false,
                approval,
                person_only: Vec::new(),
                output_schema: None,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use serde_json::json;

    use std::time::Duration;

    use serde_json::Value;

    use super::*;
    use crate::catalog::{Catalog, CatalogCache};
    use crate::message::ToolOutput;
    use crate::sources::{attach, detach, CallFuture, SourceError, SourceTool, ToolSource};

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
