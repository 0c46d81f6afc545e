//! The `propagation` suite: the scenarios of js-reactivity-benchmark
//! (github.com/milomg/js-reactivity-benchmark), reproduced on [`ReactiveSystem`].
//!
//! * `cellx1000`, `cellx2500`, `cellx5000`: the cellx layered graph. Each layer has four
//!   computeds `a = prev.b`, `b = prev.a - prev.c`, `c = prev.b + prev.d`, `d = prev.c`,
//!   each observed by an effect; the sources start at 1, 2, 3, 4. One sample builds a
//!   fresh graph (untimed), then times: read the last layer, set the sources to 4, 3, 2, 1
//!   in one batch, read the last layer. The values read are checked against the table
//!   published with the benchmark, and the number of effect runs against a plain
//!   simulation (exactly one per cell whose value changed).
//! * The kairo cases (names as in the JS benchmark): each builds its graph once; one
//!   sample is one call of the case's iteration (the JS benchmark times 1000 of them).
//!   Every iteration checks every value it reads and, at its end, the exact number of
//!   effect runs (and of computation runs where the case is about them).
//!
//! Writes that the JS benchmark wraps in `withBatch` are `batch`es here; reads inside a
//! batch happen after it (a batch settles at its end in this model).

use std::fmt::{Debug, Display};
use std::hint::black_box;

use crate::harness::{self, Budget, Measurement, RunConfig, Stats, Suite};
use crate::reactive::{visit_systems, Counter, Inputs, ReactiveSystem, Row, SystemVisitor};

/// The suite entry for `main.rs`.
pub const SUITE: Suite =
    Suite { name: "propagation", description: "cellx layered graph and kairo cases from js-reactivity-benchmark", run };

/// Budget for one kairo case on one system (a sample is one iteration, ~µs to ~ms).
const KAIRO_BUDGET: Budget =
    Budget { warmup: 3, min_samples: 5, max_samples: 2000, max_time: std::time::Duration::from_millis(1000) };

/// Budget for one cellx size on one system (a sample builds a whole graph).
const CELLX_BUDGET: Budget =
    Budget { warmup: 1, min_samples: 3, max_samples: 15, max_time: std::time::Duration::from_millis(2500) };

/// One scenario of the suite.
#[derive(Clone, Copy, Debug)]
enum Scenario {
    /// The cellx graph with this many layers.
    Cellx(usize),
    /// A kairo case.
    Kairo(Kairo),
}

/// The kairo cases.
#[derive(Clone, Copy, Debug)]
enum Kairo {
    Avoidable,
    Broad,
    Deep,
    Diamond,
    Mux,
    Repeated,
    Triangle,
    Unstable,
}

/// Every scenario, in table order.
const SCENARIOS: [Scenario; 11] = [
    Scenario::Cellx(1000),
    Scenario::Cellx(2500),
    Scenario::Cellx(5000),
    Scenario::Kairo(Kairo::Avoidable),
    Scenario::Kairo(Kairo::Broad),
    Scenario::Kairo(Kairo::Deep),
    Scenario::Kairo(Kairo::Diamond),
    Scenario::Kairo(Kairo::Mux),
    Scenario::Kairo(Kairo::Repeated),
    Scenario::Kairo(Kairo::Triangle),
    Scenario::Kairo(Kairo::Unstable),
];

impl Scenario {
    /// Name in the output (as in js-reactivity-benchmark).
    fn name(self) -> String {
        match self {
            Self::Cellx(layers) => format!("cellx{layers}"),
            Self::Kairo(k) => k.name().to_string(),
        }
    }
}

impl Kairo {
    fn name(self) -> &'static str {
        match self {
            Self::Avoidable => "avoidablePropagation",
            Self::Broad => "broadPropagation",
            Self::Deep => "deepPropagation",
            Self::Diamond => "diamond",
            Self::Mux => "mux",
            Self::Repeated => "repeatedObservers",
            Self::Triangle => "triangle",
            Self::Unstable => "unstable",
        }
    }

    /// Builds the case's graph on `sys` and returns its iteration.
    fn build<S: ReactiveSystem>(self, sys: &mut S) -> Iteration<S> {
        match self {
            Self::Avoidable => avoidable_propagation(sys),
            Self::Broad => broad_propagation(sys),
            Self::Deep => deep_propagation(sys),
            Self::Diamond => diamond(sys),
            Self::Mux => mux(sys),
            Self::Repeated => repeated_observers(sys),
            Self::Triangle => triangle(sys),
            Self::Unstable => unstable(sys),
        }
    }
}

/// Runs every scenario on every registered system (scenario by scenario, so the systems
/// of one row are measured close together in time).
fn run(config: &RunConfig) -> Vec<Measurement> {
    let mut runner = Runner { config: *config, scenario: SCENARIOS[0], out: Vec::new() };
    for scenario in SCENARIOS {
        runner.scenario = scenario;
        visit_systems(&mut runner);
    }
    runner.out
}

/// Measures the current scenario on each system it visits.
struct Runner {
    config: RunConfig,
    scenario: Scenario,
    out: Vec<Measurement>,
}

impl SystemVisitor for Runner {
    fn visit<S: ReactiveSystem>(&mut self) {
        let config = self.config;
        let scenario = self.scenario;
        let measurement = harness::run_guarded(&config, SUITE.name, &scenario.name(), S::NAME, || match scenario {
            Scenario::Cellx(layers) => measure_cellx::<S>(&config, layers),
            Scenario::Kairo(case) => measure_kairo::<S>(&config, case),
        });
        self.out.push(measurement);
    }
}

/// Panics with a clear message when `actual != expected`.
#[track_caller]
fn check<T: PartialEq + Debug>(scenario: &str, what: impl Display, actual: T, expected: T) {
    if actual != expected {
        panic!("{scenario}: {what}: expected {expected:?}, got {actual:?}");
    }
}

/// `computed` over `i64` nodes producing `i64` (most of the graph).
fn calc<S: ReactiveSystem>(
    sys: &mut S,
    deps: &[S::Node<i64>],
    f: impl Fn(&dyn Inputs<i64>) -> i64 + Send + Sync + 'static,
) -> S::Node<i64> {
    sys.computed(deps, f)
}

/// An effect that counts its runs in `counter`.
fn count_effect<S: ReactiveSystem>(sys: &mut S, node: &S::Node<i64>, counter: &Counter) {
    let counter = counter.clone();
    sys.effect(node, move |_: &i64| counter.hit());
}

// ---------------------------------------------------------------------------------------
// cellx

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

fn measure_cellx<S: ReactiveSystem>(config: &RunConfig, layers: usize) -> Stats {
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

    harness::measure(config.budget(CELLX_BUDGET), || {
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

// ---------------------------------------------------------------------------------------
// kairo

/// One iteration of a kairo case (owns the graph's handles and counters).
type Iteration<S> = Box<dyn FnMut(&mut S)>;

fn measure_kairo<S: ReactiveSystem>(config: &RunConfig, case: Kairo) -> Stats {
    let mut sys = S::new();
    let mut iteration = case.build(&mut sys);
    let stats = harness::measure(config.budget(KAIRO_BUDGET), || harness::time(|| iteration(&mut sys)).1);
    drop(iteration);
    drop(sys);
    stats
}

/// The `head` source of a case (starting at 0) and its readable node.
fn head_signal<S: ReactiveSystem>(sys: &mut S) -> (S::Signal<i64>, S::Node<i64>) {
    let head = sys.signal(0);
    let head_node = sys.node(&head);
    (head, head_node)
}

/// [`calc`] whose computation counts its runs in `counter` (before computing).
fn counted_calc<S: ReactiveSystem>(
    sys: &mut S,
    deps: &[S::Node<i64>],
    counter: &Counter,
    f: impl Fn(&dyn Inputs<i64>) -> i64 + Send + Sync + 'static,
) -> S::Node<i64> {
    let counter = counter.clone();
    calc(sys, deps, move |x| {
        counter.hit();
        f(x)
    })
}

/// The sum of all inputs.
fn sum_inputs(x: &dyn Inputs<i64>) -> i64 {
    (0..x.len()).map(|i| x.get(i)).sum()
}

/// The iteration shared by the kairo cases driven by one `head` signal: write head = 1
/// (checking `out` after it if asked to), then head = 0, 1, …, `writes` - 1, checking `out`
/// after each write; at the end, the exact runs of every counter since their reset (after
/// the first write unless asked otherwise).
struct Sweep<S: ReactiveSystem> {
    head: S::Signal<i64>,
    /// The node read after each write.
    out: S::Node<i64>,
    /// Nodes nobody reads that must live as long as the iteration.
    keep_alive: Vec<S::Node<i64>>,
    checks: SweepChecks,
}

/// What a [`Sweep`] checks (apart from the handles, so that its iteration does not
/// depend on the lifetime of `S`).
struct SweepChecks {
    name: &'static str,
    /// What `out` is called in messages.
    what: &'static str,
    writes: i64,
    /// The value of `out` for a value of head.
    expected: fn(i64) -> i64,
    check_first: bool,
    count_first: bool,
    /// Name in messages, counter, exact runs per iteration.
    runs: Vec<(&'static str, Counter, u64)>,
}

impl<S: ReactiveSystem> Sweep<S> {
    fn new(
        name: &'static str,
        head: S::Signal<i64>,
        out: S::Node<i64>,
        what: &'static str,
        writes: i64,
        expected: fn(i64) -> i64,
    ) -> Self {
        let checks =
            SweepChecks { name, what, writes, expected, check_first: false, count_first: false, runs: Vec::new() };
        Self { head, out, keep_alive: Vec::new(), checks }
    }

    /// Also checks `out` after the first write (head = 1).
    fn check_first(mut self) -> Self {
        self.checks.check_first = true;
        self
    }

    /// Resets the counters before the first write, so its runs count too.
    fn count_first(mut self) -> Self {
        self.checks.count_first = true;
        self
    }

    /// Checks that `counter` ran exactly `expected` times per iteration.
    fn runs(mut self, what: &'static str, counter: Counter, expected: u64) -> Self {
        self.checks.runs.push((what, counter, expected));
        self
    }

    /// Keeps `node` alive as long as the iteration.
    fn keep_alive(mut self, node: S::Node<i64>) -> Self {
        self.keep_alive.push(node);
        self
    }

    fn iteration(self) -> Iteration<S> {
        let Self { head, out, keep_alive, checks } = self;
        Box::new(move |sys: &mut S| {
            let _keep_alive = &keep_alive;
            checks.run(sys, &head, &out)
        })
    }
}

impl SweepChecks {
    fn run<S: ReactiveSystem>(&self, sys: &mut S, head: &S::Signal<i64>, out: &S::Node<i64>) {
        let Self { name, what, writes, expected, check_first, count_first, runs } = self;
        let reset = || {
            for (_, counter, _) in runs {
                counter.take();
            }
        };
        if *count_first {
            reset();
        }
        sys.write(head, 1);
        if *check_first {
            check(name, format_args!("{what} after head = 1"), sys.get(out), expected(1));
        }
        if !count_first {
            reset();
        }
        for i in 0..*writes {
            sys.write(head, i);
            check(name, format_args!("{what} after head = {i}"), sys.get(out), expected(i));
        }
        for (what, counter, runs) in runs {
            check(name, what, counter.take(), *runs);
        }
    }
}

/// The "heavy computation" of avoidablePropagation: 100 additions the optimiser keeps.
fn busy() {
    let mut a = 0u32;
    for _ in 0..100 {
        a = black_box(a + 1);
    }
    black_box(a);
}

/// avoidablePropagation: head → c1 = head → c2 = 0 (ignores c1) → c3 (busy) → c4 → c5 →
/// effect (busy). c2 never changes, so c3, c4, c5 and the effect must never re-run.
fn avoidable_propagation<S: ReactiveSystem>(sys: &mut S) -> Iteration<S> {
    const NAME: &str = "avoidablePropagation";
    const WRITES: i64 = 1000;
    let (head, head_node) = head_signal(sys);
    let (c2_runs, c3_runs, effect_runs) = (Counter::new(), Counter::new(), Counter::new());
    let c1 = calc(sys, &[head_node], |x| x.get(0));
    let c2 = counted_calc(sys, &[c1], &c2_runs, |x| {
        let _ = x.get(0);
        0
    });
    let c3 = counted_calc(sys, &[c2], &c3_runs, |x| {
        busy();
        x.get(0) + 1
    });
    let c4 = calc(sys, &[c3], |x| x.get(0) + 2);
    let c5 = calc(sys, &[c4], |x| x.get(0) + 3);
    let counter = effect_runs.clone();
    sys.effect(&c5, move |_: &i64| {
        busy();
        counter.hit();
    });
    sys.settle();

    // Every write changes head (the previous iteration ends at WRITES - 1).
    let c2_expected = WRITES as u64 + 1;
    Sweep::new(NAME, head, c5, "c5", WRITES, |_| 6)
        .check_first()
        .count_first()
        .runs("c2 runs", c2_runs, c2_expected)
        .runs("c3 (heavy) runs", c3_runs, 0)
        .runs("effect runs", effect_runs, 0)
        .iteration()
}

/// broadPropagation: 50 branches head → head + i → + 1, each with an effect.
fn broad_propagation<S: ReactiveSystem>(sys: &mut S) -> Iteration<S> {
    const NAME: &str = "broadPropagation";
    const BRANCHES: i64 = 50;
    const WRITES: i64 = 50;
    let (head, head_node) = head_signal(sys);
    let effect_runs = Counter::new();
    let mut last = head_node.clone();
    for i in 0..BRANCHES {
        let current = calc(sys, std::slice::from_ref(&head_node), move |x| x.get(0) + i);
        let current2 = calc(sys, &[current], |x| x.get(0) + 1);
        count_effect(sys, &current2, &effect_runs);
        last = current2;
    }
    sys.settle();

    // Every write changes head, and each change reaches every branch's effect once.
    Sweep::new(NAME, head, last, "last branch", WRITES, |i| i + BRANCHES)
        .runs("effect runs", effect_runs, (BRANCHES * WRITES) as u64)
        .iteration()
}

/// deepPropagation: a chain of 50 computeds (+1 each) from head, with an effect at the end.
fn deep_propagation<S: ReactiveSystem>(sys: &mut S) -> Iteration<S> {
    const NAME: &str = "deepPropagation";
    const LEN: i64 = 50;
    const WRITES: i64 = 50;
    let (head, mut current) = head_signal(sys);
    for _ in 0..LEN {
        current = calc(sys, &[current], |x| x.get(0) + 1);
    }
    let effect_runs = Counter::new();
    count_effect(sys, &current, &effect_runs);
    sys.settle();

    Sweep::new(NAME, head, current, "end of chain", WRITES, |i| LEN + i)
        .runs("effect runs", effect_runs, WRITES as u64)
        .iteration()
}

/// diamond: head → 5 computeds (+1) → sum, with an effect on the sum. The sum must run
/// once per write (glitch-free), not once per branch.
fn diamond<S: ReactiveSystem>(sys: &mut S) -> Iteration<S> {
    const NAME: &str = "diamond";
    const WIDTH: i64 = 5;
    const WRITES: i64 = 500;
    let (head, head_node) = head_signal(sys);
    let branches: Vec<S::Node<i64>> =
        (0..WIDTH).map(|_| calc(sys, std::slice::from_ref(&head_node), |x| x.get(0) + 1)).collect();
    let (sum_runs, effect_runs) = (Counter::new(), Counter::new());
    let sum = counted_calc(sys, &branches, &sum_runs, sum_inputs);
    count_effect(sys, &sum, &effect_runs);
    sys.settle();

    Sweep::new(NAME, head, sum, "sum", WRITES, |i| (i + 1) * WIDTH)
        .check_first()
        .runs("sum runs", sum_runs, WRITES as u64)
        .runs("effect runs", effect_runs, WRITES as u64)
        .iteration()
}

/// mux: 100 sources → one node holding all of them (a [`Row`]) → 100 nodes each picking
/// its own entry → +1, each with an effect. Writes are unbatched, one source at a time.
fn mux<S: ReactiveSystem>(sys: &mut S) -> Iteration<S> {
    const NAME: &str = "mux";
    const SOURCES: usize = 100;
    const WRITTEN: i64 = 10;
    let heads: Vec<S::Signal<i64>> = (0..SOURCES).map(|_| sys.signal(0)).collect();
    let head_nodes: Vec<S::Node<i64>> = heads.iter().map(|h| sys.node(h)).collect();
    let mux = sys.computed::<i64, Row, _>(&head_nodes, |x| (0..x.len()).map(|i| x.get(i)).collect());
    let effect_runs = Counter::new();
    let mut split = Vec::with_capacity(SOURCES);
    for index in 0..SOURCES {
        let picked = sys.computed::<Row, i64, _>(std::slice::from_ref(&mux), move |x| x.get(0)[index]);
        let plus_one = calc(sys, &[picked], |x| x.get(0) + 1);
        count_effect(sys, &plus_one, &effect_runs);
        split.push(plus_one);
    }
    sys.settle();

    Box::new(move |sys: &mut S| {
        effect_runs.take();
        // heads[i] = i, then heads[i] = 2 * i.
        for factor in [1, 2] {
            for (i, (head, out)) in heads.iter().zip(&split).take(WRITTEN as usize).enumerate() {
                let (i, value) = (i as i64, factor * i as i64);
                sys.write(head, value);
                check(NAME, format_args!("split[{i}] after heads[{i}] = {value}"), sys.get(out), value + 1);
            }
        }
        // heads[0] is written 0 twice (no change); the 18 other writes each change exactly
        // one split node, whose effect alone must run.
        check(NAME, "effect runs", effect_runs.take(), 2 * (WRITTEN as u64 - 1));
    })
}

/// repeatedObservers: one computed that reads head 30 times.
fn repeated_observers<S: ReactiveSystem>(sys: &mut S) -> Iteration<S> {
    const NAME: &str = "repeatedObservers";
    const SIZE: i64 = 30;
    const WRITES: i64 = 100;
    let (head, head_node) = head_signal(sys);
    let (runs, effect_runs) = (Counter::new(), Counter::new());
    let current = counted_calc(sys, &[head_node], &runs, |x| (0..SIZE).map(|_| x.get(0)).sum());
    count_effect(sys, &current, &effect_runs);
    sys.settle();

    Sweep::new(NAME, head, current, "value", WRITES, |i| i * SIZE)
        .check_first()
        .runs("computation runs", runs, WRITES as u64)
        .runs("effect runs", effect_runs, WRITES as u64)
        .iteration()
}

/// triangle: a chain of 10 nodes from head (+1 each); a sum over head and the first 9
/// chain nodes, with an effect; an 11th chain node nobody reads (as in the JS case).
fn triangle<S: ReactiveSystem>(sys: &mut S) -> Iteration<S> {
    const NAME: &str = "triangle";
    const WIDTH: i64 = 10;
    const WRITES: i64 = 100;
    // sum = WIDTH * head + (0 + 1 + ... + WIDTH - 1)
    const OFFSET: i64 = WIDTH * (WIDTH - 1) / 2;
    let (head, mut current) = head_signal(sys);
    let mut list = Vec::with_capacity(WIDTH as usize);
    for _ in 0..WIDTH {
        list.push(current.clone());
        current = calc(sys, &[current], |x| x.get(0) + 1);
    }
    let unread_tail = current;
    let effect_runs = Counter::new();
    let sum = calc(sys, &list, sum_inputs);
    count_effect(sys, &sum, &effect_runs);
    sys.settle();

    Sweep::new(NAME, head, sum, "sum", WRITES, |i| WIDTH * i + OFFSET)
        .check_first()
        .keep_alive(unread_tail)
        .runs("effect runs", effect_runs, WRITES as u64)
        .iteration()
}

/// unstable: a computed that reads head, then 20 times either `double` (head odd) or
/// `inverse` (head even), so its dynamic dependencies flip on every write.
fn unstable<S: ReactiveSystem>(sys: &mut S) -> Iteration<S> {
    const NAME: &str = "unstable";
    const READS: i64 = 20;
    const WRITES: i64 = 100;
    let (head, head_node) = head_signal(sys);
    let double = calc(sys, std::slice::from_ref(&head_node), |x| x.get(0) * 2);
    let inverse = calc(sys, std::slice::from_ref(&head_node), |x| -x.get(0));
    let (runs, effect_runs) = (Counter::new(), Counter::new());
    let current = counted_calc(sys, &[head_node, double, inverse], &runs, |x| {
        let mut result = 0;
        for _ in 0..READS {
            result += if x.get(0) % 2 != 0 { x.get(1) } else { x.get(2) };
        }
        result
    });
    count_effect(sys, &current, &effect_runs);
    sys.settle();

    // Every write changes the value (odd heads give positive, even ones non-positive).
    Sweep::new(NAME, head, current, "value", WRITES, |i| if i % 2 != 0 { 2 * i * READS } else { -i * READS })
        .check_first()
        .runs("computation runs", runs, WRITES as u64)
        .runs("effect runs", effect_runs, WRITES as u64)
        .iteration()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::futures_signals::FuturesSignals;
    use crate::peers::sycamore::Sycamore;

    #[test]
    fn cellx_simulation_matches_the_published_values() {
        for layers in [1000, 2500, 5000] {
            let before = cellx_simulate(layers, [1, 2, 3, 4]);
            let after = cellx_simulate(layers, [4, 3, 2, 1]);
            let published = cellx_expected(layers).expect("published");
            assert_eq!((before[layers - 1], after[layers - 1]), published, "{layers} layers");
        }
    }

    /// Runs every scenario once per peer with tiny budgets: the verifications must pass.
    fn smoke<S: ReactiveSystem>() {
        let config = RunConfig { quick: true, progress: false };
        for scenario in SCENARIOS {
            match scenario {
                Scenario::Cellx(layers) => {
                    measure_cellx::<S>(&config, layers);
                }
                Scenario::Kairo(case) => {
                    measure_kairo::<S>(&config, case);
                }
            }
        }
    }

    #[test]
    fn futures_signals_passes_every_scenario() {
        // Deep graphs recurse deeply in futures-signals; main.rs uses a big stack too.
        std::thread::Builder::new()
            .stack_size(crate::STACK_SIZE)
            .spawn(smoke::<FuturesSignals>)
            .expect("spawn")
            .join()
            .expect("scenarios pass");
    }

    #[test]
    fn sycamore_passes_every_scenario() {
        std::thread::Builder::new()
            .stack_size(crate::STACK_SIZE)
            .spawn(smoke::<Sycamore>)
            .expect("spawn")
            .join()
            .expect("scenarios pass");
    }

    /// A system that computes wrong values must fail verification, not win.
    #[test]
    fn a_broken_system_fails_verification() {
        let config = RunConfig { quick: true, progress: false };
        let m = harness::run_guarded(&config, "propagation", "deepPropagation", "broken", || {
            measure_kairo::<broken::OffByOne>(&config, Kairo::Deep)
        });
        let err = m.median_ns.expect_err("must fail");
        assert!(err.contains("deepPropagation"), "{err}");
    }

    mod broken {
        //! Sycamore, except every computed adds one too many.
        use super::*;

        pub struct OffByOne(Sycamore);

        impl ReactiveSystem for OffByOne {
            const NAME: &'static str = "broken";
            type Signal<T: crate::reactive::Value> = <Sycamore as ReactiveSystem>::Signal<T>;
            type Node<T: crate::reactive::Value> = <Sycamore as ReactiveSystem>::Node<T>;

            fn new() -> Self {
                Self(Sycamore::new())
            }
            fn signal<T: crate::reactive::Value>(&mut self, v: T) -> Self::Signal<T> {
                self.0.signal(v)
            }
            fn node<T: crate::reactive::Value>(&mut self, s: &Self::Signal<T>) -> Self::Node<T> {
                self.0.node(s)
            }
            fn computed<A, B, F>(&mut self, deps: &[Self::Node<A>], f: F) -> Self::Node<B>
            where
                A: crate::reactive::Value,
                B: crate::reactive::Value,
                F: Fn(&dyn Inputs<A>) -> B + Send + Sync + 'static,
            {
                let broken = move |x: &dyn Inputs<A>| {
                    let v = f(x);
                    // Corrupt i64 results only.
                    match (&v as &dyn std::any::Any).downcast_ref::<i64>() {
                        Some(n) => {
                            let n: Box<dyn std::any::Any> = Box::new(n + 1);
                            *n.downcast::<B>().expect("B is i64")
                        }
                        None => v,
                    }
                };
                self.0.computed(deps, broken)
            }
            fn effect<T: crate::reactive::Value, F: FnMut(&T) + Send + 'static>(&mut self, node: &Self::Node<T>, f: F) {
                self.0.effect(node, f)
            }
            fn set<T: crate::reactive::Value>(&mut self, s: &Self::Signal<T>, v: T) {
                self.0.set(s, v)
            }
            fn settle(&mut self) {
                self.0.settle()
            }
            fn get<T: crate::reactive::Value>(&mut self, n: &Self::Node<T>) -> T {
                self.0.get(n)
            }
        }
    }
}
