//! A span for each HTTP request `trellis serve` answers (the probes and `/metrics` left
//! out), as the HTTP semantic conventions name it, and the W3C `traceparent` that carries a
//! trace from one node to the next.
//!
//! A request's span continues the trace its `traceparent` names, whoever sent it: a node
//! forwarding it, or a client with a trace of its own. Only the path is recorded, never
//! the query (the page's sign-in link carries a token there) nor a header or a body.

use axum::extract::Request;
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::field::Empty;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use trellis_builtins::traced::TARGET;

/// The middleware that answers a request inside its span (until its response's head: an
/// event stream's body goes on after).
pub(crate) async fn traced(request: Request, next: Next) -> Response {
    if !super::tracing() {
        return next.run(request).await;
    }
    let method = request.method().clone();
    // A server of many spaces: the space a request names, for finding one space's requests.
    let space = request.uri().path().strip_prefix("/spaces/").and_then(|rest| rest.split('/').next());
    // The name is the method alone: a path names spaces and charms, too many to name spans by.
    let span = tracing::info_span!(
        target: TARGET,
        "request",
        otel.name = %method,
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = %method,
        url.path = request.uri().path(),
        trellis.space = space.filter(|name| !name.is_empty()),
        http.response.status_code = Empty,
    );
    let parent = TraceContextPropagator::new().extract(&HeaderExtractor(request.headers()));
    // Fails only for a span that is off, which then needs no parent.
    let _ = span.set_parent(parent);
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "error");
    }
    response
}

/// The propagation of traces beyond HTTP (an MCP call's `_meta`), for
/// `trellis_builtins::traced`.
pub(crate) const PROPAGATION: trellis_builtins::traced::Propagation =
    trellis_builtins::traced::Propagation { inject: fields, adopt };

/// The current span's trace as `(name, value)` fields.
fn fields() -> Vec<(String, String)> {
    let mut fields = std::collections::HashMap::new();
    TraceContextPropagator::new().inject_context(&tracing::Span::current().context(), &mut fields);
    fields.into_iter().collect()
}

/// Makes `span` continue the trace the fields `incoming` looks up name.
fn adopt(span: &tracing::Span, incoming: &trellis_builtins::traced::Lookup<'_>) {
    /// The trace's fields, found.
    struct Fields(Vec<(&'static str, String)>);
    impl opentelemetry::propagation::Extractor for Fields {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str())
        }
        fn keys(&self) -> Vec<&str> {
            self.0.iter().map(|(k, _)| *k).collect()
        }
    }
    let found: Vec<_> = ["traceparent", "tracestate"].into_iter().filter_map(|k| Some((k, incoming(k)?))).collect();
    if found.is_empty() {
        return;
    }
    // Fails only for a span that is off, which then needs no parent.
    let _ = span.set_parent(TraceContextPropagator::new().extract(&Fields(found)));
}

/// The current span's trace as headers (`traceparent`, `tracestate`) for a request this
/// process sends; none without traces.
pub(crate) fn trace_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    inject(&mut headers);
    headers
}

/// Puts the current span's trace into `headers` (a request about to be forwarded to
/// another node), in place of any the client sent; without traces, `headers` stay as they
/// are.
pub(crate) fn inject(headers: &mut HeaderMap) {
    if !super::tracing() {
        return;
    }
    let context = tracing::Span::current().context();
    for name in ["traceparent", "tracestate"] {
        headers.remove(name);
    }
    TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(headers));
}
