//! What MCP clients watch in a space: one runtime observer per watched thing (the list of
//! charms, or one charm's data), however many clients and subscriptions watch it.
//!
//! A subscription is a receiver of a signal shared by everyone watching the same thing,
//! so a client that subscribes and cancels over and over to a charm that never changes
//! adds nothing. The one observer behind a signal belongs to the signal's entry in the
//! shared map, not to a subscription: the entry goes, and the observer with it, at the
//! first change once no receiver is left, or when the server goes.
//!
//! A `subscriptions/listen` stream reports the changes after its acknowledgement, which
//! rmcp sends before the stream's task starts: receivers are kept when its filter is
//! accepted ([`Watches::watch_ahead`]), and it starts with one at least as old
//! ([`Watches::watch_from_ahead`]). Which kept receiver was made for which stream is not
//! known (rmcp does not tell `accept` the request), so each takes the oldest kept.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::watch;
use trellis_runner::charm::CHARMS_DOC;
use trellis_runner::{Link, Observation, Runtime};

use super::STREAM_START;

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

/// A receiver made for a stream about to start, with when it was made.
type Ahead = (Instant, Target, watch::Receiver<()>);

/// The change signals of one server, shared by all its clients.
#[derive(Clone, Default)]
pub(crate) struct Watches {
    signals: Arc<Signals>,
    /// Receivers made for streams about to start.
    ahead: Arc<Mutex<Vec<Ahead>>>,
}

impl Watches {
    /// A receiver marked changed after each commit that changes `target` (changes that
    /// come while nobody looks make one).
    pub(crate) fn watch(&self, rt: &Runtime, target: Target) -> watch::Receiver<()> {
        let link = target.link(rt);
        self.watch_at(rt, target, &link)
    }

    /// Keeps a receiver of each of `targets`, as of now, for [`STREAM_START`]: for a stream
    /// accepted now, about to start. Receivers made with no change between them are alike,
    /// so one that saw every change is kept longer rather than joined by another: a target
    /// keeps one receiver per change among the streams accepted lately, however many.
    pub(crate) fn watch_ahead(&self, rt: &Runtime, targets: impl IntoIterator<Item = Target>) {
        let now = Instant::now();
        let mut ahead = self.kept_ahead();
        for target in targets {
            let newest = ahead.iter().rposition(|(_, kept, _)| *kept == target);
            match newest {
                Some(at) if matches!(ahead[at].2.has_changed(), Ok(false)) => ahead[at].0 = now,
                _ => {
                    let receiver = self.watch(rt, target.clone());
                    ahead.push((now, target, receiver));
                }
            }
        }
    }

    /// A receiver of `target` for a stream starting now, as old as the oldest that
    /// [`Watches::watch_ahead`] keeps: so at least as old as the one made when the stream
    /// was accepted, and it hears every change since (and at worst one from a moment
    /// before); a new one if none is kept.
    pub(crate) fn watch_from_ahead(&self, rt: &Runtime, target: Target) -> watch::Receiver<()> {
        let kept = self.kept_ahead().iter().find(|(_, kept, _)| *kept == target).map(|(.., receiver)| receiver.clone());
        kept.unwrap_or_else(|| self.watch(rt, target))
    }

    /// The receivers kept for streams about to start, less those kept longer than
    /// [`STREAM_START`].
    fn kept_ahead(&self) -> parking_lot::MutexGuard<'_, Vec<Ahead>> {
        let mut ahead = self.ahead.lock();
        ahead.retain(|(at, ..)| at.elapsed() < STREAM_START);
        ahead
    }

    /// [`Watches::watch`], with the link `target` has.
    fn watch_at(&self, rt: &Runtime, target: Target, link: &Link) -> watch::Receiver<()> {
        let mut signals = self.signals.lock();
        if let Some(watched) = signals.get(&target) {
            return watched.sender.subscribe();
        }
        let (sender, receiver) = watch::channel(());
        let hub = Arc::downgrade(&self.signals);
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
        self.signals.lock().len()
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

    #[tokio::test]
    async fn a_stream_hears_what_changed_after_it_was_accepted_before_it_started() {
        let rt = Runtime::in_memory();
        rt.register_pattern(trellis_runner::Pattern::new("note", |b, _: serde_json::Value| {
            b.state("count", 0i64)?;
            Ok(())
        }));
        let watches = Watches::default();
        // Stream A is accepted (and acknowledged); the client creates a charm; stream B is
        // accepted; A's task starts only now.
        watches.watch_ahead(&rt, [Target::Charms]);
        rt.charms().create("note", serde_json::Value::Null).unwrap();
        watches.watch_ahead(&rt, [Target::Charms]);
        let mut a = watches.watch_from_ahead(&rt, Target::Charms);
        assert!(a.has_changed().unwrap(), "the change after A's acknowledgement is A's");
        // B, started after A, may hear that change too (a moment before it), never less.
        let mut b = watches.watch_from_ahead(&rt, Target::Charms);
        a.mark_unchanged();
        b.mark_unchanged();
        rt.charms().create("note", serde_json::Value::Null).unwrap();
        a.changed().await.unwrap();
        b.changed().await.unwrap();
    }

    #[test]
    fn streams_accepted_with_no_change_between_share_one_kept_receiver() {
        let rt = Runtime::in_memory();
        let watches = Watches::default();
        for _ in 0..100 {
            watches.watch_ahead(&rt, [Target::Charms]);
        }
        assert_eq!(watches.ahead.lock().len(), 1);
        assert_eq!(rt.stats().observers, 1);
    }
}
