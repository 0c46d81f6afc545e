//! The change log and its wake-ups: one row per group with consecutive sequence numbers,
//! a `NOTIFY` per group seen on another connection, and followers that read the log.

use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;
use serde_json::json;
use trellis_postgres::{ChangeFeed, Holder, OpenOptions, PostgresStorage, SpaceUrl};
use trellis_runner::storage::conformance::doc;
use trellis_runner::storage::{Durable, Storage};

use crate::server::server;

fn open(url: &SpaceUrl) -> PostgresStorage {
    OpenOptions::new().lease(Duration::from_secs(30)).open(url, Holder::new("owner")).expect("open")
}

/// The space's change log: sequence numbers and the ids each row lists.
fn log(client: &mut postgres::Client, space: &str) -> Vec<(i64, Vec<String>)> {
    client
        .query("SELECT seq, ids FROM trellis_changes WHERE space = $1 ORDER BY seq", &[&space])
        .expect("read the log")
        .iter()
        .map(|row| (row.get(0), serde_json::from_str(row.get(1)).expect("ids are a JSON array")))
        .collect()
}

#[test]
fn the_log_has_one_row_per_group_with_consecutive_numbers_across_owners() {
    let server = server!();
    let url = server.new_space("log_rows");
    let mut sql = server.sql();
    let storage = open(&url);
    storage.submit(vec![doc("b", 1, json!(1)), doc("a", 1, json!(1))]).wait().expect("durable");
    storage.submit(vec![doc("a", 2, json!(2))]).wait().expect("durable");
    storage.submit(Vec::new()).wait().expect("a barrier writes no row");
    assert_eq!(log(&mut sql, url.space()), [(1, vec!["a".to_owned(), "b".to_owned()]), (2, vec!["a".to_owned()])]);

    let tickets: Vec<Durable> = (1..=400).map(|n| storage.submit(vec![doc(&format!("g{n}"), 1, json!(n))])).collect();
    for ticket in tickets {
        ticket.wait().expect("durable");
    }
    let commits = storage.stats().commits;
    drop(storage);
    // A new owner goes on from the last number.
    let next = open(&url);
    next.submit(vec![doc("z", 1, json!(0))]).wait().expect("durable");

    let rows = log(&mut sql, url.space());
    assert_eq!(rows.len() as u64, commits + 1, "one row per PostgreSQL transaction");
    for (at, (seq, _)) in rows.iter().enumerate() {
        assert_eq!(*seq, at as i64 + 1, "consecutive from 1");
    }
    let listed: usize = rows[2..rows.len() - 1].iter().map(|(_, ids)| ids.len()).sum();
    assert_eq!(listed, 400, "every document written is listed once");
    assert_eq!(rows.last().map(|(_, ids)| ids.clone()), Some(vec!["z".to_owned()]));
}

#[test]
fn a_notify_per_group_reaches_another_connection() {
    let server = server!();
    let url = server.new_space("notify");
    let mut listener = server.sql();
    listener.batch_execute("LISTEN trellis_changes").expect("listen");
    let storage = open(&url);
    storage.submit(vec![doc("a", 1, json!(1))]).wait().expect("durable");

    let mut notifications = listener.notifications();
    let mut heard = Vec::new();
    let mut waiting = notifications.timeout_iter(Duration::from_secs(5));
    while let Some(notification) = waiting.next().expect("notifications") {
        // Other tests' spaces share the channel.
        if notification.payload().starts_with(url.space()) {
            heard.push(notification.payload().to_owned());
            break;
        }
    }
    assert_eq!(heard, [format!("{}:1", url.space())]);
}

#[test]
fn a_follower_reads_the_changes_of_the_owner() {
    let server = server!();
    let url = server.new_space("follow");
    let owner = open(&url);
    owner.submit(vec![doc("early", 1, json!("before following"))]).wait().expect("durable");

    let feed = ChangeFeed::follow(&url, None).expect("follow from now");
    owner.submit(vec![doc("a", 1, json!({"n": 1})), doc("b", 1, json!([]))]).wait().expect("durable");
    owner.submit(vec![doc("a", 2, json!({"n": 2}))]).wait().expect("durable");

    let first = feed.recv_timeout(Duration::from_secs(5)).expect("feed").expect("a change within 5 s");
    assert_eq!(first.seq, 2, "the change before following is not delivered");
    let ids: Vec<&str> = first.docs.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["a", "b"]);
    let second = feed.recv_timeout(Duration::from_secs(5)).expect("feed").expect("the next change");
    assert_eq!(second.seq, 3);
    assert_eq!(second.docs, [doc("a", 2, json!({"n": 2}))]);

    // From the beginning of the log: everything, in order.
    let from_start = ChangeFeed::follow(&url, Some(0)).expect("follow from the start");
    let seqs: Vec<u64> =
        (0..3).map(|_| from_start.recv_timeout(Duration::from_secs(5)).expect("feed").expect("a change").seq).collect();
    assert_eq!(seqs, [1, 2, 3]);
}

#[test]
fn a_change_whose_wake_up_was_lost_is_found_by_the_poll() {
    let server = server!();
    let url = server.new_space("poll");
    let owner = open(&url);
    owner.submit(vec![doc("a", 1, json!(1))]).wait().expect("durable");
    let feed = ChangeFeed::follow(&url, None).expect("follow");
    // A log row with no NOTIFY, as if the wake-up had been lost.
    server
        .sql()
        .execute("INSERT INTO trellis_changes (space, seq, ids) VALUES ($1, 2, '[\"a\"]')", &[&url.space()])
        .expect("append to the log");
    let change = feed.recv_timeout(Duration::from_secs(5)).expect("feed").expect("found by the poll");
    assert_eq!(change.seq, 2);
    assert_eq!(change.docs, [doc("a", 1, json!(1))]);
    drop(owner);
}

#[test]
fn a_copy_of_another_nodes_space_takes_its_changes_and_changes_nothing() {
    use trellis_runner::prelude::*;

    let server = server!();
    let url = server.new_space("copy");
    let owner = open(&url);
    owner.submit(vec![doc("a", 1, json!({"n": 1}))]).wait().expect("durable");
    assert_eq!(owner.log_position(), Some(1), "the owner knows how far its log goes");

    let feed = ChangeFeed::follow(&url, None).expect("follow");
    let copy = OpenOptions::new().database(&url).and_then(|db| db.follow(url.space())).expect("copy");
    let copy = Runtime::with_storage(Box::new(copy)).expect("open the copy");
    let n = Link::new("a", Path::root()).child("n");
    assert_eq!(copy.read(&n).expect("read"), Value::from(1), "read as the owner left it");

    let (heard, hear) = std::sync::mpsc::channel();
    let watched = n.clone();
    let _watching = copy.observe(&n, move |rt| heard.send(rt.read(&watched).map(|v| v.to_json())).is_ok());
    owner.submit(vec![doc("a", 2, json!({"n": 2}))]).wait().expect("durable");
    let change = feed.recv_timeout(Duration::from_secs(5)).expect("feed").expect("a change");
    assert_eq!(change.seq, owner.log_position().expect("position"));
    copy.apply_stored(change.docs);
    assert_eq!(hear.recv_timeout(Duration::from_secs(1)).expect("the observer heard").expect("read"), json!(2));

    let written = copy.transact(|tx| tx.write(&Link::new("a", Path::root()).child("n"), Value::from(9)));
    let refused = format!("{:?}", written.expect_err("a copy takes no change"));
    assert!(refused.contains("Following"), "{refused}");
    assert_eq!(owner.load_doc("a").expect("load").map(|d| d.value.to_json()), Some(json!({"n": 2})));
}
