//! Live charms for MCP clients: the subscriptions of the current revision (2026-07-28,
//! `subscriptions/listen`: one long request whose filter names list changes and resource
//! URIs, cancelled to end) and, for the revisions today's hosts speak, `resources/subscribe`
//! and the list changes sent after `notifications/initialized`.

use std::collections::HashMap;

use futures::stream::{SelectAll, Stream, StreamExt};
use parking_lot::Mutex;
use rmcp::model::{ResourceUpdatedNotificationParam, SubscriptionFilter};
use rmcp::service::{SubscriptionContext, SubscriptionSendError};
use rmcp::{ErrorData, Peer, RoleServer};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use super::budget::Held;
use super::watch::Target;
use super::{TrellisMcp, CHARM_URI};

/// How many subscriptions may be open at once: each resource of a `subscriptions/listen`
/// stream, the stream itself, and each `resources/subscribe`. Counted per session over
/// stdio, and over Streamable HTTP (where the current revision has no sessions) for all of
/// the server's clients together, each of which may hold at most [`SESSION_SHARE`].
///
/// The list changes a session of an earlier revision gets after `notifications/initialized`
/// are not counted: they cost a receiver of the one shared signal of the charms (less than
/// the session itself), and counting them let clients that only initialise fill the budget,
/// so that nobody else's `resources/subscribe` got through.
pub const MAX_SUBSCRIPTIONS: usize = 128;

/// How many of [`MAX_SUBSCRIPTIONS`] one client over Streamable HTTP may hold (a session of
/// an earlier revision, or one `subscriptions/listen` stream): no single client fills the
/// budget. A process that opens many sessions, each holding its share, still can; what
/// it holds is let go when its sessions end.
pub const SESSION_SHARE: usize = 16;

/// A change a subscription reports.
#[derive(Clone)]
enum Change {
    /// The charms changed, so the tools and the resources did.
    Lists,
    /// The charm at this URI changed.
    Resource(String),
}

/// What the server accepts of a `subscriptions/listen` filter: the list changes, and the
/// URIs that name a charm, as many as the budget has room for beside the stream. Only the
/// first [`MAX_SUBSCRIPTIONS`] URIs are looked at: no more could be honoured, and a
/// client's list costs no more than that to read.
pub(super) fn accept(server: &TrellisMcp, requested: &SubscriptionFilter) -> SubscriptionFilter {
    let room = server.budget.left().min(server.share).saturating_sub(1);
    let (mut uris, mut charms): (Vec<String>, Vec<Target>) = (Vec::new(), Vec::new());
    for uri in requested.resource_subscriptions.iter().flatten().take(MAX_SUBSCRIPTIONS) {
        if uris.len() >= room {
            break;
        }
        if uris.contains(uri) {
            continue;
        }
        if let Some(id) = server.charm_of(uri) {
            uris.push(uri.clone());
            charms.push(Target::Charm(id));
        }
    }
    // Set aside now what the stream will hold: the client may ask for the next one as soon
    // as it reads this answer. When another stream took the room meanwhile, only the
    // list changes are honoured (and the stream is refused if even that has no room).
    if !server.budget.reserve(1 + uris.len()) {
        uris.clear();
        charms.clear();
        server.budget.reserve(1);
    }
    // The changes from here on are the stream's, though its task starts only after the
    // acknowledgement has gone out and the client may already have changed a charm.
    let lists = requested.tools_list_changed == Some(true) || requested.resources_list_changed == Some(true);
    server.watches.watch_ahead(&server.rt, lists.then_some(Target::Charms).into_iter().chain(charms));
    SubscriptionFilter::builder().tools_list_changed().resources_list_changed().resource_subscriptions(uris).build()
}

/// Runs one `subscriptions/listen` stream until the client cancels it or leaves; what it
/// watched is let go when it returns.
pub(super) async fn listen(server: &TrellisMcp, context: SubscriptionContext) -> Result<(), ErrorData> {
    let accepted = context.accepted().clone();
    let mut uris = accepted.resource_subscriptions.clone().unwrap_or_default();
    uris.sort();
    uris.dedup();
    // What `accept` set aside for this stream, free again once the request is cancelled.
    let _held = server.budget.claim(1 + uris.len(), &context.request_context().ct).ok_or_else(too_many)?;
    let mut changes = SelectAll::new();
    let (tools, resources) = (accepted.tools_list_changed == Some(true), accepted.resources_list_changed == Some(true));
    if tools || resources {
        changes.push(changes_of(server.watches.watch_from_ahead(&server.rt, Target::Charms), Change::Lists));
    }
    for uri in uris {
        let Some(id) = server.charm_of(&uri) else { continue };
        let receiver = server.watches.watch_from_ahead(&server.rt, Target::Charm(id));
        changes.push(changes_of(receiver, Change::Resource(uri)));
    }
    let sink = context.sink();
    loop {
        let change = tokio::select! {
            () = context.cancelled() => return Ok(()),
            change = changes.next() => change,
        };
        let sent: Result<(), SubscriptionSendError> = match change {
            // Nothing to watch (all the charms it named are gone): wait for the client.
            None => {
                context.cancelled().await;
                return Ok(());
            }
            Some(Change::Lists) => {
                async {
                    if tools {
                        sink.notify_tool_list_changed().await?;
                    }
                    if resources {
                        sink.notify_resource_list_changed().await?;
                    }
                    Ok::<(), SubscriptionSendError>(())
                }
                .await
            }
            Some(Change::Resource(uri)) => sink.notify_resource_updated(uri).await,
        };
        if let Err(error) = sent {
            tracing::debug!(%error, "the subscription cannot reach its client; it ends");
            return Ok(());
        }
    }
}

/// The changes a receiver signals, each reported as `change`.
fn changes_of(receiver: watch::Receiver<()>, change: Change) -> impl Stream<Item = Change> + Unpin + Send {
    Box::pin(futures::stream::unfold(receiver, move |mut receiver| {
        let change = change.clone();
        async move {
            receiver.changed().await.ok()?;
            Some((change, receiver))
        }
    }))
}

/// Why a subscription is refused when [`MAX_SUBSCRIPTIONS`] are open.
fn too_many() -> ErrorData {
    ErrorData::invalid_request(
        format!(
            "too many subscriptions are open (at most {MAX_SUBSCRIPTIONS}); end one (cancel a subscriptions/listen \
             request, or resources/unsubscribe) before opening another"
        ),
        None,
    )
}

/// Why a session's subscription is refused when it holds its `share` already.
fn too_many_here(share: usize) -> ErrorData {
    ErrorData::invalid_request(
        format!(
            "this session has {share} subscriptions open, as many as one client may; resources/unsubscribe one \
             before subscribing to another"
        ),
        None,
    )
}

/// The subscriptions of one session of an earlier revision: a task each that notifies
/// the client, stopped by `resources/unsubscribe` or when the session ends.
#[derive(Default)]
pub(super) struct Legacy(Mutex<HashMap<Target, (AbortHandle, Option<Held>)>>);

impl Legacy {
    /// Sends `notifications/resources/updated` for `uri` (a charm's) after each change.
    pub(super) fn subscribe(&self, server: &TrellisMcp, uri: String, peer: Peer<RoleServer>) -> Result<(), ErrorData> {
        let id = server.charm_of(&uri).ok_or_else(|| {
            ErrorData::resource_not_found(format!("no charm at `{uri}`; resources/list shows them"), None)
        })?;
        self.start(server, Target::Charm(id), Some(server.share), move || {
            let (peer, uri) = (peer.clone(), uri.clone());
            async move { peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri)).await }
        })
    }

    /// Sends `notifications/tools/list_changed` and `notifications/resources/list_changed`
    /// after each change of the charms.
    pub(super) fn lists(&self, server: &TrellisMcp, peer: Peer<RoleServer>) -> Result<(), ErrorData> {
        self.start(server, Target::Charms, None, move || {
            let peer = peer.clone();
            async move {
                peer.notify_tool_list_changed().await?;
                peer.notify_resource_list_changed().await
            }
        })
    }

    /// Stops the notifications of `uri`, if it was subscribed to.
    pub(super) fn unsubscribe(&self, uri: &str) {
        if let Some(id) = uri.strip_prefix(CHARM_URI) {
            if let Some((task, _held)) = self.0.lock().remove(&Target::Charm(id.to_string())) {
                task.abort();
            }
        }
    }

    /// Runs `notify` after each change of `target`, unless the session already watches it.
    /// With a `share`, it counts in the budget, and the session may hold at most `share`
    /// such subscriptions.
    fn start<N, F>(&self, server: &TrellisMcp, target: Target, share: Option<usize>, notify: N) -> Result<(), ErrorData>
    where
        N: Fn() -> F + Send + 'static,
        F: std::future::Future<Output = Result<(), rmcp::ServiceError>> + Send,
    {
        let mut tasks = self.0.lock();
        if tasks.contains_key(&target) {
            return Ok(());
        }
        let held = match share {
            None => None,
            Some(share) if tasks.values().filter(|(_, held)| held.is_some()).count() >= share => {
                return Err(too_many_here(share))
            }
            Some(_) => Some(server.budget.take(1).ok_or_else(too_many)?),
        };
        let mut changes = server.watches.watch(&server.rt, target.clone());
        let task = tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                if let Err(error) = notify().await {
                    tracing::debug!(%error, "the client is gone; no more notifications");
                    break;
                }
            }
        });
        tasks.insert(target, (task.abort_handle(), held));
        Ok(())
    }
}

impl Drop for Legacy {
    fn drop(&mut self) {
        for (task, _held) in self.0.get_mut().values() {
            task.abort();
        }
    }
}
