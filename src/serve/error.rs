//! [`ApiError`]: every refusal and failure of the API, as a status and a JSON body
//! `{"error": "what happened and what to do"}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::Serialize;

/// The body of every error response.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ErrorBody {
    /// What went wrong, and what to do about it.
    pub error: String,
}

/// An error answered to a client.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    /// For 429: when to try again, in seconds.
    retry_after: Option<u64>,
}

impl ApiError {
    /// An error with `status` and `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into(), retry_after: None }
    }

    /// 422: the request is well formed but its content is refused.
    pub fn unprocessable(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, message)
    }

    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    /// Its status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// 429, with when to try again.
    pub fn too_many(message: impl Into<String>, retry_after: u64) -> Self {
        ApiError { retry_after: Some(retry_after), ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, message) }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(ErrorBody { error: self.message })).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// The runtime's errors: what the client named does not exist (404), is ambiguous (409),
/// or was refused (422); a change that could not be saved (and was undone) is 503, to be
/// sent again once the server has room; a timeout is 504; anything else is the server's
/// failure (500).
impl From<trellis_runner::Error> for ApiError {
    fn from(error: trellis_runner::Error) -> Self {
        use trellis_runner::Error as E;
        let status = match &error {
            E::UnknownCharm(_) | E::UnknownPattern(_) | E::NoHandler(_) => StatusCode::NOT_FOUND,
            E::AmbiguousCharm { .. } => StatusCode::CONFLICT,
            E::BadArgument { .. }
            | E::BadName { .. }
            | E::TooDeep { .. }
            | E::BadEvent { .. }
            | E::Refused(_)
            | E::HandlerFailed { .. }
            | E::Shape { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            E::NotSaved(_) => StatusCode::SERVICE_UNAVAILABLE,
            E::Timeout(..) => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, error.to_string())
    }
}

/// A chatbot's refusal (a reply is being generated, a call is not waiting) is a conflict
/// with the conversation's state; an unknown @-mention is refused content.
impl From<trellis_patterns::chatbot::ChatbotError> for ApiError {
    fn from(error: trellis_patterns::chatbot::ChatbotError) -> Self {
        use trellis_patterns::chatbot::ChatbotError as E;
        match error {
            E::Runtime(e) => e.into(),
            E::Refused(why) => ApiError::new(StatusCode::CONFLICT, why),
            E::UnknownMention(_) | E::AmbiguousMention { .. } | E::UnknownPattern(_) => {
                ApiError::unprocessable(error.to_string())
            }
            other => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, other.to_string()),
        }
    }
}
