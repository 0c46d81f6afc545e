//! Sending a request until it succeeds: retries with exponential backoff on 429, 5xx,
//! timeouts and connection errors, and the provider's message from an error body.

use std::time::Duration;

use super::{describe, seconds, truncate, Endpoint, HttpSettings};
use crate::model::ModelError;

/// Retries on 429, 5xx, timeouts and connection errors, with exponential backoff.
///
/// Only the request is retried, never a stream that has started: events already
/// delivered cannot be taken back.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (so `3` means at most 4 attempts).
    pub max_retries: u32,
    /// Delay before the first retry; doubled for each further one.
    pub initial_delay: Duration,
    /// Cap of the doubled delay.
    pub max_delay: Duration,
    /// A `retry-after` longer than this is not waited for: the error is reported instead.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The backoff before retry number `retry` (0-based), without `retry-after`.
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 1u32.checked_shl(retry).unwrap_or(u32::MAX);
        self.initial_delay.saturating_mul(factor).min(self.max_delay)
    }
}

/// The most of an error body that is read: enough for any provider's JSON error, and
/// bounded, so a huge error page (seen: 400 MB with a 500) costs no more than this, on
/// every retry.
pub const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// Sends the request built by `make` until it succeeds, retrying as `settings` say.
///
/// Non-success statuses become [`ModelError::Refused`] with the provider's message;
/// timeouts become [`ModelError::TimedOut`] and other transport failures
/// [`ModelError::Network`]. The caller bounds the whole (the answer's deadline).
pub(crate) async fn send_with_retries(
    endpoint: &Endpoint,
    settings: &HttpSettings,
    make: impl Fn() -> reqwest::RequestBuilder,
) -> Result<reqwest::Response, ModelError> {
    let mut retry = 0;
    loop {
        let (error, retry_after) = match attempt(endpoint, settings, make()).await {
            Attempt::Done(response) => return Ok(response),
            Attempt::Fatal(error) => return Err(error),
            Attempt::Retryable { error, retry_after } => (error, retry_after),
        };
        if retry >= settings.retry.max_retries {
            return Err(error);
        }
        let delay = match retry_after {
            Some(wait) if wait > settings.retry.max_retry_after => return Err(error),
            Some(wait) => wait,
            None => settings.retry.backoff(retry),
        };
        tokio::time::sleep(delay).await;
        retry += 1;
    }
}

enum Attempt {
    Done(reqwest::Response),
    Fatal(ModelError),
    Retryable { error: ModelError, retry_after: Option<Duration> },
}

async fn attempt(endpoint: &Endpoint, settings: &HttpSettings, request: reqwest::RequestBuilder) -> Attempt {
    let retryable = |error| Attempt::Retryable { error, retry_after: None };
    let response = match tokio::time::timeout(settings.request_timeout, request.send()).await {
        Err(_) => {
            let message =
                format!("no response within {}; the server may be overloaded", seconds(settings.request_timeout));
            return retryable(endpoint.timed_out(message));
        }
        Ok(Err(error)) if error.is_builder() => return Attempt::Fatal(endpoint.network(describe(&error))),
        Ok(Err(error)) if error.is_connect() && error.is_timeout() => {
            let message = format!(
                "could not connect within {}; check the URL and that the server is running",
                seconds(settings.connect_timeout)
            );
            return retryable(endpoint.timed_out(message));
        }
        Ok(Err(error)) => return retryable(endpoint.network(describe(&error))),
        Ok(Ok(response)) => response,
    };
    let status = response.status();
    if status.is_success() {
        return Attempt::Done(response);
    }
    if status.is_redirection() {
        let to = response.headers().get(reqwest::header::LOCATION).and_then(|v| v.to_str().ok()).unwrap_or("?");
        let message = format!(
            "the URL {} redirects ({}) to {}; Trellis does not follow redirects (the conversation would go to another \
             server): if that is the provider's address, set the base URL to it",
            endpoint.url,
            status.as_u16(),
            truncate(to, 200)
        );
        return Attempt::Fatal(ModelError::Refused {
            provider: endpoint.provider.clone(),
            status: status.as_u16(),
            message,
        });
    }
    let retry_after = retry_after(response.headers());
    let (body, cut) = tokio::time::timeout(settings.request_timeout, error_body(response)).await.unwrap_or_default();
    let mut message = error_message(&body).unwrap_or_else(|| {
        status.canonical_reason().map_or_else(|| format!("HTTP {}", status.as_u16()), str::to_string)
    });
    if cut {
        message.push_str(&format!(
            " (the error body is longer than {} KiB; only its start was read)",
            MAX_ERROR_BODY_BYTES >> 10
        ));
    }
    let error = ModelError::Refused { provider: endpoint.provider.clone(), status: status.as_u16(), message };
    if status.as_u16() == 429 || status.is_server_error() {
        Attempt::Retryable { error, retry_after }
    } else {
        Attempt::Fatal(error)
    }
}

/// The start of `response`'s body, at most [`MAX_ERROR_BODY_BYTES`] of it, and whether
/// there was more. Reading stops there: dropping the response closes the connection
/// rather than draining the rest. A body broken off by the network gives what arrived.
async fn error_body(mut response: reqwest::Response) -> (String, bool) {
    let mut body = Vec::new();
    let mut cut = false;
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = MAX_ERROR_BODY_BYTES - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            cut = true;
            break;
        }
        body.extend_from_slice(&chunk);
    }
    (utf8_prefix(&body), cut)
}

/// `bytes` as text, less a character the cut split at the end; any other invalid byte
/// is replaced.
fn utf8_prefix(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_string(),
        Err(error) if error.error_len().is_none() => {
            String::from_utf8_lossy(&bytes[..error.valid_up_to()]).into_owned()
        }
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

/// The wait a `retry-after-ms` or `retry-after` (seconds) header asks for.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let number = |name: &str| -> Option<f64> {
        let value = headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok()?;
        (value.is_finite() && value >= 0.0).then_some(value)
    };
    if let Some(ms) = number("retry-after-ms") {
        return Some(Duration::from_secs_f64(ms.min(1e9) / 1000.0));
    }
    number("retry-after").map(|s| Duration::from_secs_f64(s.min(1e6)))
}

/// The human-readable message of a provider's JSON error body.
///
/// Understands OpenAI (`{"error": {"message"}}`), Anthropic
/// (`{"type": "error", "error": {"type", "message"}}`), Ollama (`{"error": "..."}`) and
/// a few common variants; any other non-empty body is returned shortened.
pub fn error_message(body: &str) -> Option<String> {
    let body = body.trim();
    if body.is_empty() {
        return None;
    }
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(body) {
        let error = json.get("error");
        let candidates = [error.and_then(|e| e.get("message")), error, json.get("message"), json.get("detail")];
        for candidate in candidates.into_iter().flatten() {
            if let Some(text) = candidate.as_str().filter(|t| !t.trim().is_empty()) {
                return Some(truncate(text.trim(), 1000));
            }
        }
    }
    Some(truncate(body, 500))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests {
    use super::*;

    #[test]
    fn error_messages_from_provider_bodies() {
        let cases = [
            (
                r#"{"error": {"message": "The model `x` does not exist", "type": "invalid_request_error"}}"#,
                "The model `x` does not exist",
            ),
            (
                r#"{"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}"#,
                "invalid x-api-key",
            ),
            (r#"{"error": "model 'llama9' not found"}"#, "model 'llama9' not found"),
            (r#"{"detail": "Not Found"}"#, "Not Found"),
            ("<html>Bad Gateway</html>", "<html>Bad Gateway</html>"),
        ];
        for (body, expected) in cases {
            assert_eq!(error_message(body).as_deref(), Some(expected));
        }
        assert_eq!(error_message("  "), None);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let policy = RetryPolicy {
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(500),
            ..RetryPolicy::default()
        };
        let delays: Vec<u128> = (0..5).map(|r| policy.backoff(r).as_millis()).collect();
        assert_eq!(delays, vec![100, 200, 400, 500, 500]);
        assert_eq!(policy.backoff(200), Duration::from_millis(500));
    }

    #[test]
    fn retry_after_headers() {
        let mut headers = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert("retry-after", reqwest::header::HeaderValue::from_static("2"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert("retry-after-ms", reqwest::header::HeaderValue::from_static("150"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(150)));
        headers.insert("retry-after-ms", reqwest::header::HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
    }
}
