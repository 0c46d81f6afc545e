//! Typed state that crates above the runner keep per runtime: the tool sources a runtime's
//! catalogs list, for one. One value per type, made on first use and dropped with the
//! runtime, so what one runtime keeps never leaks into another's (no process-global
//! registry keyed by a runtime's address, which a later runtime may reuse).

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::Runtime;

/// The values of [`Runtime::extension`], by type.
#[derive(Default)]
pub(super) struct Extensions(Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>);

impl Runtime {
    /// The runtime's value of type `T`, made with `T::default()` the first time any caller
    /// asks for it. Every clone of the runtime shares it; a type private to a crate keeps
    /// its state to itself.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    ///
    /// #[derive(Default)]
    /// struct Greetings(AtomicU32);
    ///
    /// let rt = trellis_runner::Runtime::in_memory();
    /// rt.extension::<Greetings>().0.fetch_add(1, Ordering::Relaxed);
    /// assert_eq!(rt.clone().extension::<Greetings>().0.load(Ordering::Relaxed), 1);
    /// assert_eq!(trellis_runner::Runtime::in_memory().extension::<Greetings>().0.load(Ordering::Relaxed), 0);
    /// ```
    pub fn extension<T: Default + Send + Sync + 'static>(&self) -> Arc<T> {
        let mut all = self.0.extensions.0.lock();
        let value = all.entry(TypeId::of::<T>()).or_insert_with(|| Arc::new(T::default())).clone();
        drop(all);
        // Stored under its own type id, so the downcast cannot fail; a fresh value stands
        // in rather than a panic all the same.
        value.downcast::<T>().unwrap_or_default()
    }
}
