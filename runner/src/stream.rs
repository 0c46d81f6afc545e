//! Streams: locations whose events go to a handler.
//!
//! A stream is stored as a marker (`{"$stream": {"schema": ...}}`) in its charm's result,
//! so anyone can see it is a stream and what events it takes, even while the charm is not
//! running. [`Runtime::send`] starts the charm if needed; an event is never dropped.

use std::marker::PhantomData;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::intern::{self, Location};
use crate::link::Link;
use crate::runtime::{Runtime, Sent};

/// A typed handle to a stream that takes events of type `E`; `Copy`, like [`Cell`](crate::Cell).
pub struct Stream<E> {
    at: &'static Location,
    _event: PhantomData<fn(E)>,
}

impl<E> Clone for Stream<E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E> Copy for Stream<E> {}

impl<E> std::fmt::Debug for Stream<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream({})", self.at.link)
    }
}

impl<E> Stream<E> {
    /// The stream at `link`.
    pub fn from_link(link: Link) -> Self {
        Stream { at: intern::plain(link), _event: PhantomData }
    }

    /// Where the stream lives.
    pub fn link(&self) -> &Link {
        &self.at.link
    }
}

impl<E: Serialize> Stream<E> {
    /// Sends an event and waits until the handler's transaction is committed, the
    /// computations it affected have re-run, and the commit is durable.
    pub async fn send(&self, rt: &Runtime, event: E) -> Result<Sent> {
        let json = serde_json::to_value(event).map_err(Error::Serialize)?;
        rt.send(&self.at.link, json).await
    }
}

impl<E> Serialize for Stream<E> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        crate::link::serialize_as_link(&self.at.link, s)
    }
}

impl<'de, E> Deserialize<'de> for Stream<E> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        crate::link::deserialize_link(d, "stream").map(Stream::from_link)
    }
}
