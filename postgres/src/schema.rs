//! Trellis's tables in a PostgreSQL database, shared by every space kept there.
//!
//! * `trellis_documents`: the latest version of each document, its value as JSON **text**
//!   (`jsonb` would reorder keys, drop duplicate ones, refuse `\u0000` and rewrite
//!   numbers, and a document must come back as it was written). Ids compare byte by byte
//!   (`COLLATE "C"`), so listing by prefix sorts as SQLite and Rust sort.
//! * `trellis_changes`: one row per durable batch, with the ids it wrote: what nodes that
//!   follow a space read after a wake-up.
//! * `trellis_leases`: which node owns each space, until when, under which epoch.
//! * `trellis_schema`: the tables' version, for a later Trellis to migrate from.
//!
//! Several nodes may open spaces in a new database at the same moment, and two
//! `CREATE TABLE IF NOT EXISTS` racing each other fail on the catalog's unique index, so
//! creation runs under a transaction-scoped advisory lock. Where the tables exist already
//! nothing is created: a user allowed to write the tables but not to create tables (an
//! administrator made them) opens spaces too.

use postgres::Client;
use trellis_runner::storage::StorageError;

use crate::connect::Connector;

/// The version of the tables this build reads and writes.
pub const SCHEMA_VERSION: i32 = 1;

/// The advisory lock key taken while the tables are created (any fixed number; this one
/// spells "trellis" in ASCII).
const CREATE_LOCK: i64 = 0x0074_7265_6c6c_6973;

const TABLES: [&str; 4] = ["trellis_schema", "trellis_documents", "trellis_changes", "trellis_leases"];

const CREATE: &str = r#"
CREATE TABLE IF NOT EXISTS trellis_schema (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    version integer NOT NULL
);
CREATE TABLE IF NOT EXISTS trellis_documents (
    space text COLLATE "C" NOT NULL,
    id text COLLATE "C" NOT NULL,
    version bigint NOT NULL,
    value text NOT NULL,
    PRIMARY KEY (space, id)
);
CREATE TABLE IF NOT EXISTS trellis_changes (
    space text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    ids text NOT NULL,
    PRIMARY KEY (space, seq)
);
CREATE TABLE IF NOT EXISTS trellis_leases (
    space text COLLATE "C" PRIMARY KEY,
    epoch bigint NOT NULL,
    holder text NOT NULL,
    addr text,
    expires_at timestamptz NOT NULL
);
"#;

/// Makes sure Trellis's tables exist, at a version this build knows.
pub(crate) fn ensure(client: &mut Client, connector: &Connector) -> Result<(), StorageError> {
    let error = |error: postgres::Error| connector.error("create Trellis's tables", &error);
    let version = match installed(client).map_err(error)? {
        Some(version) => version,
        None => {
            let mut tx = client.transaction().map_err(error)?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&CREATE_LOCK]).map_err(error)?;
            tx.batch_execute(CREATE).map_err(error)?;
            tx.execute("INSERT INTO trellis_schema (version) VALUES ($1) ON CONFLICT DO NOTHING", &[&SCHEMA_VERSION])
                .map_err(error)?;
            let version: i32 = tx
                .query_one("SELECT version FROM trellis_schema", &[])
                .and_then(|row| row.try_get(0))
                .map_err(error)?;
            tx.commit().map_err(error)?;
            version
        }
    };
    if version > SCHEMA_VERSION {
        return Err(connector.fault(
            format!(
                "the database's Trellis tables are at version {version}, newer than this build of Trellis reads ({SCHEMA_VERSION})"
            ),
            "upgrade Trellis on this node to the version the other nodes run",
        ));
    }
    Ok(())
}

/// The tables' version, `None` if any table is missing (or the version row is).
fn installed(client: &mut Client) -> Result<Option<i32>, postgres::Error> {
    let names: Vec<&str> = TABLES.to_vec();
    let present: i64 = client
        .query_one("SELECT count(*) FROM unnest($1::text[]) AS t(name) WHERE to_regclass(name) IS NOT NULL", &[&names])?
        .try_get(0)?;
    if present < TABLES.len() as i64 {
        return Ok(None);
    }
    client.query_opt("SELECT version FROM trellis_schema", &[])?.map(|row| row.try_get(0)).transpose()
}
