//! Bearer tokens for `trellis mcp serve --http` when it faces a network: every request to
//! `/mcp` carries `Authorization: Bearer TOKEN`, checked by the caller's [`TokenCheck`]
//! (the space's tokens, `trellis token new`); one that does not is answered 401 with a
//! `WWW-Authenticate` header that points at the protected-resource metadata (RFC 9728),
//! served without a token at `/.well-known/oauth-protected-resource` (and at its `/mcp`
//! suffix), which says how such a token is sent and where it comes from.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// Whether a bearer token lets its holder in.
pub type TokenCheck = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Where the protected-resource metadata is served.
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// What the middleware and the metadata need.
#[derive(Clone)]
pub(super) struct Bearer {
    pub check: TokenCheck,
    /// `https` or `http`, as the server listens.
    pub scheme: &'static str,
}

/// `https://HOST` of a request, from its `Host` header.
fn origin(scheme: &str, headers: &HeaderMap) -> String {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    format!("{scheme}://{host}")
}

/// The protected-resource metadata (RFC 9728) of the `/mcp` endpoint.
pub(super) async fn metadata(State(bearer): State<Bearer>, headers: HeaderMap) -> Json<serde_json::Value> {
    let origin = origin(bearer.scheme, &headers);
    Json(json!({
        "resource": format!("{origin}/mcp"),
        "bearer_methods_supported": ["header"],
        "resource_name": "a Trellis space over MCP",
        "authorization_servers": [],
        "token_source": "a token of the space, made with `trellis token new` where the space is kept"
    }))
}

/// Lets a request through with a token the check accepts; else 401, saying where the
/// metadata is.
pub(super) async fn require(State(bearer): State<Bearer>, request: Request, next: Next) -> Response {
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    if given.is_some_and(|token| (bearer.check)(token)) {
        return next.run(request).await;
    }
    let origin = origin(bearer.scheme, request.headers());
    let error = match given {
        Some(_) => ", error=\"invalid_token\", error_description=\"the token is unknown or revoked\"",
        None => "",
    };
    let challenge = format!("Bearer resource_metadata=\"{origin}{METADATA_PATH}/mcp\"{error}");
    let mut response = (
        StatusCode::UNAUTHORIZED,
        Json(json!({"error": "this MCP server needs a bearer token of the space: make one with `trellis token new` and send it as `Authorization: Bearer TOKEN`"})),
    )
        .into_response();
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, value);
    }
    response
}
