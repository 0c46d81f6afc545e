//! The `propagation` suite: the scenarios of js-reactivity-benchmark
//! (github.com/milomg/js-reactivity-benchmark), reproduced on [`ReactiveSystem`]: the
//! cellx layered graph (`cellx`) and the kairo cases (`kairo`). Every value read is
//! checked, and so is the exact number of effect runs; a system that computes wrong
//! values fails instead of winning.
//!
//! Writes that the JS benchmark wraps in `withBatch` are `batch`es here; reads inside a
//! batch happen after it (a batch settles at its end in this model).

mod cellx;
mod kairo;

use std::fmt::{Debug, Display};
use std::time::Duration;

use crate::harness::{self, Measurement, RunConfig, Stats, Suite};
use crate::reactive::{visit_systems, Counter, Inputs, ReactiveSystem, SystemVisitor};

use self::cellx::measure_cellx;
use self::kairo::{measure_kairo, Kairo};

/// The suite entry for `main.rs`.
pub const SUITE: Suite =
    Suite { name: "propagation", description: "cellx layered graph and kairo cases from js-reactivity-benchmark", run };

/// One scenario of the suite.
#[derive(Clone, Copy, Debug)]
enum Scenario {
    /// The cellx graph with this many layers.
    Cellx(usize),
    /// A kairo case.
    Kairo(Kairo),
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

/// Checks that `TRELLIS_BENCH_ONLY`, if set, names a system (or `*`) and, if it names one,
/// a scenario of this suite; the error lists the names there are.
pub fn check_only() -> Result<(), String> {
    check_selection(harness::only())
}

/// [`check_only`] for a given selection: (system or `*`, scenario).
fn check_selection(only: Option<(&str, Option<&str>)>) -> Result<(), String> {
    struct Names(Vec<&'static str>);
    impl SystemVisitor for Names {
        fn visit<S: ReactiveSystem>(&mut self) {
            self.0.push(S::NAME);
        }
    }
    let Some((system, scenario)) = only else { return Ok(()) };
    let mut systems = Names(Vec::new());
    visit_systems(&mut systems);
    let scenarios: Vec<String> = SCENARIOS.iter().map(|s| s.name()).collect();
    let known_system = system == "*" || systems.0.contains(&system);
    let known_scenario = scenario.is_none_or(|scenario| scenarios.iter().any(|s| s == scenario));
    if known_system && known_scenario {
        return Ok(());
    }
    Err(format!(
        "TRELLIS_BENCH_ONLY={system}{} selects no propagation row: give SYSTEM or SYSTEM/SCENARIO, \
         where SYSTEM is `*` or one of {} and SCENARIO one of {}",
        scenario.map(|s| format!("/{s}")).unwrap_or_default(),
        systems.0.join(", "),
        scenarios.join(", ")
    ))
}

/// In how many rounds a row is measured: each round measures every system in turn with
/// this share of the budget, so that the machine slowing down for a second (another
/// tenant of the host) falls on every system of the row alike rather than on whichever
/// was being measured then. The median is over the samples of all rounds.
const ROUNDS: usize = 4;

/// Runs every scenario on every registered system (scenario by scenario, so the systems
/// of one row are measured close together in time, in [`ROUNDS`] interleaved rounds).
fn run(config: &RunConfig) -> Vec<Measurement> {
    // Fixed samples are taken in one go, so that an instruction count repeats.
    let rounds = if config.quick || harness::fixed_samples() { 1 } else { ROUNDS };
    let mut out = Vec::new();
    for scenario in SCENARIOS {
        let mut runner = Runner { config: RunConfig { rounds, ..*config }, scenario, rows: Vec::new() };
        for _ in 0..rounds {
            visit_systems(&mut runner);
        }
        out.extend(runner.rows.into_iter().map(|(system, samples)| {
            let stats = samples.map(|mut samples| Stats::median_of(&mut samples));
            harness::measurement(config, SUITE.name, &scenario.name(), system, stats)
        }));
    }
    out
}

/// Measures one scenario on each system it visits, adding to the samples of its row.
struct Runner {
    config: RunConfig,
    scenario: Scenario,
    /// The samples of each system so far, or why its row failed.
    rows: Vec<(&'static str, Result<Vec<Duration>, String>)>,
}

impl SystemVisitor for Runner {
    fn visit<S: ReactiveSystem>(&mut self) {
        let config = self.config;
        let scenario = self.scenario;
        if !config.selected(S::NAME, &scenario.name()) {
            return;
        }
        let at = match self.rows.iter().position(|(system, _)| *system == S::NAME) {
            Some(at) => at,
            None => {
                self.rows.push((S::NAME, Ok(Vec::new())));
                self.rows.len() - 1
            }
        };
        // A row that failed a check is not measured again.
        let Ok(samples) = &mut self.rows[at].1 else { return };
        let round = harness::guarded(|| match scenario {
            Scenario::Cellx(layers) => measure_cellx::<S>(&config, layers),
            Scenario::Kairo(case) => measure_kairo::<S>(&config, case),
        });
        match round {
            Ok(round) => samples.extend(round),
            Err(failed) => self.rows[at].1 = Err(failed),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::futures_signals::FuturesSignals;
    use crate::peers::sycamore::Sycamore;

    /// Runs every scenario once per peer with tiny budgets: the verifications must pass.
    fn smoke<S: ReactiveSystem>() {
        let config = RunConfig { quick: true, ..RunConfig::default() };
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

    /// Runs every scenario on `S` on a big stack: deep graphs recurse deeply in some
    /// peers (main.rs uses a big stack too).
    fn smoke_on_big_stack<S: ReactiveSystem + 'static>() {
        std::thread::Builder::new()
            .stack_size(crate::STACK_SIZE)
            .spawn(smoke::<S>)
            .expect("spawn")
            .join()
            .expect("scenarios pass");
    }

    #[test]
    fn a_selection_must_name_a_system_and_a_scenario_of_the_suite() {
        assert!(check_selection(None).is_ok());
        assert!(check_selection(Some(("trellis", None))).is_ok());
        assert!(check_selection(Some(("*", Some("diamond")))).is_ok());
        let err = check_selection(Some(("trellis", Some("diamonds")))).expect_err("no such scenario");
        assert!(err.contains("trellis/diamonds") && err.contains("deepPropagation"), "{err}");
        let err = check_selection(Some(("Trellis", None))).expect_err("no such system");
        assert!(err.contains("sycamore") && err.contains("`*`"), "{err}");
    }

    #[test]
    fn futures_signals_passes_every_scenario() {
        smoke_on_big_stack::<FuturesSignals>();
    }

    #[test]
    fn alien_signals_passes_every_scenario() {
        smoke_on_big_stack::<crate::peers::alien::AlienSignals>();
    }

    #[test]
    fn sycamore_passes_every_scenario() {
        smoke_on_big_stack::<Sycamore>();
    }

    /// Trellis itself, on the same checks: the cellx graphs (8,000 to 40,000 computations)
    /// take the engine's path for graphs larger than a core's cache.
    #[test]
    fn trellis_passes_every_scenario() {
        smoke_on_big_stack::<crate::trellis_system::Trellis>();
    }

    /// A system that computes wrong values must fail verification, not win.
    #[test]
    fn a_broken_system_fails_verification() {
        let config = RunConfig { quick: true, ..RunConfig::default() };
        let err = harness::guarded(|| measure_kairo::<broken::OffByOne>(&config, Kairo::Deep)).expect_err("must fail");
        assert!(err.contains("deepPropagation"), "{err}");
    }

    /// A row's samples are those of all its rounds; a round that fails fails the row.
    #[test]
    fn a_row_adds_up_its_rounds_and_fails_with_a_failed_round() {
        let config = RunConfig { quick: true, ..RunConfig::default() };
        let mut runner = Runner { config, scenario: Scenario::Kairo(Kairo::Deep), rows: Vec::new() };
        for _ in 0..3 {
            runner.visit::<Sycamore>();
            runner.visit::<broken::OffByOne>();
        }
        let row = |name: &str| runner.rows.iter().find(|(system, _)| *system == name).map(|(_, row)| row.clone());
        let one_round = measure_kairo::<Sycamore>(&config, Kairo::Deep).len();
        assert_eq!(row(Sycamore::NAME).map(|samples| samples.map(|s| s.len())), Some(Ok(3 * one_round)));
        let failed = row(broken::OffByOne::NAME).expect("a row").expect_err("a wrong value fails the row");
        assert!(failed.contains("deepPropagation"), "{failed}");
        assert_eq!(runner.rows.len(), 2, "one row per system");
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
