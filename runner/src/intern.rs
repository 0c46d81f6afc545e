//! Interned locations, so that [`Cell`](crate::Cell) and [`Stream`](crate::Stream) are
//! `Copy`: a pattern's closures capture the same cell without a `.clone()` before each.
//!
//! A location (a link, and for cells an optional schema) is stored once for the life of
//! the process and handles point at it. Plain locations are deduplicated, so memory grows
//! with the number of distinct locations ever used (the cells of the charms a process
//! ran), not with the number of handles made. A cell shaped by a schema
//! ([`Cell::with_schema`](crate::Cell::with_schema)) is stored anew each time: shape cells
//! once and keep the handle.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use parking_lot::RwLock;

use crate::link::Link;
use crate::schema::Schema;

/// One interned location.
#[derive(Debug)]
pub(crate) struct Location {
    pub link: Link,
    pub schema: Option<Arc<Schema>>,
}

static PLAIN: LazyLock<RwLock<HashMap<Link, &'static Location>>> = LazyLock::new(Default::default);

/// The interned location of `link` (no schema).
pub(crate) fn plain(link: Link) -> &'static Location {
    if let Some(found) = PLAIN.read().get(&link) {
        return found;
    }
    let mut table = PLAIN.write();
    table.entry(link.clone()).or_insert_with(|| Box::leak(Box::new(Location { link, schema: None })))
}

/// A location of `link` shaped by `schema`; without a schema, the plain one.
pub(crate) fn shaped(link: Link, schema: Option<Arc<Schema>>) -> &'static Location {
    match schema {
        None => plain(link),
        Some(schema) => Box::leak(Box::new(Location { link, schema: Some(schema) })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Path;

    #[test]
    fn the_same_link_is_stored_once() {
        let a = plain(Link::new("intern-test", Path::new(["a"])));
        let again = plain(Link::new("intern-test", Path::new(["a"])));
        assert!(std::ptr::eq(a, again));
        assert!(!std::ptr::eq(a, plain(Link::new("intern-test", Path::new(["b"])))));
    }
}
