//! What MCP clients watch in a space: one runtime observer per watched thing (the list of
//! charms, or one charm's data), however many clients and subscriptions watch it, and a
//! budget on how many subscriptions may be open at once.
//!
//! A subscription is a receiver of a signal shared by everyone watching the same thing,
//! so a client that subscribes and cancels over and over to a charm that never changes
//! adds nothing. The one observer behind a signal belongs to the signal's entry in the
//! shared map, not to a subscription: the entry goes, and the observer with it, at the
//! first change once no receiver is left, or when the server goes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::watch;
use trellis_runner::charm::CHARMS_DOC;
use trellis_runner::{Link, Observation, Runtime};

/// Something a client can watch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Target {
    /// The charms of the space: one coming, going or renamed changes the tools and the
    /// resources.
    Charms,
    /// The data of the charm with this id.
    Charm(String),
}

impl Target {
    fn link(&self, rt: &Runtime) -> Link {
        match self {
            Target::Charms => Link::new(CHARMS_DOC, trellis_runner::Path::root()),
            Target::Charm(id) => rt.charms().result(&id.as_str().into()),
        }
    }
}

/// The signal of one watched thing, and the observer behind it (stopped when this goes).
struct Watched {
    sender: watch::Sender<()>,
    _observer: Observation,
}

type Signals = Mutex<HashMap<Target, Watched>>;

/// The change signals of one server, shared by all its clients.
#[derive(Clone, Default)]
pub(crate) struct Watches(Arc<Signals>);

impl Watches {
    /// A receiver marked changed after each commit that changes `target` (changes that
    /// come while nobody looks make one).
    pub(crate) fn watch(&self, rt: &Runtime, target: Target) -> watch::Receiver<()> {
        let link = target.link(rt);
        self.watch_at(rt, target, &link)
    }

    /// [`Watches::watch`], with the link `target` has.
    fn watch_at(&self, rt: &Runtime, target: Target, link: &Link) -> watch::Receiver<()> {
        let mut signals = self.0.lock();
        if let Some(watched) = signals.get(&target) {
            return watched.sender.subscribe();
        }
        let (sender, receiver) = watch::channel(());
        let hub = Arc::downgrade(&self.0);
        // Registered under the lock, so a retiring observer of the same target (which
        // takes the lock too) never removes this new entry.
        let observer = rt.observe(link, {
            let target = target.clone();
            move |_| signal(&hub, &target)
        });
        signals.insert(target, Watched { sender, _observer: observer });
        receiver
    }

    /// How many things have an observer behind them.
    #[cfg(test)]
    pub(crate) fn observed(&self) -> usize {
        self.0.lock().len()
    }
}

/// Signals the receivers of `target`; false (the observer stops, its entry goes) once
/// none is left or the server is gone.
fn signal(hub: &Weak<Signals>, target: &Target) -> bool {
    let Some(hub) = hub.upgrade() else { return false };
    let mut signals = hub.lock();
    match signals.get(target) {
        Some(watched) if watched.sender.receiver_count() > 0 => {
            watched.sender.send_replace(());
            true
        }
        Some(_) => {
            let gone = signals.remove(target);
            // Its observer (this one) is let go of once the map is free again.
            drop(signals);
            drop(gone);
            false
        }
        None => false,
    }
}

/// How long a part of the budget set aside for a `subscriptions/listen` stream waits for
/// the stream to claim it. The stream starts right after its acknowledgement is sent, but
/// a client that cancels at once can end the request in between (seen over Streamable
/// HTTP); what it was promised is given back once this has passed.
const RESERVATION_TTL: Duration = Duration::from_secs(2);

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
}

impl Budget {
    /// A budget of `cap` subscriptions.
    pub(crate) fn new(cap: usize) -> Arc<Self> {
        Self::with_ttl(cap, RESERVATION_TTL)
    }

    fn with_ttl(cap: usize, ttl: Duration) -> Arc<Self> {
        Arc::new(Budget { used: AtomicUsize::new(0), cap, ttl, reserved: Mutex::default() })
    }

    /// How many more can be opened now (what is set aside for a stream is not).
    pub(crate) fn left(&self) -> usize {
        self.expire();
        self.cap.saturating_sub(self.used.load(Ordering::Acquire))
    }

    /// Takes `n` of the budget until the [`Held`] is dropped; `None` if fewer are left.
    pub(crate) fn take(self: &Arc<Self>, n: usize) -> Option<Held> {
        self.expire();
        self.add(n).then(|| Held { budget: Arc::clone(self), n })
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
    /// more taken now; `None` if neither is there.
    pub(crate) fn claim(self: &Arc<Self>, n: usize) -> Option<Held> {
        self.expire();
        let mut reserved = self.reserved.lock();
        match reserved.iter().position(|(_, part)| *part == n) {
            Some(at) => {
                reserved.swap_remove(at);
                Some(Held { budget: Arc::clone(self), n })
            }
            None => {
                drop(reserved);
                self.take(n)
            }
        }
    }

    /// Counts `n` more in use, if there is room.
    fn add(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| used.checked_add(n).filter(|&u| u <= self.cap))
            .is_ok()
    }

    /// Gives back what was set aside for streams that never claimed it.
    fn expire(&self) {
        let mut reserved = self.reserved.lock();
        reserved.retain(|(at, n)| {
            let keep = at.elapsed() < self.ttl;
            if !keep {
                self.used.fetch_sub(*n, Ordering::AcqRel);
            }
            keep
        });
    }
}

/// A part of a [`Budget`], given back when dropped.
pub(crate) struct Held {
    budget: Arc<Budget>,
    n: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.n, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_observer_per_thing_and_it_stops_once_nobody_watches() {
        let rt = Runtime::in_memory();
        let count = rt.new_cell("count", 0i64).unwrap();
        // A charm's data stands in for the cell.
        let watch = |watches: &Watches| watches.watch_at(&rt, Target::Charm("c".into()), count.link());
        let watches = Watches::default();

        let mut first = watch(&watches);
        // Subscribing and cancelling many times leaves one observer behind, not many.
        for _ in 0..100 {
            drop(watch(&watches));
        }
        assert_eq!(watches.observed(), 1);
        rt.transact(|tx| count.set(tx, 1)).unwrap();
        first.changed().await.unwrap();

        drop(first);
        rt.transact(|tx| count.set(tx, 2)).unwrap();
        assert_eq!(watches.observed(), 0, "the observer stopped at the first change nobody watched");
        assert_eq!(rt.stats().observers, 0, "and left the runtime");
        // A new watcher gets a new observer, and hears the next change.
        let mut again = watch(&watches);
        rt.transact(|tx| count.set(tx, 3)).unwrap();
        again.changed().await.unwrap();
    }

    #[test]
    fn a_server_that_goes_takes_its_observers_at_once() {
        let rt = Runtime::in_memory();
        let count = rt.new_cell("count", 0i64).unwrap();
        let watches = Watches::default();
        let watching = watches.watch_at(&rt, Target::Charm("c".into()), count.link());
        watches.watch(&rt, Target::Charms);
        assert_eq!(rt.stats().observers, 2);
        drop(watching);
        drop(watches);
        assert_eq!(rt.stats().observers, 0, "not left until the next change of what they watched");
    }

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
        assert!(budget.reserve(3));
        assert_eq!(budget.left(), 1, "the promised part is not room");
        assert!(!budget.reserve(2));
        let first = budget.claim(3).unwrap();
        assert_eq!(budget.left(), 1, "claiming moves the part, it takes no more");
        assert!(budget.claim(3).is_none(), "nothing set aside, and no room");
        drop(first);
        assert_eq!(budget.left(), 4);
    }

    #[test]
    fn a_part_never_claimed_comes_back_on_every_path() {
        let budget = Budget::with_ttl(2, Duration::from_millis(20));
        assert!(budget.reserve(2));
        assert!(budget.take(1).is_none(), "promised");
        std::thread::sleep(Duration::from_millis(40));
        // `take` (a legacy subscription) sees the room again, not only `accept`'s `left`.
        let held = budget.take(2).expect("the unclaimed part expired");
        drop(held);
        assert_eq!(budget.left(), 2);
        assert!(budget.reserved.lock().is_empty());
    }
}
