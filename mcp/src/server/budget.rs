//! How many subscriptions may be open at once: a [`Budget`] whose parts are given back when
//! a subscription ends, or, for a `subscriptions/listen` stream, as soon as its request is
//! cancelled.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::STREAM_START;

/// How many subscriptions may be open at once.
pub(crate) struct Budget {
    used: AtomicUsize,
    cap: usize,
    ttl: Duration,
    /// Parts set aside when a stream's filter was accepted (counted in `used`), claimed
    /// when it starts: a client may open its next stream as soon as it reads the
    /// acknowledgement, before the first has started, and must not be told there is room
    /// that is already promised.
    reserved: Mutex<Vec<(Instant, usize)>>,
    /// The parts of running streams, each with its request's cancellation. The server
    /// cancels a request as it reads the client's `notifications/cancelled`, but the
    /// stream's task ends a moment later, on another thread: a client that ends its
    /// streams and opens another at once must find the room they took already free.
    streams: Mutex<Vec<(CancellationToken, Arc<Part>)>>,
}

/// `n` of the budget, counted in use until given back (once).
struct Part {
    n: usize,
    back: AtomicBool,
}

impl Budget {
    /// A budget of `cap` subscriptions.
    pub(crate) fn new(cap: usize) -> Arc<Self> {
        Self::with_ttl(cap, STREAM_START)
    }

    fn with_ttl(cap: usize, ttl: Duration) -> Arc<Self> {
        Arc::new(Budget { used: AtomicUsize::new(0), cap, ttl, reserved: Mutex::default(), streams: Mutex::default() })
    }

    /// How many more can be opened now (what is set aside for a stream is not).
    pub(crate) fn left(&self) -> usize {
        self.expire();
        self.cap.saturating_sub(self.used.load(Ordering::Acquire))
    }

    /// Takes `n` of the budget until the [`Held`] is dropped; `None` if fewer are left.
    pub(crate) fn take(self: &Arc<Self>, n: usize) -> Option<Held> {
        self.expire();
        self.add(n).then(|| self.held(n))
    }

    /// Sets `n` aside for a stream about to start; `false` if fewer are left.
    pub(crate) fn reserve(&self, n: usize) -> bool {
        self.expire();
        let added = self.add(n);
        if added {
            self.reserved.lock().push((Instant::now(), n));
        }
        added
    }

    /// What a starting stream needs: `n` set aside for it by [`Budget::reserve`], or `n`
    /// more taken now; `None` if neither is there. The part comes back when the [`Held`]
    /// is dropped or `cancelled` is, whichever is first.
    pub(crate) fn claim(self: &Arc<Self>, n: usize, cancelled: &CancellationToken) -> Option<Held> {
        self.expire();
        let mut reserved = self.reserved.lock();
        let held = match reserved.iter().position(|(_, part)| *part == n) {
            Some(at) => {
                reserved.swap_remove(at);
                drop(reserved);
                self.held(n)
            }
            None => {
                drop(reserved);
                self.take(n)?
            }
        };
        self.streams.lock().push((cancelled.clone(), Arc::clone(&held.part)));
        Some(held)
    }

    fn held(self: &Arc<Self>, n: usize) -> Held {
        Held { budget: Arc::clone(self), part: Arc::new(Part { n, back: AtomicBool::new(false) }) }
    }

    /// Counts `n` more in use, if there is room.
    fn add(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| used.checked_add(n).filter(|&u| u <= self.cap))
            .is_ok()
    }

    fn give_back(&self, part: &Part) {
        if !part.back.swap(true, Ordering::AcqRel) {
            self.used.fetch_sub(part.n, Ordering::AcqRel);
        }
    }

    /// Gives back what was set aside for streams that never claimed it, and what streams
    /// whose requests are cancelled hold.
    fn expire(&self) {
        self.reserved.lock().retain(|(at, n)| {
            let keep = at.elapsed() < self.ttl;
            if !keep {
                self.used.fetch_sub(*n, Ordering::AcqRel);
            }
            keep
        });
        self.streams.lock().retain(|(cancelled, part)| {
            if cancelled.is_cancelled() {
                self.give_back(part);
            }
            !part.back.load(Ordering::Acquire)
        });
    }
}

/// A part of a [`Budget`], given back when dropped.
pub(crate) struct Held {
    budget: Arc<Budget>,
    part: Arc<Part>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.give_back(&self.part);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_is_given_back() {
        let budget = Budget::new(3);
        let two = budget.take(2).unwrap();
        assert!(budget.take(2).is_none());
        assert_eq!(budget.left(), 1);
        drop(two);
        assert!(budget.take(3).is_some());
    }

    #[test]
    fn what_is_set_aside_for_a_stream_is_not_offered_again() {
        let budget = Budget::new(4);
        let cancelled = CancellationToken::new();
        assert!(budget.reserve(3));
        assert_eq!(budget.left(), 1, "the promised part is not room");
        assert!(!budget.reserve(2));
        let first = budget.claim(3, &cancelled).unwrap();
        assert_eq!(budget.left(), 1, "claiming moves the part, it takes no more");
        assert!(budget.claim(3, &cancelled).is_none(), "nothing set aside, and no room");
        drop(first);
        assert_eq!(budget.left(), 4);
    }

    #[test]
    fn a_part_never_claimed_comes_back_on_every_path() {
        // A long expiry, and the part made older than it by hand: no scheduler stall
        // between the reservation and the first check can expire it early.
        let ttl = Duration::from_secs(30);
        let budget = Budget::with_ttl(2, ttl);
        assert!(budget.reserve(2));
        assert!(budget.take(1).is_none(), "promised");
        for (at, _) in budget.reserved.lock().iter_mut() {
            *at = at.checked_sub(ttl).expect("the clock reaches 30 s back");
        }
        // `take` (a legacy subscription) sees the room again, not only `accept`'s `left`.
        let held = budget.take(2).expect("the unclaimed part expired");
        drop(held);
        assert_eq!(budget.left(), 2);
        assert!(budget.reserved.lock().is_empty());
    }

    #[test]
    fn a_stream_gives_its_part_back_when_its_request_is_cancelled() {
        let budget = Budget::new(3);
        let cancelled = CancellationToken::new();
        assert!(budget.reserve(2));
        let stream = budget.claim(2, &cancelled).unwrap();
        assert_eq!(budget.left(), 1);
        // Cancelled, and its task not yet ended: the room is free already.
        cancelled.cancel();
        assert_eq!(budget.left(), 3);
        let next = budget.take(3).expect("the cancelled stream's part is free");
        // The task ends now: what it held is not given back twice.
        drop(stream);
        assert_eq!(budget.left(), 0);
        drop(next);
        assert_eq!(budget.left(), 3);
        assert!(budget.streams.lock().is_empty());
    }

    #[test]
    fn a_stream_that_ends_by_itself_is_forgotten() {
        let budget = Budget::new(2);
        let cancelled = CancellationToken::new();
        drop(budget.claim(2, &cancelled).unwrap());
        assert_eq!(budget.left(), 2);
        assert!(budget.streams.lock().is_empty());
        cancelled.cancel();
        assert_eq!(budget.left(), 2, "a later cancellation gives nothing back twice");
    }
}
