//! What a user is told when the database cannot be used: each message names what to fix,
//! and never the password.

use trellis_postgres::{Holder, PostgresStorage, SpaceUrl};

use crate::server::server;

fn refused(url: &SpaceUrl) -> String {
    match PostgresStorage::open(url, Holder::new("errors")) {
        Ok(_) => panic!("{url} should not open"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn a_missing_database_a_wrong_password_and_no_server_say_what_to_fix() {
    let server = server!();
    let missing = refused(&server.with("dbname=trellis_no_such_database", "errors"));
    assert!(missing.contains("does not exist") && missing.contains("createdb"), "{missing}");
    let wrong = refused(&server.with("password=not-the-password&user=trellis_no_such_user", "errors"));
    assert!(wrong.contains("user and password") && !wrong.contains("not-the-password"), "{wrong}");
    let nobody = refused(&SpaceUrl::parse("postgres://u:secret@127.0.0.1:1/d?space=errors&connect_timeout=2").unwrap());
    assert!(nobody.contains("is PostgreSQL running") && !nobody.contains("secret"), "{nobody}");
}
