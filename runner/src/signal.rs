//! Observing cells from outside the runtime with `futures-signals` (for UIs and the
//! CLI). The scheduler does not use signals; they only follow committed values.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures_signals::signal::{Mutable, MutableSignalCloned, Signal};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::cell::Cell;
use crate::runtime::{Observation, Runtime};

/// A signal of a cell's committed value; see [`Cell::signal`].
pub struct CellSignal<T: Clone> {
    inner: MutableSignalCloned<Option<T>>,
    /// While this lives, the runtime keeps the signal up to date.
    _observation: Observation,
}

impl<T: Clone> Signal for CellSignal<T> {
    type Item = Option<T>;

    fn poll_change(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.inner).poll_change(cx)
    }
}

impl<T: Serialize + DeserializeOwned + Clone + PartialEq + Send + Sync + 'static> Cell<T> {
    /// A signal of this cell's committed value (`None` while it does not fit `T`). The
    /// runtime stops updating it once the signal is dropped.
    pub fn signal(&self, rt: &Runtime) -> CellSignal<T> {
        let mutable = Mutable::new(self.get(rt).ok());
        let inner = mutable.signal_cloned();
        let cell = *self;
        // Observe where the value really lives: a cell that is an alias (a link) is
        // written at its target, not at its own location.
        let at = crate::read::Read::resolve(rt, self.link()).map(|(at, _)| at).unwrap_or_else(|_| self.link().clone());
        let observation = rt.observe(&at, move |rt| {
            mutable.set_neq(cell.get(rt).ok());
            true
        });
        CellSignal { inner, _observation: observation }
    }
}
