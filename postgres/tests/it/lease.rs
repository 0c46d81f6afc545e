//! One owner per space: the lease refuses a second node, is renewed, handed over at a
//! clean close, taken after expiry, and fences an owner that lost it.

use std::time::{Duration, Instant};

use serde_json::json;
use trellis_postgres::{Holder, OpenOptions, PostgresStorage, SpaceUrl};
use trellis_runner::storage::conformance::doc;
use trellis_runner::storage::{Storage, StorageError};

use crate::server::server;

fn open(url: &SpaceUrl, name: &str, lease: Duration) -> Result<PostgresStorage, StorageError> {
    OpenOptions::new().lease(lease).open(url, Holder::new(name))
}

#[test]
fn a_second_node_is_refused_while_the_lease_is_held_and_told_where_to_go() {
    let server = server!();
    let url = server.new_space("lease_refused");
    let first = OpenOptions::new()
        .lease(Duration::from_secs(30))
        .open(&url, Holder::new("node-a:1").at("http://10.0.0.1:8080"))
        .expect("the first node takes the lease");
    assert_eq!(first.epoch(), 1);
    assert!(!first.lease_lost());

    let error = open(&url, "node-b:2", Duration::from_secs(30)).expect_err("the space is held");
    match &error {
        StorageError::Owned { space, holder, addr, expires_in_ms } => {
            assert_eq!(space, url.space());
            assert_eq!(holder, "node-a:1");
            assert_eq!(addr.as_deref(), Some("http://10.0.0.1:8080"));
            assert!((1..=30_000).contains(expires_in_ms), "{expires_in_ms}");
        }
        other => panic!("expected Owned, got {other:?}"),
    }
    let message = error.to_string();
    for part in ["node-a:1", "http://10.0.0.1:8080", "send the request to that node", "wait until its lease expires"] {
        assert!(message.contains(part), "{message}");
    }
}

#[test]
fn closing_the_storage_hands_the_lease_over_at_once() {
    let server = server!();
    let url = server.new_space("lease_handover");
    let first = open(&url, "node-a", Duration::from_secs(60)).expect("open");
    // Queued, not waited for: written before the lease is given back.
    drop(first.submit(vec![doc("kept", 1, json!("from a"))]));
    drop(first);

    let started = Instant::now();
    let second = open(&url, "node-b", Duration::from_secs(60)).expect("the lease was given back");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(second.epoch(), 2, "each taking raises the epoch");
    assert_eq!(second.load_doc("kept").expect("load").map(|d| d.value.to_json()), Some(json!("from a")));
}

#[test]
fn a_renewed_lease_outlives_its_length() {
    let server = server!();
    let url = server.new_space("lease_renewed");
    let owner = open(&url, "node-a", Duration::from_millis(900)).expect("open");
    std::thread::sleep(Duration::from_millis(2500));
    assert!(matches!(open(&url, "node-b", Duration::from_secs(1)), Err(StorageError::Owned { .. })));
    assert!(!owner.lease_lost());
    owner.submit(vec![doc("d", 1, json!(1))]).wait().expect("still the owner");
}

#[test]
fn an_owner_whose_lease_was_taken_writes_nothing_more() {
    let server = server!();
    let url = server.new_space("lease_fenced");
    // A long lease: its renewal does not run during the test, so the writer itself must
    // notice the new epoch, as an owner that was paused would.
    let old = open(&url, "node-a", Duration::from_secs(120)).expect("open");
    old.submit(vec![doc("d", 1, json!("a1"))]).wait().expect("durable");

    // The lease runs out (as if node-a were paused past it) and node-b takes the space.
    server
        .sql()
        .execute("UPDATE trellis_leases SET expires_at = now() - interval '1 second' WHERE space = $1", &[&url.space()])
        .expect("expire the lease");
    let new = open(&url, "node-b", Duration::from_secs(120)).expect("an expired lease is taken");
    assert_eq!((old.epoch(), new.epoch()), (1, 2));

    match old.submit(vec![doc("d", 2, json!("a2")), doc("other", 1, json!("a"))]).wait() {
        Err(StorageError::LeaseLost { space, epoch }) => assert_eq!((space.as_str(), epoch), (url.space(), 1)),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert!(old.lease_lost());
    assert!(old.refusing());
    old.resume();
    let error = old.submit(vec![doc("later", 1, json!(0))]).wait().expect_err("lost for good");
    assert!(matches!(error, StorageError::LeaseLost { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("another node took over the space"), "{message}");
    assert!(message.contains("its later writes were refused"), "{message}");

    // Nothing of the old owner's after the takeover is in the database.
    assert_eq!(new.load_doc("d").expect("load").map(|d| d.version), Some(1));
    assert_eq!(new.load_doc("other").expect("load"), None);
    assert_eq!(new.load_doc("later").expect("load"), None);
    new.submit(vec![doc("d", 2, json!("b2"))]).wait().expect("the new owner writes");

    // The old owner's close does not give back a lease that is no longer its own.
    drop(old);
    assert!(
        matches!(open(&url, "node-c", Duration::from_secs(1)), Err(StorageError::Owned { holder, .. }) if holder == "node-b")
    );
}

#[test]
fn many_spaces_of_one_database_share_a_few_connections_and_keep_their_leases() {
    let server = server!();
    // A name of their own, to count this test's connections among the other tests'.
    let app = server.space("pool");
    let first = server.with(&format!("application_name={app}"), &server.space("pool"));
    let lease = Duration::from_millis(900);
    let database = OpenOptions::new().lease(lease).database(&first).expect("the database");
    let spaces: Vec<PostgresStorage> =
        (0..24).map(|_| database.open(&server.space("pool"), Holder::new("node-a")).expect("open a space")).collect();

    std::thread::scope(|scope| {
        for storage in &spaces {
            scope.spawn(move || {
                for version in 1..=20 {
                    storage.submit(vec![doc("n", version, json!(version))]).wait().expect("durable");
                }
            });
        }
    });
    // Past two leases: every lease is renewed by the one thread.
    std::thread::sleep(lease * 2);
    for storage in &spaces {
        assert!(!storage.lease_lost(), "{storage:?}");
        storage.submit(vec![doc("n", 21, json!(21))]).wait().expect("still the holder");
        assert_eq!(storage.load_doc("n").expect("load").map(|d| d.value.to_json()), Some(json!(21)));
    }

    let count: i64 = server
        .sql()
        .query_one("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", &[&app])
        .expect("count the connections")
        .get(0);
    let most = (trellis_postgres::MAX_WRITERS + trellis_postgres::READERS + 1) as i64;
    assert!((1..=most).contains(&count), "{count} connections for 24 spaces (at most {most})");

    let names: Vec<String> = spaces.iter().map(|storage| storage.target().space().to_owned()).collect();
    drop(spaces);
    for name in names {
        let again = open(&server.url(&name), "node-b", lease).expect("each lease was given back at the close");
        assert_eq!(again.epoch(), 2);
    }
}
