//! The `dialogs` suite: many dialogs in one process (issue targets in brackets).
//!
//! 1,000 chat charms, each with a dialog whose tool is a counter of its own, answered by
//! the scripted model (a tool call, then a text: two rounds per conversation). In memory,
//! so the figures are the runtime's and the dialog's, not the disk's.
//!
//! * `round-1-dialog`: a round when the process holds one dialog.
//! * `round-among-1000`: a round of one dialog at a time, taking turns through 1,000 live
//!   dialogs (each has talked before, so each holds its conversation and catalog): the
//!   latency 1,000 dialogs add per round is this minus `round-1-dialog` (p99 ≤ 5 ms).
//! * `burst-1000`: all 1,000 dialogs say something at once (Tokio, two workers); the
//!   median is wall time per round of the burst, so the rate under the table is rounds
//!   per second; p99 is of each dialog's own time per round, which includes waiting for
//!   the others (handlers run one at a time); the peak is the memory the burst adds.
//!
//! Trellis only: no peer has dialogs, so the scenarios state targets.

use std::sync::Arc;
use std::time::{Duration, Instant};

use trellis_builtins::dialog::ModelResolver;
use trellis_builtins::model::Model;
use trellis_builtins::scripted::{ScriptedModel, Turn};
use trellis_runner::Runtime;

use crate::harness::{self, Budget, Measurement, RunConfig, Stats, Suite};
use crate::memory;
use crate::tools::{counter_pattern, register_chat, tokio, Chat, ROUNDS_PER_SAY};

/// The suite entry for `main.rs`.
pub const SUITE: Suite = Suite {
    name: "dialogs",
    description: "1,000 concurrent dialogs with the scripted model: latency per round (p50, p99), rounds/s",
    run,
};

/// Dialogs in the many-dialogs scenarios.
const DIALOGS: usize = 1000;

const ROUND_BUDGET: Budget =
    Budget { warmup: 20, min_samples: 200, max_samples: 5000, max_time: Duration::from_millis(2000) };

/// Bursts of `burst-1000` (each is 2,000 rounds).
const BURSTS: usize = 5;

fn run(config: &RunConfig) -> Vec<Measurement> {
    let guarded = |name: &str, f: &dyn Fn() -> Stats| harness::run_guarded(config, SUITE.name, name, "trellis", f);
    vec![
        guarded("round-1-dialog", &|| rounds(config, 1)),
        guarded("round-among-1000", &|| rounds(config, DIALOGS)),
        guarded("burst-1000", &|| burst(config)),
    ]
    .into_iter()
    .map(|m| if m.scenario == "burst-1000" { m.per("round") } else { m })
    .collect()
}

/// Scripted models for dialogs of `conversations` conversations each. The dialog keeps one
/// model per model string, and a scripted model goes on down its script, so each chat
/// names its own model and its script holds a call and an answer per conversation.
fn scripted(conversations: usize) -> ModelResolver {
    Arc::new(move |_| {
        let call = Turn::tool_call("Counter.increment", serde_json::json!({"amount": 1}));
        let turns = [call, Turn::text("done")].into_iter().cycle().take(2 * conversations).collect();
        Ok(Arc::new(ScriptedModel::from_turns(turns)) as Arc<dyn Model>)
    })
}

/// A runtime with `n` chats, each of which has had one conversation and may have up to
/// `conversations` in all.
fn chats(n: usize, conversations: usize, tokio: &tokio::runtime::Runtime) -> (Runtime, Vec<Chat>) {
    let rt = Runtime::in_memory();
    rt.register_pattern(counter_pattern());
    register_chat(&rt, scripted(conversations));
    let chats: Vec<Chat> = (0..n).map(|i| Chat::new(&rt, &format!("scripted-{i}"))).collect();
    for chat in &chats {
        chat.conversation(tokio);
    }
    (rt, chats)
}

/// Conversations taking turns through `n` dialogs, one at a time: time per round.
fn rounds(config: &RunConfig, n: usize) -> Stats {
    let tokio = tokio();
    let budget = config.budget(ROUND_BUDGET);
    let (_rt, chats) = chats(n, 1 + (budget.warmup + budget.max_samples).div_ceil(n), &tokio);
    let mut next = chats.iter().cycle();
    for chat in next.by_ref().take(budget.warmup) {
        chat.conversation(&tokio);
    }
    let started = Instant::now();
    let mut samples = Vec::new();
    while samples.len() < budget.max_samples.max(1)
        && (samples.len() < budget.min_samples.max(1) || started.elapsed() < budget.max_time)
    {
        samples.extend(next.next().map(|chat| chat.conversation(&tokio)));
    }
    Stats::of(&mut samples).with_p99_target(Duration::from_millis(5))
}

/// Every dialog says something at once, `BURSTS` times.
fn burst(config: &RunConfig) -> Stats {
    let workers = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("dialogs: a Tokio runtime");
    let bursts = if config.quick { 1 } else { BURSTS };
    let (_rt, chats) = chats(DIALOGS, 1 + bursts, &workers);
    let chats: Vec<Arc<Chat>> = chats.into_iter().map(Arc::new).collect();
    let rounds = u32::try_from(DIALOGS).unwrap_or(u32::MAX) * ROUNDS_PER_SAY;
    let (measured, peak) = memory::peak_during(|| {
        let mut per_round = Vec::new();
        let mut own = Vec::new();
        for _ in 0..bursts {
            workers.block_on(async {
                for chat in &chats {
                    chat.clear().await.expect("dialogs: clear the conversation");
                }
            });
            let (times, took) = harness::time(|| workers.block_on(say_all(&chats)));
            own.extend(times.into_iter().map(|t| t / ROUNDS_PER_SAY));
            per_round.push(took / rounds);
        }
        (per_round, own)
    });
    for chat in &chats {
        chat.check();
    }
    let (mut per_round, mut own) = measured;
    let stats = Stats { p99_ns: Stats::of(&mut own).p99_ns, ..Stats::of(&mut per_round) };
    match peak {
        Some(bytes) => stats.with_peak(bytes),
        None => stats,
    }
}

/// Every chat says "count" on its own task; each one's time to its answer.
async fn say_all(chats: &[Arc<Chat>]) -> Vec<Duration> {
    let tasks: Vec<_> = chats
        .iter()
        .map(|chat| {
            let chat = Arc::clone(chat);
            tokio::spawn(async move {
                let start = Instant::now();
                chat.say().await.expect("dialogs: the dialog answered");
                start.elapsed()
            })
        })
        .collect();
    let mut times = Vec::with_capacity(tasks.len());
    for task in tasks {
        times.push(task.await.expect("dialogs: a dialog's task"));
    }
    times
}
