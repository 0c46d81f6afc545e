//! Trellis spaces in PostgreSQL, for spaces shared by several nodes (DESIGN.md §10).
//!
//! SQLite stays the embedded default; a space several `trellis serve` nodes share lives in
//! a PostgreSQL database instead, and the unit of distribution is the space:
//!
//! * **One owner per space.** [`PostgresStorage::open`] takes the space's lease (a row
//!   with an epoch that grows at every taking, expiry judged by the database's clock), or
//!   fails with [`StorageError::Owned`] naming the node to send the request to. The owner
//!   runs the engine as with SQLite. A node holding many spaces of one database opens
//!   them through one [`Database`], whose few connections they share.
//! * **Each group commit is one PostgreSQL transaction**, fenced by the epoch, that only
//!   lets versions grow, appends one row to the space's change log and sends one `NOTIFY`.
//! * **Other nodes follow** through a [`ChangeFeed`]: the log is the truth, `NOTIFY` only
//!   wakes them up. A follower keeps a copy to read and to watch ([`FollowerStorage`]),
//!   into which the runtime takes each changed document whole.
//!
//! Documents are stored as JSON text, never `jsonb`, which would reorder keys and rewrite
//! numbers; ids compare byte by byte, as SQLite and Rust compare them. Every connection
//! lives on a thread of this crate: the synchronous client runs a Tokio runtime of its
//! own, which may not be driven from a thread inside another.
//!
//! ```no_run
//! use trellis_postgres::{Holder, PostgresStorage, SpaceUrl};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let url = SpaceUrl::parse("postgres://trellis:secret@db:5432/trellis?space=team-a")?;
//! let storage = PostgresStorage::open(&url, Holder::new("node-1:4242").at("http://10.0.0.5:8080"))?;
//! let runtime = trellis_runner::Runtime::with_storage(Box::new(storage))?;
//! # Ok(()) }
//! ```
//!
//! [`StorageError::Owned`]: trellis_runner::storage::StorageError::Owned

mod connect;
mod database;
mod feed;
mod follower;
mod lease;
mod pool;
mod reader;
mod schema;
mod storage;
mod target;
mod writer;

pub use connect::{cluster_secret, ping, space_exists, CONNECT_TIMEOUT};
pub use database::Database;
pub use feed::{Change, ChangeFeed, LastRead, POLL};
pub use follower::FollowerStorage;
pub use pool::MAX_WRITERS;
pub use reader::READERS;
pub use schema::SCHEMA_VERSION;
pub use storage::{OpenOptions, PostgresStats, PostgresStorage, DEFAULT_LEASE, DEFAULT_STATEMENT_TIMEOUT, MIN_LEASE};
pub use target::{Holder, SpaceUrl, UrlError, MAX_SPACE_NAME};
pub use trellis_runner::storage::group::MAX_GROUP;
