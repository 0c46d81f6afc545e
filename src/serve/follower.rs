//! Following a space another node holds (DESIGN.md §10): this node keeps a copy of it,
//! read from the database and kept up to date from the holder's change log, and answers
//! a client's reads and event streams from that copy instead of forwarding them.
//!
//! The copy takes each change whole (`Runtime::apply_stored`) on a thread of its own, fed
//! by a `ChangeFeed` started before the copy read anything, so nothing made durable in
//! between is missed. It changes nothing itself: every change is forwarded to the holder.
//!
//! What a copy answers: a client's `GET` (or `HEAD`) of the API (`/api/...`) with a
//! credential (a bearer token or a session cookie), the event streams among them. The
//! page's own files, its sign-in (which opens a session in the space), MCP (whose
//! sessions live on one node, and whose calls change the space) and every write go to
//! the holder. A request the copy cannot sign in (a session or token made on the holder a
//! moment ago) goes to the holder too.
//!
//! Reading what one wrote: each answer the holder gives to a forwarded request says how
//! far its change log went (`x-trellis-log`), and a read the copy answers after it waits
//! until the copy has taken the log that far ([`CATCH_UP`] at most, else it is
//! forwarded). So a client that changed the space through this node reads its change
//! here. A change made through another node shows once its wake-up arrives (a few
//! milliseconds).
//!
//! A copy nobody asked for in [`IDLE`], with no answer still being sent (an event
//! stream), is let go of, and a node keeps at most [`MAX_FOLLOWED`]: each holds a
//! connection of its own for the feed. A copy whose feed could not read the holder's log
//! for [`STALE`] forwards its reads (it may lag), and one that stays so is let go of.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use futures::StreamExt as _;
use tokio::sync::watch;
use tower::ServiceExt as _;
use trellis_postgres::{ChangeFeed, LastRead};
use trellis_runner::Runtime;

use super::Server;

/// How long a read waits for the copy to take the changes its client made through this
/// node before it is forwarded to the holder instead.
pub const CATCH_UP: Duration = Duration::from_secs(1);

/// How long a copy nobody reads is kept.
pub const IDLE: Duration = Duration::from_secs(300);

/// The most spaces a node follows at once; reads of others are forwarded.
pub const MAX_FOLLOWED: usize = 64;

/// The header of the holder's answer to a forwarded request: how far its change log went.
pub const LOG: &str = "x-trellis-log";

/// The header of an answer a copy gave: how far it had taken the holder's log.
pub const COPY: &str = "x-trellis-copy";

/// How long after its feed last read the holder's log a copy still answers: a copy whose
/// feed cannot read the log (the database is unreachable) forwards its reads, and one
/// that stays so is let go of.
pub const STALE: Duration = Duration::from_secs(3);

/// How often the thread taking changes looks whether the copy is still wanted.
const STOP_CHECK: Duration = Duration::from_millis(200);

/// How far a copy has taken the holder's change log; a server of a copy keeps it, and
/// the copy is updated for as long as one is kept.
#[derive(Clone)]
pub struct Following {
    taken: watch::Receiver<u64>,
    read: LastRead,
}

impl Following {
    /// Starts taking `feed`'s changes into `rt`, the copy it was started before.
    pub fn start(rt: Runtime, feed: ChangeFeed) -> std::io::Result<Following> {
        let read = feed.last_read();
        let (taken, following) = watch::channel(feed.began());
        std::thread::Builder::new().name("trellis-follow".to_owned()).spawn(move || {
            // Until every server of the copy is gone (the last reader, or event stream).
            while !taken.is_closed() {
                match feed.recv_timeout(STOP_CHECK) {
                    Ok(Some(change)) => {
                        rt.apply_stored(change.docs);
                        taken.send_replace(change.seq);
                        metrics::counter!("trellis_followed_changes_total").increment(1);
                    }
                    Ok(None) => {}
                    // The feed says so once per failed attempt, and tries again.
                    Err(error) => {
                        tracing::warn!(%error, "a followed space's changes could not be read");
                        std::thread::sleep(STOP_CHECK);
                    }
                }
            }
        })?;
        Ok(Following { taken: following, read })
    }

    /// How far the copy has taken the holder's log.
    pub fn taken(&self) -> u64 {
        *self.taken.borrow()
    }

    /// How long ago the copy last read the holder's log to its end.
    pub fn stale_for(&self) -> Duration {
        self.read.elapsed()
    }

    /// Whether the copy has taken the log up to `seq`, waiting [`CATCH_UP`] at most.
    async fn reached(&self, seq: u64) -> bool {
        let mut following = self.taken.clone();
        let reached = tokio::time::timeout(CATCH_UP, following.wait_for(|taken| *taken >= seq)).await;
        matches!(reached, Ok(Ok(_)))
    }
}

/// A node's copy of one space another node holds, with the server that answers from it.
pub struct Follower {
    router: axum::Router,
    following: Following,
    /// When a request last came for it.
    used: parking_lot::Mutex<Instant>,
    /// How many of its answers are still being sent (event streams, mostly).
    sending: Arc<AtomicUsize>,
}

/// One answer of a copy being sent: counted while its body lives.
struct Sending(Arc<AtomicUsize>);

impl Drop for Sending {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How far the holder's log went when it answered a request forwarded from here
/// ([`LOG`]), if it said.
pub fn logged(response: &Response) -> Option<u64> {
    response.headers().get(LOG).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok())
}

impl Follower {
    /// The copy that `server` serves, which `following` keeps up to date.
    pub fn new(server: Server, following: Following) -> Follower {
        let router = super::router(server);
        Follower { router, following, used: parking_lot::Mutex::new(Instant::now()), sending: Arc::default() }
    }

    /// Whether a client's request of `parts` for `rest` (the path after the space's
    /// prefix) is one a copy answers: a read of the API that carries a credential (one
    /// without is refused by the holder, and opens no copy).
    pub fn answers(parts: &Parts, rest: &str) -> bool {
        let signed = parts.headers.contains_key(header::AUTHORIZATION) || parts.headers.contains_key(header::COOKIE);
        matches!(parts.method, Method::GET | Method::HEAD) && rest.starts_with("api/") && signed
    }

    /// Whether the copy may be let go of: nobody asked for it in [`IDLE`] and none of its
    /// answers is still being sent, or its feed could not read the holder's log for
    /// `stale`.
    pub fn unwanted(&self, stale: Duration) -> bool {
        let idle = self.used.lock().elapsed() > IDLE && self.sending.load(Ordering::Acquire) == 0;
        idle || self.following.stale_for() > stale
    }

    /// The copy's answer to the request of `parts` (at `uri` in the space), once it has
    /// taken the holder's log up to `fence`.
    pub async fn answer(&self, parts: &Parts, uri: Uri, fence: u64) -> Answer {
        *self.used.lock() = Instant::now();
        let following = &self.following;
        if following.stale_for() > STALE {
            tracing::debug!("the copy could not read the holder's log lately; the read is forwarded");
            return Answer::Holder(None);
        }
        if !following.reached(fence).await {
            tracing::debug!("the copy has not caught up with the holder in time; the read is forwarded");
            return Answer::Holder(None);
        }
        let mut request = Request::from_parts(parts.clone(), Body::empty());
        *request.uri_mut() = uri;
        let mut response = match self.router.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        response.headers_mut().insert(COPY, HeaderValue::from(following.taken()));
        if response.status() == StatusCode::UNAUTHORIZED {
            return Answer::Holder(Some(response));
        }
        metrics::counter!("trellis_follower_reads_total").increment(1);
        self.sending.fetch_add(1, Ordering::AcqRel);
        let sending = Sending(Arc::clone(&self.sending));
        Answer::Copy(response.map(|body| {
            // Counted until the body is sent or dropped (an event stream: until it ends).
            Body::from_stream(body.into_data_stream().map(move |chunk| {
                let _counted = &sending;
                chunk
            }))
        }))
    }
}

/// What a copy makes of a request.
pub enum Answer {
    /// Its answer.
    Copy(Response),
    /// The holder must answer: the copy has not caught up with this node's changes in
    /// time, or cannot sign the request in (the copy's refusal, given when the holder
    /// cannot be reached).
    Holder(Option<Response>),
}
