//! Who may use the server: requests from other origins are refused, and every API request
//! needs a session cookie (which the page gets by exchanging the one-time token printed
//! at start) or a bearer token from `trellis token new`.
//!
//! - **Origins.** The `Host` must name the server (a loopback name and the bound port,
//!   unless it binds elsewhere), which stops DNS rebinding; an `Origin`, when a browser
//!   sends one, must be the server's own, and `Sec-Fetch-Site` must not say `cross-site`.
//!   A page elsewhere can therefore neither read nor write anything here.
//! - **The one-time token.** Printed in the start URL; `GET /?token=...` trades it for a
//!   session cookie (`HttpOnly`, `SameSite=Strict`) and redirects to `/`, so the token
//!   leaves the address bar and cannot be used again.
//! - **Sessions** live in memory: a restart prints a new URL.
//! - **Writes are JSON.** A POST, PUT or PATCH without `Content-Type: application/json` is
//!   refused (415): a browser sends that type elsewhere only after a preflight, which this
//!   server never grants, so no write from another site rests on `SameSite` alone (DELETE
//!   is always preflighted).

use std::collections::HashSet;
use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use parking_lot::Mutex;

use super::error::ApiError;
use super::{Base, Server};
use crate::tokens;

/// The session cookie's name.
pub const COOKIE: &str = "trellis_session";

/// The server's secrets: the one-time token (until used) and the sessions it opened, both
/// kept as hashes.
pub struct Auth {
    one_time: Mutex<Option<String>>,
    sessions: Mutex<HashSet<String>>,
    /// The bearer token of this process's hand-off file, for `trellis` commands on the
    /// same space (see `crate::handoff`).
    local: String,
}

impl Auth {
    /// Makes the one-time token and the hand-off token; returns the state and both (the
    /// one-time token for the start URL, the other for the hand-off file).
    pub fn new() -> Result<(Auth, String, String), tokens::TokenError> {
        let token = tokens::random_hex(24)?;
        let local = tokens::random_hex(32)?;
        let auth = Auth {
            one_time: Mutex::new(Some(tokens::hash(&token))),
            sessions: Mutex::default(),
            local: tokens::hash(&local),
        };
        Ok((auth, token, local))
    }

    /// Trades the one-time token for a new session id; `None` if it is wrong or used.
    fn exchange(&self, token: &str) -> Option<String> {
        let mut one_time = self.one_time.lock();
        if one_time.as_deref() != Some(tokens::hash(token).as_str()) {
            return None;
        }
        *one_time = None;
        self.new_session()
    }

    /// A new session id, remembered (as its hash) for this process's life.
    fn new_session(&self) -> Option<String> {
        let session = tokens::random_hex(32).ok()?;
        self.sessions.lock().insert(tokens::hash(&session));
        Some(session)
    }

    fn has_session(&self, session: &str) -> bool {
        self.sessions.lock().contains(&tokens::hash(session))
    }
}

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find_map(|(key, value)| (key == name).then_some(value))
}

/// Refuses requests whose `Host` does not name this server, and requests a page on
/// another origin makes (403). Applies to every route, the page's too, but not to one
/// whose origin was checked already ([`OriginChecked`]).
pub async fn same_origin(State(server): State<Server>, request: Request, next: Next) -> Response {
    if request.extensions().get::<OriginChecked>().is_some() {
        return next.run(request).await;
    }
    match server.listening().check(request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refused) => refused.into_response(),
    }
}

/// A request extension: the request's origin was checked already, by the node of a
/// server of many spaces it reached (a request another node forwarded was checked there,
/// against that node's own address).
#[derive(Debug, Clone, Copy)]
pub struct OriginChecked;

/// A request extension: the request is a `trellis` command's on this space, proven by the
/// nodes' secret (see `crate::nodes`): it acts as the hand-off token does.
#[derive(Debug, Clone, Copy)]
pub struct Commanded;

/// Where a server listens, to tell its own `Host` and origin from others'.
#[derive(Debug, Clone, Copy)]
pub struct Listening {
    /// The address bound.
    pub addr: SocketAddr,
    /// Whether it was bound for other machines (`--allow-remote`).
    pub remote: bool,
}

impl Listening {
    /// Whether a request's `Host` names this server: the bound address, or a loopback
    /// name, with the bound port (or, bound for other machines, any name with that port).
    fn is_own_host(&self, host: &str) -> bool {
        let Some((name, port)) = host.rsplit_once(':') else { return false };
        if port != self.addr.port().to_string() {
            return false;
        }
        let bound = SocketAddr::new(self.addr.ip(), 0).to_string();
        let bound = bound.strip_suffix(":0").unwrap_or(&bound);
        // Host names are case-insensitive (RFC 9110), and a client may send `LOCALHOST`.
        let name = name.to_ascii_lowercase();
        self.remote || name == bound || matches!(name.as_str(), "127.0.0.1" | "localhost" | "[::1]")
    }

    /// Refuses (403) a request whose `Host` is not this server's, or that a page on
    /// another origin or site made.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let forbidden = |why: String| ApiError::new(StatusCode::FORBIDDEN, why);
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
        if !self.is_own_host(host) {
            return Err(forbidden(format!(
                "the Host `{host}` is not this server's ({}); open the address `{} serve` printed",
                self.addr,
                crate::program::name()
            )));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or_default();
            if !origin.eq_ignore_ascii_case(&format!("http://{host}")) {
                return Err(forbidden(format!("requests from other origins ({origin}) are refused")));
            }
        }
        if headers.get("sec-fetch-site").is_some_and(|site| site == "cross-site" || site == "same-site") {
            return Err(forbidden("requests from other sites are refused".into()));
        }
        Ok(())
    }
}

/// Counts the request against its client's rate limit (429 when spent).
pub async fn rate_limit(
    State(server): State<Server>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    match server.limits().take(peer.ip()) {
        Ok(()) => next.run(request).await,
        Err(refused) => refused.into_response(),
    }
}

/// What a request signed in with: a stream it opens lasts only as long as this does.
#[derive(Debug, Clone)]
pub enum Credential {
    /// A session cookie from the sign-in link (it lasts as long as the process).
    Session,
    /// The hand-off file's token (the same).
    Local,
    /// A bearer token of the space, by its SHA-256: revoking it ends its streams.
    Token(String),
}

impl Credential {
    /// Resolves once the credential no longer signs anyone in (its token was revoked);
    /// never for a session or the hand-off token.
    pub async fn revoked(self, server: Server) {
        let Credential::Token(sha256) = self else { return std::future::pending().await };
        let changed = std::sync::Arc::new(tokio::sync::Notify::new());
        let notify = changed.clone();
        // Held while this waits: the stream going drops it.
        let _observation = tokens::observe(server.runtime(), move || notify.notify_one());
        while tokens::is_current(server.runtime(), &sha256) {
            changed.notified().await;
        }
    }
}

/// Lets an API request through with a session cookie or a bearer token of the space
/// (401 otherwise), with its [`Credential`] among its extensions.
pub async fn require_auth(State(server): State<Server>, mut request: Request, next: Next) -> Response {
    if request.extensions().get::<Commanded>().is_some() {
        request.extensions_mut().insert(Credential::Local);
        return next.run(request).await;
    }
    let headers = request.headers();
    let session = cookie(headers, COOKIE).and_then(|session| match server.auth().has_session(session) {
        true => Some(Credential::Session),
        // A session a token opened: kept in the space, it ends with the token.
        false => tokens::session_token(server.runtime(), session).map(Credential::Token),
    });
    let bearer = || {
        let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
        let token = value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer "))?.trim();
        if tokens::hash(token) == server.auth().local {
            return Some(Credential::Local);
        }
        tokens::verify(server.runtime(), token).map(|record| Credential::Token(record.sha256))
    };
    let credential = session.or_else(bearer);
    if let Some(credential) = credential {
        request.extensions_mut().insert(credential);
        return next.run(request).await;
    }
    let name = crate::program::name();
    let how = match request.extensions().get::<Base>() {
        // A server of many spaces prints no sign-in link.
        Some(Base(base)) if !base.is_empty() => format!("open {base}/?token=TOKEN (it sets a session cookie)"),
        _ => format!("open the URL `{name} serve` printed (it sets a session cookie)"),
    };
    let message = format!(
        "sign in: {how}, or send `Authorization: Bearer TOKEN`, with a token of this space from `{name} token new`"
    );
    ApiError::new(StatusCode::UNAUTHORIZED, message).into_response()
}

/// Refuses an API write (POST, PUT, PATCH) whose `Content-Type` is not
/// `application/json` (415), a write without a body too: a form or a text body is what a
/// page elsewhere may send without a preflight.
pub async fn require_json(request: Request, next: Next) -> Response {
    let write = matches!(*request.method(), Method::POST | Method::PUT | Method::PATCH);
    let given = request.headers().get(header::CONTENT_TYPE).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let json = given
        .as_deref()
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"));
    if !write || json {
        return next.run(request).await;
    }
    let given = given.map_or_else(|| "none".to_string(), |v| format!("`{}`", v.escape_debug()));
    ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        format!(
            "send `Content-Type: application/json` with every POST, PUT and PATCH, even one without a body \
             (send `{{}}`); this request's was {given}"
        ),
    )
    .into_response()
}

/// `GET /?token=...`: trades the one-time token for a session cookie and sends the page
/// to `/`; a wrong or used token is refused (401), saying how to get a new one. A server of
/// many spaces prints no sign-in link: there, the page at `/spaces/NAME/?token=` takes a
/// bearer token of the space, and the cookie is for that space's pages only.
pub fn exchange(server: &Server, token: &str, base: &Base) -> Response {
    let one_time = server.auth().exchange(token);
    let session = match (one_time, base.0.is_empty()) {
        (Some(session), _) => Some(session),
        (None, false) => {
            match tokens::verify(server.runtime(), token).map(|t| tokens::open_session(server.runtime(), &t)) {
                Some(Ok(session)) => Some(session),
                Some(Err(error)) => {
                    let message = format!("could not open a session in the space ({error}); try again in a moment");
                    return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message).into_response();
                }
                None => None,
            }
        }
        (None, true) => None,
    };
    let Some(session) = session else {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            format!(
                "this sign-in link was used already or is wrong; restart `{name} serve` for a new one, \
                 or use a bearer token from `{name} token new`",
                name = crate::program::name()
            ),
        )
        .into_response();
    };
    let home = format!("{}/", base.0);
    // A server of many spaces keeps its sessions in the space, for as long as they last.
    let lasts = match base.0.is_empty() {
        true => String::new(),
        false => format!("; Max-Age={}", tokens::SESSION_SECONDS),
    };
    let cookie = format!("{COOKIE}={session}; HttpOnly; SameSite=Strict; Path={home}{lasts}");
    let mut response = Redirect::to(&home).into_response();
    match HeaderValue::from_str(&cookie) {
        Ok(value) => {
            response.headers_mut().insert(header::SET_COOKIE, value);
            response
        }
        Err(_) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "could not make the session cookie").into_response(),
    }
}
