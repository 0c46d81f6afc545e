//! The kairo cases of js-reactivity-benchmark (names as in the JS benchmark): each builds
//! its graph once; one sample is one call of the case's iteration (the JS benchmark times
//! 1000 of them). Every iteration checks every value it reads and, at its end, the exact
//! number of effect runs (and of computation runs where the case is about them).

use std::hint::black_box;
use std::time::Duration;

use super::{calc, check, count_effect};
use crate::harness::{self, Budget, RunConfig};
use crate::reactive::{Counter, Inputs, ReactiveSystem, Row};

/// Budget for one kairo case on one system (a sample is one iteration, ~µs to ~ms).
const KAIRO_BUDGET: Budget =
    Budget { warmup: 3, min_samples: 5, max_samples: 2000, max_time: std::time::Duration::from_millis(1000) };

/// The kairo cases.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kairo {
    Avoidable,
    Broad,
    Deep,
    Diamond,
    Mux,
    Repeated,
    Triangle,
    Unstable,
}

impl Kairo {
    /// Name in the output (as in js-reactivity-benchmark).
    pub(super) fn name(self) -> &'static str {
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

/// One iteration of a kairo case (owns the graph's handles and counters).
type Iteration<S> = Box<dyn FnMut(&mut S)>;

/// Measures one kairo case on `S`.
pub(super) fn measure_kairo<S: ReactiveSystem>(config: &RunConfig, case: Kairo) -> Vec<Duration> {
    let mut sys = S::new();
    let mut iteration = case.build(&mut sys);
    let samples = harness::durations(config.budget(KAIRO_BUDGET), || harness::time(|| iteration(&mut sys)).1);
    drop(iteration);
    drop(sys);
    samples
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
