//! Dependency graphs that must never show a glitch: every computation sees a state in
//! which all of its inputs are up to date, and runs once per change.

use crate::spaces;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use trellis::prelude::*;
use trellis::runner::Error;

#[test]
fn diamond_runs_the_join_once_and_never_sees_a_half_update() {
    for spaces::Subject { kind, rt, .. } in spaces::both() {
        let a = rt.new_cell("a", 1i64).unwrap();
        let b = rt.computed("b", move |tx| Ok(a.get(tx)? + 1)).unwrap();
        let c = rt.computed("c", move |tx| Ok(a.get(tx)? * 10)).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let d = rt
            .computed("d", {
                let (a, b, c, seen) = (a, b, c, seen.clone());
                move |tx| {
                    let (a, b, c) = (a.get(tx)?, b.get(tx)?, c.get(tx)?);
                    seen.lock().unwrap().push((a, b, c));
                    Ok(b + c)
                }
            })
            .unwrap();
        seen.lock().unwrap().clear();
        for n in 2..=20 {
            rt.transact(|tx| a.set(tx, n)).unwrap();
            assert_eq!(d.get(&rt).unwrap(), (n + 1) + n * 10);
        }
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 19, "{kind}: d ran exactly once per change: {seen:?}");
        for (a, b, c) in seen.iter() {
            assert_eq!((*b, *c), (a + 1, a * 10), "{kind}: glitch: d saw a={a} b={b} c={c}");
        }
    }
}

#[test]
fn deep_chain_propagates_in_order() {
    let rt = Runtime::in_memory();
    let source = rt.new_cell("source", 0i64).unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let mut last = source;
    for i in 0..200 {
        let runs = runs.clone();
        last = rt
            .computed(&format!("step{i}"), move |tx| {
                runs.fetch_add(1, Ordering::Relaxed);
                Ok(last.get(tx)? + 1)
            })
            .unwrap();
    }
    runs.store(0, Ordering::Relaxed);
    rt.transact(|tx| source.set(tx, 5)).unwrap();
    assert_eq!(last.get(&rt).unwrap(), 205);
    assert_eq!(runs.load(Ordering::Relaxed), 200, "each step ran once");
}

#[test]
fn unequal_depths_join_without_glitches() {
    for spaces::Subject { kind, rt, .. } in spaces::both() {
        // a → x1 → x2 → x3 → join ← a: the short edge must wait for the long chain.
        let a = rt.new_cell("a", 0i64).unwrap();
        let mut chain = a;
        for i in 0..3 {
            chain = rt.computed(&format!("x{i}"), move |tx| Ok(chain.get(tx)? + 1)).unwrap();
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let join = rt
            .computed("join", {
                let (a, chain, seen) = (a, chain, seen.clone());
                move |tx| {
                    let pair = (a.get(tx)?, chain.get(tx)?);
                    seen.lock().unwrap().push(pair);
                    Ok(pair.1 - pair.0)
                }
            })
            .unwrap();
        for n in 1..10 {
            rt.transact(|tx| a.set(tx, n)).unwrap();
        }
        assert_eq!(join.get(&rt).unwrap(), 3);
        assert!(seen.lock().unwrap().iter().all(|(a, c)| c - a == 3), "{kind}: glitch: {:?}", seen.lock().unwrap());
    }
}

#[test]
fn dynamic_dependencies_are_tracked() {
    let rt = Runtime::in_memory();
    let use_left = rt.new_cell("flag", true).unwrap();
    let left = rt.new_cell("left", 1i64).unwrap();
    let right = rt.new_cell("right", 100i64).unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let pick = rt
        .computed("pick", {
            let (f, l, r, runs) = (use_left, left, right, runs.clone());
            move |tx| {
                runs.fetch_add(1, Ordering::Relaxed);
                Ok(if f.get(tx)? { l.get(tx)? } else { r.get(tx)? })
            }
        })
        .unwrap();
    rt.transact(|tx| right.set(tx, 101)).unwrap();
    assert_eq!(runs.load(Ordering::Relaxed), 1, "right was not read, so changing it runs nothing");
    rt.transact(|tx| use_left.set(tx, false)).unwrap();
    assert_eq!(pick.get(&rt).unwrap(), 101);
    rt.transact(|tx| left.set(tx, 2)).unwrap();
    assert_eq!(runs.load(Ordering::Relaxed), 2, "left is no longer a dependency");
    // The control: a change to what it reads now does run it.
    rt.transact(|tx| right.set(tx, 102)).unwrap();
    assert_eq!((runs.load(Ordering::Relaxed), pick.get(&rt).unwrap()), (3, 102), "right is a dependency");
}

#[test]
fn equal_values_stop_propagation() {
    let rt = Runtime::in_memory();
    let n = rt.new_cell("n", 1i64).unwrap();
    let parity = rt.computed("parity", move |tx| Ok(n.get(tx)? % 2)).unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    rt.computed("after", {
        let (p, runs) = (parity, runs.clone());
        move |tx| {
            runs.fetch_add(1, Ordering::Relaxed);
            p.get(tx)
        }
    })
    .unwrap();
    rt.transact(|tx| n.set(tx, 3)).unwrap();
    assert_eq!(runs.load(Ordering::Relaxed), 1, "parity did not change, so `after` did not re-run");
    // The control: a change that changes parity does reach it.
    rt.transact(|tx| n.set(tx, 4)).unwrap();
    assert_eq!(runs.load(Ordering::Relaxed), 2, "parity changed, so `after` ran");
}

#[test]
fn a_runaway_cycle_stops_with_an_error_naming_the_computation() {
    let rt = Runtime::in_memory();
    let n = rt.new_cell("n", 0i64).unwrap();
    // A computation that writes its output into the cell it reads: it can never settle.
    let link = n.link().clone();
    rt.add_computation("ever_growing", link, None, Arc::new(move |tx| Ok(Value::from(n.get(tx)? + 1))));
    rt.settle();
    let errors = rt.take_errors();
    assert!(errors.iter().any(|e| matches!(e, Error::Cycle { name, .. } if name == "ever_growing")), "{errors:?}");
    assert!(errors[0].to_string().contains("ever_growing"));
    // The runtime keeps working afterwards.
    let other = rt.new_cell("other", 1i64).unwrap();
    rt.transact(|tx| other.set(tx, 2)).unwrap();
    assert_eq!(other.get(&rt).unwrap(), 2);
}

#[test]
fn a_failing_computation_is_reported_and_keeps_its_last_value() {
    for spaces::Subject { kind, rt, .. } in spaces::both() {
        let n = rt.new_cell("n", 1i64).unwrap();
        let inverse = rt
            .computed("inverse", {
                move |tx| {
                    let n = n.get(tx)?;
                    assert!(n != 0, "division by zero");
                    Ok(100 / n)
                }
            })
            .unwrap();
        rt.transact(|tx| n.set(tx, 0)).unwrap();
        assert_eq!(inverse.get(&rt).unwrap(), 100, "{kind}: the failed run kept the last value");
        let errors = rt.take_errors();
        assert!(
            errors.iter().any(|e| e.to_string().contains("inverse") && e.to_string().contains("division by zero")),
            "{errors:?}"
        );
        rt.transact(|tx| n.set(tx, 4)).unwrap();
        assert_eq!(inverse.get(&rt).unwrap(), 25, "{kind}: it recovers once its input is valid again");
    }
}
