//! Sending a request for a space this node does not hold to the node that does, and its
//! answer back as it comes (an event stream stays a stream).
//!
//! The request goes as it came (method, path, query, body, and its headers but those of
//! the connection), marked with [`FORWARDED`] so the other node answers it or refuses it,
//! never forwards it on. Bearer tokens work on every node (they are kept in the space);
//! a page's session cookie belongs to the node that made it.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// The header a forwarded request carries: the forwarding node's address.
pub const FORWARDED: &str = "x-trellis-forwarded-by";

/// The largest request body forwarded: a message's files fit (see `limits`).
const MAX_BODY: usize = 64 << 20;

/// How long reaching the other node may take (not the answer: an event stream is long).
const CONNECT: Duration = Duration::from_secs(3);

/// The headers of one connection, never passed on (RFC 9110 §7.6.1), and `host`, which
/// names this node.
const HOP_BY_HOP: [HeaderName; 7] = [
    header::CONNECTION,
    header::HOST,
    header::TRANSFER_ENCODING,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
];

/// Whether a request was forwarded here by another node.
pub fn was_forwarded(headers: &HeaderMap) -> bool {
    headers.contains_key(FORWARDED)
}

/// Sends requests on to other nodes.
pub struct Forwarder {
    http: reqwest::Client,
    /// This node's address, told to the other node.
    me: String,
}

/// Why a request could not be forwarded.
#[derive(Debug)]
pub struct NotForwarded {
    status: StatusCode,
    message: String,
}

impl NotForwarded {
    /// The error a client gets, naming the node that holds the space.
    pub fn with_holder(self, holder: &str) -> ApiError {
        ApiError::new(self.status, format!("{} (the space's holder: node {holder})", self.message))
    }
}

impl Forwarder {
    /// A forwarder for the node at `me`.
    pub fn new(me: SocketAddr) -> anyhow::Result<Forwarder> {
        // Between nodes: a proxy of the environment must not see their traffic or tokens.
        let http = reqwest::Client::builder().no_proxy().connect_timeout(CONNECT).build()?;
        Ok(Forwarder { http, me: format!("http://{me}") })
    }

    /// Sends `request` to the node at `to` (`http://HOST:PORT`), and its answer back.
    pub async fn send(&self, to: &str, request: Request) -> Result<Response, NotForwarded> {
        let (parts, body) = request.into_parts();
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let url = format!("{}{path}", to.trim_end_matches('/'));
        let body = axum::body::to_bytes(body, MAX_BODY).await.map_err(|_| NotForwarded {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("a request forwarded to another node may carry at most {MAX_BODY} bytes"),
        })?;
        let mut headers = parts.headers;
        for name in &HOP_BY_HOP {
            headers.remove(name);
        }
        headers.remove(header::CONTENT_LENGTH);
        let sent = self.http.request(parts.method, &url).headers(headers).header(FORWARDED, &self.me).body(body).send();
        let answer = sent.await.map_err(|error| NotForwarded {
            status: StatusCode::BAD_GATEWAY,
            message: format!("the node holding the space, at {to}, did not answer ({error}); send the request again"),
        })?;
        let mut response = Response::builder().status(answer.status());
        if let Some(headers) = response.headers_mut() {
            for (name, value) in answer.headers() {
                // Its length too: the body comes as it was.
                if !HOP_BY_HOP.contains(name) {
                    headers.append(name, value.clone());
                }
            }
        }
        let streamed = Body::from_stream(answer.bytes_stream());
        Ok(response.body(streamed).unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response()))
    }
}
