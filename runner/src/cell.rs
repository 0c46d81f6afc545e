//! Cells: typed views of one location in a space.
//!
//! A [`Cell<T>`] is a link plus a Rust type. It reads through any [`Read`] (a transaction
//! or the runtime) and writes inside a [`Tx`]. Values cross into Rust through serde, so
//! any `Serialize + Deserialize` type works (`Clone + Send + Sync` too, to be read: a list
//! is read into its type once, and its other readers get copies); a cell whose value is
//! missing reads the schema default (see [`crate::schema`]) when it has a schema, else
//! `null`.
//!
//! A cell serialises as a link, so a struct field of type `Cell<U>` stored in a document
//! is a live reference, and reading the struct gives back a working cell.

use std::marker::PhantomData;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::intern::{self, Location};
use crate::link::Link;
use crate::read::{shaped, Read};
use crate::schema::Schema;
use crate::tx::Tx;
use crate::value::{Segment, Value};

/// A typed view of one location.
///
/// `Copy`: capture a cell in as many handlers as need it. Its location is interned:
/// stored once per distinct location for the life of the process.
pub struct Cell<T> {
    at: &'static Location,
    _type: PhantomData<fn() -> T>,
}

impl<T> Clone for Cell<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Cell<T> {}

impl<T> std::fmt::Debug for Cell<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cell({})", self.at.link)
    }
}

impl<T> PartialEq for Cell<T> {
    fn eq(&self, other: &Self) -> bool {
        self.at.link == other.at.link
    }
}

impl<T> Cell<T> {
    /// The cell at `link`.
    pub fn from_link(link: Link) -> Self {
        Cell { at: intern::plain(link), _type: PhantomData }
    }

    /// This cell shaped by `schema`: reads apply its defaults and turn `asCell` /
    /// `asStream` properties into links.
    pub fn with_schema(self, schema: Schema) -> Self {
        Cell { at: intern::shaped(self.at.link.clone(), Some(Arc::new(schema))), _type: PhantomData }
    }

    /// The location this cell views.
    pub fn link(&self) -> &Link {
        &self.at.link
    }

    /// A cell for one key (or array index) below this one.
    pub fn key<U>(&self, key: impl Into<Segment>) -> Cell<U> {
        let key = key.into();
        let schema = self.at.schema.as_ref().and_then(|s| s.property(&key)).map(Arc::new);
        Cell { at: intern::shaped(self.at.link.child(key), schema), _type: PhantomData }
    }

    /// The same location viewed as another type.
    pub fn cast<U>(&self) -> Cell<U> {
        Cell { at: self.at, _type: PhantomData }
    }

    /// The raw value, links followed, schema applied.
    pub fn get_value(&self, r: &(impl Read + ?Sized)) -> Result<Value> {
        match &self.at.schema {
            Some(schema) => {
                let (at, value) = r.resolve(&self.at.link)?;
                Ok(schema.shape(&at, value))
            }
            None => r.read(&self.at.link),
        }
    }

    /// Writes a raw value.
    pub fn set_value(&self, tx: &Tx, value: Value) -> Result<()> {
        tx.write(&self.at.link, value)
    }
}

impl<T: Serialize + DeserializeOwned + Clone + Send + Sync + 'static> Cell<T> {
    /// The current value. A list is read into `T` once: its next readers get a copy (see
    /// [`Value::read_as`]).
    pub fn get(&self, r: &impl Read) -> Result<T> {
        match &self.at.schema {
            None => r.read_as(&self.at.link),
            Some(_) => match self.get_value(r) {
                Ok(ref value) => shaped(&self.at.link, value.read_as()),
                Err(error) => Err(error),
            },
        }
    }

    /// Replaces the value.
    pub fn set(&self, tx: &Tx, value: T) -> Result<()> {
        let value = Value::from_typed(&value).map_err(Error::Serialize)?;
        tx.write(&self.at.link, value)
    }

    /// Replaces the value with `f(current)`.
    pub fn update(&self, tx: &Tx, f: impl FnOnce(T) -> T) -> Result<()> {
        let next = f(self.get(tx)?);
        self.set(tx, next)
    }
}

impl<T: Serialize + DeserializeOwned> Cell<Vec<T>> {
    /// Appends an item to the list (an absent list counts as empty).
    pub fn push(&self, tx: &Tx, item: T) -> Result<()> {
        let len = match self.get_value(tx)? {
            Value::Array(items) => items.len(),
            _ => {
                self.set_value(tx, Value::Array(Default::default()))?;
                0
            }
        };
        let item = Value::from_serialize(&item).map_err(Error::Serialize)?;
        tx.write(&self.at.link.child(len.to_string()), item)
    }

    /// The item at `index`.
    pub fn item(&self, index: usize) -> Cell<T> {
        self.key(index.to_string())
    }
}

impl<T> Serialize for Cell<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        crate::link::serialize_as_link(&self.at.link, s)
    }
}

impl<'de, T> Deserialize<'de> for Cell<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        crate::link::deserialize_link(d, "cell").map(Cell::from_link)
    }
}
