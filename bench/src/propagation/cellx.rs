//! The cellx layered graph (`cellx1000`, `cellx2500`, `cellx5000`). Each layer has four
//! computeds `a = prev.b`, `b = prev.a - prev.c`, `c = prev.b + prev.d`, `d = prev.c`,
//! each observed by an effect; the sources start at 1, 2, 3, 4. One sample builds a fresh
//! graph (untimed), then times: read the last layer, set the sources to 4, 3, 2, 1 in one
//! batch, read the last layer. The values read are checked against the table published
//! with the benchmark, and the number of effect runs against a plain simulation (exactly
//! one per cell whose value changed).

use std::time::Duration;

use super::{calc, check, count_effect};
use crate::harness::{self, Budget, RunConfig};
use crate::reactive::{Counter, ReactiveSystem};

/// Budget for one cellx size on one system (a sample builds a whole graph).
const CELLX_BUDGET: Budget =
    Budget { warmup: 1, min_samples: 3, max_samples: 15, max_time: std::time::Duration::from_millis(2500) };

/// Values of the last layer before and after the update, as published with the benchmark
/// (the 2500 and 5000 rows are commented out in the JS source; a plain simulation agrees
/// with all three, see the tests).
fn cellx_expected(layers: usize) -> Option<([i64; 4], [i64; 4])> {
    match layers {
        1000 | 2500 => Some(([-3, -6, -2, 2], [-2, -4, 2, 3])),
        5000 => Some(([2, 4, -1, -6], [-2, 1, -4, -4])),
        _ => None,
    }
}

/// One cellx layer computed from the previous one, without any reactive system.
fn cellx_step([a, b, c, d]: [i64; 4]) -> [i64; 4] {
    [b, a - c, b + d, c]
}

/// Plain simulation: the last layer for `sources`, and the layers themselves.
fn cellx_simulate(layers: usize, sources: [i64; 4]) -> Vec<[i64; 4]> {
    let mut out = Vec::with_capacity(layers);
    let mut layer = sources;
    for _ in 0..layers {
        layer = cellx_step(layer);
        out.push(layer);
    }
    out
}

/// Measures the cellx graph of `layers` layers on `S`.
pub(super) fn measure_cellx<S: ReactiveSystem>(config: &RunConfig, layers: usize) -> Vec<Duration> {
    let name = format!("cellx{layers}");
    let before = cellx_simulate(layers, [1, 2, 3, 4]);
    let after = cellx_simulate(layers, [4, 3, 2, 1]);
    let expected_last = match (before.last(), after.last()) {
        (Some(b), Some(a)) => (*b, *a),
        _ => panic!("{name}: needs at least one layer"),
    };
    if let Some(published) = cellx_expected(layers) {
        check(&name, "simulation vs published values", expected_last, published);
    }
    let changed_cells: u64 =
        before.iter().zip(&after).map(|(b, a)| b.iter().zip(a).filter(|(x, y)| x != y).count() as u64).sum();

    harness::durations(config.budget(CELLX_BUDGET), || {
        let mut sys = S::new();
        let sources = [1, 2, 3, 4].map(|v| sys.signal(v));
        let mut prev: [S::Node<i64>; 4] = [0, 1, 2, 3].map(|i| sys.node(&sources[i]));
        let effects = Counter::new();
        for _ in 0..layers {
            let [pa, pb, pc, pd] = &prev;
            let a = calc(&mut sys, std::slice::from_ref(pb), |x| x.get(0));
            let b = calc(&mut sys, &[pa.clone(), pc.clone()], |x| x.get(0) - x.get(1));
            let c = calc(&mut sys, &[pb.clone(), pd.clone()], |x| x.get(0) + x.get(1));
            let d = calc(&mut sys, std::slice::from_ref(pc), |x| x.get(0));
            for node in [&a, &b, &c, &d] {
                count_effect(&mut sys, node, &effects);
            }
            prev = [a, b, c, d];
        }
        sys.settle();
        check(&name, "initial effect runs", effects.take(), 4 * layers as u64);

        let ((first, last), elapsed) = harness::time(|| {
            let first = [0, 1, 2, 3].map(|i| sys.get(&prev[i]));
            sys.batch(|s| {
                for (signal, value) in sources.iter().zip([4, 3, 2, 1]) {
                    s.set(signal, value);
                }
            });
            let last = [0, 1, 2, 3].map(|i| sys.get(&prev[i]));
            (first, last)
        });

        check(&name, "last layer before the update", first, expected_last.0);
        check(&name, "last layer after the update", last, expected_last.1);
        check(&name, "effect runs (one per changed cell)", effects.take(), changed_cells);
        drop(sys);
        elapsed
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cellx_simulation_matches_the_published_values() {
        for layers in [1000, 2500, 5000] {
            let before = cellx_simulate(layers, [1, 2, 3, 4]);
            let after = cellx_simulate(layers, [4, 3, 2, 1]);
            let published = cellx_expected(layers).expect("published");
            assert_eq!((before[layers - 1], after[layers - 1]), published, "{layers} layers");
        }
    }
}
