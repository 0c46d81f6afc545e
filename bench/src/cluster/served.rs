//! Real `trellis serve --database` processes on loopback, sharing the database: the
//! figures that need a second node (forwarding, an observer elsewhere) or a process to
//! kill.
//!
//! * owner / forwarded commit: `POST /spaces/NAME/api/charms/Counter/handlers/increment`
//!   to node A, which holds the space, and to node B, which forwards it to A, one after
//!   the other on kept-alive connections; the forwarded target is the owner's median plus
//!   1 ms.
//! * propagation: [`PROPAGATION_SENDERS`] clients send increments to A on a fixed
//!   schedule of 1,000 a second; an event stream of the counter opened through B (B
//!   forwards it to A, as a page reaching B would) notes when each count arrives. A
//!   commit's time is from its send (the request written) to the first event showing its
//!   count or a later one (events coalesce, so a count may never be shown on its own): the
//!   handler, the commit and the way to the observer. Not from the sender's answer: the
//!   holder's observers run once a commit is applied in memory, before it is durable, so
//!   the event usually arrives before the answer. The same, for a stream opened on A
//!   itself, shows what the forwarding hop adds.
//! * failover: a node takes a space, B learns it holds it, the node is killed (SIGKILL),
//!   and B is sent the increment (with an `Idempotency-Key`) every [`RETRY`] until one is
//!   accepted; the time from the kill to that answer, against the lease plus 1 s. The
//!   node is killed right after it took the space, so its lease has almost all of its
//!   time to run: the worst case (a node killed later dies at most a third of a lease
//!   after its last renewal).
//!
//! The nodes run with `--lease` [`LEASE`], a rate limit and connection cap no benchmark
//! reaches, and a configuration directory of their own.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::database::Database;
use super::http::{Answer, Http, Observer};
use crate::harness::{self, Budget, RunConfig, Stats};

/// The nodes' lease (`--lease`).
pub(super) const LEASE: Duration = Duration::from_secs(2);

/// Commits per second in the propagation scenario.
const RATE: u32 = 1000;

/// Clients sending at once in the propagation scenario (each waits for its answer).
const PROPAGATION_SENDERS: usize = 8;

/// How often B is asked again after the holder was killed.
const RETRY: Duration = Duration::from_millis(25);

/// Sends to the owner and through another node, one after the other.
const HTTP: Budget = Budget { warmup: 20, min_samples: 100, max_samples: 2000, max_time: Duration::from_secs(4) };

/// Variable naming the `trellis` binary to run (instead of building or finding it).
pub(super) const BINARY_VAR: &str = "TRELLIS_BENCH_TRELLIS";

/// The `trellis` binary of this build: [`BINARY_VAR`]'s, or the one beside this benchmark
/// (in `target/PROFILE/`), built first when the benchmark runs under `cargo run` (a no-op
/// when it is up to date).
pub(super) fn binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(BINARY_VAR) {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| format!("where is this benchmark? {e}"))?;
    let dir = exe.parent().ok_or("the benchmark is in no directory")?;
    if let Some(cargo) = std::env::var_os("CARGO") {
        let profile = match dir.file_name().and_then(|name| name.to_str()) {
            Some("debug") => "dev",
            Some(profile) => profile,
            None => "release",
        };
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
        eprintln!("  cluster: building the trellis binary ({profile})");
        let built = Command::new(cargo)
            .args(["build", "--locked", "--quiet", "-p", "trellis", "--bin", "trellis", "--profile", profile])
            .arg("--manifest-path")
            .arg(&manifest)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("cannot run cargo to build trellis: {e}"))?;
        if !built.success() {
            return Err(format!("cargo build -p trellis failed ({built})"));
        }
    }
    let binary = dir.join("trellis");
    if binary.is_file() {
        Ok(binary)
    } else {
        Err(format!(
            "no trellis binary at {}: build it (cargo build --release -p trellis) or set {BINARY_VAR}",
            binary.display()
        ))
    }
}

/// A space the nodes serve: its name and a bearer token of it.
pub(super) struct Space {
    pub(super) name: String,
    auth: String,
}

impl Space {
    /// Makes space `name` in the database (seeded with the reference charms, Counter among
    /// them) and a token of it: `trellis --space URL token new`.
    pub(super) fn make(binary: &Path, db: &Database, config: &Path, name: &str) -> Space {
        let out = Command::new(binary)
            .args(["--json", "--space", &db.space_url(name), "token", "new", "--name", "bench"])
            .env_remove("TRELLIS_SPACE")
            .env("XDG_CONFIG_HOME", config)
            .stdin(Stdio::null())
            .output()
            .expect("cluster: run trellis token new");
        assert!(out.status.success(), "cluster: trellis token new failed: {}", String::from_utf8_lossy(&out.stderr));
        let made: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cluster: token new's JSON");
        let token = made["token"].as_str().expect("cluster: a token");
        Space { name: name.to_owned(), auth: format!("Authorization: Bearer {token}") }
    }

    fn path(&self, rest: &str) -> String {
        format!("/spaces/{}/api/charms/Counter{rest}", self.name)
    }

    /// Sends one increment through `http`.
    fn increment(&self, http: &mut Http, extra: &[&str]) -> Answer {
        let headers: Vec<&str> = std::iter::once(self.auth.as_str()).chain(extra.iter().copied()).collect();
        http.request("POST", &self.path("/handlers/increment"), &headers, Some(r#"{"amount": 1}"#))
    }

    /// The counter's count, read through `http`.
    fn count(&self, http: &mut Http) -> i64 {
        let got = http.request("GET", &self.path(""), &[&self.auth], None);
        assert_eq!(got.status, 200, "cluster: read the counter: {}", got.body);
        got.json()["data"]["count"].as_i64().expect("cluster: a count")
    }
}

/// The count an increment's answer reports.
fn answered_count(answer: &Answer) -> i64 {
    assert_eq!(answer.status, 200, "cluster: an increment: {}", answer.body);
    let sent = answer.json();
    sent["returned"]["count"]
        .as_i64()
        .or_else(|| sent["result"]["count"].as_i64())
        .unwrap_or_else(|| panic!("cluster: no count in the answer: {}", answer.body))
}

/// A `trellis serve --database` process, killed when dropped.
pub(super) struct Node {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub(super) authority: String,
    log: Arc<Mutex<String>>,
}

impl Node {
    /// Starts a node on a free port, its configuration in `config`.
    pub(super) fn start(binary: &Path, db: &Database, config: &Path) -> Node {
        let lease = format!("{}", LEASE.as_secs_f64());
        let mut child = Command::new(binary)
            .args(["serve", "--database", &db.url, "--addr", "127.0.0.1:0", "--lease", &lease])
            .args(["--rate-limit", "4000000000", "--connections-per-address", "100000"])
            .env_remove("TRELLIS_SPACE")
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .env("XDG_CONFIG_HOME", config)
            .env("XDG_DATA_HOME", config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cluster: start trellis serve");
        let mut lines = BufReader::new(child.stderr.take().expect("cluster: its standard error")).lines();
        let mut said = Vec::new();
        let authority = lines.by_ref().map_while(Result::ok).find_map(|line| {
            let found =
                line.split_once(" http://").map(|(_, url)| url.split('/').next().unwrap_or_default().to_owned());
            said.push(line);
            found
        });
        let Some(authority) = authority else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("cluster: trellis serve did not say where it listens:\n{}", said.join("\n"));
        };
        // Keep reading what it says, so it never blocks on a full pipe.
        let log = Arc::new(Mutex::new(String::new()));
        let kept = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let mut log = kept.lock().unwrap_or_else(|e| e.into_inner());
                if log.len() < 1 << 20 {
                    log.push_str(&line);
                    log.push('\n');
                }
            }
        });
        Node { child, authority, log }
    }

    /// A client of this node.
    pub(super) fn http(&self) -> Http {
        Http::new(&self.authority)
    }

    /// Kills the process at once (SIGKILL), as a machine going down would.
    pub(super) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The end of what the node logged, for a failure's message.
    pub(super) fn log_tail(&self) -> String {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Makes `a` hold `space` (its first request) and `b` know that (a request it forwards).
pub(super) fn hold(space: &Space, a: &Node, b: &Node) {
    assert_eq!(space.count(&mut a.http()), 0, "cluster: a fresh counter, through the node that takes the space");
    assert_eq!(space.count(&mut b.http()), 0, "cluster: the counter, forwarded");
}

/// Increments sent to the holder `a` and through `b`, alternately: (owner, forwarded).
pub(super) fn owner_and_forwarded(config: &RunConfig, space: &Space, a: &Node, b: &Node) -> (Stats, Stats) {
    let (mut to_a, mut via_b) = (a.http(), b.http());
    let (mut on_a, mut on_b) = (Vec::new(), Vec::new());
    let mut last = 0;
    let mut send = |http: &mut Http, samples: &mut Vec<Duration>| {
        let (answer, took) = harness::time(|| space.increment(http, &[]));
        let count = answered_count(&answer);
        assert!(count > last, "cluster: counts grow ({last} then {count})");
        last = count;
        samples.push(took);
    };
    let budget = config.budget(HTTP);
    for _ in 0..budget.warmup {
        send(&mut to_a, &mut Vec::new());
        send(&mut via_b, &mut Vec::new());
    }
    let started = Instant::now();
    while on_a.len() < budget.max_samples.max(1)
        && (on_a.len() < budget.min_samples.max(1) || started.elapsed() < budget.max_time)
    {
        // Each goes first half the time.
        if on_a.len() % 2 == 0 {
            send(&mut to_a, &mut on_a);
            send(&mut via_b, &mut on_b);
        } else {
            send(&mut via_b, &mut on_b);
            send(&mut to_a, &mut on_a);
        }
    }
    assert_eq!(space.count(&mut to_a), last, "cluster: every send counted once");
    let owner = Stats::of(&mut on_a);
    let target = Duration::from_nanos(owner.median_ns as u64) + Duration::from_millis(1);
    (owner, Stats::of(&mut on_b).with_target(target))
}

/// Propagation at [`RATE`] commits/s to an observer through `b` and one on the holder
/// `a`: (through `b`, on `a`).
pub(super) fn propagation(config: &RunConfig, space: &Space, a: &Node, b: &Node) -> (Stats, Stats) {
    let events = space.path("/events");
    let via_b = Observer::open(&b.authority, &events, &[&space.auth]);
    let on_a = Observer::open(&a.authority, &events, &[&space.auth]);
    let start = space.count(&mut a.http());
    for observer in [&via_b, &on_a] {
        assert!(observer.wait_for(start, Duration::from_secs(10)), "cluster: the stream's first event");
    }
    let total = if config.quick { RATE as usize / 2 } else { 3 * RATE as usize };
    let next = AtomicUsize::new(0);
    let t0 = Instant::now() + Duration::from_millis(50);
    let due = |i: usize| t0 + Duration::from_secs(1) * u32::try_from(i).unwrap_or(u32::MAX) / RATE;
    // (count answered, when its request was sent)
    let acks: Vec<(i64, Instant, Instant)> = std::thread::scope(|scope| {
        let senders: Vec<_> = (0..PROPAGATION_SENDERS)
            .map(|_| {
                let (next, due) = (&next, &due);
                scope.spawn(move || {
                    let mut http = a.http();
                    let mut acks = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= total {
                            return acks;
                        }
                        if let Some(wait) = due(i).checked_duration_since(Instant::now()) {
                            std::thread::sleep(wait);
                        }
                        let sent = Instant::now();
                        let answer = space.increment(&mut http, &[]);
                        acks.push((answered_count(&answer), sent, Instant::now()));
                    }
                })
            })
            .collect();
        senders.into_iter().flat_map(|s| s.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    let last = acks.iter().map(|(count, _, _)| *count).max().unwrap_or(start);
    let finished = acks.iter().map(|(_, _, answered)| *answered).max().unwrap_or(t0);
    assert_eq!(last, start + total as i64, "cluster: every send counted once");
    for (name, observer) in [("through the other node", &via_b), ("on the holder", &on_a)] {
        assert!(observer.wait_for(last, Duration::from_secs(30)), "cluster: the stream {name} never showed {last}");
    }
    let rate = total as f64 / finished.duration_since(t0).as_secs_f64();
    let stats = |observer: Observer| {
        let seen = observer.close();
        let mut samples: Vec<Duration> = acks
            .iter()
            .map(|(count, sent, _)| {
                // Counts only grow, so the first event at or past `count` is found by halving.
                let at = seen.partition_point(|(_, c)| c < count);
                let (shown, _) = seen.get(at).expect("cluster: every count was shown");
                shown.saturating_duration_since(*sent)
            })
            .collect();
        Stats::of(&mut samples)
    };
    let (through_b, on_holder) = (stats(via_b), stats(on_a));
    assert!(
        rate >= 0.9 * f64::from(RATE),
        "cluster: the senders kept up only {rate:.0} commits/s of {RATE} (an owner's answer takes too long for \
         {PROPAGATION_SENDERS} senders); propagation through B was p50 {:.2} ms, p99 {:.2} ms",
        through_b.median_ns / 1e6,
        through_b.p99_ns.unwrap_or_default() / 1e6
    );
    (through_b.with_target(Duration::from_millis(5)).with_tail_target(Duration::from_millis(25)), on_holder)
}

/// Times from killing a space's holder to the first increment another node accepts, one
/// per round: each round a new node takes a new space, `b` learns where it is, the node
/// is killed, and `b` is asked again every [`RETRY`] until it answers 200.
pub(super) fn failover(config: &RunConfig, binary: &Path, db: &Database, dir: &Path, prefix: &str, b: &Node) -> Stats {
    let rounds = if config.quick || harness::fixed_samples() { 1 } else { 3 };
    let mut samples = Vec::new();
    let mut via_b = b.http();
    for round in 0..rounds {
        let space = Space::make(binary, db, dir, &format!("{prefix}-failover{round}"));
        let mut victim = Node::start(binary, db, &dir.join(format!("victim{round}")));
        hold(&space, &victim, b);
        victim.kill();
        let killed = Instant::now();
        let key = format!("Idempotency-Key: {prefix}-failover-{round}");
        loop {
            let answer = space.increment(&mut via_b, &[&key]);
            if answer.status == 200 {
                samples.push(killed.elapsed());
                break;
            }
            assert!(
                killed.elapsed() < LEASE + Duration::from_secs(30),
                "cluster: no node took the space over: {} {}\n{}",
                answer.status,
                answer.body,
                b.log_tail()
            );
            std::thread::sleep(RETRY);
        }
        assert_eq!(space.count(&mut via_b), 1, "cluster: the increment applied once");
    }
    Stats::of(&mut samples).with_p99_target(LEASE + Duration::from_secs(1))
}
