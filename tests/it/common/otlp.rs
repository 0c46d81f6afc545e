//! An OpenTelemetry collector on loopback for tests that run the binary: it takes OTLP
//! over HTTP with protobuf at `/v1/traces`, as a real collector does, decodes each batch
//! with the protocol's own message types, and keeps every span.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{header, StatusCode};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message as _;

/// One span as received, its ids in hex and its attributes as text.
#[derive(Debug, Clone)]
pub struct Span {
    /// `service.name` of the process that sent it.
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_id: String,
    /// `SPAN_KIND_SERVER` is 2, `SPAN_KIND_CLIENT` 3, `SPAN_KIND_INTERNAL` 1.
    pub kind: i32,
    pub attributes: BTreeMap<String, String>,
}

impl Span {
    /// The attribute `key`, if the span has it.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// The collector; it stops with the value.
pub struct Collector {
    /// The base URL, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: String,
    spans: Arc<Mutex<Vec<Span>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Collector {
    /// Starts a collector on a port of its own.
    pub fn start() -> Collector {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let spans = Arc::new(Mutex::new(Vec::new()));
        let kept = spans.clone();
        let route = axum::routing::post(move |body: Bytes| {
            let kept = kept.clone();
            async move {
                let Ok(request) = ExportTraceServiceRequest::decode(body) else {
                    return (StatusCode::BAD_REQUEST, Vec::new());
                };
                kept.lock().unwrap().extend(flatten(request));
                (StatusCode::OK, ExportTraceServiceResponse::default().encode_to_vec())
            }
        });
        let app = axum::Router::new().route("/v1/traces", route).layer(axum::middleware::map_response(
            |mut response: axum::response::Response| async move {
                let protobuf = header::HeaderValue::from_static("application/x-protobuf");
                response.headers_mut().insert(header::CONTENT_TYPE, protobuf);
                response
            },
        ));
        runtime.spawn(async move { axum::serve(listener, app).await });
        Collector { endpoint, spans, _runtime: runtime }
    }

    /// The spans received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits (at most 30 s) until the spans received satisfy `done`; they are returned
    /// either way, for the test's own assertions to say what is missing.
    pub fn wait_for(&self, done: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.spans();
            if done(&spans) || Instant::now() > deadline {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The spans of one export request.
fn flatten(request: ExportTraceServiceRequest) -> Vec<Span> {
    let mut spans = Vec::new();
    for resource in request.resource_spans {
        let attributes = resource.resource.map(|r| r.attributes).unwrap_or_default();
        let service = texts(&attributes).remove("service.name").unwrap_or_default();
        for span in resource.scope_spans.into_iter().flat_map(|scope| scope.spans) {
            spans.push(Span {
                service: service.clone(),
                name: span.name,
                trace_id: hex(&span.trace_id),
                span_id: hex(&span.span_id),
                parent_id: hex(&span.parent_span_id),
                kind: span.kind,
                attributes: texts(&span.attributes),
            });
        }
    }
    spans
}

/// Attributes as text (numbers and booleans written out).
fn texts(attributes: &[KeyValue]) -> BTreeMap<String, String> {
    attributes
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Any::StringValue(text)) => text.clone(),
                Some(Any::IntValue(n)) => n.to_string(),
                Some(Any::BoolValue(b)) => b.to_string(),
                Some(Any::DoubleValue(x)) => x.to_string(),
                Some(other) => format!("{other:?}"),
                None => String::new(),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
