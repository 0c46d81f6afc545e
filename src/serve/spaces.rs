//! One server for the many spaces of a PostgreSQL database (`trellis serve --database`):
//! a request names its space, `/spaces/NAME/...`, and is answered by the space's router,
//! the same one a server of one space has, under that prefix.
//!
//! A space is opened the first time a request names it, which takes its lease in the
//! database (DESIGN.md §10): this node is then its owner, and runs its engine and its
//! conversations until the process stops. When another node holds the lease, the request
//! is forwarded to that node's address, kept from the lease until it runs out or the node
//! stops answering; a forwarded request is never forwarded again, so two nodes that each
//! think the other holds a space cannot bounce it between them. When this node's lease is
//! lost (another node took the space over), its copy is dropped and the next request finds
//! the new owner.
//!
//! Opening a space runs the command's own code (its patterns, its seed): the command
//! receives [`OpenRequest`]s on a channel and answers each with a runtime.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use tokio::sync::{mpsc, oneshot, Mutex};
use tower::ServiceExt as _;
use trellis_runner::storage::StorageError;
use trellis_runner::Runtime;

use super::error::ApiError;
use super::{forward, limits, listen, probes, router, stopped, Base, Options, Server};

/// A request to open space `space` for this node; the command answers with its runtime.
pub struct OpenRequest {
    /// The space's name.
    pub space: String,
    /// Where this node takes requests (`http://HOST:PORT`), for the space's lease.
    pub addr: String,
    /// Where the runtime (or why the space could not be opened) goes.
    pub reply: oneshot::Sender<anyhow::Result<Runtime>>,
}

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

/// The server's spaces: those it owns and where the others were.
#[derive(Clone)]
struct Spaces(Arc<Inner>);

struct Inner {
    options: Options,
    addr: SocketAddr,
    limits: Arc<limits::RateLimit>,
    opener: mpsc::Sender<OpenRequest>,
    /// One lookup at a time: opening a space twice at once would take its lease twice.
    routes: Mutex<HashMap<String, Route>>,
    forward: forward::Forwarder,
}

/// Serves every space of the database the command's [`OpenRequest`]s open, until the
/// process ends; `ready` says whether the database answers (for `/readyz`).
pub async fn run_many(
    options: Options,
    opener: mpsc::Sender<OpenRequest>,
    ready: probes::Readiness,
) -> anyhow::Result<()> {
    let (listener, addr) = listen(&options).await?;
    let limits = Arc::new(limits::RateLimit::new(options.rate_per_minute));
    let spaces = Spaces(Arc::new(Inner {
        forward: forward::Forwarder::new(addr)?,
        options: options.clone(),
        addr,
        limits,
        opener,
        routes: Mutex::default(),
    }));
    let router = axum::Router::new().fallback(dispatch).with_state(spaces).merge(probes::routes(ready));
    let name = crate::program::name();
    eprintln!("{name} serve: serving the spaces of the database at http://{addr}/spaces/NAME/");
    eprintln!("(API clients send `Authorization: Bearer TOKEN` from `{name} --space URL?space=NAME token new`)");
    trellis_http::serve(listener, router, options.limits, stopped()).await;
    Ok(())
}

/// Answers a request for `/spaces/NAME/...` through the space's router, here or at its
/// owner.
async fn dispatch(State(spaces): State<Spaces>, mut request: Request) -> Response {
    let Some((space, rest)) = split(request.uri().path()) else {
        return ApiError::not_found("this server serves many spaces: ask for /spaces/NAME/... (NAME: the space's)")
            .into_response();
    };
    let (space, rest) = (space.to_owned(), rest.to_owned());
    // The page's own files are named relative to it: its address ends with a slash.
    if rest.is_empty() && !request.uri().path().ends_with('/') {
        let query = request.uri().query().map(|q| format!("?{q}")).unwrap_or_default();
        return Redirect::permanent(&format!("/spaces/{space}/{query}")).into_response();
    }
    request.extensions_mut().insert(Base(format!("/spaces/{space}")));
    let forwarded = forward::was_forwarded(request.headers());
    match spaces.route(&space, forwarded).await {
        Ok(Route::Here(_, router)) => {
            let query = request.uri().query().map(|q| format!("?{q}")).unwrap_or_default();
            match format!("/{rest}{query}").parse() {
                Ok(uri) => *request.uri_mut() = uri,
                Err(_) => return ApiError::not_found("no such route").into_response(),
            }
            match router.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            }
        }
        Ok(Route::There { holder, addr, .. }) => match spaces.0.forward.send(&addr, request).await {
            Ok(response) => response,
            Err(error) => {
                // The owner may be gone: the next request looks the space up again.
                spaces.0.routes.lock().await.remove(&space);
                error.with_holder(&holder).into_response()
            }
        },
        Err(error) => error.into_response(),
    }
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
    /// Where requests for `space` go now, opening it here when no other node holds it.
    async fn route(&self, space: &str, forwarded: bool) -> Result<Route, ApiError> {
        let mut routes = self.0.routes.lock().await;
        match routes.get(space) {
            Some(Route::Here(server, _)) if server.runtime().space().storage_lost() => {
                tracing::warn!(space, "this node lost the space's lease; it is looked up again");
                routes.remove(space);
            }
            Some(Route::There { until, .. }) if *until <= Instant::now() => {
                routes.remove(space);
            }
            Some(route) => return Ok(route.clone()),
            None => {}
        }
        let route = self.open(space).await?;
        if forwarded && matches!(route, Route::There { .. }) {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("the space {space} is not held by the node this request was forwarded to; send it again"),
            ));
        }
        routes.insert(space.to_owned(), route.clone());
        Ok(route)
    }

    /// Opens `space` here, or learns which node holds it.
    async fn open(&self, space: &str) -> Result<Route, ApiError> {
        let unavailable = |message: String| ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message);
        let (reply, answer) = oneshot::channel();
        let request = OpenRequest { space: space.to_owned(), addr: format!("http://{}", self.0.addr), reply };
        let stopped = || unavailable("the server is stopping".to_owned());
        self.0.opener.send(request).await.map_err(|_| stopped())?;
        let opened = answer.await.map_err(|_| stopped())?;
        let rt = match opened {
            Ok(rt) => rt,
            Err(error) => {
                return match held_elsewhere(&error) {
                    Some(route) => Ok(route),
                    None => Err(unavailable(format!("cannot open the space {space}: {error:#}"))),
                }
            }
        };
        let inner = &self.0;
        let (server, _, _) = Server::new(rt, &inner.options, inner.addr, Arc::clone(&inner.limits))
            .await
            .map_err(|e| unavailable(format!("cannot serve the space {space}: {e:#}")))?;
        Ok(Route::Here(server.clone(), router(server)))
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
        for bad in ["/spaces//api", "/spaces/a%20b/api", "/api/chat", "/spaces/../x"] {
            assert_eq!(super::split(bad), None, "{bad}");
        }
    }
}
