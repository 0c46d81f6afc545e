//! Signing in to an MCP server that wants OAuth 2.1, as MCP's authorization spec says,
//! with rmcp's OAuth client: the authorization server found from the server's
//! protected-resource metadata (RFC 9728) and its own (RFC 8414); the client registered
//! dynamically (RFC 7591); the authorization code with PKCE, through the browser, to a
//! redirect on this machine's loopback; the `resource` parameter (RFC 8707).
//!
//! [`login`] prints the URL to open and waits for the browser to come back to `127.0.0.1`
//! here; with the browser on another machine, the person pastes the address it ended on
//! (a page that did not load) instead. The tokens go into the user's sign-in
//! file ([`SignIns`], `$XDG_CONFIG_HOME/trellis/mcp-sign-ins.json`, readable by the user
//! only), keyed by the server's URL, so a token is only ever sent to the server it was
//! issued for; never into the space, a log or an error. A connection to a server with a
//! sign-in sends its token (`authorized`): refreshed before it expires and once on a
//! 401, one process at a time; when that fails, the person signs in again. [`logout`]
//! forgets the sign-in.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rmcp::transport::auth::{
    AuthClient, AuthError, AuthorizationManager, AuthorizationRequest, AuthorizationSession, CredentialRefreshGuard,
    CredentialStore, StoredCredentials,
};
use serde::{Deserialize, Serialize};

use super::config::{ServerSpec, Transport};

/// The largest sign-in file read.
const MAX_FILE: u64 = 1 << 20;
/// The file's name in the user's configuration directory.
const FILE_NAME: &str = "mcp-sign-ins.json";

/// Why signing in (or out) failed.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    /// The server is started as a command: it has no sign-in.
    #[error("`{0}` is a server Trellis starts as a command; only servers reached by URL sign in")]
    NotHttp(String),
    /// No configuration directory to keep the sign-in in.
    #[error("cannot find where to keep sign-ins: set XDG_CONFIG_HOME or HOME")]
    NoConfigDir,
    /// The sign-in file cannot be read or written.
    #[error("the sign-in file {path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The OAuth flow failed.
    #[error("signing in to `{server}` failed: {message}")]
    Flow {
        /// The server.
        server: String,
        /// What went wrong (never a token).
        message: String,
    },
    /// Nobody came back from the browser in time.
    #[error("no sign-in came back within {0:?}; run it again, and open the URL it prints")]
    Timeout(Duration),
}

/// Where a server's sign-in stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignIn {
    /// No sign-in is kept for it.
    None,
    /// Signed in; the token is good for this many seconds more (when the server said).
    SignedIn {
        /// Seconds until the access token expires, if known.
        expires_in: Option<u64>,
        /// Whether an expired token can be refreshed without the person.
        refreshable: bool,
    },
}

impl std::fmt::Display for SignIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SignIn::None => f.write_str("not signed in"),
            SignIn::SignedIn { expires_in: Some(0), refreshable: true } => {
                f.write_str("signed in (the token expired; it is refreshed at the next call)")
            }
            SignIn::SignedIn { expires_in: Some(0), refreshable: false } => {
                f.write_str("signed in, but the token expired: sign in again")
            }
            SignIn::SignedIn { expires_in: Some(seconds), .. } => write!(f, "signed in (token good for {seconds} s)"),
            SignIn::SignedIn { expires_in: None, .. } => f.write_str("signed in"),
        }
    }
}

/// The user's sign-in file: each server's stored credentials, by its URL.
#[derive(Debug, Clone)]
pub struct SignIns {
    path: PathBuf,
    /// Read-modify-write of the file within this process, one at a time.
    writing: Arc<Mutex<()>>,
}

#[derive(Default, Serialize, Deserialize)]
struct Stored {
    #[serde(default)]
    servers: BTreeMap<String, StoredCredentials>,
}

impl SignIns {
    /// The user's file (`$XDG_CONFIG_HOME/trellis/mcp-sign-ins.json`).
    pub fn user() -> Result<SignIns, SignInError> {
        let dir = trellis_runner::dirs::config_dir().ok_or(SignInError::NoConfigDir)?;
        Ok(SignIns::at(dir.join(FILE_NAME)))
    }

    /// The file at `path`.
    pub fn at(path: PathBuf) -> SignIns {
        SignIns { path, writing: Arc::default() }
    }

    fn failed(&self, message: impl std::fmt::Display) -> SignInError {
        SignInError::File { path: self.path.clone(), message: message.to_string() }
    }

    fn read(&self) -> Result<Stored, SignInError> {
        let file = match std::fs::File::open(&self.path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Stored::default()),
            Err(error) => return Err(self.failed(error)),
        };
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::Read::take(file, MAX_FILE + 1), &mut text)
            .map_err(|e| self.failed(e))?;
        if text.len() as u64 > MAX_FILE {
            return Err(self.failed(format!("it is larger than {MAX_FILE} bytes")));
        }
        // What the error says of the text is a position, never the text (it holds tokens).
        serde_json::from_str(&text).map_err(|e| self.failed(format!("it is not a sign-in file (line {})", e.line())))
    }

    fn change(&self, server: &str, credentials: Option<StoredCredentials>) -> Result<(), SignInError> {
        let _one = self.writing.lock();
        let mut stored = self.read()?;
        match credentials {
            Some(credentials) => stored.servers.insert(server.to_string(), credentials),
            None => stored.servers.remove(server),
        };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| self.failed(e))?;
        }
        let text = serde_json::to_vec_pretty(&stored).map_err(|e| self.failed(e))?;
        trellis_runner::dirs::replace(&self.path, &text, true).map_err(|e| self.failed(e))
    }

    /// The credentials kept for the server at `url`.
    fn credentials(&self, url: &str) -> Result<Option<StoredCredentials>, SignInError> {
        Ok(self.read()?.servers.remove(url))
    }

    /// Where the sign-in of the server at `url` stands.
    pub fn state(&self, url: &str) -> Result<SignIn, SignInError> {
        let Some(credentials) = self.credentials(url)? else { return Ok(SignIn::None) };
        let Some(token) = credentials.token_response.as_ref() else { return Ok(SignIn::None) };
        // Read as the wire has it (`expires_in` seconds, `refresh_token`), and kept here.
        let token = serde_json::to_value(token).unwrap_or_default();
        let refreshable = token["refresh_token"].is_string();
        let expires_in = match (token["expires_in"].as_u64(), credentials.token_received_at) {
            (Some(lasts), Some(received)) => Some(lasts.saturating_sub(now().saturating_sub(received))),
            _ => None,
        };
        Ok(SignIn::SignedIn { expires_in, refreshable })
    }

    /// Forgets the sign-in of the server at `url`; whether there was one.
    pub fn forget(&self, url: &str) -> Result<bool, SignInError> {
        let had = self.credentials(url)?.is_some();
        if had {
            self.change(url, None)?;
        }
        Ok(had)
    }

    /// The server at `url`'s credentials in this file, as rmcp keeps them.
    fn store(&self, url: &str) -> FileStore {
        FileStore { file: self.clone(), url: url.to_string() }
    }
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// One server's entry of a [`SignIns`] file.
struct FileStore {
    file: SignIns,
    url: String,
}

fn store_error(error: SignInError) -> AuthError {
    AuthError::CredentialStoreError(error.to_string())
}

#[async_trait::async_trait]
impl CredentialStore for FileStore {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        self.file.credentials(&self.url).map_err(store_error)
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        self.file.change(&self.url, Some(credentials)).map_err(store_error)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.file.change(&self.url, None).map_err(store_error)
    }

    /// One refresh at a time across processes (a lock file beside the sign-ins): a server
    /// that rotates refresh tokens refuses the second use of one, so two chats refreshing
    /// at once would otherwise send the person to sign in again.
    async fn acquire_refresh_guard(&self) -> Result<Option<CredentialRefreshGuard>, AuthError> {
        let mut path = self.file.path.clone().into_os_string();
        path.push(".lock");
        let locking = tokio::task::spawn_blocking(move || {
            let mut options = std::fs::OpenOptions::new();
            options.create(true).truncate(false).write(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let file = options.open(&path)?;
            file.lock()?;
            Ok::<_, std::io::Error>(file)
        });
        let failed = |e: &dyn std::fmt::Display| AuthError::CredentialStoreError(format!("the sign-ins' lock: {e}"));
        let file = locking.await.map_err(|e| failed(&e))?.map_err(|e| failed(&e))?;
        // Unlocked when the file closes, with the guard.
        Ok(Some(CredentialRefreshGuard::new(file)))
    }
}

/// An OAuth manager for the server at `url`, reaching it (and its authorization server)
/// with `client`, keeping credentials in `file`.
async fn manager(url: &str, client: reqwest_mcp::Client, file: &SignIns) -> Result<AuthorizationManager, AuthError> {
    // The user named this server: an address on this machine or network is theirs to use.
    let mut manager = AuthorizationManager::new_allowing_private_addresses(url).await?;
    manager.with_client(client)?;
    manager.set_credential_store(file.store(url));
    Ok(manager)
}

/// What an OAuth error says, for a person: never a token (rmcp's errors name none).
fn said(error: &AuthError) -> String {
    match error {
        AuthError::AuthorizationRequired => "the server wants a sign-in".to_string(),
        other => other.to_string(),
    }
}

/// Signs in to the server of `spec`: prints the URL to open with `show`, waits up to
/// `timeout` for the browser to come back (or for the address it ended on to come through
/// `pasted`), and keeps the tokens in `file`.
pub async fn login(
    spec: &ServerSpec,
    file: &SignIns,
    (timeout, pasted): (Duration, tokio::sync::mpsc::Receiver<String>),
    show: impl FnOnce(&str),
) -> Result<SignIn, SignInError> {
    let server = spec.name.as_str();
    let flow = |message: String| SignInError::Flow { server: server.to_string(), message };
    let Transport::Http { url, ca, oauth, .. } = &spec.transport else {
        return Err(SignInError::NotHttp(server.into()));
    };
    let client = super::http::client(ca.as_deref()).map_err(flow)?;
    let mut manager = manager(url, client, file).await.map_err(|e| flow(said(&e)))?;
    let found = manager.resolve_metadata().await.map_err(|e| {
        flow(format!("cannot find its authorization server ({}); is it an MCP server that uses OAuth?", said(&e)))
    })?;
    manager.set_metadata(found.metadata);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| flow(format!("cannot listen on loopback for the browser's return: {e}")))?;
    let port = listener.local_addr().map_err(|e| flow(e.to_string()))?.port();
    let redirect = format!("http://127.0.0.1:{port}/callback");
    let mut request = AuthorizationRequest::new(&redirect).with_client_name("Trellis").with_scopes(&oauth.scopes);
    if let Some(id) = &oauth.client_id {
        request = request.with_preregistered_client(id);
    }
    if let Some(secret) = &oauth.client_secret {
        request = request.with_client_secret(secret);
    }
    if let Some(document) = &oauth.client_metadata_url {
        request = request.with_client_metadata_url(document);
    }
    let session = AuthorizationSession::new(manager, request).await.map_err(|(_, e)| flow(said(&e)))?;
    show(&session.auth_url);
    let back =
        tokio::time::timeout(timeout, returned(listener, pasted)).await.map_err(|_| SignInError::Timeout(timeout))?;
    let back = back.map_err(flow)?;
    session.handle_callback_url(&back).await.map_err(|e| flow(said(&e)))?;
    file.state(url)
}

/// Waits for the browser's request to the loopback redirect, or a pasted address of it;
/// the URL it came to. The browser is told it may close the tab.
async fn returned(
    listener: tokio::net::TcpListener,
    mut pasted: tokio::sync::mpsc::Receiver<String>,
) -> Result<String, String> {
    use axum::extract::RawQuery;
    let (sender, receiver) = tokio::sync::mpsc::channel::<String>(1);
    let app = axum::Router::new().route(
        "/callback",
        axum::routing::get(move |RawQuery(query): RawQuery| {
            let sender = sender.clone();
            async move {
                let query = query.unwrap_or_default();
                let _ = sender.try_send(format!("http://127.0.0.1/callback?{query}"));
                let page = "Trellis has the answer: you may close this tab and go back to it.";
                axum::response::Html(format!("<!doctype html><title>Trellis</title><p>{page}</p>"))
            }
        }),
    );
    let mut receiver = receiver;
    let serving = axum::serve(listener, app);
    let from_paste = async {
        while let Some(line) = pasted.recv().await {
            let line = line.trim();
            if line.contains("code=") || line.contains("error=") {
                return line.to_string();
            }
        }
        std::future::pending().await
    };
    let back = tokio::select! {
        served = serving => return Err(format!("the loopback listener stopped: {served:?}")),
        back = receiver.recv() => back.ok_or("the loopback listener stopped")?,
        back = from_paste => back,
    };
    let parsed = reqwest_mcp::Url::parse(&back).map_err(|e| format!("the browser came back to a bad URL: {e}"))?;
    let said = |key: &str| parsed.query_pairs().find(|(k, _)| k == key).map(|(_, v)| v.into_owned());
    match said("error") {
        // The authorization server's words reach a terminal: escaped by the caller.
        Some(error) => Err(format!(
            "the authorization server refused: {error}{}",
            said("error_description").map(|d| format!(" ({d})")).unwrap_or_default()
        )),
        None => Ok(back),
    }
}

/// The HTTP client for the server at `url` that sends its sign-in's token (refreshing
/// it), or `None` when no sign-in is kept for it.
pub(super) async fn authorized(
    url: &str,
    client: reqwest_mcp::Client,
    file: &SignIns,
) -> Result<Option<AuthClient<reqwest_mcp::Client>>, String> {
    if file.state(url).map_err(|e| e.to_string())? == SignIn::None {
        return Ok(None);
    }
    let mut manager = manager(url, client.clone(), file).await.map_err(|e| said(&e))?;
    let usable = manager.initialize_from_store().await.map_err(|e| said(&e))?;
    Ok(usable.then(|| AuthClient::new(client, manager)))
}

/// Forgets the sign-in of the server at `url` in `file`; whether there was one.
pub fn logout(url: &str, file: &SignIns) -> Result<bool, SignInError> {
    file.forget(url)
}
