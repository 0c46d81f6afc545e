//! Measuring (warm-up, samples, median) and the suite registry types; `report` prints
//! what is measured.

use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};

use crate::report::format_ns;

/// A benchmark suite, as registered in `main.rs` (`SUITES`).
///
/// Adding a suite is a new module exposing a `pub const SUITE: Suite` plus one line in
/// that list.
#[derive(Clone, Copy, Debug)]
pub struct Suite {
    /// Name used on the command line and in the output (`"suite"`).
    pub name: &'static str,
    /// One line for `--help`.
    pub description: &'static str,
    /// Runs every scenario of the suite on every system it covers.
    pub run: fn(&RunConfig) -> Vec<Measurement>,
}

/// Options shared by all suites.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunConfig {
    /// Tiny budgets (a few samples): for smoke tests; the numbers mean little.
    pub quick: bool,
    /// Print one progress line per scenario × system to stderr.
    pub progress: bool,
    /// In how many rounds a scenario's samples are taken (0 counts as 1): each round gets
    /// this share of the budget (see [`RunConfig::budget`]).
    pub rounds: usize,
}

/// The rows `TRELLIS_BENCH_ONLY` selects (`SYSTEM` or `SYSTEM/SCENARIO`, `*` for any
/// system): for profiling one system or one scenario. Unset: every row.
static ONLY: std::sync::LazyLock<Option<(String, Option<String>)>> = std::sync::LazyLock::new(|| {
    let only = std::env::var("TRELLIS_BENCH_ONLY").ok().filter(|s| !s.is_empty())?;
    let (system, scenario) = match only.split_once('/') {
        Some((system, scenario)) => (system.to_string(), Some(scenario.to_string())),
        None => (only, None),
    };
    Some((system, scenario))
});

/// The number of samples `TRELLIS_BENCH_SAMPLES` fixes (no warm-up, no time budget): a
/// run whose work does not depend on the clock, so that an instruction counter such as
/// callgrind gives the same count every time, and two counts give the cost of a sample.
static SAMPLES: std::sync::LazyLock<Result<Option<usize>, String>> = std::sync::LazyLock::new(|| {
    let Some(text) = std::env::var("TRELLIS_BENCH_SAMPLES").ok().filter(|s| !s.is_empty()) else { return Ok(None) };
    match text.parse::<usize>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(format!("TRELLIS_BENCH_SAMPLES must be a whole number of samples above 0, not `{text}`")),
    }
});

/// Whether `TRELLIS_BENCH_SAMPLES` fixes the samples (then a scenario is measured in one
/// go, so that its instruction count repeats).
pub fn fixed_samples() -> bool {
    matches!(*SAMPLES, Ok(Some(_)))
}

/// Whether `TRELLIS_BENCH_SAMPLES` is unset or a valid count (checked before any suite
/// runs, so that a typo is not a long run with the usual budget).
pub fn check_samples() -> Result<(), String> {
    SAMPLES.as_ref().map(|_| ()).map_err(Clone::clone)
}

/// The rows `TRELLIS_BENCH_ONLY` selects, if it is set: (system or `*`, scenario).
pub fn only() -> Option<(&'static str, Option<&'static str>)> {
    ONLY.as_ref().map(|(system, scenario)| (system.as_str(), scenario.as_deref()))
}

impl RunConfig {
    /// Whether the row of `system` in `scenario` is measured (see `TRELLIS_BENCH_ONLY`).
    pub fn selected(&self, system: &str, scenario: &str) -> bool {
        match &*ONLY {
            None => true,
            Some((only_system, only_scenario)) => {
                (only_system == "*" || only_system == system) && only_scenario.as_ref().is_none_or(|s| s == scenario)
            }
        }
    }

    /// `budget`; exactly the samples `TRELLIS_BENCH_SAMPLES` asks for, with no warm-up,
    /// when it is set; or a minimal one when [`RunConfig::quick`] is set.
    pub fn budget(&self, budget: Budget) -> Budget {
        if let Ok(Some(samples)) = *SAMPLES {
            return Budget { warmup: 0, min_samples: samples, max_samples: samples, max_time: Duration::ZERO };
        }
        if self.quick {
            Budget {
                warmup: budget.warmup.min(1),
                min_samples: 1,
                max_samples: budget.max_samples.min(3),
                max_time: Duration::ZERO,
            }
        } else {
            let rounds = self.rounds.max(1);
            Budget {
                warmup: budget.warmup,
                min_samples: budget.min_samples.div_ceil(rounds),
                max_samples: budget.max_samples.div_ceil(rounds),
                max_time: budget.max_time / rounds as u32,
            }
        }
    }
}

/// How long to measure one scenario on one system.
///
/// After `warmup` unrecorded runs, samples are taken until `max_samples` are recorded or
/// `max_time` of wall time (setup and teardown included) has passed, but at least
/// `min_samples`.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Runs before measuring (not recorded).
    pub warmup: usize,
    /// Samples always taken, whatever the time.
    pub min_samples: usize,
    /// Samples never exceeded.
    pub max_samples: usize,
    /// Wall-time budget for the samples.
    pub max_time: Duration,
}

/// Summary of the samples of one scenario on one system.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// Median sample, in nanoseconds.
    pub median_ns: f64,
    /// Number of samples recorded.
    pub samples: usize,
    /// The 99th percentile, for scenarios whose tail matters (see [`Stats::of`]).
    pub p99_ns: Option<f64>,
    /// The most memory the scenario added, for scenarios that measure it (see
    /// [`crate::memory`]).
    pub peak_bytes: Option<u64>,
    /// The target, for scenarios with no peer to compare with: for the median,
    /// or for the 99th percentile (see [`Stats::with_p99_target`]).
    pub target_ns: Option<f64>,
    /// Whether [`Stats::target_ns`] is for the 99th percentile rather than the median.
    pub target_is_p99: bool,
    /// A target for the 99th percentile beside the median's (see [`Stats::with_tail_target`]).
    pub p99_target_ns: Option<f64>,
}

impl Stats {
    /// Median and 99th percentile of `durations`.
    pub fn of(durations: &mut [Duration]) -> Self {
        let p99 = percentile_ns(durations, 0.99);
        Stats { median_ns: median_ns(durations), samples: durations.len(), p99_ns: Some(p99), ..Stats::default() }
    }

    /// The median of `durations` (and how many there are), nothing else.
    pub fn median_of(durations: &mut [Duration]) -> Self {
        Stats { median_ns: median_ns(durations), samples: durations.len(), ..Stats::default() }
    }

    /// These stats with the memory the scenario added at its peak.
    pub fn with_peak(self, bytes: u64) -> Self {
        Stats { peak_bytes: Some(bytes), ..self }
    }

    /// These stats with the median's target.
    pub fn with_target(self, target: Duration) -> Self {
        Stats { target_ns: Some(target.as_nanos() as f64), target_is_p99: false, ..self }
    }

    /// These stats with a target for the 99th percentile.
    pub fn with_p99_target(self, target: Duration) -> Self {
        Stats { target_ns: Some(target.as_nanos() as f64), target_is_p99: true, ..self }
    }

    /// These stats with a target for the 99th percentile as well as the median's (set
    /// with [`Stats::with_target`]): for figures whose issue states both.
    pub fn with_tail_target(self, target: Duration) -> Self {
        Stats { p99_target_ns: Some(target.as_nanos() as f64), ..self }
    }
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            median_ns: 0.0,
            samples: 0,
            p99_ns: None,
            peak_bytes: None,
            target_ns: None,
            target_is_p99: false,
            p99_target_ns: None,
        }
    }
}

/// Runs `sample` per `budget`; each call returns the duration of its timed part, so a
/// sample can exclude its own setup and teardown (use [`time`]).
pub fn measure(budget: Budget, sample: impl FnMut() -> Duration) -> Stats {
    Stats::median_of(&mut durations(budget, sample))
}

/// [`measure`]'s samples, unsummarised (for a scenario measured in rounds).
pub fn durations(budget: Budget, mut sample: impl FnMut() -> Duration) -> Vec<Duration> {
    for _ in 0..budget.warmup {
        sample();
    }
    let max = budget.max_samples.max(budget.min_samples).max(1);
    let mut durations = Vec::with_capacity(max);
    let started = Instant::now();
    while durations.len() < max && (durations.len() < budget.min_samples.max(1) || started.elapsed() < budget.max_time)
    {
        durations.push(sample());
    }
    durations
}

/// Times `f`, returning its result and how long it took.
pub fn time<R>(f: impl FnOnce() -> R) -> (R, Duration) {
    let start = Instant::now();
    let result = f();
    (result, start.elapsed())
}

/// Median of `durations` in nanoseconds (mean of the two middle ones for an even count;
/// 0 for none).
pub fn median_ns(durations: &mut [Duration]) -> f64 {
    if durations.is_empty() {
        return 0.0;
    }
    durations.sort_unstable();
    let mid = durations.len() / 2;
    let ns = |d: Duration| d.as_nanos() as f64;
    if durations.len() % 2 == 1 {
        ns(durations[mid])
    } else {
        (ns(durations[mid - 1]) + ns(durations[mid])) / 2.0
    }
}

/// The sample below which `fraction` of `durations` lie (nearest rank), in nanoseconds; 0
/// for none.
pub fn percentile_ns(durations: &mut [Duration], fraction: f64) -> f64 {
    if durations.is_empty() {
        return 0.0;
    }
    durations.sort_unstable();
    let rank = ((durations.len() as f64) * fraction).ceil() as usize;
    durations[rank.clamp(1, durations.len()) - 1].as_nanos() as f64
}

/// The result of one scenario on one system.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    /// Suite name.
    pub suite: String,
    /// Scenario name.
    pub scenario: String,
    /// System name (see [`is_trellis`]).
    pub system: String,
    /// The median in nanoseconds, or why the system failed (panic message, e.g. a failed
    /// verification).
    pub median_ns: Result<f64, String>,
    /// Number of samples behind the median (0 on failure).
    pub samples: usize,
    /// Set when the median is the time of one operation of a throughput scenario, named
    /// by this unit (singular, e.g. `"commit"`): the table then also shows
    /// `1e9 / median` operations per second. Not part of the JSON output.
    pub rate_unit: Option<&'static str>,
    /// Tail, memory and target where the scenario measures them (see [`Stats`]).
    pub extra: Extra,
}

/// What some scenarios report beside the median: in the JSON line when set, and on a
/// line under the table.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Extra {
    /// See [`Stats::p99_ns`].
    pub p99_ns: Option<f64>,
    /// See [`Stats::peak_bytes`].
    pub peak_bytes: Option<u64>,
    /// See [`Stats::target_ns`].
    pub target_ns: Option<f64>,
    /// See [`Stats::target_is_p99`].
    pub target_is_p99: bool,
    /// See [`Stats::p99_target_ns`].
    pub p99_target_ns: Option<f64>,
}

impl Measurement {
    /// Marks the median as the time per `unit` (see [`Measurement::rate_unit`]).
    pub fn per(mut self, unit: &'static str) -> Self {
        self.rate_unit = Some(unit);
        self
    }
}

/// Is `system` one of ours? Names starting with `trellis` are; all others are peers.
pub fn is_trellis(system: &str) -> bool {
    system.starts_with("trellis")
}

/// Runs `f` (which measures one scenario on one system), turning a panic into a failed
/// [`Measurement`] so that one broken system does not stop the run.
pub fn run_guarded(
    config: &RunConfig,
    suite: &str,
    scenario: &str,
    system: &str,
    f: impl FnOnce() -> Stats,
) -> Measurement {
    measurement(config, suite, scenario, system, guarded(f))
}

/// What `f` returned, or what it panicked with (a failed check panics).
pub fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    panic::catch_unwind(AssertUnwindSafe(f)).map_err(|payload| {
        if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_string()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "panicked (non-string payload)".to_string()
        }
    })
}

/// The measurement of one row from what measuring it gave (see [`guarded`]), with its
/// progress line when the config asks for one.
pub fn measurement(
    config: &RunConfig,
    suite: &str,
    scenario: &str,
    system: &str,
    outcome: Result<Stats, String>,
) -> Measurement {
    if config.progress {
        match &outcome {
            Ok(stats) => eprintln!(
                "  {suite}/{scenario:<22} {system:<16} {:>12}  ({} samples)",
                format_ns(stats.median_ns),
                stats.samples
            ),
            Err(e) => eprintln!("  {suite}/{scenario:<22} {system:<16} FAILED: {e}"),
        }
    }
    Measurement {
        suite: suite.to_string(),
        scenario: scenario.to_string(),
        system: system.to_string(),
        samples: outcome.as_ref().map_or(0, |s| s.samples),
        extra: outcome.as_ref().map_or(Extra::default(), |s| Extra {
            p99_ns: s.p99_ns,
            peak_bytes: s.peak_bytes,
            target_ns: s.target_ns,
            target_is_p99: s.target_is_p99,
            p99_target_ns: s.p99_target_ns,
        }),
        median_ns: outcome.map(|s| s.median_ns),
        rate_unit: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        let mut odd = [3, 1, 2].map(Duration::from_nanos);
        assert_eq!(median_ns(&mut odd), 2.0);
        let mut even = [4, 1, 3, 2].map(Duration::from_nanos);
        assert_eq!(median_ns(&mut even), 2.5);
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let mut samples: Vec<Duration> = (1..=200).map(Duration::from_nanos).collect();
        assert_eq!(percentile_ns(&mut samples, 0.99), 198.0);
        assert_eq!(percentile_ns(&mut [Duration::from_nanos(7)], 0.99), 7.0);
        assert_eq!(percentile_ns(&mut [], 0.99), 0.0);
    }

    #[test]
    fn measure_respects_min_and_max_samples() {
        let budget = Budget { warmup: 2, min_samples: 3, max_samples: 5, max_time: Duration::ZERO };
        let mut calls = 0;
        let stats = measure(budget, || {
            calls += 1;
            Duration::from_nanos(10)
        });
        assert_eq!((calls, stats.samples), (5, 3));
    }
}
