//! Whether code read the committed space while the engine watched it.
//!
//! The engine runs the computations a writer's change makes dirty inside the writer's
//! own transaction, before it commits, so that the change and what it implies commit
//! as one. Such a computation sees the change only through that transaction: a read of
//! the committed space (through [`Space`](super::Space), a `Runtime` or `Tx::space`)
//! would miss it. The engine watches those runs; a run that read the committed space is
//! undone and runs again after the commit, as do that computation's later runs.

use std::cell::Cell;

thread_local! {
    /// Whether the engine watches this thread's reads of the committed space.
    static WATCHING: Cell<bool> = const { Cell::new(false) };
    /// Whether one was made since the engine last asked ([`take_read`]).
    static READ: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with this thread's reads of the committed space watched (each run inside
/// it asks [`take_read`] whether it made one); then the thread is watched as before.
pub(crate) fn watching<R>(f: impl FnOnce() -> R) -> R {
    let before = (WATCHING.replace(true), READ.replace(false));
    let result = f();
    WATCHING.set(before.0);
    READ.set(before.1);
    result
}

/// Whether the committed space was read, while watched, since the last time this was
/// asked. One look per computation run: the run's own reads are all it can see.
#[inline]
pub(crate) fn take_read() -> bool {
    READ.replace(false)
}

/// Notes that the committed space was read (every way the space answers a read from
/// outside a transaction calls this).
#[inline]
pub(crate) fn committed_read() {
    if WATCHING.get() {
        READ.set(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_is_seen_only_while_watched_and_once() {
        committed_read();
        watching(|| {
            assert!(!take_read(), "a read before the watch is not seen");
            committed_read();
            assert!(take_read());
            assert!(!take_read(), "told once");
        });
        committed_read();
        assert!(!take_read(), "not watched any more");
        watching(|| {
            committed_read();
            watching(|| assert!(!take_read(), "a watch within starts afresh"));
            assert!(take_read(), "and the one around it still has its own");
        });
    }
}
