//! Sending a request for a space this node does not hold to the node that does, and its
//! answer back as it comes (an event stream stays a stream).
//!
//! The request goes as it came (method, path, query, body, and its headers but those of
//! the connection), marked with [`FORWARDED`] and the secret the database's nodes share
//! ([`NODE`], `trellis_postgres::cluster_secret`): the other node answers it without
//! counting it against a rate limit (this node did) and never forwards it on, and a client
//! cannot pass for a node. Bearer tokens and the page's sessions work on every node (they
//! are kept in the space). A client's own marks of a node or a command are dropped: only
//! this node's go on.

use axum::body::{Body, Bytes};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use crate::nodes::{COMMAND, FORWARDED, NODE};

/// The largest request body forwarded: a message's files fit (see `limits`).
pub const MAX_BODY: usize = 64 << 20;

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

/// The answer to a body larger than [`MAX_BODY`].
pub fn too_large() -> ApiError {
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, format!("a request may carry at most {MAX_BODY} bytes"))
}

/// Sends requests on to other nodes, and knows theirs.
pub struct Forwarder {
    http: reqwest::Client,
    /// This node's address, told to the other node.
    me: String,
    /// The nodes' shared secret, and its hash (compared, so no timing tells the secret).
    secret: String,
    secret_hash: String,
}

/// Why a request could not be forwarded.
#[derive(Debug)]
pub struct NotForwarded {
    status: StatusCode,
    message: String,
    /// Whether the other node was not reached at all (the request did not arrive).
    unreached: bool,
}

impl NotForwarded {
    /// Whether the other node was never reached, so sending the request elsewhere cannot
    /// apply it twice.
    pub fn unreached(&self) -> bool {
        self.unreached
    }

    /// The error a client gets, naming the node that holds the space.
    pub fn with_holder(self, holder: &str) -> ApiError {
        ApiError::new(self.status, format!("{} (the space's holder: node {holder})", self.message))
    }
}

impl Forwarder {
    /// A forwarder for the node the others reach at `me` (`http://HOST:PORT`), with the
    /// nodes' `secret`.
    pub fn new(me: String, secret: String) -> anyhow::Result<Forwarder> {
        let http = crate::nodes::client()?;
        let secret_hash = crate::tokens::hash(&secret);
        Ok(Forwarder { http, me, secret, secret_hash })
    }

    /// Whether a request comes from another node (it carries the nodes' secret); one that
    /// says it was forwarded without the secret is refused.
    pub fn sent_by_node(&self, headers: &HeaderMap) -> Result<bool, ApiError> {
        if !headers.contains_key(FORWARDED) {
            return Ok(false);
        }
        let proof = headers.get(NODE).and_then(|v| v.to_str().ok()).map(crate::tokens::hash);
        match proof {
            Some(hash) if hash == self.secret_hash => Ok(true),
            _ => Err(ApiError::new(StatusCode::FORBIDDEN, "only another node of this database may forward requests")),
        }
    }

    /// Sends the request of `parts` and `body` to the node at `to` (`http://HOST:PORT`),
    /// and its answer back.
    pub async fn send(&self, to: &str, parts: &Parts, body: Bytes) -> Result<Response, NotForwarded> {
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let url = format!("{}{path}", to.trim_end_matches('/'));
        let mut headers = parts.headers.clone();
        for name in &HOP_BY_HOP {
            headers.remove(name);
        }
        headers.remove(header::CONTENT_LENGTH);
        // A client's own marks go no further (a request from a node or a command is never
        // forwarded on).
        for mark in [COMMAND, FORWARDED, NODE] {
            headers.remove(mark);
        }
        // The trace goes on at the other node, from this request's span.
        crate::telemetry::http::inject(&mut headers);
        let sent = self
            .http
            .request(parts.method.clone(), &url)
            .headers(headers)
            .header(FORWARDED, &self.me)
            .header(NODE, &self.secret)
            .body(body)
            .send();
        let answer = sent.await.map_err(|error| {
            let outcome = if error.is_connect() { "unreached" } else { "failed" };
            metrics::counter!("trellis_forwarded_requests_total", "outcome" => outcome).increment(1);
            NotForwarded {
                status: StatusCode::BAD_GATEWAY,
                message: format!(
                    "the node holding the space, at {to}, did not answer ({error}); send the request again"
                ),
                unreached: error.is_connect(),
            }
        })?;
        metrics::counter!("trellis_forwarded_requests_total", "outcome" => "answered").increment(1);
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
