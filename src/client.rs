//! [`Remote`]: a `trellis` command talking to the `trellis serve` that holds its space,
//! through the server's API: with the hand-off file's token (see `crate::handoff`) for a
//! space file, with the database's secret (see `crate::nodes`) for a space in PostgreSQL.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context as _};
use eventsource_stream::Eventsource as _;
use futures::StreamExt as _;
use reqwest::Method;
use serde_json::Value;

use crate::handoff::Handoff;

/// How long the first request may take before the server counts as gone.
const PROBE: Duration = Duration::from_secs(3);

/// The server that holds a space.
pub struct Remote {
    base: reqwest::Url,
    auth: Auth,
    http: reqwest::Client,
}

/// How a command proves itself to the server.
enum Auth {
    /// The hand-off file's token.
    Bearer(String),
    /// The secret of the database's nodes.
    Node(String),
}

impl Remote {
    /// The server holding the space at `space`, if its hand-off file names one that
    /// answers with the file's token.
    pub async fn connect(space: &Path) -> Option<Remote> {
        let handoff = Handoff::read(space)?;
        let base = reqwest::Url::parse(&handoff.url).ok()?;
        // The token goes only to a server on this machine, whatever the file says.
        let host = base.host_str().map(|h| h.trim_start_matches('[').trim_end_matches(']'));
        let loopback = host.and_then(|h| h.parse::<std::net::IpAddr>().ok()).is_some_and(|ip| ip.is_loopback());
        if base.scheme() != "http" || !loopback {
            return None;
        }
        // Loopback, always: a proxy from the environment must not see the token.
        let http = reqwest::Client::builder().no_proxy().build().ok()?;
        let remote = Remote { base, auth: Auth::Bearer(handoff.token), http };
        let probe = tokio::time::timeout(PROBE, remote.call(Method::GET, &["api", "patterns"], None)).await;
        matches!(probe, Ok(Ok(_))).then_some(remote)
    }

    /// The node at `addr` (from the space's lease) holding the space `url` names.
    pub async fn holder(url: &trellis_postgres::SpaceUrl, addr: &str) -> anyhow::Result<Remote> {
        let nodes = url.with_space("nodes")?;
        let secret = tokio::task::spawn_blocking(move || trellis_postgres::cluster_secret(&nodes)).await??;
        let mut base = reqwest::Url::parse(addr)
            .ok()
            .filter(|base| matches!(base.scheme(), "http" | "https"))
            .with_context(|| format!("the node holding the space gave the address {addr:?}, not an http URL"))?;
        base.set_path(&format!("/spaces/{}", url.space()));
        Ok(Remote { base, auth: Auth::Node(secret), http: crate::nodes::client()? })
    }

    /// Why a command that needs the space itself cannot run here, `what` naming it.
    pub fn needs_the_space(&self, what: &str) -> anyhow::Error {
        let name = crate::program::name();
        match &self.auth {
            Auth::Bearer(_) => anyhow::anyhow!(
                "{what} needs the space, which {name} serve at {} holds: stop the server first (Ctrl-C), or use its page",
                self.base
            ),
            Auth::Node(_) => anyhow::anyhow!(
                "{what} needs the space, which the node at {} holds for the database's servers: use its page \
                 ({}/), or run it where `{name} serve --database` runs",
                self.base.origin().ascii_serialization(),
                self.base
            ),
        }
    }

    /// `request`, signed as this command proves itself, carrying its trace.
    fn signed(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        use crate::nodes::{A_COMMAND, COMMAND, FORWARDED, NODE};
        // The command's trace goes on in the server.
        let request = request.headers(crate::telemetry::http::trace_headers());
        match &self.auth {
            Auth::Bearer(token) => request.bearer_auth(token),
            Auth::Node(secret) => request.header(FORWARDED, A_COMMAND).header(NODE, secret).header(COMMAND, "1"),
        }
    }

    /// Where the server is.
    pub fn url(&self) -> &str {
        self.base.as_str()
    }

    fn url_of(&self, segments: &[&str]) -> anyhow::Result<reqwest::Url> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| anyhow::anyhow!("the server's address {} has no path", self.base))?
            .extend(segments);
        Ok(url)
    }

    /// Calls the API: `segments` make the path (each escaped); the JSON answer (`null` for
    /// none), or the server's refusal as the error.
    pub async fn call(&self, method: Method, segments: &[&str], body: Option<&Value>) -> anyhow::Result<Value> {
        let mut request = self.signed(self.http.request(method, self.url_of(segments)?));
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach {} serve at {}", crate::program::name(), self.base))?;
        let status = response.status();
        let text = response.text().await.context("the server's answer was cut off")?;
        let json: Value = if text.is_empty() { Value::Null } else { serde_json::from_str(&text)? };
        if !status.is_success() {
            bail!("{}", json["error"].as_str().unwrap_or(status.as_str()));
        }
        Ok(json)
    }

    /// Follows the conversation's events (its state, then its changes) until the state
    /// satisfies `done`, for at most `timeout`; returns that state.
    pub async fn follow_chat(&self, timeout: Duration, done: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
        let response = self
            .signed(self.http.get(self.url_of(&["api", "chat", "events"])?))
            .send()
            .await
            .with_context(|| format!("cannot reach {} serve at {}", crate::program::name(), self.base))?;
        if !response.status().is_success() {
            bail!("{} serve refused to send the chat's events ({})", crate::program::name(), response.status());
        }
        let mut events = response.bytes_stream().eventsource();
        let mut state: Option<Value> = None;
        let follow = async {
            while let Some(event) = events.next().await {
                let event = event.map_err(|e| anyhow::anyhow!("the chat's events broke off: {e}"))?;
                match event.event.as_str() {
                    "chat" => state = Some(serde_json::from_str(&event.data)?),
                    "change" => match state.as_mut() {
                        Some(state) => apply_change(state, serde_json::from_str(&event.data)?)?,
                        None => bail!("{} serve sent a change of the chat before the chat", crate::program::name()),
                    },
                    _ => continue,
                }
                if let Some(state) = state.as_ref().filter(|state| done(state)) {
                    return Ok(state.clone());
                }
            }
            bail!("{} serve stopped sending the chat's events", crate::program::name())
        };
        match tokio::time::timeout(timeout, follow).await {
            Ok(state) => state,
            Err(_) => bail!(
                "the reply did not finish within {} s; it goes on in {} serve",
                timeout.as_secs_f64(),
                crate::program::name()
            ),
        }
    }
}

/// Applies a `change` event of the chat to its `state` (see `ChatChange`): the messages
/// from `from` on, and each field it carries.
fn apply_change(state: &mut Value, change: Value) -> anyhow::Result<()> {
    let Value::Object(mut change) = change else { bail!("a change of the chat is not a JSON object") };
    let from = change.remove("from").and_then(|from| usize::try_from(from.as_u64()?).ok());
    let (Some(from), Some(Value::Array(new)), Some(Value::Array(messages))) =
        (from, change.remove("messages"), state.get_mut("messages"))
    else {
        bail!("a change of the chat does not say which messages changed")
    };
    if from > messages.len() {
        bail!("a change of the chat starts at message {from} of {}", messages.len());
    }
    messages.truncate(from);
    messages.extend(new);
    for (key, value) in change {
        state[key.as_str()] = value;
    }
    Ok(())
}
