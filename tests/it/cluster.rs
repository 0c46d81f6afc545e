//! Several `trellis serve --database` nodes on loopback sharing one PostgreSQL database
//! (see `common::postgres`): a request names its space, a node that does not hold the space
//! forwards it to the one that does, a token of one space is refused on another, and when
//! the holder is killed another node takes the space over once its lease runs out, with
//! nothing acknowledged lost.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::postgres::{self as pg, PgSpace};
use crate::common::provider::{Provider, Reply};
use crate::common::server::Served;

/// The lease the nodes of these tests hold a space by, in seconds.
const LEASE: &str = "1";

/// `trellis serve --database DB` on a port of its own.
fn node(database: &str, config: &std::path::Path) -> Served {
    node_with(database, config, &[])
}

/// [`node`] with `env` set.
pub(crate) fn node_with(database: &str, config: &std::path::Path, env: &[(&str, &str)]) -> Served {
    let mut command = serve(database, config, &["--addr", "127.0.0.1:0"]);
    command.envs(env.iter().copied());
    Served::spawn(command)
}

/// `trellis serve --database DB` with `args`, not started.
fn serve(database: &str, config: &std::path::Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_trellis"));
    command
        .args(["serve", "--database", database, "--lease", LEASE])
        .args(args)
        .env_remove("TRELLIS_SPACE")
        .env_remove("OPENAI_API_KEY")
        .env("XDG_CONFIG_HOME", config);
    command
}

/// A bearer token of `space`, as the `Authorization` header.
pub(crate) fn bearer(space: &PgSpace) -> String {
    let made = space.json(&["token", "new", "--name", "cluster"]);
    format!("Authorization: Bearer {}", made["token"].as_str().expect("a token"))
}

pub(crate) fn count(node: &Served, space: &PgSpace, auth: &str) -> Value {
    let got = node.request("GET", &format!("/spaces/{}/api/charms/Counter", space.name), &[auth], None);
    assert_eq!(got.status, 200, "{}", got.body);
    got.json()["data"]["count"].clone()
}

#[test]
fn nodes_forward_to_the_holder_refuse_other_spaces_tokens_and_take_over_when_it_dies() {
    let Some(s) = pg::space() else { return };
    let other = pg::space().expect("a second space");
    let database = pg::database().expect("the database");
    let auth = bearer(&s);
    let other_auth = bearer(&other);
    let mut a = node(&database, &s.dir.join("a"));
    let b = node(&database, &s.dir.join("b"));
    for n in [&a, &b] {
        assert_eq!(n.request("GET", "/healthz", &[], None).json()["status"], "alive");
        assert_eq!(n.request("GET", "/readyz", &[], None).json()["status"], "ready");
    }

    // A opens the space; B forwards to A, and the answer comes back.
    let increment = format!("/spaces/{}/api/charms/Counter/handlers/increment", s.name);
    assert_eq!(count(&a, &s, &auth), 0);
    let sent = b.request("POST", &increment, &[&auth], Some(r#"{"amount": 2}"#));
    assert_eq!(sent.status, 200, "forwarded: {}", sent.body);
    assert_eq!(count(&a, &s, &auth), 2, "applied by the holder");
    assert_eq!(count(&b, &s, &auth), 2, "read through B as well, from its copy");
    assert!(b.metric(r#"trellis_forwarded_requests_total{outcome="answered"}"#) >= 1.0);
    assert!(b.metric("trellis_follower_reads_total") >= 1.0);
    // A client's own marks of a node or a command are dropped on the way: no token, no answer.
    let forged = b.request(
        "GET",
        &increment.replace("/handlers/increment", ""),
        &["X-Trellis-Command: 1", "X-Trellis-Node: guess"],
        None,
    );
    assert_eq!(forged.status, 401, "{}", forged.body);
    assert!(a.metric(r#"trellis_lease_changes_total{change="taken"}"#) >= 1.0);
    assert!(a.metric(r#"trellis_commits_total{outcome="durable"}"#) >= 1.0);

    // A token is its space's: refused on another, on either node.
    for n in [&a, &b] {
        let refused = n.request("GET", &format!("/spaces/{}/api/charms", other.name), &[&auth], None);
        assert_eq!(refused.status, 401, "{}", refused.body);
        let own = n.request("GET", &format!("/spaces/{}/api/charms", other.name), &[&other_auth], None);
        assert_eq!(own.status, 200, "{}", own.body);
    }
    let nowhere = b.request("GET", "/api/charms", &[&auth], None);
    assert_eq!(nowhere.status, 404, "a request names its space: {}", nowhere.body);
    let unknown = b.request("GET", &format!("/spaces/{}-none/api/charms", s.name), &[&auth], None);
    assert!(
        unknown.status == 404 && unknown.body.contains("token new"),
        "no space is made by asking: {}",
        unknown.body
    );
    let forged =
        a.request("GET", &format!("/spaces/{}/api/charms", s.name), &[&auth, "x-trellis-forwarded-by: me"], None);
    assert_eq!(forged.status, 403, "a client cannot pass for a node: {}", forged.body);

    // A dies: once its lease has run out, B takes the space over with every
    // acknowledged change.
    a.kill();
    let killed = Instant::now();
    let taken = loop {
        let sent = b.request("POST", &increment, &[&auth], Some(r#"{"amount": 1}"#));
        if sent.status == 200 {
            break killed.elapsed();
        }
        assert!(killed.elapsed() < Duration::from_secs(30), "B never took over: {} {}", sent.status, sent.body);
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(taken < Duration::from_secs(1) + Duration::from_secs(2), "took over in {taken:?}");
    assert_eq!(count(&b, &s, &auth), json!(3));
}

/// 20 clients send increments, each with an idempotency key and again until it is
/// acknowledged, through three nodes; the holder is killed in the middle. Another node
/// takes over within the lease plus a second, and the count is the number of sends: none
/// lost, none applied twice.
#[test]
fn killing_the_holder_under_load_loses_nothing_and_applies_nothing_twice() {
    const CLIENTS: usize = 20;
    const SENDS: usize = 15;
    let Some(s) = pg::space() else { return };
    let database = pg::database().expect("the database");
    let auth = bearer(&s);
    let mut holder = node(&database, &s.dir.join("a"));
    let others = [node(&database, &s.dir.join("b")), node(&database, &s.dir.join("c"))];
    assert_eq!(count(&holder, &s, &auth), 0, "the first node holds the space");
    let increment = format!("/spaces/{}/api/charms/Counter/handlers/increment", s.name);
    let acknowledged = std::sync::atomic::AtomicUsize::new(0);
    let first_after_kill = std::sync::Mutex::new(None::<Instant>);
    let killed_at = std::sync::Mutex::new(None::<Instant>);
    std::thread::scope(|scope| {
        for client in 0..CLIENTS {
            let (others, increment, auth, acknowledged, name) = (&others, &increment, &auth, &acknowledged, &s.name);
            let (first_after_kill, killed_at) = (&first_after_kill, &killed_at);
            scope.spawn(move || {
                for send in 0..SENDS {
                    let key = format!("Idempotency-Key: {name}-{client}-{send}");
                    let through = &others[(client + send) % 2];
                    let started = Instant::now();
                    loop {
                        let sent = through.request("POST", increment, &[auth, &key], Some(r#"{"amount": 1}"#));
                        if sent.status == 200 {
                            break;
                        }
                        assert!(started.elapsed() < Duration::from_secs(30), "{} {}", sent.status, sent.body);
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    acknowledged.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if killed_at.lock().unwrap().is_some_and(|at| at < started) {
                        first_after_kill.lock().unwrap().get_or_insert(Instant::now());
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            });
        }
        while acknowledged.load(std::sync::atomic::Ordering::SeqCst) < CLIENTS * SENDS / 3 {
            std::thread::sleep(Duration::from_millis(5));
        }
        holder.kill();
        *killed_at.lock().unwrap() = Some(Instant::now());
    });
    let total = CLIENTS * SENDS;
    assert_eq!(acknowledged.into_inner(), total);
    assert_eq!(count(&others[0], &s, &auth), json!(total), "every acknowledged send once, and only those");
    let killed = killed_at.into_inner().unwrap().expect("killed");
    let resumed = first_after_kill.into_inner().unwrap().expect("sends went on after the kill");
    let lease = Duration::from_secs_f64(LEASE.parse().unwrap());
    assert!(resumed - killed <= lease + Duration::from_secs(1), "first commit elsewhere after {:?}", resumed - killed);
}

/// The holder is paused past its lease (SIGSTOP) and another node takes the space over; let
/// go on (SIGCONT), the old holder writes nothing more: its late write is refused by the
/// epoch, it says so, and requests it gets go to the new holder.
#[test]
fn a_paused_holder_that_lost_its_lease_writes_nothing_more() {
    let Some(s) = pg::space() else { return };
    let database = pg::database().expect("the database");
    let auth = bearer(&s);
    let a = node(&database, &s.dir.join("a"));
    let b = node(&database, &s.dir.join("b"));
    let increment = format!("/spaces/{}/api/charms/Counter/handlers/increment", s.name);
    assert_eq!(a.request("POST", &increment, &[&auth], Some(r#"{"amount": 1}"#)).status, 200);
    a.pause(true);
    std::thread::sleep(Duration::from_millis(1600));
    let taken = b.request("POST", &increment, &[&auth], Some(r#"{"amount": 10}"#));
    assert_eq!(taken.status, 200, "B took the space over: {}", taken.body);
    a.pause(false);
    let late = a.request("POST", &increment, &[&auth], Some(r#"{"amount": 100}"#));
    let again = a.request("POST", &increment, &[&auth], Some(r#"{"amount": 1000}"#));
    assert_eq!(again.status, 200, "A forwards to the new holder once it knows: {}", again.body);
    let total = count(&b, &s, &auth);
    match late.status {
        200 => assert_eq!(total, json!(1111), "the late send went to the new holder"),
        _ => {
            assert!(late.body.contains("lost the lease"), "refused, saying why: {}", late.body);
            assert_eq!(total, json!(1011), "the refused write is nowhere");
        }
    }
    let log = a.log();
    assert!(log.contains("lost the lease") || log.contains("lost the space's lease"), "A says so: {log}");
}

/// A page's event stream opened through another node sees the holder's changes.
#[test]
fn an_event_stream_through_another_node_sees_the_holders_changes() {
    let Some(s) = pg::space() else { return };
    let database = pg::database().expect("the database");
    let auth = bearer(&s);
    let a = node(&database, &s.dir.join("a"));
    let b = node(&database, &s.dir.join("b"));
    assert_eq!(count(&a, &s, &auth), 0);
    let mut events = b.events(&format!("/spaces/{}/api/charms/Counter/events", s.name), &[&auth]);
    assert_eq!(events.until("charm", |_| true)["data"]["count"], 0);
    assert_eq!(b.metric("trellis_follower_reads_total"), 1.0, "the stream comes from B's copy");
    let increment = format!("/spaces/{}/api/charms/Counter/handlers/increment", s.name);
    assert_eq!(a.request("POST", &increment, &[&auth], Some(r#"{"amount": 4}"#)).status, 200);
    assert_eq!(events.until("charm", |charm| charm["data"]["count"] == 4)["data"]["count"], 4);
}

/// A node that does not hold a space answers its reads from a copy it keeps up to date
/// from the holder's change log: a change made through it is read back through it at
/// once, one made through the holder shows in a moment, and the copy answers while the
/// holder is paused (where a forwarded read would wait for it).
#[test]
fn another_node_answers_reads_from_its_copy_of_the_space() {
    let Some(s) = pg::space() else { return };
    let database = pg::database().expect("the database");
    let auth = bearer(&s);
    let a = node(&database, &s.dir.join("a"));
    let b = node(&database, &s.dir.join("b"));
    assert_eq!(count(&a, &s, &auth), 0, "A holds the space");
    let counter = format!("/spaces/{}/api/charms/Counter", s.name);
    let increment = format!("{counter}/handlers/increment");
    // Another client reads through B all the while, so that reads and writes of the
    // space cross on B.
    let writing = std::sync::atomic::AtomicBool::new(true);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while writing.load(std::sync::atomic::Ordering::Acquire) {
                assert_eq!(b.request("GET", &counter, &[&auth], None).status, 200);
            }
        });
        for n in 1..=20 {
            assert_eq!(b.request("POST", &increment, &[&auth], Some(r#"{"amount": 1}"#)).status, 200);
            let got = b.request("GET", &counter, &[&auth], None);
            assert!(got.header("x-trellis-copy").is_some(), "answered from B's copy: {}", got.body);
            assert_eq!(got.json()["data"]["count"], n, "B's copy has what was sent through B");
        }
        writing.store(false, std::sync::atomic::Ordering::Release);
    });
    assert_eq!(a.request("POST", &increment, &[&auth], Some(r#"{"amount": 100}"#)).status, 200);
    let started = Instant::now();
    while count(&b, &s, &auth) != 120 {
        assert!(started.elapsed() < Duration::from_secs(2), "B's copy never took A's change");
        std::thread::sleep(Duration::from_millis(10));
    }

    a.pause(true);
    let started = Instant::now();
    let got = b.request("GET", &counter, &[&auth], None);
    let took = started.elapsed();
    a.pause(false);
    assert_eq!((got.status, got.json()["data"]["count"].clone()), (200, json!(120)), "{}", got.body);
    assert!(took < Duration::from_millis(500), "answered without A, in {took:?}");
    let unsigned = b.request("GET", &counter, &[], None);
    assert_eq!(unsigned.status, 401, "a read without a credential is the holder's to refuse: {}", unsigned.body);
    assert!(unsigned.header("x-trellis-copy").is_none(), "no copy answers one");
    let forged = b.request("GET", &counter, &["Authorization: Bearer trellis_wrong"], None);
    assert_eq!(forged.status, 401, "the copy signs requests in as the holder does: {}", forged.body);
    let taken = b.metric("trellis_followed_changes_total");
    assert!(taken >= 20.0, "B took every change after its first read: {taken}");
    let log = b.log();
    assert!(!log.contains("only follows") && !log.contains("WARN"), "the copy tried to change nothing: {log}");
}

/// A copy follows the space across a change of holder: the new holder's log goes on
/// from the old one's, and the copy reads it as it did.
#[test]
fn a_copy_follows_the_space_to_its_next_holder() {
    let Some(s) = pg::space() else { return };
    let database = pg::database().expect("the database");
    let auth = bearer(&s);
    let mut a = node(&database, &s.dir.join("a"));
    let (b, c) = (node(&database, &s.dir.join("b")), node(&database, &s.dir.join("c")));
    let counter = format!("/spaces/{}/api/charms/Counter", s.name);
    let increment = format!("{counter}/handlers/increment");
    assert_eq!(a.request("POST", &increment, &[&auth], Some(r#"{"amount": 1}"#)).status, 200, "A holds the space");
    let read = b.request("GET", &counter, &[&auth], None);
    assert!(read.header("x-trellis-copy").is_some() && read.json()["data"]["count"] == 1, "{}", read.body);
    a.kill();
    let started = Instant::now();
    while c.request("POST", &increment, &[&auth], Some(r#"{"amount": 10}"#)).status != 200 {
        assert!(started.elapsed() < Duration::from_secs(10), "C never took the space over");
        std::thread::sleep(Duration::from_millis(100));
    }
    let started = Instant::now();
    loop {
        let read = b.request("GET", &counter, &[&auth], None);
        if read.header("x-trellis-copy").is_some() && read.json()["data"]["count"] == 11 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "B's copy never took C's change: {}", read.body);
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A space slow to open (its lease row locked by a transaction left open, as a database
/// slow to answer would hold it) holds up no other space on the same node.
#[test]
fn a_space_slow_to_open_holds_up_no_other() {
    let Some(slow) = pg::space() else { return };
    let quick = pg::space().expect("another space");
    let database = pg::database().expect("the database");
    let (slow_auth, quick_auth) = (bearer(&slow), bearer(&quick));
    let mut sql = postgres::Client::connect(&database, postgres::NoTls).expect("connect");
    let mut locked = sql.transaction().expect("begin");
    locked
        .execute(
            "INSERT INTO trellis_leases (space, epoch, holder, addr, expires_at) VALUES ($1, 1, 'test', NULL, now()) \
             ON CONFLICT (space) DO UPDATE SET holder = 'test'",
            &[&slow.name],
        )
        .expect("lock the lease row");
    let a = node(&database, &slow.dir.join("a"));
    std::thread::scope(|scope| {
        let opening =
            scope.spawn(|| a.request("GET", &format!("/spaces/{}/api/charms", slow.name), &[&slow_auth], None));
        std::thread::sleep(Duration::from_millis(500));
        assert!(!opening.is_finished(), "the slow space waits for its lease row");
        let started = Instant::now();
        let other = a.request("GET", &format!("/spaces/{}/api/charms", quick.name), &[&quick_auth], None);
        assert_eq!(other.status, 200, "{}", other.body);
        assert!(started.elapsed() < Duration::from_secs(3), "the other space waited {:?}", started.elapsed());
        locked.rollback().expect("let go of the lease row");
        let slowest = opening.join().expect("the slow request");
        assert_eq!(slowest.status, 200, "opened once the row was let go of: {}", slowest.body);
    });
}

/// An MCP host (the Python SDK's client) subscribed to a charm through a node that does
/// not hold the space hears of a change sent through another node: `/spaces/NAME/mcp` is
/// forwarded to the holder like the rest of the space, and wants the space's token.
#[test]
fn an_mcp_subscription_through_another_node_hears_the_holders_changes() {
    use std::io::{BufRead, BufReader};
    let Some(s) = pg::space() else { return };
    let database = pg::database().expect("the database");
    let auth = bearer(&s);
    let a = node(&database, &s.dir.join("a"));
    let b = node(&database, &s.dir.join("b"));
    assert_eq!(count(&a, &s, &auth), 0, "node a holds the space");
    let mcp = format!("/spaces/{}/mcp", s.name);
    let refused = b.request("POST", &mcp, &[], Some("{}"));
    assert_eq!(refused.status, 401, "no token: {}", refused.body);

    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    let token = auth.trim_start_matches("Authorization: Bearer ");
    let mut client = Command::new(crate::common::mcp_tools::python())
        .arg(script)
        .args(["observe", "http", &format!("{}{mcp}", b.base())])
        .env("TRELLIS_MCP_TOKEN", token)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the MCP client");
    let mut lines = BufReader::new(client.stdout.take().expect("its output")).lines();
    let first = lines.next().and_then(Result::ok);
    if first.as_deref() != Some("subscribed") {
        let out = crate::common::output_within(client, Duration::from_secs(10), "the MCP client");
        panic!("the client did not subscribe: {first:?} {}", String::from_utf8_lossy(&out.stderr));
    }
    let increment = format!("/spaces/{}/api/charms/Counter/handlers/increment", s.name);
    assert_eq!(a.request("POST", &increment, &[&auth], Some(r#"{"amount": 5}"#)).status, 200);
    let seen: Value = serde_json::from_str(&lines.next().and_then(Result::ok).unwrap_or_default())
        .unwrap_or_else(|error| panic!("the client's answer: {error}"));
    let out = crate::common::output_within(client, Duration::from_secs(60), "the MCP client");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(seen["updated"], json!([seen["counter_uri"]]), "{seen}");
    assert_eq!(seen["counter"]["count"], 5, "{seen}");
}

/// A node listening on every interface must say where the others reach it
/// (`--advertise`); the address it gives is the one kept with the spaces it holds, and
/// the other nodes forward there.
#[test]
fn a_node_on_every_interface_is_reached_at_the_address_it_advertises() {
    let Some(s) = pg::space() else { return };
    let database = pg::database().expect("the database");
    let auth = bearer(&s);
    let everywhere = ["--addr", "0.0.0.0:0", "--allow-remote"];
    let refused = serve(&database, &s.dir.join("x"), &everywhere).output().expect("run trellis serve");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && said.contains("add --advertise http://THIS-HOST:"), "{said}");
    let bad = serve(&database, &s.dir.join("x"), &["--advertise", "http://h:1/path"]).output().expect("run");
    let said = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && said.contains("give http://HOST:PORT"), "{said}");

    let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
    let (addr, advertised) = (format!("0.0.0.0:{port}"), format!("http://127.0.0.1:{port}"));
    let b = Served::spawn(serve(
        &database,
        &s.dir.join("b"),
        &["--addr", &addr, "--allow-remote", "--advertise", &advertised],
    ));
    assert_eq!(count(&b, &s, &auth), 0, "node b holds the space");
    let a = node(&database, &s.dir.join("a"));
    let increment = format!("/spaces/{}/api/charms/Counter/handlers/increment", s.name);
    let sent = a.request("POST", &increment, &[&auth], Some(r#"{"amount": 3}"#));
    assert_eq!(sent.status, 200, "forwarded to {advertised}: {}", sent.body);
    assert_eq!(count(&b, &s, &auth), 3);
    assert!(b.log().contains(&format!("other nodes reach this one at {advertised}")), "{}", b.log());
}

/// A reply streaming on the holder when it is killed goes on on the node that takes the
/// space over, as a restart's would: the cut text kept and marked, the model asked again.
#[test]
fn a_conversation_running_on_a_killed_holder_resumes_on_the_next() {
    let Some(s) = pg::space() else { return };
    let database = pg::database().expect("the database");
    let auth = bearer(&s);
    let provider = Provider::start(vec![Reply::Slow, Reply::Text("Resumed elsewhere.".into())]);
    let env =
        [("OPENAI_API_KEY", "not-checked"), ("OPENAI_BASE_URL", provider.url.as_str()), ("NO_PROXY", "127.0.0.1")];
    let mut a = node_with(&database, &s.dir.join("a"), &env);
    let b = node_with(&database, &s.dir.join("b"), &env);
    let chat = |rest: &str| format!("/spaces/{}/api/chat{rest}", s.name);
    let model = a.request("PUT", &chat("/model"), &[&auth], Some(r#"{"model": "openai:loopback"}"#));
    assert_eq!(model.status, 204, "{}", model.body);
    assert_eq!(a.request("POST", &chat("/messages"), &[&auth], Some(r#"{"text": "hello"}"#)).status, 202);
    let started = Instant::now();
    while provider.received().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(60), "the request never reached the model");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(800));
    a.kill();

    let started = Instant::now();
    let state = loop {
        let got = b.request("GET", &chat(""), &[&auth], None);
        if got.status == 200 {
            let state = got.json();
            if state["pending"] == false && state["messages"].as_array().is_some_and(|m| m.len() >= 3) {
                break state;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the reply did not go on: {} {}", got.status, got.body);
        std::thread::sleep(Duration::from_millis(100));
    };
    crate::durable::assert_resumed(&state, "Resumed elsewhere.");
    assert_eq!(provider.received().len(), 2, "asked once more, by the new holder");
}

/// The page of a space at `/spaces/NAME/`: a bearer token of the space signs in (there is
/// no one-time link on a server of many spaces), the cookie is that space's, and the page's
/// files and API answer below the space's path, through another node as well.
#[test]
fn the_page_of_a_space_signs_in_with_its_token_below_its_path() {
    let Some(s) = pg::space() else { return };
    let database = pg::database().expect("the database");
    let made = s.json(&["token", "new", "--name", "page"]);
    let token = made["token"].as_str().expect("a token").to_string();
    let mut a = node(&database, &s.dir.join("a"));
    let b = node(&database, &s.dir.join("b"));
    let home = format!("/spaces/{}/", s.name);
    let bare = a.request("GET", home.trim_end_matches('/'), &[], None);
    assert_eq!((bare.status, bare.header("location")), (308, Some(home.as_str())), "the page's address ends with /");
    assert_eq!(a.request("GET", &format!("{home}?token=trellis_wrong"), &[], None).status, 401);

    let signed = a.request("GET", &format!("{home}?token={token}"), &[], None);
    assert_eq!((signed.status, signed.header("location")), (303, Some(home.as_str())), "{}", signed.body);
    let cookie = signed.header("set-cookie").expect("a session cookie");
    assert!(cookie.contains(&format!("Path={home}")) && cookie.contains("HttpOnly"), "{cookie}");
    let cookie = format!("Cookie: {}", cookie.split(';').next().unwrap());

    let page = b.request("GET", &home, &[], None);
    assert!(page.status == 200 && page.body.contains(r#"src="app.js""#), "the page, relative files: {}", page.body);
    let script = b.request("GET", &format!("{home}app.js"), &[], None);
    assert_eq!((script.status, script.header("content-type")), (200, Some("text/javascript; charset=utf-8")));
    for n in [&a, &b] {
        let chat = n.request("GET", &format!("{home}api/chat"), &[&cookie], None);
        assert_eq!(chat.status, 200, "the cookie works through either node: {}", chat.body);
    }
    let other = pg::space().expect("another space");
    other.ok(&["charm", "list"]);
    let elsewhere = a.request("GET", &format!("/spaces/{}/api/chat", other.name), &[&cookie], None);
    assert_eq!(elsewhere.status, 401, "the cookie is its space's only: {}", elsewhere.body);

    // The session is kept in the space: it holds on the node that takes the space over
    // (once A's lease has run out, B's reads come from the space it holds, not its copy),
    // and ends with its token.
    a.kill();
    let started = Instant::now();
    let chat = loop {
        let chat = b.request("GET", &format!("{home}api/chat"), &[&cookie], None);
        let copy = chat.header("x-trellis-copy").is_some();
        if !copy && chat.status != 502 && chat.status != 503 || started.elapsed() > Duration::from_secs(30) {
            break chat;
        }
        assert!(!copy || chat.status == 200, "B's copy answers while A's lease runs: {}", chat.body);
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(chat.status, 200, "the cookie works on the new holder: {}", chat.body);
    // A command on a space a node holds goes through that node, proven by the database's
    // secret; a client's mark of a command is not taken for one.
    let forged = b.request("GET", &format!("{home}api/chat"), &["X-Trellis-Command: 1"], None);
    assert_eq!(forged.status, 401, "{}", forged.body);
    let listed = s.json(&["token", "list"]);
    assert!(listed.to_string().contains(made["id"].as_str().expect("its id")), "{listed}");
    s.ok(&["token", "revoke", made["id"].as_str().expect("its id")]);
    let revoked = b.request("GET", &format!("{home}api/chat"), &[&cookie], None);
    assert_eq!(revoked.status, 401, "the session ended with its token: {}", revoked.body);
}
