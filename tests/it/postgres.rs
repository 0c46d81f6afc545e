//! Spaces in PostgreSQL from the command line, against a real server (see
//! `common::postgres`): the commands work on `--space postgres://...?space=NAME` as on a
//! file, a second process is told which node holds the space, `trellis space copy` goes
//! there and back with the same documents, and a bad URL or login is a clear error.

use serde_json::json;
use trellis_runner::storage::{SqliteSnapshot, Storage as _, StoredDoc};

use crate::common;
use common::postgres as pg;

/// The documents of a SQLite space file as stored: id, version and value, in id order.
fn sqlite_documents(path: &std::path::Path) -> Vec<StoredDoc> {
    SqliteSnapshot::open(path).expect("open the space file").load().expect("its documents")
}

#[test]
fn the_commands_work_on_a_space_in_postgres_across_processes() {
    let Some(s) = pg::space() else { return };
    let names: Vec<String> =
        s.json(&["charm", "list"]).as_array().unwrap().iter().map(|c| c["name"].to_string()).collect();
    assert!(names.iter().any(|n| n.contains("Counter")), "a fresh space is seeded: {names:?}");
    s.ok(&["charm", "send", "Counter", "increment", r#"{"amount": 3}"#]);
    assert_eq!(s.json(&["charm", "get", "Counter"])["count"], 3, "kept by the database between processes");

    let chat = s.ok(&["chat", "-m", "@Counter add 5"]);
    assert!(chat.contains("→ Counter.increment"), "{chat}");
    assert_eq!(s.json(&["charm", "get", "Counter"])["count"], 8);

    let made = s.json(&["token", "new", "--name", "ci"]);
    assert!(made["token"].as_str().is_some_and(|t| t.starts_with("trellis_")), "{made}");
    let listed = s.json(&["token", "list"]);
    assert_eq!(listed[0]["name"], "ci", "{listed}");
}

#[test]
fn a_copy_to_postgres_and_back_holds_the_same_documents() {
    let Some(s) = pg::space() else { return };
    let first = s.dir.join("first.sqlite");
    let back = s.dir.join("back.sqlite");
    let local = |args: &[&str]| common::ok(&first, args);
    local(&["charm", "send", "Counter", "increment", r#"{"amount": 2}"#]);
    local(&["chat", "-m", "@Counter add 5"]);
    local(&["token", "new", "--name", "copied"]);

    let there = common::ok(&first, &["space", "copy", first.to_str().unwrap(), &s.url]);
    assert!(there.contains("read back, the same") && !there.contains("PGPASSWORD"), "{there}");
    assert_eq!(s.json(&["charm", "get", "Counter"])["count"], 7, "the copy in the database works");
    let chat = s.json(&["charm", "get", "Chat"]);
    assert!(chat["messages"].as_array().is_some_and(|m| m.len() >= 3), "the conversation came along: {chat}");

    let report: serde_json::Value =
        serde_json::from_str(&common::ok(&first, &["--json", "space", "copy", &s.url, back.to_str().unwrap()]))
            .expect("JSON");
    assert_eq!(report["checked"], json!(true), "{report}");
    assert_eq!(sqlite_documents(&first), sqlite_documents(&back), "there and back: the same documents");

    // Never into a space that holds documents.
    let refused = common::fails(&first, &["space", "copy", back.to_str().unwrap(), &s.url]);
    assert!(refused.contains("already holds") && refused.contains("never merges"), "{refused}");
}

#[test]
fn a_space_held_by_a_running_node_is_refused_naming_the_node() {
    let Some(s) = pg::space() else { return };
    s.ok(&["charm", "list"]);
    let mut serve = s
        .trellis()
        .args(["serve", "--addr", "127.0.0.1:0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("trellis serve");
    let mut said = String::new();
    let stderr = serve.stderr.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    while !said.contains("serve: open http://") {
        said.push_str(&lines.next().expect("the server's address").expect("its log"));
    }
    let refused = s.fails(&["charm", "send", "Counter", "increment", "{}"]);
    serve.kill().unwrap();
    serve.wait().unwrap();
    assert!(refused.contains("is held by node") && refused.contains(&s.name), "{refused}");
}

#[test]
fn bad_urls_and_logins_are_clear_errors() {
    let Some(database) = pg::database() else { return };
    let dir = tempfile::tempdir().unwrap();
    let run = |url: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_trellis"))
            .args(["--space", url, "charm", "list"])
            .env("XDG_CONFIG_HOME", dir.path())
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{url} should fail");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let nameless = run(&database);
    assert!(nameless.contains("space="), "names the missing parameter: {nameless}");
    let mut elsewhere = reqwest::Url::parse(&database).expect("the test database's URL");
    elsewhere.set_path("/no_such_database");
    let missing = run(&pg::with_param(elsewhere.as_str(), "space", "x"));
    assert!(missing.contains("no_such_database") || missing.contains("does not exist"), "{missing}");
    let nobody = run("postgres://trellis@127.0.0.1:1/trellis?space=x");
    assert!(nobody.contains("127.0.0.1:1") || nobody.contains("running"), "{nobody}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "nothing made in the current directory");
}
