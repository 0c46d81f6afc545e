//! The PostgreSQL server the tests run against, found once for all of them.
//!
//! From `TRELLIS_TEST_POSTGRES` (a URL without `space`), or else from libpq's variables
//! (`PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`, as `pg_virtualenv` exports
//! them). With neither, a test fails under `CI=true` (CI must test PostgreSQL) and is
//! skipped otherwise. Every test works in a space of its own, so all share one database.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use trellis_postgres::SpaceUrl;

/// How to get a server, for the message of a run without one.
const HOW: &str = "run the tests inside a throwaway cluster: `pg_virtualenv -- cargo test -p trellis-postgres` \
    (Debian's postgresql-15: `apt-get install -y --no-install-recommends postgresql-15`), \
    or set TRELLIS_TEST_POSTGRES=postgres://USER:PASSWORD@HOST:PORT/DATABASE";

/// The server, by its URL.
pub struct Server {
    /// A URL without `space`, ending so that `&NAME=VALUE` can follow.
    base: String,
}

/// The server, or `None` (the test returns) when there is none and this is not CI.
pub fn find() -> Option<&'static Server> {
    static SERVER: OnceLock<Option<Server>> = OnceLock::new();
    let server = SERVER.get_or_init(|| from_env().map(|base| Server { base })).as_ref();
    if server.is_none() {
        if std::env::var("CI").is_ok_and(|ci| ci == "true") {
            panic!("no PostgreSQL server for the tests (CI=true requires one): {HOW}");
        }
        eprintln!("skipped: no PostgreSQL server; {HOW}");
    }
    server
}

/// The server for this test, or return from the test when there is none.
macro_rules! server {
    () => {
        match crate::server::find() {
            Some(server) => server,
            None => return,
        }
    };
}
pub(crate) use server;

fn from_env() -> Option<String> {
    let var = |name| std::env::var(name).ok().filter(|value: &String| !value.is_empty());
    if let Some(url) = var("TRELLIS_TEST_POSTGRES") {
        let joiner = if url.contains('?') { "&" } else { "?" };
        return Some(format!("{url}{joiner}sslmode=disable"));
    }
    let host = var("PGHOST")?;
    let mut base = format!("postgres://?host={}", encode(&host));
    for (variable, param) in
        [("PGPORT", "port"), ("PGUSER", "user"), ("PGPASSWORD", "password"), ("PGDATABASE", "dbname")]
    {
        if let Some(value) = var(variable) {
            base.push_str(&format!("&{param}={}", encode(&value)));
        }
    }
    Some(base + "&sslmode=disable")
}

/// `text` percent-encoded for a URL's query.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Server {
    /// A new space's name, unique to this run: `test` and a number.
    pub fn space(&self, test: &str) -> String {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        format!("{test}-{}-{nanos}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The full URL of space `space`, password included (for a child process).
    pub fn url_text(&self, space: &str) -> String {
        format!("{}&space={space}", self.base)
    }

    /// The URL of space `space`.
    pub fn url(&self, space: &str) -> SpaceUrl {
        SpaceUrl::parse(&self.url_text(space)).expect("the test server's URL parses")
    }

    /// A new space's URL.
    pub fn new_space(&self, test: &str) -> SpaceUrl {
        self.url(&self.space(test))
    }

    /// The server's URL with `extra` parameters after the test's (later ones win).
    pub fn with(&self, extra: &str, space: &str) -> SpaceUrl {
        SpaceUrl::parse(&format!("{}&{extra}&space={space}", self.base)).expect("URL parses")
    }

    /// A plain connection, for the tests' own SQL.
    pub fn sql(&self) -> postgres::Client {
        let driver = self.base.parse::<postgres::Config>().expect("the test server's URL");
        driver.connect(postgres::NoTls).expect("connect to the test server")
    }
}
