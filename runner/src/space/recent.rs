//! The paths a document's latest commits wrote: what validation checks a transaction's
//! reads against when the document moved after it was read.

use super::Version;
use crate::value::Path;

/// How many recent commits per document are remembered for path-level validation; a
/// transaction that read a document more than this many commits ago is retried.
pub(super) const RECENT_COMMITS: usize = 32;

/// The latest commits of one document (at most [`RECENT_COMMITS`]), each with the paths
/// it wrote. A ring: once full, the oldest commit's place (and its list's room) is taken
/// by the newest, so a commit allocates nothing and moves nothing to remember itself
/// (a settle commits every few microseconds). A commit's first path is kept apart from
/// the rest: most commits write one.
///
/// A commit that wrote the whole document is remembered by its version alone, before the
/// ring: it conflicts with every read made before it, so the commits before it no longer
/// decide anything. A document only ever written whole (a cell, a computation's output:
/// most documents) allocates nothing to remember its history.
#[derive(Default)]
pub(super) struct Recent {
    /// The latest commit that wrote the whole document, while the ring has not forgotten
    /// it (0: none).
    whole: Version,
    /// The commits after it.
    commits: Vec<Commit>,
    /// Where the next commit goes: the oldest once the ring is full.
    next: usize,
}

/// One commit remembered: its version, and the paths it wrote (at least one).
struct Commit {
    version: Version,
    first: Path,
    rest: Vec<Path>,
}

/// The whole document, as [`Recent::written_after`] lends it.
static ROOT: Path = Path::root();

impl Recent {
    /// Remembers that the commit of `version` wrote `paths`, forgetting the oldest once
    /// there are [`RECENT_COMMITS`].
    pub fn record(&mut self, version: Version, mut paths: impl Iterator<Item = Path>) {
        // A commit that wrote nothing here made no version of this document.
        let Some(first) = paths.next() else { return };
        if first.is_root() {
            self.whole = version;
            // Asked first: clearing calls out to drop even when nothing goes.
            if !self.commits.is_empty() {
                self.commits.clear();
            }
            self.next = 0;
            return;
        }
        if self.commits.len() < RECENT_COMMITS {
            self.commits.push(Commit { version, first, rest: paths.collect() });
            self.next = self.commits.len() % RECENT_COMMITS;
            return;
        }
        // The ring is full: what came before its oldest is forgotten, a whole write too.
        self.whole = Version::default();
        let oldest = &mut self.commits[self.next];
        self.next = (self.next + 1) % RECENT_COMMITS;
        oldest.version = version;
        oldest.first = first;
        oldest.rest.clear();
        oldest.rest.extend(paths);
    }

    /// The version of the oldest commit remembered, if any.
    pub fn oldest(&self) -> Option<Version> {
        if self.whole != Version::default() {
            return Some(self.whole);
        }
        // Before the ring fills, `next` is its length (0 once full): the oldest is first.
        let at = if self.commits.len() < RECENT_COMMITS { 0 } else { self.next };
        self.commits.get(at).map(|commit| commit.version)
    }

    /// The paths written by the commits after `version`, in no particular order (the
    /// root alone for a whole write).
    pub fn written_after(&self, version: Version) -> impl Iterator<Item = &Path> + '_ {
        let whole = (self.whole > version).then_some(&ROOT);
        whole.into_iter().chain(
            self.commits
                .iter()
                .filter(move |commit| commit.version > version)
                .flat_map(|commit| std::iter::once(&commit.first).chain(&commit.rest)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_commits_are_kept_and_the_oldest_forgotten() {
        let mut recent = Recent::default();
        assert_eq!(recent.oldest(), None);
        assert_eq!(recent.written_after(Version(0)).count(), 0);
        let path = |n: u64| Path::new([n.to_string()]);
        for n in 1..=(RECENT_COMMITS as u64 + 5) {
            recent.record(Version(n), [path(n)].into_iter());
            let oldest = n.saturating_sub(RECENT_COMMITS as u64 - 1).max(1);
            assert_eq!(recent.oldest(), Some(Version(oldest)), "after commit {n}");
            let mut after: Vec<_> = recent.written_after(Version(n - 1)).cloned().collect();
            after.sort();
            assert_eq!(after, vec![path(n)]);
        }
        let kept = recent.written_after(Version(0)).count();
        assert_eq!(kept, RECENT_COMMITS, "only the latest are remembered");
    }

    #[test]
    fn a_commit_of_several_paths_is_remembered_whole_and_one_of_none_not_at_all() {
        let mut recent = Recent::default();
        let path = |key: &str| Path::new([key]);
        for n in 1..=(RECENT_COMMITS as u64 + 3) {
            recent.record(Version(n), [path("a"), path("b"), path(&n.to_string())].into_iter());
        }
        let newest = RECENT_COMMITS as u64 + 3;
        let mut after: Vec<_> = recent.written_after(Version(newest - 1)).cloned().collect();
        after.sort();
        let mut expected = vec![path("a"), path("b"), path(&newest.to_string())];
        expected.sort();
        assert_eq!(after, expected);
        recent.record(Version(newest + 1), std::iter::empty());
        assert_eq!(recent.written_after(Version(newest)).count(), 0);
        assert_eq!(recent.oldest(), Some(Version(4)), "the ring moved for commits only");
    }

    #[test]
    fn a_whole_document_written_leaves_only_its_own_commit_and_what_follows() {
        let mut recent = Recent::default();
        let path = |n: u64| Path::new([n.to_string()]);
        for n in 1..=(RECENT_COMMITS as u64 + 3) {
            recent.record(Version(n), [path(n)].into_iter());
        }
        let whole = RECENT_COMMITS as u64 + 4;
        recent.record(Version(whole), [Path::root(), path(1)].into_iter());
        assert!(recent.commits.is_empty(), "the commits before it are let go of");
        assert_eq!(recent.oldest(), Some(Version(whole)));
        let written: Vec<_> = recent.written_after(Version(0)).cloned().collect();
        assert_eq!(written, vec![Path::root()], "the root stands for every path it wrote");
        assert_eq!(recent.written_after(Version(whole)).count(), 0);
        recent.record(Version(whole + 1), [path(7)].into_iter());
        recent.record(Version(whole + 2), [Path::root()].into_iter());
        recent.record(Version(whole + 3), [path(9)].into_iter());
        let after: Vec<_> = recent.written_after(Version(whole + 1)).cloned().collect();
        assert_eq!(after.len(), 2, "the newest whole write and the commit after it: {after:?}");
        assert!(after.contains(&Path::root()) && after.contains(&path(9)));
        assert_eq!(recent.oldest(), Some(Version(whole + 2)));
        // Written whole over and over, a document remembers a version and nothing else.
        let mut recent = Recent::default();
        for n in 1..=100 {
            recent.record(Version(n), [Path::root()].into_iter());
        }
        assert_eq!(recent.commits.capacity(), 0, "nothing allocated");
        assert_eq!(recent.oldest(), Some(Version(100)));
        assert_eq!(recent.written_after(Version(99)).count(), 1);
        // Once the ring fills after it, the whole write is forgotten with what came before.
        for n in 101..=(100 + RECENT_COMMITS as u64) {
            recent.record(Version(n), [path(n)].into_iter());
        }
        assert_eq!(recent.oldest(), Some(Version(100)), "the ring is full, not yet turned");
        recent.record(Version(101 + RECENT_COMMITS as u64), [path(0)].into_iter());
        assert_eq!(recent.oldest(), Some(Version(102)));
        assert!(recent.written_after(Version(101)).all(|p| !p.is_root()));
    }
}
