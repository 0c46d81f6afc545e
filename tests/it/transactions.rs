//! Transactions: concurrent conflicts resolved by retry, failures and panics rolled back;
//! in memory and on a SQLite space.

use crate::spaces;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use serde_json::json;
use trellis::patterns::counter::counter;
use trellis::prelude::*;
use trellis::runner::Error;

#[test]
fn conflicting_concurrent_transactions_are_retried_and_each_applies_exactly_once() {
    const THREADS: usize = 8;
    for spaces::Subject { kind, rt, .. } in spaces::both() {
        let count = rt.new_cell("count", 0i64).unwrap();
        // Every thread reads the count in its first transaction, then waits here until
        // all have read: all but the first to commit must conflict and run again.
        let all_read = Arc::new(Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let (rt, count, all_read) = (rt.clone(), count, all_read.clone());
                std::thread::spawn(move || {
                    let waited = AtomicBool::new(false);
                    for _ in 0..200 {
                        rt.transact(|tx| {
                            let n = count.get(tx)?;
                            if !waited.swap(true, Ordering::Relaxed) {
                                all_read.wait();
                            }
                            // Widen the window between read and commit so conflicts go on.
                            std::thread::yield_now();
                            count.set(tx, n + 1)
                        })
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(count.get(&rt).unwrap(), 200 * THREADS as i64, "{kind}: every increment applied exactly once");
        let retries = rt.stats().conflict_retries;
        assert!(retries >= THREADS as u64 - 1, "{kind}: the overlapping first transactions conflicted: {retries}");
    }
}

/// Runs `body` in a transaction; during its first attempt only, another thread runs
/// `between` (which commits on its own). Returns how many attempts the transaction took.
fn with_commits_between(
    rt: &Runtime,
    body: impl Fn(&Tx) -> trellis::runner::Result<()>,
    between: impl Fn() -> trellis::runner::Result<()> + Sync,
) -> usize {
    let attempts = AtomicUsize::new(0);
    rt.transact(|tx| {
        if attempts.fetch_add(1, Ordering::Relaxed) == 0 {
            body(tx)?;
            std::thread::scope(|s| s.spawn(&between).join().unwrap())?;
            return Ok(());
        }
        body(tx)
    })
    .unwrap();
    attempts.load(Ordering::Relaxed)
}

#[test]
fn disjoint_writes_to_one_document_do_not_conflict() {
    for spaces::Subject { kind, rt, .. } in spaces::both() {
        let doc = rt.new_cell("doc", json!({"a": 0, "b": 0})).unwrap();
        let (a, b) = (doc.key::<i64>("a"), doc.key::<i64>("b"));
        // The other transaction commits `b` between this one's read of `a` and its commit.
        let attempts = with_commits_between(&rt, |tx| a.set(tx, a.get(tx)? + 1), || rt.transact(|tx| b.set(tx, 7)));
        assert_eq!(doc.get(&rt).unwrap(), json!({"a": 1, "b": 7}), "{kind}");
        assert_eq!(attempts, 1, "{kind}: no retry: the transactions touched different paths");
        assert_eq!(rt.stats().conflict_retries, 0, "{kind}");

        // Writing what the other one read does conflict, and the retry sees the new value.
        let attempts = with_commits_between(&rt, |tx| b.set(tx, a.get(tx)?), || rt.transact(|tx| a.set(tx, 100)));
        assert_eq!(attempts, 2, "{kind}");
        assert_eq!(rt.stats().conflict_retries, 1, "{kind}: the conflict was counted");
        assert_eq!(doc.get(&rt).unwrap(), json!({"a": 100, "b": 100}), "{kind}");
    }
}

#[test]
fn a_blind_write_lands_on_the_newest_value_however_many_commits_came_between() {
    for spaces::Subject { kind, rt, .. } in spaces::both() {
        let doc = rt.new_cell("doc", json!({"a": 0, "b": 0})).unwrap();
        let (a, b) = (doc.key::<i64>("a"), doc.key::<i64>("b"));
        // More whole-document commits than a document's history remembers come between
        // this transaction's first look at the document and its commit.
        let whole = || (1..=40).try_for_each(|n| rt.transact(|tx| doc.set(tx, json!({"a": -n, "b": n}))));
        assert_eq!(with_commits_between(&rt, |tx| a.set(tx, 1), whole), 1, "{kind}: nothing read, nothing to retry");
        assert_eq!(doc.get(&rt).unwrap(), json!({"a": 1, "b": 40}), "{kind}: written onto the newest value");

        // A read of anything in the document conflicts with a later whole-document write,
        // and with commits older than what the document's history remembers.
        let copy_b = |tx: &Tx| a.set(tx, b.get(tx)?);
        let once = || rt.transact(|tx| doc.set(tx, json!({"a": 0, "b": 5})));
        assert_eq!(with_commits_between(&rt, copy_b, once), 2, "{kind}");
        assert_eq!(doc.get(&rt).unwrap(), json!({"a": 5, "b": 5}), "{kind}");
        let many = || (0..40).try_for_each(|n| rt.transact(|tx| a.set(tx, n)));
        assert_eq!(with_commits_between(&rt, copy_b, many), 2, "{kind}: forty commits since `b` was read");
        assert_eq!(doc.get(&rt).unwrap(), json!({"a": 5, "b": 5}), "{kind}");
    }
}

#[tokio::test]
async fn a_failing_or_panicking_handler_is_rolled_back_and_reported_and_the_runtime_goes_on() {
    #[derive(Deserialize, JsonSchema)]
    struct Go {}
    for spaces::Subject { kind, rt, .. } in spaces::both() {
        rt.register_pattern(Pattern::new("fragile", |b, _: serde_json::Value| {
            let n = b.state("n", 0i64)?;
            let log = b.state("log", Vec::<String>::new())?;
            let (m, l) = (n, log);
            // Each writes two places, then fails: neither write may stay.
            b.handler("boom", move |tx, _: Go| -> Result<()> {
                m.set(tx, 99)?;
                l.push(tx, "boom".to_string())?;
                panic!("kaboom");
            })?;
            let (m, l) = (n, log);
            b.handler("fail", move |tx, _: Go| -> Result<()> {
                m.set(tx, 98)?;
                l.push(tx, "fail".to_string())?;
                Err("refused".into())
            })?;
            b.handler("ok", move |tx, _: Go| n.update(tx, |v| v + 1))?;
            Ok(())
        }));
        let id = rt.charms().create("fragile", json!({})).unwrap();
        let at = rt.charms().result(&id);
        let err = rt.send(&at.child("boom"), json!({})).await.unwrap_err();
        assert!(matches!(&err, Error::HandlerPanicked { message, .. } if message == "kaboom"), "{kind}: {err}");
        let err = rt.send(&at.child("fail"), json!({})).await.unwrap_err();
        assert!(matches!(&err, Error::HandlerFailed { message, .. } if message == "refused"), "{kind}: {err}");
        let state = rt.charms().get(&id).unwrap();
        assert_eq!((&state["n"], &state["log"]), (&json!(0), &json!([])), "{kind}: the writes were rolled back");
        rt.send(&at.child("ok"), json!({})).await.unwrap();
        assert_eq!(rt.charms().get(&id).unwrap()["n"], 1, "{kind}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_senders_to_one_charm_all_apply() {
    for spaces::Subject { kind, rt, .. } in spaces::both() {
        rt.register_pattern(counter());
        let id = rt.charms().create("counter", json!({})).unwrap();
        let stream = rt.charms().result(&id).child("increment");
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let (rt, stream) = (rt.clone(), stream.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..50 {
                    rt.send(&stream, json!({"amount": 1})).await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        rt.idle().await;
        assert_eq!(rt.charms().get(&id).unwrap()["label"], "Count: 200", "{kind}");
        assert!(rt.take_errors().is_empty(), "{kind}: no false cycle reports under concurrent load");
    }
}

#[tokio::test]
async fn a_handler_that_awaits_send_fails_instead_of_hanging() {
    #[derive(Deserialize, JsonSchema)]
    struct Poke {}
    let rt = Runtime::in_memory();
    rt.register_pattern(counter());
    let target = rt.charms().create("counter", json!({})).unwrap();
    let increment = rt.charms().result(&target).child("increment");
    let weak = rt.downgrade();
    rt.register_pattern(Pattern::new("impatient", move |b, _: serde_json::Value| {
        let (weak, increment) = (weak.clone(), increment.clone());
        b.handler("poke", move |_, _: Poke| {
            let rt = weak.upgrade().ok_or("runtime gone")?;
            futures::executor::block_on(rt.send(&increment, json!({"amount": 1})))?;
            Ok(())
        })?;
        Ok(())
    }));
    let id = rt.charms().create("impatient", json!({})).unwrap();
    let poke = rt.charms().result(&id).child("poke");
    let outcome = tokio::time::timeout(std::time::Duration::from_secs(10), rt.send(&poke, json!({}))).await;
    let err = outcome.expect("no deadlock").unwrap_err();
    assert!(err.to_string().contains("would wait forever"), "{err}");
    assert_eq!(rt.charms().get(&target).unwrap()["count"], 0);
}

#[test]
fn derived_values_end_right_while_threads_write_their_inputs_and_outputs() {
    const THREADS: usize = 4;
    for spaces::Subject { kind, rt, .. } in spaces::both() {
        let inputs: Vec<Cell<i64>> = (0..THREADS).map(|_| rt.new_cell("in", 0i64).unwrap()).collect();
        let pairs: Vec<Cell<i64>> = (0..THREADS)
            .map(|i| {
                let (a, b) = (inputs[i], inputs[(i + 1) % THREADS]);
                rt.computed("pair", move |tx| Ok(a.get(tx)? + b.get(tx)?)).unwrap()
            })
            .collect();
        let all = pairs.clone();
        let total = rt.computed("total", move |tx| all.iter().map(|p| p.get(tx)).sum::<Result<i64, _>>()).unwrap();
        // Each thread flips its input between 0 and 1, and now and then writes nonsense
        // straight into a derived value, as another writer may: the settles that keep
        // those documents must work on what is there, not on what they last wrote.
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (rt, input, pair) = (rt.clone(), inputs[t], pairs[t]);
                std::thread::spawn(move || {
                    for i in 0..200i64 {
                        rt.transact(|tx| input.set(tx, i % 2)).unwrap();
                        if i % 7 == 0 {
                            rt.transact(|tx| pair.set(tx, 99)).unwrap();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Then: every input 0 (so every pair computes 0 and keeps it), nonsense written
        // into every pair, and a change that leaves pair 0's sum at the 0 it computed
        // before. Only a settle that sees the 99 there writes its 0 again.
        rt.transact(|tx| inputs.iter().try_for_each(|input| input.set(tx, 0))).unwrap();
        assert_eq!(total.get(&rt).unwrap(), 0, "{kind}: every pair settled at 0");
        rt.transact(|tx| pairs.iter().try_for_each(|pair| pair.set(tx, 99))).unwrap();
        rt.transact(|tx| {
            inputs[0].set(tx, 1)?;
            inputs[1].set(tx, -1)
        })
        .unwrap();
        let read: Vec<i64> = pairs.iter().map(|p| p.get(&rt).unwrap()).collect();
        assert_eq!(read, [0, -1, 99, 1], "{kind}: the pairs that read a changed input ran again; the third did not");
        assert_eq!(total.get(&rt).unwrap(), 99, "{kind}: the total follows the pairs");
    }
}
