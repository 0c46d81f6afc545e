//! Which space, in which database: the URL a user gives, and who is asking.
//!
//! A space in PostgreSQL is named by a libpq-style URL with one extra query parameter,
//! `space`. Everything else is left exactly as given for the driver to read, so the
//! driver's own options (`host=/socket/dir`, `sslmode`, `connect_timeout`, several hosts)
//! keep working. The URL is taken apart the way the driver takes it apart (credentials up
//! to the first `@`), so the password it would use is the one hidden when the URL is shown.

use std::fmt;

/// The longest space name accepted.
pub const MAX_SPACE_NAME: usize = 128;

const SCHEMES: [&str; 2] = ["postgres://", "postgresql://"];

/// What is shown in place of a password.
const HIDDEN: &str = "***";

/// A space kept in a PostgreSQL database:
/// `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE?space=NAME` (or `postgresql://`).
///
/// Its [`Display`](fmt::Display) never shows the password.
///
/// ```
/// use trellis_postgres::SpaceUrl;
/// let url = SpaceUrl::parse("postgres://app:secret@db.internal/trellis?sslmode=disable&space=team-a").unwrap();
/// assert_eq!(url.space(), "team-a");
/// assert_eq!(url.to_string(), "postgres://app:***@db.internal/trellis?sslmode=disable&space=team-a");
/// ```
#[derive(Clone)]
pub struct SpaceUrl {
    space: String,
    config: postgres::Config,
    shown: String,
    /// `shown` up to the space's name (`...?space=`), for [`SpaceUrl::with_space`].
    shown_base: String,
}

/// Why a text is not a space URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// The text does not start with `postgres://` or `postgresql://`.
    #[error("{shown} is not a PostgreSQL URL; it must start with postgres:// or postgresql://")]
    NotPostgres {
        /// The text, its password hidden if it has one.
        shown: String,
    },
    /// The URL names no space.
    #[error("{shown} names no space; add ?space=NAME (or &space=NAME after other parameters)")]
    MissingSpace {
        /// The URL, its password hidden.
        shown: String,
    },
    /// The URL names a space twice.
    #[error("{shown} names the space more than once; keep one space=NAME")]
    SpaceTwice {
        /// The URL, its password hidden.
        shown: String,
    },
    /// The space name is empty, too long or has characters a space name may not have.
    #[error(
        "the space name {name:?} is not allowed; a space name is 1 to {MAX_SPACE_NAME} letters, digits, '.', '_' or '-'"
    )]
    BadSpace {
        /// The name given.
        name: String,
    },
    /// The PostgreSQL driver does not understand the rest of the URL.
    #[error("{shown} is not a connection URL PostgreSQL's driver understands: {reason}")]
    Connection {
        /// The URL, its password hidden.
        shown: String,
        /// What the driver said.
        reason: String,
    },
}

impl SpaceUrl {
    /// Reads a space URL: the `space` query parameter names the space, every other part
    /// goes to the PostgreSQL driver unchanged.
    pub fn parse(text: &str) -> Result<SpaceUrl, UrlError> {
        if !SpaceUrl::is_postgres(text) {
            return Err(UrlError::NotPostgres { shown: redact(text) });
        }
        let parts = Parts::split(text);
        let mut space = None;
        let mut kept = Vec::new();
        for param in parts.query.iter().flat_map(|query| query.split('&')) {
            match param.split_once('=') {
                Some(("space", _)) if space.is_some() => return Err(UrlError::SpaceTwice { shown: redact(text) }),
                Some(("space", name)) => space = Some(name),
                _ => kept.push(param),
            }
        }
        let Some(space) = space else {
            return Err(UrlError::MissingSpace { shown: redact(text) });
        };
        if !is_space_name(space) {
            return Err(UrlError::BadSpace { name: space.to_owned() });
        }

        let mut driver = parts.base.to_owned();
        if !kept.is_empty() {
            driver.push('?');
            driver.push_str(&kept.join("&"));
        }
        let shown_base = format!("{}{}space=", redact(&driver), if kept.is_empty() { '?' } else { '&' });
        let shown = format!("{shown_base}{space}");
        let config = driver
            .parse::<postgres::Config>()
            .map_err(|error| UrlError::Connection { shown: shown.clone(), reason: reason(&error) })?;
        Ok(SpaceUrl { space: space.to_owned(), config, shown, shown_base })
    }

    /// The URL of another space in the same database.
    ///
    /// ```
    /// use trellis_postgres::SpaceUrl;
    /// let url = SpaceUrl::parse("postgres://app:secret@db/trellis?space=team-a").unwrap();
    /// assert_eq!(url.with_space("team-b").unwrap().to_string(), "postgres://app:***@db/trellis?space=team-b");
    /// assert!(url.with_space("no spaces").is_err());
    /// ```
    pub fn with_space(&self, space: &str) -> Result<SpaceUrl, UrlError> {
        if !is_space_name(space) {
            return Err(UrlError::BadSpace { name: space.to_owned() });
        }
        Ok(SpaceUrl {
            space: space.to_owned(),
            config: self.config.clone(),
            shown: format!("{}{space}", self.shown_base),
            shown_base: self.shown_base.clone(),
        })
    }

    /// Whether `text` is a PostgreSQL URL rather than (say) the path of a space file.
    pub fn is_postgres(text: &str) -> bool {
        SCHEMES.iter().any(|scheme| text.starts_with(scheme))
    }

    /// The space's name.
    pub fn space(&self) -> &str {
        &self.space
    }

    /// The database's URL as shown: without its `space`, and without a password.
    pub(crate) fn database_shown(&self) -> &str {
        let base = self.shown_base.strip_suffix("space=").unwrap_or(&self.shown_base);
        base.strip_suffix(['?', '&']).unwrap_or(base)
    }

    /// The driver's settings: the URL without its `space`.
    pub(crate) fn config(&self) -> &postgres::Config {
        &self.config
    }
}

impl fmt::Display for SpaceUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl fmt::Debug for SpaceUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SpaceUrl").field(&self.shown).finish()
    }
}

impl std::str::FromStr for SpaceUrl {
    type Err = UrlError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        SpaceUrl::parse(text)
    }
}

/// Who holds a space's lease: the node's name, and where other nodes reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The node's name, unique among the nodes sharing the database (`hostname:pid`, say).
    pub name: String,
    /// Where the node takes requests for the spaces it holds (`http://10.0.0.5:8080`),
    /// for other nodes to forward to; `None` when it takes none.
    pub addr: Option<String>,
}

impl Holder {
    /// A holder that takes no requests from other nodes.
    pub fn new(name: impl Into<String>) -> Holder {
        Holder { name: name.into(), addr: None }
    }

    /// The same holder, reached at `addr`.
    pub fn at(mut self, addr: impl Into<String>) -> Holder {
        self.addr = Some(addr.into());
        self
    }
}

/// Whether `name` may name a space: what fits in a NOTIFY payload, a log line and a URL
/// without quoting.
fn is_space_name(name: &str) -> bool {
    (1..=MAX_SPACE_NAME).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A URL cut where the driver cuts it.
struct Parts<'a> {
    /// Everything before the query: scheme, credentials, hosts, database.
    base: &'a str,
    /// The query after `?`, if any.
    query: Option<&'a str>,
}

impl<'a> Parts<'a> {
    fn split(text: &'a str) -> Parts<'a> {
        // The driver reads credentials up to the first `@`, so a `?` inside a password
        // does not start the query.
        let after_credentials = text.find('@').map_or(0, |at| at + 1);
        match text[after_credentials..].find('?') {
            Some(at) => {
                let at = after_credentials + at;
                Parts { base: &text[..at], query: Some(&text[at + 1..]) }
            }
            None => Parts { base: text, query: None },
        }
    }
}

/// `text` with its password hidden: the one in the credentials and any `password=`
/// parameter.
fn redact(text: &str) -> String {
    let scheme = SCHEMES.iter().find(|scheme| text.starts_with(*scheme)).map_or(0, |scheme| scheme.len());
    let mut shown = String::with_capacity(text.len());
    let parts = Parts::split(text);
    match parts.base.find('@') {
        Some(at) => {
            let credentials = &parts.base[..at];
            match credentials[scheme.min(credentials.len())..].find(':') {
                Some(colon) => {
                    shown.push_str(&credentials[..scheme + colon + 1]);
                    shown.push_str(HIDDEN);
                }
                None => shown.push_str(credentials),
            }
            shown.push_str(&parts.base[at..]);
        }
        None => shown.push_str(parts.base),
    }
    if let Some(query) = parts.query {
        shown.push('?');
        let params: Vec<String> = query
            .split('&')
            .map(|param| match param.split_once('=') {
                Some(("password", _)) => format!("password={HIDDEN}"),
                _ => param.to_owned(),
            })
            .collect();
        shown.push_str(&params.join("&"));
    }
    shown
}

/// The driver's complaint about a URL, with its cause.
fn reason(error: &postgres::Error) -> String {
    match std::error::Error::source(error) {
        Some(cause) => format!("{error}: {cause}"),
        None => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_space_is_taken_out_and_the_rest_goes_to_the_driver() {
        let url = SpaceUrl::parse("postgres://app:pw@db:6543/trellis?sslmode=disable&space=a.b_c-1&connect_timeout=3")
            .expect("valid");
        assert_eq!(url.space(), "a.b_c-1");
        assert_eq!(url.config().get_user(), Some("app"));
        assert_eq!(url.config().get_password(), Some(&b"pw"[..]));
        assert_eq!(url.config().get_dbname(), Some("trellis"));
        assert_eq!(url.config().get_ports(), [6543]);
        assert_eq!(url.config().get_connect_timeout(), Some(&std::time::Duration::from_secs(3)));
        assert_eq!(
            url.to_string(),
            "postgres://app:***@db:6543/trellis?sslmode=disable&connect_timeout=3&space=a.b_c-1"
        );

        let socket = SpaceUrl::parse("postgresql:///trellis?space=s&host=/run/postgresql").expect("socket directory");
        assert_eq!(socket.config().get_hosts(), [postgres::config::Host::Unix("/run/postgresql".into())]);
        assert_eq!(socket.to_string(), "postgresql:///trellis?host=/run/postgresql&space=s");
    }

    #[test]
    fn no_password_is_ever_shown() {
        let url = SpaceUrl::parse("postgres://u:p?a@ss@h/db?space=s").expect("a ? inside the password");
        assert_eq!(url.config().get_password(), Some(&b"p?a"[..]), "the driver reads up to the first @");
        assert!(!url.to_string().contains("p?a"), "{url}");
        let url = SpaceUrl::parse("postgres://h/db?password=hunter2&space=s").expect("password parameter");
        assert_eq!(url.to_string(), "postgres://h/db?password=***&space=s");
        assert!(!format!("{url:?}").contains("hunter2"));
        for bad in [
            "postgres://u:hunter2@h/db",
            "postgres://u:hunter2@h/db?space=",
            "postgres://u:hunter2@h/db?port=x&space=s",
        ] {
            let error = SpaceUrl::parse(bad).expect_err("refused");
            assert!(!error.to_string().contains("hunter2"), "{error}");
        }
    }

    #[test]
    fn a_missing_or_bad_space_is_refused_with_what_to_write() {
        let error = SpaceUrl::parse("postgres://h/db").expect_err("no space");
        assert!(error.to_string().contains("add ?space=NAME"), "{error}");
        assert!(matches!(SpaceUrl::parse("postgres://h/db?sslmode=disable"), Err(UrlError::MissingSpace { .. })));
        assert!(matches!(SpaceUrl::parse("postgres://h/db?space=a&space=b"), Err(UrlError::SpaceTwice { .. })));
        let too_long = format!("postgres://h/db?space={}", "x".repeat(MAX_SPACE_NAME + 1));
        for bad in ["postgres://h/db?space=", "postgres://h/db?space=a%20b", "postgres://h/db?space=é", &too_long] {
            let error = SpaceUrl::parse(bad).expect_err(bad);
            assert!(matches!(error, UrlError::BadSpace { .. }), "{error}");
            assert!(error.to_string().contains("letters, digits"), "{error}");
        }
        let error = SpaceUrl::parse("/var/lib/space.sqlite").expect_err("a path");
        assert!(matches!(error, UrlError::NotPostgres { .. }), "{error}");
        let error = SpaceUrl::parse("postgres://h/db?space=s&colour=blue").expect_err("unknown option");
        assert!(error.to_string().contains("colour"), "{error}");
    }

    #[test]
    fn urls_are_told_from_paths() {
        assert!(SpaceUrl::is_postgres("postgres://h/db?space=s"));
        assert!(SpaceUrl::is_postgres("postgresql://h/db?space=s"));
        assert!(!SpaceUrl::is_postgres("space.sqlite"));
        assert!(!SpaceUrl::is_postgres("./postgres://x"));
    }
}
