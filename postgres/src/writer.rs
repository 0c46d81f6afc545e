//! The writer: group commit ([`trellis_runner::storage::group`]), each group one
//! PostgreSQL statement, so one transaction and one round trip, under the lease:
//!
//! 1. it reads the lease row `FOR SHARE`, and writes only if the row holds this node's
//!    epoch (the lock keeps the lease from changing hands until the commit; see
//!    [`crate::lease`]);
//! 2. it upserts the group's documents (arrays through `unnest`, however many), each only
//!    if its version grows, so that a write that arrives late can never put an older
//!    version back;
//! 3. it appends one row to the change log, with the next sequence number, and sends one
//!    `NOTIFY` (`space:seq`) to wake the nodes that follow the space.
//!
//! The statement commits on its own; only then are the tickets resolved. It answers one
//! row when it wrote, none when the epoch was not this node's (then it wrote nothing).
//!
//! A lost lease refuses everything, for good.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use postgres::{Client, Statement};
use trellis_runner::storage::group::{Counters, GroupWriter, Refusal};
use trellis_runner::storage::{StorageError, StoredDoc};

use crate::connect::Connector;
use crate::storage::Shared;
use crate::{pool, schema};

/// The name of the writer's thread.
pub(crate) const WRITER_THREAD: &str = "trellis-pg-writer";

/// The space's last sequence number in the change log.
const LAST_SEQ: &str = "SELECT coalesce(max(seq), 0) FROM trellis_changes WHERE space = $1";

/// One group's documents (`$4` ids, `$5` versions, `$6` JSON texts, each id once), its
/// change-log row (`$2` its sequence number, `$3` the ids as a JSON array) and its
/// wake-up, written only while the lease row holds epoch `$7`, which it locks so that it
/// cannot change hands before the statement commits.
const WRITE: &str = r#"WITH lease AS (
    SELECT epoch FROM trellis_leases WHERE space = $1 AND epoch = $7 FOR SHARE
), written AS (
    INSERT INTO trellis_documents AS d (space, id, version, value)
    SELECT $1, w.id, w.version, w.value FROM unnest($4::text[], $5::bigint[], $6::text[]) AS w(id, version, value)
    WHERE EXISTS (SELECT 1 FROM lease)
    ON CONFLICT (space, id) DO UPDATE SET version = EXCLUDED.version, value = EXCLUDED.value
        WHERE d.version < EXCLUDED.version
), logged AS (
    INSERT INTO trellis_changes (space, seq, ids) SELECT $1, $2, $3 WHERE EXISTS (SELECT 1 FROM lease) RETURNING seq
)
SELECT pg_notify('trellis_changes', $1::text || ':' || logged.seq::text) FROM logged"#;

/// A document ready to be bound to [`WRITE`].
pub(crate) struct Row {
    id: String,
    version: i64,
    value: String,
}

/// The space's last sequence number in the change log, read once the lease is ours.
pub(crate) fn last_seq(client: &mut Client, connector: &Connector, space: &str) -> Result<i64, StorageError> {
    client
        .query_one(LAST_SEQ, &[&space])
        .and_then(|row| row.try_get(0))
        .map_err(|error| connector.error("read the space's change log", &error))
}

/// The writer's state: one space's, on the thread of its group commit.
pub(crate) struct Writer {
    /// The space's URL, for errors.
    connector: Connector,
    /// The node's writer connections to the database.
    pool: Arc<WriterPool>,
    shared: Arc<Shared>,
    /// The next change's sequence number; `None` after a failed transaction, whose
    /// commit may or may not have happened, until the next one reads it from the log.
    next_seq: Option<i64>,
}

/// The node's writer connections to one database.
pub(crate) type WriterPool = pool::Pool<Statements>;

/// The writer's prepared statements, on one connection.
pub(crate) struct Statements {
    last_seq: Statement,
    write: Statement,
}

impl Statements {
    /// Creates Trellis's tables if missing (they must be there to prepare statements on
    /// them), then prepares the writer's statements.
    pub(crate) fn prepare(client: &mut Client, connector: &Connector) -> Result<Statements, StorageError> {
        schema::ensure(client, connector)?;
        let prepare = |client: &mut Client| -> Result<Statements, postgres::Error> {
            let last_seq = client.prepare(LAST_SEQ)?;
            let write = client.prepare(WRITE)?;
            Ok(Statements { last_seq, write })
        };
        prepare(client).map_err(|error| connector.error("prepare the writer's statements", &error))
    }
}

impl Writer {
    pub(crate) fn new(connector: Connector, pool: Arc<WriterPool>, shared: Arc<Shared>, last_seq: i64) -> Writer {
        Writer { connector, pool, shared, next_seq: Some(last_seq + 1) }
    }

    /// Writes the given transactions, in order, in one PostgreSQL transaction.
    fn write_rows(&mut self, txns: &[&Vec<Row>]) -> Result<(), StorageError> {
        if txns.iter().all(|rows| rows.is_empty()) {
            return Ok(());
        }
        // One statement may not upsert a row twice: the group's last write of each
        // document is the one that counts (versions grow in submission order).
        let mut latest: BTreeMap<&str, &Row> = BTreeMap::new();
        for row in txns.iter().flat_map(|rows| rows.iter()) {
            latest.insert(&row.id, row);
        }
        let pool = Arc::clone(&self.pool);
        let result = pool.with(|conn| self.commit(conn, &latest));
        if result.is_err() {
            self.next_seq = None;
        }
        result
    }

    /// Commits the group's documents, `latest`, under the lease.
    fn commit(&mut self, conn: &mut pool::Conn<Statements>, latest: &BTreeMap<&str, &Row>) -> Result<(), StorageError> {
        let ids: Vec<&str> = latest.keys().copied().collect();
        let versions: Vec<i64> = latest.values().map(|row| row.version).collect();
        let values: Vec<&str> = latest.values().map(|row| row.value.as_str()).collect();
        let logged = serde_json::Value::from(ids.clone()).to_string();

        let connector = &self.connector;
        let error = |error: postgres::Error| connector.error("write the space", &error);
        let statements = &conn.statements;
        let space = &self.shared.space;
        let client = &mut conn.client;
        let seq = match self.next_seq {
            Some(seq) => seq,
            // Only this node writes the log while its epoch holds, which the write checks.
            None => client
                .query_one(&statements.last_seq, &[space])
                .and_then(|row| row.try_get::<_, i64>(0))
                .map_err(error)?
                .saturating_add(1),
        };
        let epoch = self.shared.epoch;
        let wrote = client.query(&statements.write, &[space, &seq, &logged, &ids, &versions, &values, &epoch]);
        if wrote.map_err(error)?.is_empty() {
            self.shared.lose("another node took the lease");
            return Err(self.shared.lease_lost());
        }
        self.next_seq = Some(seq + 1);
        self.shared.logged.store(seq.unsigned_abs(), Ordering::Release);
        Counters::count(&self.shared.counters.commits);
        Ok(())
    }
}

impl GroupWriter for Writer {
    type Rows = Vec<Row>;

    fn target(&self) -> &str {
        self.connector.target()
    }

    fn encode(&self, writes: Vec<StoredDoc>) -> Result<Vec<Row>, StorageError> {
        encode(writes, &self.connector)
    }

    fn write(&mut self, txns: &[&Vec<Row>]) -> Result<(), StorageError> {
        self.write_rows(txns)
    }

    fn refusal(&self) -> &Refusal {
        &self.shared.refusal
    }

    fn counters(&self) -> &Counters {
        &self.shared.counters
    }

    fn lost(&self) -> Option<StorageError> {
        self.shared.lost().then(|| self.shared.lease_lost())
    }
}

/// Turns one transaction's documents into rows, serializing each value to JSON text.
fn encode(writes: Vec<StoredDoc>, connector: &Connector) -> Result<Vec<Row>, StorageError> {
    writes
        .into_iter()
        .map(|doc| {
            let Ok(version) = i64::try_from(doc.version) else {
                return Err(connector.fault(
                    format!(
                        "version {} of document {} is larger than PostgreSQL can store ({})",
                        doc.version,
                        doc.id,
                        i64::MAX
                    ),
                    "",
                ));
            };
            if doc.id.contains('\0') {
                return Err(connector.fault(
                    format!("document id {:?} holds a NUL character, which PostgreSQL text cannot hold", doc.id),
                    "",
                ));
            }
            match serde_json::to_string(&doc.value) {
                Ok(value) => Ok(Row { id: doc.id, version, value }),
                Err(source) => Err(StorageError::Corrupt { id: doc.id, source }),
            }
        })
        .collect()
}
