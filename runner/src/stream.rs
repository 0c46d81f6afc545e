//! Streams: locations whose events go to a handler.
//!
//! A stream is stored as a marker (`{"$stream": {"schema": ...}}`) in its charm's result,
//! so anyone can see it is a stream and what events it takes, even while the charm is not
//! running. [`Runtime::send`] starts the charm if needed; an event is never dropped.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::intern::{self, Location};
use crate::link::Link;
use crate::runtime::{Runtime, Sent};

/// A typed handle to a stream that takes events of type `E` and whose handler returns
/// `R` (nothing, by default); `Copy`, like [`Cell`](crate::Cell).
pub struct Stream<E, R = ()> {
    at: &'static Location,
    _event: PhantomData<fn(E) -> R>,
}

impl<E, R> Clone for Stream<E, R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E, R> Copy for Stream<E, R> {}

impl<E, R> std::fmt::Debug for Stream<E, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stream({})", self.at.link)
    }
}

impl<E, R> Stream<E, R> {
    /// The stream at `link`.
    pub fn from_link(link: Link) -> Self {
        Stream { at: intern::plain(link), _event: PhantomData }
    }

    /// Where the stream lives.
    pub fn link(&self) -> &Link {
        &self.at.link
    }
}

impl<E: Serialize, R: DeserializeOwned> Stream<E, R> {
    /// Sends an event and waits until the handler's transaction is committed, the
    /// computations it affected have re-run, and the commit is durable.
    pub async fn send(&self, rt: &Runtime, event: E) -> Result<Sent> {
        let json = serde_json::to_value(event).map_err(Error::Serialize)?;
        rt.send(&self.at.link, json).await
    }

    /// [`Stream::send`], then what the handler returned, as `R`.
    pub async fn call(&self, rt: &Runtime, event: E) -> Result<R> {
        let returned = self.send(rt, event).await?.returned.unwrap_or_default();
        R::deserialize(returned).map_err(|source| Error::Shape { at: self.at.link.clone(), source })
    }
}

impl<E, R> Serialize for Stream<E, R> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        crate::link::serialize_as_link(&self.at.link, s)
    }
}

impl<'de, E, R> Deserialize<'de> for Stream<E, R> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        crate::link::deserialize_link(d, "stream").map(Stream::from_link)
    }
}
