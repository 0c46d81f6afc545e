//! One server for the many spaces of a PostgreSQL database (`trellis serve --database`):
//! a request names its space, `/spaces/NAME/...`, and is answered by the space's router,
//! the same one a server of one space has, under that prefix.
//!
//! A space is opened the first time a request names it, which takes its lease in the
//! database (DESIGN.md §10): this node is then its owner, and runs its engine and its
//! conversations until the process stops. When another node holds the lease, the request
//! is forwarded to that node's address, kept from the lease until it runs out or the node
//! stops answering; a forwarded request is never forwarded again, so two nodes that each
//! think the other holds a space cannot bounce it between them. A client's read of the
//! API is answered from this node's copy of the space instead (see [`follower`]), which
//! a request for the space after the lease ran out turns into holding it. When this node's lease is
//! lost (another node took the space over), its copy is dropped and the next request finds
//! the new owner.
//!
//! Opening a space runs the command's own code (its patterns, its seed): the command
//! receives [`OpenRequest`]s on a channel and answers each with a runtime.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use tokio::sync::{mpsc, oneshot};
use tower::ServiceExt as _;
use trellis_runner::storage::StorageError;
use trellis_runner::Runtime;

use super::error::ApiError;
use super::follower::{self, Answer, Follower, Following};
use super::{auth, forward, limits, listen, probes, router, stopped, Base, Options, Role, Server};

/// A request to open space `space` for this node, to hold it or to follow it; the
/// command answers with its runtime, or with [`NoSuchSpace`] for a space the database
/// does not hold.
pub struct OpenRequest {
    /// The space's name.
    pub space: String,
    /// Where this node takes requests (`http://HOST:PORT`), for the space's lease.
    pub addr: String,
    /// Whether to open a copy of the space another node holds, to follow it, rather than
    /// to take its lease.
    pub follow: bool,
    /// Where the space (or why it could not be opened) goes.
    pub reply: oneshot::Sender<anyhow::Result<Opened>>,
}

/// A space the command opened for this node.
pub enum Opened {
    /// This node holds the space now.
    Held(Runtime),
    /// A copy of a space another node holds (its storage refuses every change), and the
    /// feed of the holder's changes, started before the copy read anything.
    Copy(Runtime, Box<trellis_postgres::ChangeFeed>),
}

/// The database holds no space of this name: a server opens only spaces that exist, so a
/// request cannot make one (a space is made by `trellis --space URL token new`, say).
#[derive(Debug)]
pub struct NoSuchSpace(pub String);

impl std::fmt::Display for NoSuchSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (space, name) = (&self.0, crate::program::name());
        write!(
            f,
            "no space {space} in this database; make it with `{name} --space 'postgres://...?space={space}' token new` \
             (or copy one in with `{name} space copy`)"
        )
    }
}

impl std::error::Error for NoSuchSpace {}

/// The longest a space name may be (as the database's).
const MAX_NAME: usize = trellis_postgres::MAX_SPACE_NAME;

/// Where requests for a space go.
#[derive(Clone)]
enum Route {
    /// This node owns the space.
    Here(Server, axum::Router),
    /// Another node does, at `addr`, until `until` (its lease's end when last seen).
    There { holder: String, addr: String, until: Instant },
}

/// What this node knows of one space; locked while the space is looked up.
type Slot = Arc<tokio::sync::Mutex<Option<Route>>>;

/// This node's copy of a space another node holds.
#[derive(Default)]
struct CopySlot {
    /// The highest position of the holder's log its answers to requests forwarded from
    /// here named ([`follower::LOG`]): kept apart from the copy, so that an answer is
    /// noted while the copy is opened or read.
    fence: AtomicU64,
    /// None tried yet, the copy, or when to try again after opening one failed; locked
    /// while the copy is opened.
    copy: tokio::sync::Mutex<Option<Result<Arc<Follower>, Instant>>>,
}

/// How long a name the database holds no space of is answered so without asking it again
/// (a client asking for many names costs the database nothing more).
const MISSING_FOR: Duration = Duration::from_secs(2);

/// The most names remembered as missing at once.
const MAX_MISSING: usize = 4096;

/// How long after a copy could not be opened another try is made (meanwhile reads are
/// forwarded).
const COPY_RETRY: Duration = Duration::from_secs(30);

/// The server's spaces: those it owns and where the others were.
#[derive(Clone)]
struct Spaces(Arc<Inner>);

struct Inner {
    options: Options,
    addr: SocketAddr,
    /// Where the other nodes reach this one.
    advertised: String,
    limits: Arc<limits::RateLimit>,
    opener: mpsc::Sender<OpenRequest>,
    /// A lookup locks its space's slot only: opening one space (a round trip to the
    /// database, or its timeout) holds up no other.
    routes: parking_lot::Mutex<HashMap<String, Slot>>,
    /// The copies of spaces other nodes hold that this node follows.
    copies: parking_lot::Mutex<HashMap<String, Arc<CopySlot>>>,
    /// The names the database lately held no space of, until when they are remembered so.
    missing: parking_lot::Mutex<HashMap<String, Instant>>,
    forward: forward::Forwarder,
}

/// This node among the database's: what it tells the others and the operator.
pub struct Node {
    /// Whether the database answers (for `/readyz`).
    pub ready: probes::Readiness,
    /// The secret the database's nodes share (see [`forward`]).
    pub secret: String,
    /// Where the other nodes reach this one (`http://HOST:PORT`), recorded with each
    /// space it holds; `None`: the address it listens on, which must then be one address.
    pub advertise: Option<String>,
}

/// Serves every space of the database the command's [`OpenRequest`]s open, until the
/// process ends.
pub async fn run_many(options: Options, opener: mpsc::Sender<OpenRequest>, node: Node) -> anyhow::Result<()> {
    let (listener, addr) = listen(&options).await?;
    let advertised = match node.advertise {
        Some(url) => url,
        None if addr.ip().is_unspecified() => anyhow::bail!(
            "--addr {addr} listens on every interface, an address no other node can reach this one at: \
             add --advertise http://THIS-HOST:{} (a name or address the other nodes reach)",
            addr.port()
        ),
        None => format!("http://{addr}"),
    };
    let limits = Arc::new(limits::RateLimit::new(options.rate_per_minute));
    let spaces = Spaces(Arc::new(Inner {
        forward: forward::Forwarder::new(advertised.clone(), node.secret)?,
        options: options.clone(),
        addr,
        advertised,
        limits,
        opener,
        routes: parking_lot::Mutex::default(),
        copies: parking_lot::Mutex::default(),
        missing: parking_lot::Mutex::default(),
    }));
    tokio::spawn(spaces.clone().let_go_of_idle_copies());
    let traced = axum::middleware::from_fn(crate::telemetry::http::traced);
    let router = axum::Router::new()
        .fallback(dispatch)
        .with_state(spaces.clone())
        .layer(traced)
        .merge(probes::routes(node.ready));
    let name = crate::program::name();
    eprintln!("{name} serve: serving the spaces of the database at http://{addr}/spaces/NAME/");
    if spaces.0.advertised != format!("http://{addr}") {
        eprintln!("(other nodes reach this one at {})", spaces.0.advertised);
    }
    eprintln!("(API clients send `Authorization: Bearer TOKEN` from `{name} --space URL?space=NAME token new`)");
    trellis_http::serve(listener, router, options.limits, stopped()).await;
    Ok(())
}

/// Answers a request for `/spaces/NAME/...` through the space's router, here or at its
/// holder. A client's request counts against its rate limit here, on the node it reached;
/// one another node forwarded was counted there.
async fn dispatch(
    State(spaces): State<Spaces>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let Some((space, rest)) = split(request.uri().path()) else {
        return ApiError::not_found("this server serves many spaces: ask for /spaces/NAME/... (NAME: the space's)")
            .into_response();
    };
    let (space, rest) = (space.to_owned(), rest.to_owned());
    let from_node = match spaces.0.forward.sent_by_node(request.headers()) {
        Ok(from_node) => from_node,
        Err(refused) => return refused.into_response(),
    };
    let commanded = from_node && request.headers().contains_key(crate::nodes::COMMAND);
    // A client's request is counted and its origin checked here, on the node it reached
    // (against this node's address): the holder takes a forwarded one as checked.
    if !from_node {
        let listening = auth::Listening { addr: spaces.0.addr, remote: spaces.0.options.allow_remote };
        if let Err(refused) = listening.check(request.headers()).and_then(|()| spaces.0.limits.take(peer.ip())) {
            return refused.into_response();
        }
    }
    // The page's own files are named relative to it: its address ends with a slash.
    if rest.is_empty() && !request.uri().path().ends_with('/') {
        let query = request.uri().query().map(|q| format!("?{q}")).unwrap_or_default();
        return Redirect::permanent(&format!("/spaces/{space}/{query}")).into_response();
    }
    let query = request.uri().query().map(|q| format!("?{q}")).unwrap_or_default();
    let Ok(inner_uri) = format!("/{rest}{query}").parse() else {
        return ApiError::not_found("no such route").into_response();
    };
    // Kept whole, so that a request the holder did not take can go to the next one.
    let (mut parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, forward::MAX_BODY).await else {
        return forward::too_large().into_response();
    };
    parts.extensions.insert(Base(format!("/spaces/{space}")));
    parts.extensions.insert(auth::OriginChecked);
    if commanded {
        parts.extensions.insert(auth::Commanded);
    }
    for attempt in 0..2 {
        match spaces.route(&space, from_node).await {
            Ok(Route::Here(server, router)) => {
                let mut local = Request::from_parts(parts, Body::from(body));
                *local.uri_mut() = inner_uri;
                let mut response = match router.oneshot(local).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                // The forwarding node's copy reads this far before it answers its client again.
                if let Some(logged) = server.runtime().space().log_position().filter(|_| from_node) {
                    response.headers_mut().insert(follower::LOG, logged.into());
                }
                return response;
            }
            Ok(Route::There { holder, addr, .. }) => {
                let mut refused = None;
                if !from_node && Follower::answers(&parts, &rest) {
                    if let Some((copy, fence)) = spaces.copy(&space).await {
                        match copy.answer(&parts, inner_uri.clone(), fence).await {
                            Answer::Copy(response) => return response,
                            Answer::Holder(copys) => refused = copys,
                        }
                    }
                }
                match spaces.0.forward.send(&addr, &parts, body.clone()).await {
                    Ok(response) => {
                        spaces.fence(&space, &response);
                        return response;
                    }
                    // The holder is gone (stopped, or handed the space over): look the
                    // space up again, once.
                    Err(error) => {
                        spaces.forget(&space);
                        if attempt == 1 || !error.unreached() {
                            // The copy's refusal stands when the holder could not be asked.
                            return match refused.filter(|_| error.unreached()) {
                                Some(refused) => refused,
                                None => error.with_holder(&holder).into_response(),
                            };
                        }
                    }
                }
            }
            Err(error) => return error.into_response(),
        }
    }
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the space could not be reached; send the request again")
        .into_response()
}

/// `("NAME", "REST")` of `/spaces/NAME/REST` (`REST` may be empty), if the name is one a
/// space may have.
fn split(path: &str) -> Option<(&str, &str)> {
    let after = path.strip_prefix("/spaces/")?;
    let (space, rest) = after.split_once('/').unwrap_or((after, ""));
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    (!space.is_empty() && space.len() <= MAX_NAME && space.chars().all(allowed)).then_some((space, rest))
}

impl Spaces {
    fn slot(&self, space: &str) -> Slot {
        Arc::clone(self.0.routes.lock().entry(space.to_owned()).or_default())
    }

    /// Forgets where `space` was, so the next request looks it up again.
    fn forget(&self, space: &str) {
        self.0.routes.lock().remove(space);
    }

    /// Where requests for `space` go now, opening it here when no other node holds it.
    async fn route(&self, space: &str, from_node: bool) -> Result<Route, ApiError> {
        let slot = self.slot(space);
        let mut known = slot.lock().await;
        match known.as_ref() {
            Some(Route::Here(server, _)) if server.runtime().space().storage_lost() => {
                tracing::warn!(space, "this node lost the space's lease; it is looked up again");
            }
            Some(Route::There { until, .. }) if *until <= Instant::now() => {}
            // Another node takes this one for the holder: what this node knew is old, and
            // a forwarded request is never forwarded on.
            Some(Route::There { .. }) if from_node => {}
            Some(route) => return Ok(route.clone()),
            None => {}
        }
        *known = None;
        if self.0.missing.lock().get(space).is_some_and(|until| *until > Instant::now()) {
            return Err(ApiError::not_found(NoSuchSpace(space.to_owned()).to_string()));
        }
        let route = self.open(space).await.inspect_err(|error| {
            if error.status() == StatusCode::NOT_FOUND {
                let mut missing = self.0.missing.lock();
                if missing.len() >= MAX_MISSING {
                    missing.clear();
                }
                missing.insert(space.to_owned(), Instant::now() + MISSING_FOR);
            }
        })?;
        if matches!(route, Route::Here(..)) {
            // Held here now: a copy of it has nothing more to answer.
            self.0.copies.lock().remove(space);
        }
        if from_node && matches!(route, Route::There { .. }) {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the space {space} is not held by the node this request was forwarded to; send it again"),
            ));
        }
        *known = Some(route.clone());
        Ok(route)
    }

    /// Opens `space` here, or learns which node holds it.
    async fn open(&self, space: &str) -> Result<Route, ApiError> {
        let unavailable = |message: String| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message);
        let rt = match self.request(space, false).await? {
            Ok(Opened::Held(rt)) => rt,
            Ok(Opened::Copy(..)) => return Err(unavailable(format!("the space {space} was opened as a copy"))),
            Err(error) if error.downcast_ref::<NoSuchSpace>().is_some() => {
                return Err(ApiError::not_found(error.to_string()))
            }
            Err(error) => {
                return match held_elsewhere(&error) {
                    Some(route) => Ok(route),
                    None => Err(unavailable(format!("cannot open the space {space}: {error:#}"))),
                }
            }
        };
        let inner = &self.0;
        let (server, _, _) = Server::new(rt, &inner.options, inner.addr, Arc::clone(&inner.limits), Role::Holder)
            .await
            .map_err(|e| unavailable(format!("cannot serve the space {space}: {e:#}")))?;
        Ok(Route::Here(server.clone(), router(server)))
    }

    /// Asks the command to open `space`, to hold it or (`follow`) to follow it.
    async fn request(&self, space: &str, follow: bool) -> Result<anyhow::Result<Opened>, ApiError> {
        let stopped = || ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping");
        let (reply, answer) = oneshot::channel();
        let request = OpenRequest { space: space.to_owned(), addr: self.0.advertised.clone(), follow, reply };
        self.0.opener.send(request).await.map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())
    }

    /// This node's copy of `space`, which another node holds, opened now if need be, and
    /// how far it must have taken the holder's log before it answers (see [`CopySlot`]);
    /// `None` when there is none to answer from (this node follows as many spaces as it
    /// may, or the copy could not be opened lately).
    async fn copy(&self, space: &str) -> Option<(Arc<Follower>, u64)> {
        let slot = {
            let mut copies = self.0.copies.lock();
            if !copies.contains_key(space) && copies.len() >= follower::MAX_FOLLOWED {
                return None;
            }
            Arc::clone(copies.entry(space.to_owned()).or_default())
        };
        let mut kept = slot.copy.lock().await;
        let copy = match kept.as_ref() {
            Some(Ok(copy)) => Arc::clone(copy),
            Some(Err(retry)) if *retry > Instant::now() => return None,
            _ => {
                let opened = self.open_copy(space).await;
                if let Err(error) = &opened {
                    tracing::warn!(space, %error, "no copy of the space to read from; its reads go to its holder");
                }
                *kept = Some(opened.map(Arc::new).map_err(|_| Instant::now() + COPY_RETRY));
                kept.as_ref().and_then(|copy| copy.as_ref().ok()).cloned()?
            }
        };
        Some((copy, slot.fence.load(Ordering::Acquire)))
    }

    /// Notes how far the holder's log went when it answered a request forwarded from
    /// here, for this node's copy of `space`, if it keeps (or is opening) one.
    fn fence(&self, space: &str, response: &Response) {
        let Some(logged) = follower::logged(response) else { return };
        if let Some(slot) = self.0.copies.lock().get(space) {
            slot.fence.fetch_max(logged, Ordering::AcqRel);
        }
    }

    async fn open_copy(&self, space: &str) -> anyhow::Result<Follower> {
        let (rt, feed) = match self.request(space, true).await {
            Ok(Ok(Opened::Copy(rt, feed))) => (rt, feed),
            Ok(Ok(Opened::Held(_))) => anyhow::bail!("the space was held, not followed"),
            Ok(Err(error)) => return Err(error),
            Err(_) => anyhow::bail!("the server is stopping"),
        };
        let following = Following::start(rt.clone(), *feed)?;
        let inner = &self.0;
        let role = Role::Copy(following.clone());
        let (server, _, _) = Server::new(rt, &inner.options, inner.addr, Arc::clone(&inner.limits), role).await?;
        Ok(Follower::new(server, following))
    }

    /// Lets go of the copies nobody read lately, for as long as the server runs.
    async fn let_go_of_idle_copies(self) {
        let mut every = tokio::time::interval(follower::IDLE / 5);
        loop {
            every.tick().await;
            let now = Instant::now();
            self.0.copies.lock().retain(|_, slot| match slot.copy.try_lock() {
                Ok(kept) => match kept.as_ref() {
                    Some(Ok(copy)) => !copy.unwanted(COPY_RETRY),
                    // A copy that could not be opened is tried again by the next read.
                    Some(Err(retry)) => *retry > now,
                    None => false,
                },
                Err(_) => true, // being opened
            });
        }
    }
}

/// The route to the node that holds the space, when `error` says another one does and
/// where it takes requests; a holder that takes none is an error to answer.
fn held_elsewhere(error: &anyhow::Error) -> Option<Route> {
    let owned = error.chain().find_map(|cause| cause.downcast_ref::<StorageError>())?;
    let StorageError::Owned { holder, addr: Some(addr), expires_in_ms, .. } = owned else { return None };
    let until = Instant::now() + Duration::from_millis(*expires_in_ms);
    Some(Route::There { holder: holder.clone(), addr: addr.clone(), until })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_space_is_named_by_the_first_segment_after_spaces() {
        assert_eq!(super::split("/spaces/team-a/api/chat"), Some(("team-a", "api/chat")));
        assert_eq!(super::split("/spaces/team-a/"), Some(("team-a", "")));
        assert_eq!(super::split("/spaces/team-a"), Some(("team-a", "")));
        for bad in ["/spaces//api", "/spaces/a%20b/api", "/api/chat", "/spacesx/a/api"] {
            assert_eq!(super::split(bad), None, "{bad}");
        }
    }
}
