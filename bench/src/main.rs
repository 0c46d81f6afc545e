//! `trellis-bench`: runs the same scenarios on Trellis and on peer systems compiled into
//! this binary, and prints medians and ratios; speed targets live here, never in timed tests.
//!
//! ```text
//! cargo run --release -p trellis-bench -- [SUITE] [--json] [--quick]
//! ```
//!
//! Suites are listed in [`SUITES`]; adding one is a new module exposing
//! `pub const SUITE: harness::Suite` plus one line in that list.

mod cluster;
mod dialogs;
mod harness;
mod memory;
mod outside;
mod peers;
mod propagation;
mod reactive;
mod report;
mod selection;
mod spaces;
mod storage;
mod tools;
mod trellis_system;

use std::io::{self, Write};
use std::process::ExitCode;

use harness::{Measurement, RunConfig, Suite};

/// The allocator the `trellis` command runs on, so the figures are the command's (every
/// system in this binary shares it).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Every suite, in run order. Add new suites here (one line each).
const SUITES: &[Suite] = &[
    propagation::SUITE,
    storage::SUITE,
    tools::SUITE,
    spaces::SUITE,
    dialogs::SUITE,
    outside::SUITE,
    selection::SUITE,
    cluster::SUITE,
];

/// Stack size of the thread running the suites: deep graphs (cellx5000) recurse deeply
/// in some systems (futures-signals polls, sycamore's topological sort). The memory is
/// only reserved, not committed.
pub(crate) const STACK_SIZE: usize = 1 << 30;

/// What the command line asked for.
#[derive(Debug, PartialEq)]
struct Args {
    suite: Option<String>,
    json: bool,
    quick: bool,
    help: bool,
}

/// Parses the arguments (without the program name).
fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args { suite: None, json: false, quick: false, help: false };
    for arg in args {
        match arg.as_str() {
            "--json" => parsed.json = true,
            "--quick" => parsed.quick = true,
            "-h" | "--help" => parsed.help = true,
            flag if flag.starts_with('-') => return Err(format!("unknown option `{flag}`")),
            name => {
                if let Some(previous) = &parsed.suite {
                    return Err(format!("only one suite may be given (`{previous}`, `{name}`)"));
                }
                if !SUITES.iter().any(|s| s.name == name) {
                    return Err(format!("unknown suite `{name}`"));
                }
                parsed.suite = Some(name.to_string());
            }
        }
    }
    Ok(parsed)
}

/// The `--help` text.
fn usage() -> String {
    let mut text = String::from(
        "trellis-bench: Trellis vs peer reactive systems, side by side\n\n\
         USAGE:\n    cargo run --release -p trellis-bench -- [SUITE] [--json] [--quick]\n\n\
         SUITES (none given: all):\n",
    );
    for suite in SUITES {
        text.push_str(&format!("    {:<14} {}\n", suite.name, suite.description));
    }
    text.push_str(
        "\nOPTIONS:\n\
         \x20   --json     one JSON object per scenario x system per line:\n\
         \x20              {\"suite\",\"scenario\",\"system\",\"median_ns\",\"ratio_vs_best_peer\"}\n\
         \x20              (ratio to the fastest non-Trellis system of that scenario;\n\
         \x20              failed measurements have null numbers and an \"error\")\n\
         \x20   --quick    a few samples per measurement (smoke test; numbers are rough)\n\
         \x20   -h, --help this text\n\n\
         ENVIRONMENT:\n\
         \x20   TRELLIS_BENCH_ONLY=SYSTEM[/SCENARIO]\n\
         \x20              measure only these propagation rows (`*`: any system), e.g.\n\
         \x20              `trellis/deepPropagation` under a profiler\n\
         \x20   TRELLIS_BENCH_SAMPLES=N\n\
         \x20              exactly N samples per measurement, no warm-up, no time budget:\n\
         \x20              instruction counts (callgrind) that repeat from run to run; the\n\
         \x20              difference of two counts over their samples is one sample's\n\
         \x20   TRELLIS_BENCH_DATABASE=postgres://USER@HOST/DB\n\
         \x20              the cluster suite's database (default: a throwaway cluster it\n\
         \x20              starts with PostgreSQL's initdb and pg_ctl, and removes)\n\
         \x20   TRELLIS_BENCH_PG_BIN=DIR\n\
         \x20              where PostgreSQL's programs are (default: pg_config --bindir,\n\
         \x20              or the newest /usr/lib/postgresql/N/bin)\n\
         \x20   TRELLIS_BENCH_TRELLIS=PATH\n\
         \x20              the trellis binary the cluster suite runs as nodes (default: the\n\
         \x20              one beside this benchmark, built first under cargo run)\n\n\
         The table shows medians per iteration and (Nx) = ratio to the fastest peer;\n\
         \x20throughput scenarios (storage) also list operations per second under it.\n\
         Progress goes to stderr. Exit status 1 if any measurement failed its checks.\n",
    );
    text
}

/// Runs the selected suites on a big-stack thread.
fn run_suites(args: &Args) -> Result<Vec<Measurement>, String> {
    let config = RunConfig { quick: args.quick, progress: true, rounds: 1 };
    let selected: Vec<Suite> =
        SUITES.iter().filter(|s| args.suite.as_deref().is_none_or(|name| s.name == name)).copied().collect();
    let worker = std::thread::Builder::new()
        .name("bench".into())
        .stack_size(STACK_SIZE)
        .spawn(move || {
            let mut all = Vec::new();
            for suite in selected {
                eprintln!("suite {}:", suite.name);
                all.extend((suite.run)(&config));
            }
            all
        })
        .map_err(|e| format!("cannot start the benchmark thread: {e}"))?;
    worker.join().map_err(|_| "the benchmark thread panicked".to_string())
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("error: {e}\n\n{}", usage());
            return ExitCode::from(2);
        }
    };
    if args.help {
        print!("{}", usage());
        return ExitCode::SUCCESS;
    }
    if let Err(e) = propagation::check_only().and_then(|()| harness::check_samples()) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let measurements = match run_suites(&args) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stdout = io::stdout();
    let mut out = stdout.lock();
    let written = if args.json {
        report::write_json(&mut out, &measurements)
    } else {
        report::write_table(&mut out, &measurements)
    };
    if let Err(e) = written.and_then(|()| out.flush()) {
        eprintln!("error: cannot write the results: {e}");
        return ExitCode::FAILURE;
    }
    if measurements.iter().any(|m| m.median_ns.is_err()) {
        eprintln!("some measurements failed their checks (see FAILED above)");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, String> {
        parse_args(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn parses_suite_and_flags() {
        let args = parse(&["propagation", "--json"]).expect("valid");
        assert_eq!(args.suite.as_deref(), Some("propagation"));
        assert!(args.json && !args.quick && !args.help);
        assert_eq!(parse(&[]).expect("valid").suite, None);
    }

    #[test]
    fn rejects_unknown_suites_and_options() {
        assert!(parse(&["nope"]).is_err());
        assert!(parse(&["--fast"]).is_err());
        assert!(parse(&["propagation", "propagation"]).is_err());
    }

    #[test]
    fn usage_lists_every_suite() {
        let text = usage();
        assert!(SUITES.iter().all(|s| text.contains(s.name)));
    }
}
