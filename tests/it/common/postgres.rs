//! The PostgreSQL server the tests of spaces in a database use: `TRELLIS_TEST_POSTGRES`
//! (a URL without `space`), or the libpq variables `pg_virtualenv` exports (`PGHOST`,
//! `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`). `.ci/run` runs the tests inside
//! `pg_virtualenv`; under `CI=true` a test that finds no server fails, never skips.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A space of its own in the test database, and a configuration directory for the user.
pub struct PgSpace {
    _dir: tempfile::TempDir,
    /// `postgres://...?space=NAME`.
    pub url: String,
    /// The space's name.
    pub name: String,
    /// A scratch directory (for SQLite spaces to copy to and from).
    pub dir: PathBuf,
}

/// The database's URL without a space, or `None` (the test is skipped) outside CI.
pub fn database() -> Option<String> {
    if let Ok(url) = std::env::var("TRELLIS_TEST_POSTGRES") {
        return Some(url);
    }
    let Ok(host) = std::env::var("PGHOST") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no PostgreSQL for the tests: run them inside `pg_virtualenv -- cargo test` or set TRELLIS_TEST_POSTGRES"
        );
        eprintln!("skipped: no PostgreSQL (run inside `pg_virtualenv` or set TRELLIS_TEST_POSTGRES)");
        return None;
    };
    let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_string());
    let (user, password) = (var("PGUSER", "postgres"), var("PGPASSWORD", ""));
    let (port, database) = (var("PGPORT", "5432"), var("PGDATABASE", "postgres"));
    let login = if password.is_empty() { user } else { format!("{user}:{password}") };
    Some(match host.strip_prefix('/') {
        // A socket directory goes in `host=`.
        Some(_) => format!("postgres://{login}@localhost:{port}/{database}?host={host}"),
        None => format!("postgres://{login}@{host}:{port}/{database}"),
    })
}

/// `url` with the query parameter `key=value` added.
pub fn with_param(url: &str, key: &str, value: &str) -> String {
    let join = if url.contains('?') { '&' } else { '?' };
    format!("{url}{join}{key}={value}")
}

/// A fresh space in the test database (a name no other test or run uses), or `None`
/// outside CI when there is no server.
pub fn space() -> Option<PgSpace> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let database = database()?;
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let name = format!("t{}-{}-{}", std::process::id(), stamp, NEXT.fetch_add(1, Ordering::Relaxed));
    let dir = tempfile::tempdir().expect("temporary directory");
    let url = with_param(&database, "space", &name);
    Some(PgSpace { dir: dir.path().to_path_buf(), _dir: dir, url, name })
}

impl PgSpace {
    /// `trellis --space URL`, its user's configuration in the scratch directory.
    pub fn trellis(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_trellis"));
        command
            .arg("--space")
            .arg(&self.url)
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .env_remove("TRELLIS_SPACE")
            .env("XDG_CONFIG_HOME", self.dir.join("config"));
        command
    }

    /// Runs `trellis --space URL ARGS`, killed (failing the test) after two minutes.
    pub fn run(&self, args: &[&str]) -> Output {
        let child = self.trellis().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("trellis");
        super::output_within(child, Duration::from_secs(120), &format!("trellis {args:?}"))
    }

    /// Standard output of a command that must succeed.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "trellis {args:?} failed: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
        stdout
    }

    /// Standard error of a command that must fail.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(!out.status.success(), "trellis {args:?} should fail: {}", String::from_utf8_lossy(&out.stdout));
        String::from_utf8_lossy(&out.stderr).to_string()
    }

    /// What `trellis --json ARGS` prints, parsed.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let all: Vec<&str> = ["--json"].iter().chain(args).copied().collect();
        serde_json::from_str(&self.ok(&all)).expect("JSON")
    }
}
