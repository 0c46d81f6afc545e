//! The server's limits: the size of a request body (413) and the time it may take to
//! arrive (408), the length of a chat message (422), and the rate of requests per client
//! (429), each answered with a message that says what the limit is. (Each connection's
//! deadlines and the cap per address are `trellis_http`'s.)

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Instant;

use axum::extract::{FromRequest, Request};
use axum::http::{header, StatusCode};
use parking_lot::Mutex;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// The largest request body, in bytes.
pub const MAX_BODY: usize = 64 * 1024;

/// A charm name as `trellis_runner::charm::check_name` accepts it, for the OpenAPI
/// document: 1 to 100 characters without control characters once trimmed.
pub const NAME_PATTERN: &str = r"^\s*[^\s\x00-\x1f\x7f-\x9f]([^\x00-\x1f\x7f-\x9f]{0,98}[^\s\x00-\x1f\x7f-\x9f])?\s*$";

/// A message the chat accepts: not only white space (and at most 16,000 long).
pub const MESSAGE_PATTERN: &str = r"\S";

/// A JSON request body of at most [`MAX_BODY`] bytes: a larger one is 413, one that does not
/// arrive in time 408, one that is not JSON 400, and JSON of the wrong shape 422, each
/// saying where.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, _state: &S) -> Result<Self, ApiError> {
        let too_large = |size: String| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is {size} bytes; the limit is {MAX_BODY} bytes"),
            )
        };
        let declared = request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse().ok());
        if let Some(length) = declared.filter(|&length: &usize| length > MAX_BODY) {
            return Err(too_large(length.to_string()));
        }
        let bytes = axum::body::to_bytes(request.into_body(), MAX_BODY).await.map_err(|error| {
            if trellis_http::is_body_timeout(&error) {
                // The client stalled or trickled: it hears why as the connection closes.
                ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    format!("{error} ({} serve --body-timeout)", crate::program::name()),
                )
            } else {
                too_large(format!("more than {MAX_BODY}"))
            }
        })?;
        let bytes = if bytes.is_empty() { &b"{}"[..] } else { &bytes[..] };
        // JSON first, then its shape: serde calls some valid JSON of the wrong shape (`{}`
        // for a choice of answers) a syntax error when it reads both at once.
        let json: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| not_json(&e))?;
        serde_path_to_error::deserialize(json).map(Body).map_err(|e| {
            ApiError::unprocessable(format!("the request body does not fit at `{}`: {}", e.path(), e.inner()))
        })
    }
}

fn not_json(e: &serde_json::Error) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, format!("the request body is not valid JSON: {e}"))
}

/// Refuses a chat message longer than 16,000 characters, or empty (422).
pub fn check_message(text: &str) -> Result<(), ApiError> {
    crate::session::check_message(text).map_err(ApiError::unprocessable)
}

/// Requests per minute per client address, as a token bucket: a client may spend a
/// minute's allowance at once, and it refills evenly over the minute.
pub struct RateLimit {
    per_minute: u32,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

impl RateLimit {
    /// A limit of `per_minute` requests per minute per client address.
    pub fn new(per_minute: u32) -> Self {
        RateLimit { per_minute: per_minute.max(1), buckets: Mutex::default() }
    }

    /// Takes one request from `client`'s allowance, or says when to try again (429).
    pub fn take(&self, client: IpAddr) -> Result<(), ApiError> {
        let capacity = f64::from(self.per_minute);
        let per_second = capacity / 60.0;
        let now = Instant::now();
        let mut buckets = self.buckets.lock();
        // Forget clients whose allowance is full again, so the map stays small.
        if buckets.len() > 1024 {
            buckets.retain(|_, b| b.tokens + now.duration_since(b.at).as_secs_f64() * per_second < capacity);
        }
        let bucket = buckets.entry(client).or_insert(Bucket { tokens: capacity, at: now });
        bucket.tokens = (bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * per_second).min(capacity);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let wait = ((1.0 - bucket.tokens) / per_second).ceil().max(1.0);
        Err(ApiError::too_many(
            format!(
                "too many requests: the limit is {} a minute ({} serve --rate-limit); try again in {wait} s",
                self.per_minute,
                crate::program::name()
            ),
            // A whole number of seconds, at most a minute.
            wait.min(60.0) as u64,
        ))
    }
}
