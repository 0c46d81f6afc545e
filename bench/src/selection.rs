//! The `selection` suite: choosing the tools of one request among 1,000.
//!
//! * `keyword-1000`: [`KeywordSelector`] (cap 32) scores 1,000 tools (20 sources of 50,
//!   names and one-line descriptions like MCP servers') against a five-message
//!   conversation, and keeps the tool the conversation asks for.
//! * `offered-1000`: what a dialog round pays: the 1,000 tools of an attached tool source
//!   in a cached catalog, turned into specs and selected (`sources::offered`).
//! * `catalog-sources-1000`: building the catalog of those 1,000 source tools (schemas
//!   prepared, wire names allocated), as after a `tools/list_changed`.
//!
//! Trellis only: no peer, no ratio.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use trellis_builtins::catalog::{Catalog, CatalogCache};
use trellis_builtins::message::{Message, ToolOutput};
use trellis_builtins::model::{ToolChoice, ToolSpec};
use trellis_builtins::sources::selection::{KeywordSelector, ToolSelector};
use trellis_builtins::sources::{self, CallFuture, SourceTool, ToolSource};
use trellis_runner::Runtime;

use crate::harness::{self, Budget, Measurement, RunConfig, Stats, Suite};

/// The suite entry for `main.rs`.
pub const SUITE: Suite =
    Suite { name: "selection", description: "choosing the tools of a request among 1,000 (keyword selector)", run };

const BUDGET: Budget = Budget { warmup: 10, min_samples: 30, max_samples: 2000, max_time: Duration::from_millis(2000) };

/// Tools in every scenario; the cap of the selector.
const TOOLS: usize = 1000;
const CAP: usize = 32;

fn run(config: &RunConfig) -> Vec<Measurement> {
    type Scenario = (&'static str, fn(&RunConfig) -> Stats);
    let scenarios: [Scenario; 3] =
        [("keyword-1000", keyword), ("offered-1000", offered), ("catalog-sources-1000", catalog_sources)];
    scenarios
        .into_iter()
        .map(|(name, measure)| harness::run_guarded(config, SUITE.name, name, "trellis", || measure(config)))
        .collect()
}

const VERBS: &[&str] = &["get", "list", "create", "update", "delete", "search", "export", "archive", "sync", "count"];
const THINGS: &[&str] = &["issue", "invoice", "calendar_event", "contact", "file", "message", "ticket", "order"];

/// 1,000 tools as 20 servers of 50 would list them; one of them is `weather.forecast`.
fn source_tools() -> Vec<(String, SourceTool)> {
    let schema = json!({"type": "object", "properties": {"id": {"type": "string"}, "query": {"type": "string"}}});
    let mut tools: Vec<(String, SourceTool)> = (0..TOOLS - 1)
        .map(|i| {
            let (verb, thing) = (VERBS[i % VERBS.len()], THINGS[(i / VERBS.len()) % THINGS.len()]);
            let name = format!("{verb}_{thing}_{i}");
            let description = format!("{verb} a {} in workspace {}.", thing.replace('_', " "), i / 50);
            (format!("server{}", i / 50), SourceTool::new(name, description, schema.clone()).read_only(true))
        })
        .collect();
    let forecast = SourceTool::new("forecast", "The weather forecast for a city, by day.", schema).read_only(true);
    tools.insert(TOOLS / 2, ("weather".into(), forecast));
    tools
}

fn conversation() -> Vec<Message> {
    vec![
        Message::user("hello, I am planning a trip"),
        Message::assistant("Where are you going?"),
        Message::user("to Lisbon next week"),
        Message::assistant("Nice. What do you need?"),
        Message::user("Will it rain in Lisbon on Tuesday? Check the weather forecast please."),
    ]
}

fn specs() -> Vec<ToolSpec> {
    source_tools()
        .into_iter()
        .map(|(server, tool)| ToolSpec {
            name: format!("{server}_{}", tool.name),
            display_name: format!("{server}.{}", tool.name),
            description: tool.description,
            input_schema: Arc::new(tool.input_schema),
        })
        .collect()
}

fn keyword(config: &RunConfig) -> Stats {
    let (tools, conversation) = (specs(), conversation());
    let selector = KeywordSelector::new(CAP);
    harness::measure(config.budget(BUDGET), || {
        let (chosen, took) = harness::time(|| selector.select(&tools, &conversation));
        assert_eq!(chosen.len(), CAP, "selection: the cap holds");
        assert!(
            chosen.iter().any(|&i| tools[i].display_name == "weather.forecast"),
            "selection: the forecast is offered"
        );
        took
    })
}

/// One source offering all 1,000 tools (as `server.tool` names within it).
struct Thousand(Arc<[SourceTool]>);

impl ToolSource for Thousand {
    fn name(&self) -> &str {
        "all"
    }
    fn tools(&self) -> Arc<[SourceTool]> {
        self.0.clone()
    }
    fn version(&self) -> u64 {
        0
    }
    fn trusted(&self) -> bool {
        true
    }
    fn call(&self, _tool: &str, _arguments: Value, _timeout: Duration) -> CallFuture {
        Box::pin(async { ToolOutput::Text(String::new()) })
    }
}

fn attached() -> Runtime {
    let rt = Runtime::in_memory();
    let tools: Vec<SourceTool> = source_tools()
        .into_iter()
        .map(|(server, mut tool)| {
            tool.name = format!("{server}_{}", tool.name);
            tool
        })
        .collect();
    sources::attach(&rt, Arc::new(Thousand(tools.into()))).expect("selection: attach");
    rt
}

fn offered(config: &RunConfig) -> Stats {
    let rt = attached();
    sources::select_with(&rt, Some(Arc::new(KeywordSelector::new(CAP))));
    let cache = CatalogCache::default();
    let conversation = conversation();
    harness::measure(config.budget(BUDGET), || {
        let (offered, took) = harness::time(|| {
            let catalog = cache.get(&rt, &Value::Null);
            sources::offered(&rt, catalog.specs(), &conversation, &ToolChoice::Auto)
        });
        assert_eq!(offered.len(), CAP);
        assert!(offered.iter().any(|t| t.display_name == "all.weather_forecast"), "selection: the forecast is offered");
        took
    })
}

fn catalog_sources(config: &RunConfig) -> Stats {
    let rt = attached();
    harness::measure(config.budget(BUDGET), || {
        let (catalog, took) = harness::time(|| Catalog::build(&rt, &Value::Null));
        assert_eq!(catalog.len(), TOOLS);
        took
    })
}
