//! The PostgreSQL server the suite measures against, and its disk's fsync time.
//!
//! Unless [`DATABASE_VAR`] names a database, the suite starts a throwaway cluster of its
//! own: `initdb` into a temporary directory (as the `postgres` user when the bench runs as
//! root, since `initdb` refuses root), `pg_ctl start` on a free loopback port with
//! `max_connections` raised for 64 spaces' connections, and `pg_ctl stop` plus removal
//! of the directory when [`Database`] is dropped: at the end, on an early return and on a
//! panic. Settings are PostgreSQL's defaults otherwise (`fsync` and `synchronous_commit`
//! on), so every commit counted is durable.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A database to use instead of a throwaway cluster: `postgres://USER@HOST[:PORT]/DB`
/// (no `space=`); it must allow [`MAX_CONNECTIONS`]-ish connections.
pub(super) const DATABASE_VAR: &str = "TRELLIS_BENCH_DATABASE";

/// Where PostgreSQL's programs are, when not in the usual places.
pub(super) const BIN_VAR: &str = "TRELLIS_BENCH_PG_BIN";

/// `max_connections` of the throwaway cluster: each space open in PostgreSQL holds three
/// connections today (writer, reader, lease renewal), and 64 spaces are open at once.
const MAX_CONNECTIONS: u32 = 400;

/// Why the suite cannot run.
pub(super) enum Unavailable {
    /// Nothing to run against (PostgreSQL is not installed): the suite says so and skips.
    Skip(String),
    /// Something to run against failed: a failed row.
    Failed(String),
}

/// The database the suite runs against.
pub(super) struct Database {
    /// `postgres://USER@HOST:PORT/DB`, naming no space.
    pub(super) url: String,
    /// Where PostgreSQL's programs are (for `pg_test_fsync`), if found.
    pub(super) bin: Option<PathBuf>,
    /// The throwaway cluster, stopped and removed when dropped; `None` for
    /// [`DATABASE_VAR`]'s database.
    cluster: Option<Cluster>,
    /// A directory on the disk of the cluster's data (when it is ours): `pg_test_fsync`
    /// writes its file there.
    scratch: tempfile::TempDir,
}

impl Database {
    /// [`DATABASE_VAR`]'s database, or a throwaway cluster started now.
    pub(super) fn get() -> Result<Database, Unavailable> {
        let bin = bin_dir();
        let scratch = tempfile::Builder::new()
            .prefix("trellis-bench-cluster")
            .tempdir()
            .map_err(|e| Unavailable::Failed(format!("cannot make a temporary directory: {e}")))?;
        if let Some(url) = std::env::var(DATABASE_VAR).ok().filter(|url| !url.is_empty()) {
            check(&url).map_err(Unavailable::Failed)?;
            return Ok(Database { url, bin, cluster: None, scratch });
        }
        let Some(bin) = bin else {
            return Err(Unavailable::Skip(format!(
                "PostgreSQL's programs (initdb, pg_ctl) were not found: install them (Debian: \
                 apt-get install postgresql-15), set {BIN_VAR}=DIR, or name a database with \
                 {DATABASE_VAR}=postgres://USER@HOST/DB"
            )));
        };
        let cluster = Cluster::start(&bin, scratch.path()).map_err(Unavailable::Failed)?;
        let url = format!("postgres://postgres@127.0.0.1:{}/postgres", cluster.port);
        check(&url).map_err(Unavailable::Failed)?;
        Ok(Database { url, bin: Some(bin), cluster: Some(cluster), scratch })
    }

    /// What the suite runs against, for its first line.
    pub(super) fn describe(&self) -> String {
        match &self.cluster {
            Some(cluster) => format!(
                "a throwaway PostgreSQL cluster ({}, 127.0.0.1:{}, fsync on, max_connections {MAX_CONNECTIONS})",
                cluster.version, cluster.port
            ),
            None => format!("the database {DATABASE_VAR} names"),
        }
    }

    /// The URL of space `space` in this database.
    pub(super) fn space_url(&self, space: &str) -> String {
        let join = if self.url.contains('?') { '&' } else { '?' };
        format!("{}{join}space={space}", self.url)
    }

    /// A new connection to the database, for the raw-PostgreSQL peers.
    pub(super) fn connect(&self) -> postgres::Client {
        postgres::Client::connect(&self.url, postgres::NoTls).expect("cluster: connect to PostgreSQL")
    }

    /// The time of one 8 kB write and `fdatasync` on the cluster's disk (this machine's
    /// disk when the database is elsewhere), as `pg_test_fsync -s 1` reports it: stopped
    /// once it printed that line (its first two tests, about two seconds).
    pub(super) fn fdatasync(&self) -> Result<Duration, String> {
        let bin = self.bin.as_ref().ok_or("pg_test_fsync not found (PostgreSQL's programs are not installed)")?;
        let file = self.scratch.path().join("pg_test_fsync.out");
        let mut child = Command::new(bin.join("pg_test_fsync"))
            .args(["-s", "1", "-f"])
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run pg_test_fsync: {e}"))?;
        let stdout = child.stdout.take().ok_or("pg_test_fsync: no standard output")?;
        let mut seen = Vec::new();
        let found = BufReader::new(stdout).lines().map_while(Result::ok).find_map(|line| {
            let figure = fdatasync_line(&line);
            seen.push(line);
            figure
        });
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(&file);
        found.ok_or_else(|| format!("pg_test_fsync printed no fdatasync figure:\n{}", seen.join("\n")))
    }
}

/// The time per operation of `pg_test_fsync`'s fdatasync line
/// (`        fdatasync      2351.212 ops/sec     425 usecs/op`).
fn fdatasync_line(line: &str) -> Option<Duration> {
    let rest = line.trim_start().strip_prefix("fdatasync")?;
    let words: Vec<&str> = rest.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "usecs/op")?;
    let micros: f64 = words.get(at.checked_sub(1)?)?.parse().ok()?;
    Some(Duration::from_nanos((micros * 1e3) as u64))
}

/// Whether `url` answers a statement.
fn check(url: &str) -> Result<(), String> {
    let mut client = postgres::Client::connect(url, postgres::NoTls)
        .map_err(|e| format!("cannot connect to PostgreSQL at {}: {e}", hide_password(url)))?;
    client.simple_query("SELECT 1").map(drop).map_err(|e| format!("PostgreSQL does not answer: {e}"))
}

/// `url` without its password, for messages.
fn hide_password(url: &str) -> String {
    match trellis_postgres::SpaceUrl::parse(&format!("{url}{}space=x", if url.contains('?') { '&' } else { '?' })) {
        Ok(shown) => shown.to_string().trim_end_matches("?space=x").trim_end_matches("&space=x").to_owned(),
        Err(_) => "the URL given".to_owned(),
    }
}

/// PostgreSQL's programs: [`BIN_VAR`], `pg_config --bindir`, or Debian's newest
/// `/usr/lib/postgresql/N/bin`.
fn bin_dir() -> Option<PathBuf> {
    let has_programs = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(dir) = std::env::var_os(BIN_VAR) {
        return Some(PathBuf::from(dir)).filter(|d| has_programs(d));
    }
    let configured = Command::new("pg_config")
        .arg("--bindir")
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    if let Some(dir) = configured.filter(|d| has_programs(d)) {
        return Some(dir);
    }
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter_map(|entry| Some((entry.file_name().to_str()?.parse().ok()?, entry.path().join("bin"))))
        .filter(|(_, dir)| has_programs(dir))
        .collect();
    debian.sort();
    debian.pop().map(|(_, dir)| dir)
}

/// A cluster in a temporary directory, running until dropped.
struct Cluster {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    /// Whether its programs run as `postgres` (the bench runs as root).
    as_postgres: bool,
    /// `initdb --version`'s words.
    version: String,
}

impl Cluster {
    /// `initdb` into `dir/db`, then `pg_ctl start` on a free port (up to three tries: a
    /// port found free may be taken before the server binds it).
    fn start(bin: &Path, dir: &Path) -> Result<Cluster, String> {
        let as_postgres = is_root();
        if as_postgres {
            run(Command::new("chown").arg("postgres").arg(dir), "chown the cluster's directory to postgres")?;
        }
        let data = dir.join("db");
        let version = Command::new(bin.join("initdb"))
            .arg("--version")
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
            .unwrap_or_default();
        run(
            program(as_postgres, &bin.join("initdb")).arg("-D").arg(&data).args([
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
            ]),
            "initdb",
        )?;
        let log = dir.join("postgres.log");
        let mut last = String::new();
        for _ in 0..3 {
            let port = free_port()?;
            let options = format!(
                "-c listen_addresses=127.0.0.1 -p {port} -k {} -c max_connections={MAX_CONNECTIONS}",
                dir.display()
            );
            let started = program(as_postgres, &bin.join("pg_ctl"))
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(&log)
                .args(["-w", "-t", "60", "-o", &options, "start"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .map_err(|e| format!("cannot run pg_ctl: {e}"))?;
            if started.status.success() {
                return Ok(Cluster { bin: bin.to_owned(), data, port, as_postgres, version });
            }
            last = format!(
                "{}{}",
                String::from_utf8_lossy(&started.stderr),
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        Err(format!("the throwaway PostgreSQL cluster did not start: {last}"))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Immediate: the directory is removed next, so nothing needs a checkpoint.
        let stopped = program(self.as_postgres, &self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "stop"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !stopped.is_ok_and(|status| status.success()) {
            eprintln!("  cluster: could not stop the throwaway PostgreSQL cluster in {}", self.data.display());
        }
    }
}

/// `program`, run as `postgres` when `as_postgres`.
fn program(as_postgres: bool, program: &Path) -> Command {
    if as_postgres {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

/// Runs `command` to success, or says what `what` printed.
fn run(command: &mut Command, what: &str) -> Result<(), String> {
    let out = command.stdin(Stdio::null()).output().map_err(|e| format!("cannot run {what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
    }
}

/// Whether this process runs as root.
fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// A loopback port nobody listens on now.
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pg_test_fsyncs_fdatasync_line() {
        let line = "        fdatasync                          2351.212 ops/sec     425 usecs/op";
        assert_eq!(fdatasync_line(line), Some(Duration::from_micros(425)));
        assert_eq!(fdatasync_line("        open_datasync      2351.212 ops/sec     425 usecs/op"), None);
        assert_eq!(fdatasync_line("        fdatasync                                    n/a"), None);
    }
}
