//! Several `trellis serve --database` nodes on loopback sharing one PostgreSQL database
//! (see `common::postgres`): a request names its space, a node that does not hold the space
//! forwards it to the one that does, a token of one space is refused on another, and when
//! the holder is killed another node takes the space over once its lease runs out, with
//! nothing acknowledged lost.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::postgres::{self as pg, PgSpace};
use crate::common::server::Served;

/// The lease the nodes of these tests hold a space by, in seconds.
const LEASE: &str = "1";

/// `trellis serve --database DB` on a port of its own.
fn node(database: &str, config: &std::path::Path) -> Served {
    let mut command = Command::new(env!("CARGO_BIN_EXE_trellis"));
    command
        .args(["serve", "--database", database, "--addr", "127.0.0.1:0", "--lease", LEASE])
        .env_remove("TRELLIS_SPACE")
        .env_remove("OPENAI_API_KEY")
        .env("XDG_CONFIG_HOME", config);
    Served::spawn(command)
}

/// A bearer token of `space`, as the `Authorization` header.
fn bearer(space: &PgSpace) -> String {
    let made = space.json(&["token", "new", "--name", "cluster"]);
    format!("Authorization: Bearer {}", made["token"].as_str().expect("a token"))
}

fn count(node: &Served, space: &PgSpace, auth: &str) -> Value {
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
    assert_eq!(count(&b, &s, &auth), 2, "read through B as well");

    // A token is its space's: refused on another, on either node.
    for n in [&a, &b] {
        let refused = n.request("GET", &format!("/spaces/{}/api/charms", other.name), &[&auth], None);
        assert_eq!(refused.status, 401, "{}", refused.body);
        let own = n.request("GET", &format!("/spaces/{}/api/charms", other.name), &[&other_auth], None);
        assert_eq!(own.status, 200, "{}", own.body);
    }
    let nowhere = b.request("GET", "/api/charms", &[&auth], None);
    assert_eq!(nowhere.status, 404, "a request names its space: {}", nowhere.body);

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
