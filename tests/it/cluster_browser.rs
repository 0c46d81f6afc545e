//! The page of a space on a server of many spaces (`trellis serve --database`), end to end in
//! headless Chromium driven by Playwright (see `serve_browser`): signed in with a bearer
//! token at `/spaces/NAME/?token=` on a node that does not hold the space, which forwards
//! the page's every request to the node that does; a message to the offline model changes
//! the Counter; the page of another space, with only the first space's cookie, is refused.
//! Screenshots of each step land in `target/tmp/serve-screenshots/cluster`.

#![cfg(unix)]

use std::process::Command;

use crate::common::postgres::{self as pg, PgSpace};
use crate::common::server::Served;
use crate::serve_browser::browse_at;

/// `trellis serve --database DATABASE --lease 1` on a port of its own (as `cluster`'s nodes).
fn node(database: &str, config: &std::path::Path) -> Served {
    let mut command = Command::new(env!("CARGO_BIN_EXE_trellis"));
    command
        .args(["serve", "--database", database, "--addr", "127.0.0.1:0", "--lease", "1"])
        .env_remove("TRELLIS_SPACE")
        .env_remove("OPENAI_API_KEY")
        .env("XDG_CONFIG_HOME", config);
    Served::spawn(command)
}

/// A new bearer token of `space` (which makes the space).
fn token(space: &PgSpace) -> String {
    space.json(&["token", "new", "--name", "browser"])["token"].as_str().expect("a token").to_string()
}

/// Node B forwards the page of a space A holds: sign-in, the charms, a message to the
/// offline model and its Counter; another space's page, with this one's cookie only, refused.
#[test]
fn the_page_of_a_space_through_another_node_in_a_real_browser() {
    let Some(s) = pg::space() else { return };
    let other = pg::space().expect("another space");
    let database = pg::database().expect("the database");
    let (token, other_token) = (token(&s), token(&other));
    let auth = format!("Authorization: Bearer {token}");
    let a = node(&database, &s.dir.join("a"));
    let b = node(&database, &s.dir.join("b"));

    // A holds both spaces (the first request to each opens it there); B forwards to A.
    let counter = format!("/spaces/{}/api/charms/Counter", s.name);
    let before = a.request("GET", &counter, &[&auth], None);
    assert_eq!((before.status, &before.json()["data"]["count"]), (200, &0.into()), "{}", before.body);
    let other_auth = format!("Authorization: Bearer {other_token}");
    let own = a.request("GET", &format!("/spaces/{}/api/chat", other.name), &[&other_auth], None);
    assert_eq!(own.status, 200, "the other space answers its own token: {}", own.body);

    let sign_in = format!("{}/spaces/{}/?token={token}", b.base(), s.name);
    let elsewhere = format!("{}/spaces/{}/", b.base(), other.name);
    let shots = browse_at("cluster.py", &sign_in, &[&elsewhere]);
    for step in ["40-charms", "41-counter-added", "42-other-space-refused", "43-copied-cookie-refused"] {
        assert!(shots.join(format!("{step}.png")).exists(), "screenshot {step}");
    }

    // The page's message reached the space: through either node, with the bearer token.
    for n in [&a, &b] {
        let after = n.request("GET", &counter, &[&auth], None);
        assert_eq!((after.status, &after.json()["data"]["count"]), (200, &5.into()), "{}", after.body);
    }
}
