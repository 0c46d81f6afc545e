//! The tests every storage backend passes (`trellis_runner::storage::conformance`), on
//! PostgreSQL: the same ones SQLite's storage passes.

use std::time::Duration;

use trellis_postgres::{Holder, OpenOptions, PostgresStorage, SpaceUrl};
use trellis_runner::storage::conformance::{self, Backend, Counts};

use crate::server::server;

/// One space of the test server.
struct Postgres {
    url: SpaceUrl,
}

impl Backend for Postgres {
    type Storage = PostgresStorage;

    fn open(&self) -> PostgresStorage {
        OpenOptions::new().lease(Duration::from_secs(5)).open(&self.url, Holder::new("conformance")).expect("open")
    }

    fn counts(&self, storage: &PostgresStorage) -> Counts {
        let stats = storage.stats();
        Counts { durable: stats.transactions_durable, failed: stats.transactions_failed, commits: stats.commits }
    }
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            let server = server!();
            conformance::$name(&Postgres { url: server.new_space(stringify!($name)) });
        }
    )*};
}

conformance!(
    round_trip,
    overwrite_keeps_latest_version,
    concurrent_submitters_all_durable,
    reopen_sees_data_and_drop_flushes_queue,
    group_commit_batches,
    failed_transaction_refuses_until_resumed,
    empty_transaction_resolves,
    doc_ids_by_prefix_in_byte_order,
);
