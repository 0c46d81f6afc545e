//! The `outside` suite: a dialog's round of calls to tools outside the space.
//!
//! * `round-4x100ms`: one answer calls a source's tool four times, each call taking
//!   100 ms (a Tokio sleep, as an MCP server's tool that waits on the network would), then
//!   the model answers in words. The calls run side by side (`DialogSettings::
//!   parallel_calls`), so the round takes about one call's time, not four (≤ 150 ms).
//!
//! Trellis only: no peer has dialogs, so the scenario states its target.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use trellis_builtins::dialog::DialogHandle;
use trellis_builtins::message::ToolOutput;
use trellis_builtins::model::Model;
use trellis_builtins::scripted::{ScriptedCall, ScriptedModel, Turn};
use trellis_builtins::sources::{self, CallFuture, SourceTool, ToolSource};
use trellis_runner::Runtime;

use crate::harness::{self, Budget, Measurement, RunConfig, Stats, Suite};
use crate::tools::{register_chat, tokio};

/// The suite entry for `main.rs`.
pub const SUITE: Suite =
    Suite { name: "outside", description: "a round of four 100 ms calls to tools outside the space", run };

const BUDGET: Budget = Budget { warmup: 2, min_samples: 10, max_samples: 40, max_time: Duration::from_secs(4) };

/// How long each call takes.
const CALL: Duration = Duration::from_millis(100);

/// Calls in the round.
const CALLS: usize = 4;

fn run(config: &RunConfig) -> Vec<Measurement> {
    vec![harness::run_guarded(config, SUITE.name, "round-4x100ms", "trellis", || round(config))]
}

/// A source whose one tool answers after [`CALL`].
struct Slow;

impl ToolSource for Slow {
    fn name(&self) -> &str {
        "slow"
    }

    fn tools(&self) -> Arc<[SourceTool]> {
        Arc::new([SourceTool::new("wait", "Waits a while.", json!({"type": "object"}))])
    }

    fn version(&self) -> u64 {
        0
    }

    fn trusted(&self) -> bool {
        true
    }

    fn call(&self, _: &str, _: serde_json::Value, _: Duration) -> CallFuture {
        Box::pin(async {
            tokio::time::sleep(CALL).await;
            ToolOutput::Text("waited".into())
        })
    }
}

/// Conversations of a chat whose model calls `slow.wait` four times, then answers: the
/// time of each.
fn round(config: &RunConfig) -> Stats {
    let budget = config.budget(BUDGET);
    let conversations = budget.warmup + budget.max_samples;
    let call = ScriptedCall { name: "slow.wait".into(), arguments: json!({}) };
    let calls = Turn { text: None, tool_calls: vec![call; CALLS] };
    let turns = [calls, Turn::text("done")].into_iter().cycle().take(2 * conversations).collect();
    let model: Arc<dyn Model> = Arc::new(ScriptedModel::from_turns(turns));
    let rt = Runtime::in_memory();
    register_chat(&rt, Arc::new(move |_| Ok(model.clone())));
    sources::attach(&rt, Arc::new(Slow)).expect("outside: attach the source");
    let chat = rt
        .charms()
        .create("chat", json!({"model": "scripted", "tools": {"slow": {"source": "slow"}}}))
        .expect("outside: create the chat");
    let dialog = DialogHandle::new(rt.clone(), rt.charms().result(&chat).child("dialog"));
    let tokio = tokio();
    harness::measure(budget, || {
        let (said, took) = harness::time(|| tokio.block_on(dialog.say("wait", Duration::from_secs(30))));
        said.expect("outside: the dialog answered");
        assert!(dialog.error().is_none(), "outside: the dialog failed: {:?}", dialog.error());
        took
    })
    .with_target(Duration::from_millis(150))
}
