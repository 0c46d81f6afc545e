//! What the `trellis` command tells its operator: the log on standard error (`TRELLIS_LOG`)
//! and, when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is
//! set, OpenTelemetry traces sent over OTLP/HTTP with protobuf ([`export`]); and the
//! counters `trellis serve` answers `GET /metrics` with ([`metrics`]).
//!
//! Both are layers of one `tracing` subscriber, each with its own filter: the log shows
//! events at the `TRELLIS_LOG` level and the spans that locate them; OpenTelemetry gets
//! only the spans made for it (target `trellis_builtins::traced::TARGET`: a request
//! ([`http`]), a dialog's request, each model call and each tool call, named as the GenAI
//! semantic conventions say) and the warnings and errors inside them. The engine's own
//! spans (a handler, a computation) stay out of traces: there are thousands per second.
//!
//! A trace goes on across a request one node forwards to another (`traceparent`, W3C
//! Trace Context; [`http::inject`]). Spans are sent in batches from a thread of their own,
//! and every batch left is sent when the command ends ([`flush`]).

mod export;
pub(crate) mod http;
pub(crate) mod metrics;

use std::sync::OnceLock;

use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;
use trellis_builtins::traced::TARGET;

use crate::terminal;

/// The process's span pipeline, once traces were asked for and the subscriber installed.
static TRACES: OnceLock<SdkTracerProvider> = OnceLock::new();

/// Installs the process's subscriber: the log at `level` (escaped, on standard error) and,
/// when the environment asks for them, OpenTelemetry traces. A program that set up its own
/// subscriber keeps it (and gets no traces from here).
pub(crate) fn start(level: LevelFilter) {
    // The log as it always was: no target, no time; spans made for traces left out.
    let log = tracing_subscriber::fmt::layer()
        .with_target(false)
        .without_time()
        .with_writer(|| terminal::SafeStderr)
        .with_filter(Targets::new().with_default(level).with_target(TARGET, LevelFilter::OFF));
    let provider = export::provider();
    let traces = provider.as_ref().map(|provider| {
        use opentelemetry::trace::TracerProvider as _;
        let tracer = provider.tracer(crate::program::name());
        // The spans made for traces, and the warnings and errors of the program's crates
        // (events inside them); a target is matched by its prefix.
        let chosen = Targets::new().with_target("trellis", LevelFilter::WARN).with_target(TARGET, LevelFilter::INFO);
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_level(false)
            .with_tracked_inactivity(false)
            .with_filter(chosen)
    });
    // Refused only when a subscriber is already set: the program's own, which stays.
    let installed = tracing_subscriber::registry().with(log).with(traces).try_init().is_ok();
    if let (true, Some(provider)) = (installed, provider) {
        let _ = TRACES.set(provider);
        // Calls leaving the process outside HTTP (MCP's `_meta`) carry the trace too.
        trellis_builtins::traced::propagate_with(http::PROPAGATION);
    }
}

/// The span a command runs in, named after the program and its subcommands (`trellis
/// charm send`: never an argument); a disabled span without traces.
pub(crate) fn command_span(program: &str, matches: &clap::ArgMatches) -> tracing::Span {
    if !tracing() {
        return tracing::Span::none();
    }
    let mut name = program.to_string();
    let mut at = matches;
    while let Some((sub, next)) = at.subcommand() {
        name.push(' ');
        name.push_str(sub);
        at = next;
    }
    tracing::info_span!(target: trellis_builtins::traced::TARGET, "command", otel.name = %name, otel.kind = "client")
}

/// Whether spans go to OpenTelemetry in this process.
pub(crate) fn tracing() -> bool {
    TRACES.get().is_some()
}

/// Sends the spans not sent yet, and waits for them to be sent: the command is ending
/// (the pipeline stays up, as a program may run another command in the same process).
pub(crate) fn flush() {
    if let Some(provider) = TRACES.get() {
        if let Err(error) = provider.force_flush() {
            let message = format!("could not send the last traces to the OpenTelemetry collector: {error}");
            eprintln!("warning: {}", terminal::safe_line(&message));
        }
    }
}
