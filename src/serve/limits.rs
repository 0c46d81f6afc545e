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

/// The largest body of `POST /api/chat/messages`, in bytes: the files one message may carry
/// (20 MiB, `trellis_builtins::files::FileLimits`) as base64, which is 4/3 of them, beside
/// the text and the JSON around them.
pub const MAX_MESSAGE_BODY: usize = 28 << 20;

/// The most files one message may carry: each becomes a document of its own, so a body
/// of many empty files would otherwise make hundreds of thousands.
pub const MAX_FILES: usize = 32;

/// A charm name as `trellis_runner::charm::check_name` accepts it, for the OpenAPI
/// document: 1 to 100 characters without control characters once trimmed.
pub const NAME_PATTERN: &str = r"^\s*[^\s\x00-\x1f\x7f-\x9f]([^\x00-\x1f\x7f-\x9f]{0,98}[^\s\x00-\x1f\x7f-\x9f])?\s*$";

/// A JSON request body of at most `LIMIT` bytes ([`MAX_BODY`] unless a route says
/// otherwise): a larger one is 413, one that does not arrive in time 408, one that is not
/// JSON 400, and JSON of the wrong shape 422, each saying where.
pub struct Body<T, const LIMIT: usize = MAX_BODY>(pub T);

impl<S: Send + Sync, T: DeserializeOwned, const LIMIT: usize> FromRequest<S> for Body<T, LIMIT> {
    type Rejection = ApiError;

    async fn from_request(request: Request, _state: &S) -> Result<Self, ApiError> {
        let too_large = |size: String| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is {size} bytes; the limit is {LIMIT} bytes"),
            )
        };
        let declared = request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse().ok());
        if let Some(length) = declared.filter(|&length: &usize| length > LIMIT) {
            return Err(too_large(length.to_string()));
        }
        let bytes = axum::body::to_bytes(request.into_body(), LIMIT).await.map_err(|error| {
            if trellis_http::is_body_timeout(&error) {
                // The client stalled or trickled: it hears why as the connection closes.
                ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    format!("{error} ({} serve --body-timeout)", crate::program::name()),
                )
            } else {
                too_large(format!("more than {LIMIT}"))
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

/// Refuses a message of more than [`MAX_FILES`] files (422); their sizes are the dialog's
/// to check.
pub fn check_files(count: usize) -> Result<(), ApiError> {
    if count > MAX_FILES {
        return Err(ApiError::unprocessable(format!(
            "the message carries {count} files; the limit is {MAX_FILES}: send the others with the next message"
        )));
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use trellis_builtins::files::FileLimits;

    #[test]
    fn a_message_body_has_room_for_its_files_as_base64() {
        let files = FileLimits::default().per_message as usize;
        assert!(MAX_MESSAGE_BODY >= files.div_ceil(3) * 4 + MAX_BODY, "{MAX_MESSAGE_BODY}");
    }
}
