//! Observers: code called after each commit that writes what it watches, for as long as
//! its [`Observation`] lives.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::{Inner, Runtime};
use crate::link::{DocId, Link};
use crate::value::Path;

/// The code of an observer: true to go on observing.
type ObserverFn = dyn Fn(&Runtime) -> bool + Send + Sync;
pub(super) type Observer = Arc<ObserverFn>;

/// An observer's registration (see [`Runtime::observe`]). Dropping it stops the observer
/// and lets go of what its code holds; [`Observation::detach`] keeps the observer until
/// its code returns false instead.
#[must_use = "dropping an Observation stops its observer at once: keep it, or call `detach`"]
pub struct Observation(Option<Registered>);

struct Registered {
    runtime: Weak<Inner>,
    doc: DocId,
    observer: Weak<ObserverFn>,
}

impl Observation {
    /// Leaves the observer registered until its code returns false (or panics), or the
    /// runtime goes.
    pub fn detach(mut self) {
        self.0 = None;
    }
}

impl Drop for Observation {
    fn drop(&mut self) {
        let Some(Registered { runtime, doc, observer }) = self.0.take() else { return };
        let Some(inner) = runtime.upgrade() else { return };
        forget(&inner, &doc, |o| std::ptr::addr_eq(Arc::as_ptr(o), observer.as_ptr()));
    }
}

/// Removes the observers of `doc` that `gone` picks. The document's list goes with its
/// last observer: a server whose clients come and go keeps nothing for those that left.
fn forget(inner: &Inner, doc: &DocId, gone: impl Fn(&Observer) -> bool) {
    inner.observers.remove_if_mut(doc, |_, list| {
        list.retain(|(_, o)| !gone(o));
        list.is_empty()
    });
}

impl std::fmt::Debug for Observation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let doc = self.0.as_ref().map(|r| &r.doc);
        f.debug_struct("Observation").field("doc", &doc).finish()
    }
}

impl Runtime {
    /// Calls `observer` after every commit that writes a path overlapping `link`, while
    /// the returned [`Observation`] lives and `observer` returns true.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// use trellis_runner::prelude::*;
    ///
    /// let rt = Runtime::in_memory();
    /// let count = rt.new_cell("count", 0i64)?;
    /// let heard = Arc::new(AtomicUsize::new(0));
    /// let observation = rt.observe(count.link(), {
    ///     let heard = heard.clone();
    ///     move |_| heard.fetch_add(1, Ordering::SeqCst) < 100
    /// });
    /// rt.transact(|tx| count.set(tx, 1))?;
    /// drop(observation);
    /// rt.transact(|tx| count.set(tx, 2))?;
    /// assert_eq!(heard.load(Ordering::SeqCst), 1, "not called once dropped");
    /// # Ok::<(), trellis_runner::Error>(())
    /// ```
    pub fn observe(&self, link: &Link, observer: impl Fn(&Runtime) -> bool + Send + Sync + 'static) -> Observation {
        let observer: Observer = Arc::new(observer);
        let registered =
            Registered { runtime: Arc::downgrade(&self.0), doc: link.doc.clone(), observer: Arc::downgrade(&observer) };
        self.0.observers.entry(link.doc.clone()).or_default().push((link.path.clone(), observer));
        self.0.observed.store(true, Ordering::Release);
        Observation(Some(registered))
    }

    pub(super) fn notify_observers(&self, changes: &[(DocId, Vec<Path>)]) {
        if !self.0.observed.load(Ordering::Acquire) {
            return;
        }
        for (doc, paths) in changes {
            let hit: Vec<Observer> = match self.0.observers.get(doc) {
                Some(list) => {
                    list.iter().filter(|(p, _)| paths.iter().any(|w| w.overlaps(p))).map(|(_, o)| o.clone()).collect()
                }
                None => continue,
            };
            // An observer that panics is dropped like one that asked to stop.
            let dead: Vec<Observer> =
                hit.into_iter().filter(|o| !catch_unwind(AssertUnwindSafe(|| o(self))).unwrap_or(false)).collect();
            if !dead.is_empty() {
                forget(&self.0, doc, |o| dead.iter().any(|d| Arc::ptr_eq(d, o)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use crate::prelude::*;

    fn counter() -> (Arc<AtomicUsize>, impl Fn(&Runtime) -> bool + Send + Sync + 'static) {
        let count = Arc::new(AtomicUsize::new(0));
        let counting = count.clone();
        (count, move |_: &Runtime| counting.fetch_add(1, Ordering::SeqCst) < 1_000)
    }

    #[test]
    fn a_dropped_observation_stops_its_observer_and_leaves_no_list_behind() {
        let rt = Runtime::in_memory();
        let n = rt.new_cell("n", 0i64).expect("cell");
        let (kept_count, kept_fn) = counter();
        let (dropped_count, dropped_fn) = counter();
        let kept = rt.observe(n.link(), kept_fn);
        let dropped = rt.observe(n.link(), dropped_fn);
        rt.transact(|tx| n.set(tx, 1)).expect("commit");
        drop(dropped);
        rt.transact(|tx| n.set(tx, 2)).expect("commit");
        assert_eq!(dropped_count.load(Ordering::SeqCst), 1, "called before the drop only");
        assert_eq!(kept_count.load(Ordering::SeqCst), 2, "the other observer of the document goes on");
        drop(kept);
        assert!(!rt.0.observers.contains_key(&n.link().doc), "the document's list went with its last observer");
        rt.transact(|tx| n.set(tx, 3)).expect("commit");
        assert_eq!(kept_count.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_detached_observer_lives_until_it_returns_false() {
        let rt = Runtime::in_memory();
        let n = rt.new_cell("n", 0i64).expect("cell");
        let calls = Arc::new(AtomicUsize::new(0));
        let counting = calls.clone();
        rt.observe(n.link(), move |_| counting.fetch_add(1, Ordering::SeqCst) < 1).detach();
        for value in 1..=4 {
            rt.transact(|tx| n.set(tx, value)).expect("commit");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 2, "called until it said stop (the second call)");
        assert!(!rt.0.observers.contains_key(&n.link().doc), "a stopped observer leaves no list behind");
    }

    #[test]
    fn an_observation_outliving_its_runtime_drops_quietly() {
        let rt = Runtime::in_memory();
        let n = rt.new_cell("n", 0i64).expect("cell");
        let (_, observer) = counter();
        let observation = rt.observe(n.link(), observer);
        drop(rt);
        drop(observation);
    }
}
