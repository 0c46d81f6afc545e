//! The span pipeline, from the standard OpenTelemetry environment variables:
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` is added) or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as it is), `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`,
//! `OTEL_BSP_*` for the batches, `OTEL_SDK_DISABLED` and `OTEL_TRACES_EXPORTER=none` to
//! turn it off. The protocol is OTLP over HTTP with protobuf, the specification's
//! default (this build has neither gRPC nor JSON).
//!
//! Batches are sent by the SDK's own thread, outside Tokio, through the blocking client of
//! the reqwest the model providers use (rustls), wrapped in [`Blocking`].

use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::WithHttpConfig as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;

use crate::terminal;

/// How long one batch may take to send, unless `OTEL_EXPORTER_OTLP_TIMEOUT` says (the
/// specification's default).
const TIMEOUT: Duration = Duration::from_secs(10);

/// The pipeline the environment asks for, or `None` when it asks for no traces; one that
/// cannot be built is reported on standard error and left out (the command runs on).
pub(super) fn provider() -> Option<SdkTracerProvider> {
    if !asked() {
        return None;
    }
    match build() {
        Ok(provider) => Some(provider),
        Err(error) => {
            let message = format!("no OpenTelemetry traces: {error}");
            eprintln!("warning: {}", terminal::safe_line(&message));
            None
        }
    }
}

/// Whether the environment names a collector, and does not turn traces off.
fn asked() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|value| !value.trim().is_empty());
    let is = |name: &str, value: &str| std::env::var(name).is_ok_and(|v| v.trim().eq_ignore_ascii_case(value));
    (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        && !is("OTEL_SDK_DISABLED", "true")
        && !is("OTEL_TRACES_EXPORTER", "none")
}

fn build() -> Result<SdkTracerProvider, HttpError> {
    // Built here, before Tokio starts: reqwest's blocking client runs a runtime of its own.
    let client = reqwest::blocking::Client::builder().timeout(timeout()).build()?;
    let exporter =
        opentelemetry_otlp::SpanExporter::builder().with_http().with_http_client(Blocking(client)).build()?;
    let mut resource = Resource::builder();
    // The program's name unless the operator named the service.
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|name| !name.trim().is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|attributes| attributes.contains("service.name="));
    if !named {
        resource = resource.with_service_name(crate::program::name());
    }
    Ok(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource.build()).build())
}

/// `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` or `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds), else
/// [`TIMEOUT`].
fn timeout() -> Duration {
    ["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"]
        .iter()
        .find_map(|name| std::env::var(name).ok()?.trim().parse::<u64>().ok())
        .map_or(TIMEOUT, Duration::from_millis)
}

/// The exporter's HTTP client: reqwest 0.12's blocking one. The SDK sends each batch from
/// its own thread, waiting on the future, so a blocking call there holds up nothing else.
#[derive(Debug)]
struct Blocking(reqwest::blocking::Client);

#[async_trait::async_trait]
impl HttpClient for Blocking {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let answer =
            self.0.request(parts.method, parts.uri.to_string()).headers(parts.headers).body(body.to_vec()).send()?;
        let (status, headers) = (answer.status(), answer.headers().clone());
        let mut response = Response::builder().status(status).body(answer.bytes()?)?;
        *response.headers_mut() = headers;
        Ok(response)
    }
}
