//! The Trellis runtime: persistent JSON values in durable spaces, typed cells and
//! streams, transactions, a glitch-free scheduler, patterns and charms.
//!
//! Start with [`Runtime`], [`Pattern`] and [`Cell`]; `use trellis_runner::prelude::*`
//! brings in what a pattern author needs.

pub mod builder;
pub mod builtin;
pub mod cell;
pub mod charm;
pub mod depth;
pub mod dirs;
pub mod error;
mod intern;
pub mod limits;
pub mod link;
mod park;
pub mod pattern;
mod prefetch;
pub mod read;
pub mod runtime;
pub mod scheduler;
pub mod schema;
pub mod signal;
pub mod space;
pub mod storage;
pub mod stream;
pub mod tx;
pub mod value;

pub use builder::{Builder, NAME, UI};
pub use builtin::Builtin;
pub use cell::Cell;
pub use charm::{CharmInfo, CharmRecord, Charms};
pub use depth::{check_depth, MAX_DEPTH};
pub use error::{BoxError, Error, Result};
pub use link::{DocId, Link};
pub use pattern::Pattern;
pub use read::Read;
pub use runtime::{
    now_ms, this_process, Changed, Handler, Journal, Later, Observation, Previewed, ReadAt, Runtime, Sent, Stats,
    Undone, WeakRuntime, Writer, Written,
};
pub use schema::Schema;
pub use space::Space;
pub use stream::Stream;
pub use tx::Tx;
pub use value::{Path, Value};

/// What a pattern author needs in scope.
pub mod prelude {
    pub use crate::{BoxError, Builder, Cell, Link, Path, Pattern, Read, Result, Runtime, Schema, Stream, Tx, Value};
    pub use schemars::JsonSchema;
    pub use serde::{Deserialize, Serialize};
}
