//! Bearer tokens for the server's API, kept in the space (`trellis token new|list|revoke`).
//!
//! The space keeps only each token's SHA-256, so a copy of the space file (a backup, a
//! synced folder) gives nobody access; the token itself is shown once, when it is made.
//! The server looks tokens up in the space on every request, so one revoked while it runs
//! stops working at once, and the event streams opened with it end.
//!
//! A page signed in with a token (`/spaces/NAME/?token=`) gets a session the space keeps
//! too, as a hash beside the token's: it holds on whichever node holds the space next,
//! and ends with its token.

use ring::digest;
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use trellis_plugins::signing::encode_hex;
use trellis_runner::{Cell, Link, Observation, Path, Runtime};

/// The document of the space that holds the tokens' records.
const TOKENS_DOC: &str = "trellis-serve-tokens";

/// How a bearer token starts, so that people (and secret scanners) can tell one.
const PREFIX: &str = "trellis_";

/// The longest name a token may have.
const MAX_NAME: usize = 100;

/// The document of the space that holds the sessions opened with its tokens.
const SESSIONS_DOC: &str = "trellis-serve-sessions";

/// The most sessions a space keeps; past it, the oldest is forgotten (its page signs in
/// again).
pub const MAX_SESSIONS: usize = 256;

/// The most sessions one token keeps open: signing in again and again with one token
/// forgets its own oldest sessions, never those of other tokens.
pub const MAX_SESSIONS_PER_TOKEN: usize = 16;

/// How long a session lasts, in seconds (the cookie says the same).
pub const SESSION_SECONDS: u64 = 7 * 24 * 3600;

/// A session as the space keeps it: its hash, its token's, and when it began.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct SessionRecord {
    sha256: String,
    token_sha256: String,
    #[serde(default)]
    created_at: u64,
}

impl SessionRecord {
    /// Whether it still signs in at `now` (milliseconds), as far as its age goes.
    fn fresh(&self, now: u64) -> bool {
        now.saturating_sub(self.created_at) < SESSION_SECONDS * 1000
    }
}

/// A token as the space keeps it: never the token, only its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// A short id to name it by (`trellis token revoke ID`): the hash's first 12 hex digits.
    pub id: String,
    /// What it is for, as given to `token new`.
    pub name: String,
    /// The SHA-256 of the token, in hex.
    pub sha256: String,
    /// When it was made, in milliseconds since the Unix epoch.
    pub created_at: u64,
}

/// Why a token operation failed.
#[derive(Debug)]
pub enum TokenError {
    /// The name is empty, too long, or holds control characters.
    BadName(String),
    /// No token has that id.
    Unknown(String),
    /// The system's random source failed.
    Random,
    /// The space failed.
    Space(trellis_runner::Error),
}

impl std::fmt::Display for TokenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenError::BadName(why) => write!(f, "the token's name {why}"),
            TokenError::Unknown(id) => {
                write!(f, "no token has the id `{id}`; `{} token list` shows them", crate::program::name())
            }
            TokenError::Random => f.write_str("the system's random source failed; try again"),
            TokenError::Space(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for TokenError {}

impl From<trellis_runner::Error> for TokenError {
    fn from(e: trellis_runner::Error) -> Self {
        TokenError::Space(e)
    }
}

fn cell() -> Cell<Vec<TokenRecord>> {
    Cell::from_link(Link::new(TOKENS_DOC, Path::root()))
}

/// The tokens' records (an empty list in a space that never had one).
pub fn list(rt: &Runtime) -> Vec<TokenRecord> {
    cell().get(rt).unwrap_or_default()
}

/// Makes a token named `name`: stores its hash and returns the record and the token,
/// which is not kept anywhere else.
pub fn create(rt: &Runtime, name: &str) -> Result<(TokenRecord, String), TokenError> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME || name.chars().any(char::is_control) {
        return Err(TokenError::BadName(format!(
            "must be 1 to {MAX_NAME} characters without control characters (it was {} long)",
            name.chars().count()
        )));
    }
    let token = format!("{PREFIX}{}", random_hex(32)?);
    let sha256 = hash(&token);
    let record = TokenRecord { id: sha256[..12].to_string(), name: name.to_string(), sha256, created_at: now_ms() };
    rt.transact(|tx| {
        let mut all = list_in(tx);
        all.push(record.clone());
        cell().set(tx, all)
    })?;
    Ok((record, token))
}

/// Revokes the token with id `id`; returns its record.
pub fn revoke(rt: &Runtime, id: &str) -> Result<TokenRecord, TokenError> {
    let all = list(rt);
    let Some(at) = all.iter().position(|t| t.id == id) else { return Err(TokenError::Unknown(id.to_string())) };
    let removed = all[at].clone();
    rt.transact(|tx| {
        let mut now = list_in(tx);
        now.retain(|t| t.id != id);
        cell().set(tx, now)
    })?;
    Ok(removed)
}

fn list_in(tx: &trellis_runner::Tx) -> Vec<TokenRecord> {
    cell().get(tx).unwrap_or_default()
}

/// The record of `token`, if it is a token of this space that was not revoked.
pub fn verify(rt: &Runtime, token: &str) -> Option<TokenRecord> {
    if !token.starts_with(PREFIX) {
        return None;
    }
    let sha256 = hash(token);
    list(rt).into_iter().find(|t| t.sha256 == sha256)
}

/// Whether a token with this SHA-256 is one of the space's (not revoked).
pub fn is_current(rt: &Runtime, sha256: &str) -> bool {
    list(rt).iter().any(|t| t.sha256 == sha256)
}

fn sessions() -> Cell<Vec<SessionRecord>> {
    Cell::from_link(Link::new(SESSIONS_DOC, Path::root()))
}

/// Opens a session for a page signed in with the token of `record`; returns the session
/// id, which the space keeps only as a hash.
pub fn open_session(rt: &Runtime, record: &TokenRecord) -> Result<String, TokenError> {
    let session = random_hex(32)?;
    let now = now_ms();
    let kept = SessionRecord { sha256: hash(&session), token_sha256: record.sha256.clone(), created_at: now };
    rt.transact(|tx| {
        let tokens: Vec<String> = list_in(tx).into_iter().map(|t| t.sha256).collect();
        let mut all: Vec<SessionRecord> = sessions().get(tx).unwrap_or_default();
        // Those of revoked tokens and the expired go; then this token's oldest, then the
        // oldest of all, so that there is room.
        all.retain(|s| s.fresh(now) && tokens.contains(&s.token_sha256));
        // Oldest first, as they were opened.
        let mine = all.iter().filter(|s| s.token_sha256 == kept.token_sha256).count();
        let mut forget = (mine + 1).saturating_sub(MAX_SESSIONS_PER_TOKEN);
        all.retain(|s| {
            let go = forget > 0 && s.token_sha256 == kept.token_sha256;
            forget -= usize::from(go);
            !go
        });
        let over = (all.len() + 1).saturating_sub(MAX_SESSIONS);
        all.drain(..over);
        all.push(kept.clone());
        sessions().set(tx, all)
    })?;
    Ok(session)
}

/// The SHA-256 of the token session `session` was opened with, while both stand.
pub fn session_token(rt: &Runtime, session: &str) -> Option<String> {
    let sha256 = hash(session);
    let all: Vec<SessionRecord> = sessions().get(rt).unwrap_or_default();
    let session = all.into_iter().find(|s| s.sha256 == sha256).filter(|s| s.fresh(now_ms()))?;
    is_current(rt, &session.token_sha256).then_some(session.token_sha256)
}

/// Calls `changed` after each commit that writes the tokens (one made or revoked), for as
/// long as the observation returned is kept.
pub fn observe(rt: &Runtime, changed: impl Fn() + Send + Sync + 'static) -> Observation {
    rt.observe(&Link::new(TOKENS_DOC, Path::root()), move |_| {
        changed();
        true
    })
}

/// The SHA-256 of `text`, in hex.
pub fn hash(text: &str) -> String {
    encode_hex(digest::digest(&digest::SHA256, text.as_bytes()).as_ref())
}

/// `bytes` random bytes from the system's source, in hex.
pub fn random_hex(bytes: usize) -> Result<String, TokenError> {
    let mut buffer = vec![0u8; bytes];
    SystemRandom::new().fill(&mut buffer).map_err(|_| TokenError::Random)?;
    Ok(encode_hex(&buffer))
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A token as listed: never the token, nor its hash.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TokenInfo {
    /// Its id (`trellis token revoke ID`).
    pub id: String,
    /// What it is for.
    pub name: String,
    /// When it was made, in milliseconds since the Unix epoch.
    pub created_at: u64,
}

impl From<TokenRecord> for TokenInfo {
    fn from(record: TokenRecord) -> Self {
        TokenInfo { id: record.id, name: record.name, created_at: record.created_at }
    }
}

/// A token just made: the only time the token itself is shown.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NewToken {
    /// Its id.
    pub id: String,
    /// What it is for.
    pub name: String,
    /// The token, for `Authorization: Bearer TOKEN`.
    pub token: String,
}

/// Makes a token named `name` (see [`create`]), as shown once.
pub fn make(rt: &Runtime, name: &str) -> Result<NewToken, TokenError> {
    let (record, token) = create(rt, name)?;
    Ok(NewToken { id: record.id, name: record.name, token })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_keeps_at_most_its_share_of_sessions_and_old_ones_end() {
        let rt = Runtime::in_memory();
        let (one, _) = create(&rt, "one").unwrap();
        let (two, _) = create(&rt, "two").unwrap();
        let other = open_session(&rt, &two).unwrap();
        let first = open_session(&rt, &one).unwrap();
        let last: Vec<String> = (0..MAX_SESSIONS_PER_TOKEN).map(|_| open_session(&rt, &one).unwrap()).collect();
        assert_eq!(session_token(&rt, &first), None, "its token's oldest session was forgotten");
        assert!(last.iter().all(|s| session_token(&rt, s).as_deref() == Some(one.sha256.as_str())));
        assert_eq!(session_token(&rt, &other).as_deref(), Some(two.sha256.as_str()), "another token's stays");

        let old = SessionRecord { sha256: hash("old"), token_sha256: two.sha256.clone(), created_at: 0 };
        rt.transact(|tx| sessions().set(tx, vec![old.clone()])).unwrap();
        assert_eq!(session_token(&rt, "old"), None, "a week-old session ends");
        revoke(&rt, &two.id).unwrap();
        assert_eq!(session_token(&rt, &other), None);
    }
}
