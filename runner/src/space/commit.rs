//! A commit: a transaction's reads validated against the versions it saw, its writes
//! applied atomically under the space's commit lock and handed to storage in commit
//! order, and each written document told to whoever marks its readers.

use std::sync::atomic::Ordering;

use super::{DocKey, DocWrites, Recent, Seq, Space, Version};
use crate::error::Error;
use crate::link::DocId;
use crate::storage::{Durable, StoredDoc};
use crate::value::{Path, Value};

/// What a commit tells of each document it wrote: its key and the writes made there, as
/// (path, value) in the order made.
pub(crate) type Changed<'a> = &'a mut dyn FnMut(DocKey, &[(Path, Value)]);

/// What [`Space::commit`] takes of a transaction.
pub(crate) struct Committing<'a> {
    /// The documents it holds (touched, or kept from an earlier transaction).
    pub docs: &'a mut [DocWrites],
    /// The positions in `docs` of those it touched.
    pub touched: &'a [u32],
    /// The locations it read, as (position in `docs`, path).
    pub reads: &'a [(u32, Path)],
    /// [`Space::commit_count`] when it began, before it touched a document: if no commit
    /// came since, every document it touched is as it saw it (a transaction brings a
    /// document up to date when it first touches it), so nothing is validated.
    pub began: u64,
}

/// What one commit changed: the written paths of each document, and where it stands.
pub struct Commit {
    /// Paths written, per document (none listed when the commit was not asked to report
    /// them: a settle's commit that nobody observes).
    pub changes: Vec<(DocId, Vec<Path>)>,
    /// Its place in the order of commits, and its durability ticket.
    pub committed: Committed,
}

/// A commit's place in the space's order and the ticket that resolves once it is durable:
/// what a caller needs to wait for durability (see `Space::durable_after`).
#[derive(Debug)]
pub struct Committed {
    /// The commit's place in the space's order of commits with writes.
    pub seq: Seq,
    /// Resolves when the commit is durable.
    pub durable: Durable,
}

impl Space {
    /// Validates and applies one transaction's writes atomically: those in the documents
    /// it touched. Once everything is applied, `changed` (if any) hears each document
    /// written and the paths written there; `list`: whether the commit also lists them in
    /// [`Commit::changes`]. A written document's `local` and `read_version` are then
    /// those committed.
    pub(crate) fn commit(
        &self,
        tx: Committing<'_>,
        list: bool,
        mut changed: Option<Changed<'_>>,
    ) -> Result<Commit, Error> {
        let Committing { docs, touched, reads, began } = tx;
        let _guard = self.commit_lock.lock();
        if let Some(error) = self.damage() {
            return Err(error.into());
        }
        if self.read_only && touched.iter().any(|at| !docs[*at as usize].ops.is_empty()) {
            if let Some(why) = self.storage.read_only() {
                return Err(why.into());
            }
        }
        // Validate everything before applying anything, so a conflict leaves no trace.
        // Commits are serialised here, so what is validated is what gets applied. A
        // document that moved since it was read gets this transaction's writes replayed
        // onto its newer value (rare: no list is made otherwise).
        let mut rebased: Vec<(usize, Value)> = Vec::new();
        let none_since = self.commits.load(Ordering::Relaxed) == began;
        #[cfg(debug_assertions)]
        check_shortcuts(docs, touched, none_since);
        if !none_since {
            for index in touched.iter().map(|at| *at as usize) {
                let writes = &docs[index];
                if writes.entry.version() == writes.read_version {
                    continue;
                }
                let state = writes.entry.state.read();
                let read = reads.iter().filter(|(doc, _)| *doc as usize == index).map(|(_, path)| path);
                validate(writes, read, state.version, &state.recent)?;
                let mut value = state.value.clone();
                for (path, v) in &writes.ops {
                    value.set_at(path.segments(), v.clone()).map_err(|_| Error::Conflict { doc: writes.id.clone() })?;
                }
                rebased.push((index, value));
            }
        }
        let mut wrote = false;
        // Whether the writes are told below (else they are let go of as they are applied).
        let tells = list || changed.is_some();
        // Made only for storage that keeps writes (and then handed to it whole).
        let mut stored = self.keeps_writes.then(Vec::new);
        for index in touched.iter().map(|at| *at as usize) {
            let writes = &mut docs[index];
            if writes.ops.is_empty() {
                continue;
            }
            wrote = true;
            if let Some(at) = rebased.iter().position(|(at, _)| *at == index) {
                writes.local = rebased.swap_remove(at).1;
            }
            let value = writes.local.clone();
            let mut state = writes.entry.state.write();
            let version = Version(state.version.0 + 1);
            if let Some(stored) = &mut stored {
                stored.push(StoredDoc { id: writes.id.to_string(), version: version.0, value: value.clone() });
            }
            state.recent.record(version, writes.ops.iter().map(|(path, _)| path.clone()));
            state.value = value;
            state.version = version;
            state.exists = true;
            writes.entry.committed.store(version.0, Ordering::Release);
            writes.read_version = version;
            if !tells {
                writes.ops.clear();
            }
        }
        // Told only now, so that nobody marked by this commit can see half of it; from
        // the transaction's own list of writes, so no document is locked again.
        let mut changes = Vec::new();
        for index in touched.iter().map(|at| *at as usize).filter(|_| tells) {
            let writes = &mut docs[index];
            if writes.ops.is_empty() {
                continue;
            }
            if let Some(changed) = changed.as_mut() {
                changed(writes.key, &writes.ops);
            }
            if list {
                changes.push((writes.id.clone(), writes.ops.iter().map(|(path, _)| path.clone()).collect()));
            }
            writes.ops.clear();
        }
        // Submitted before it is counted: whoever sees the count and waits for a barrier
        // then waits for these writes too.
        let durable = match stored {
            Some(stored) if wrote => self.storage.submit(stored),
            _ => Durable::ready(Ok(())),
        };
        // Only a commit, under the commit lock, changes the count: no atomic sum needed.
        let seq = self.commits.load(Ordering::Relaxed) + u64::from(wrote);
        if wrote {
            self.commits.store(seq, Ordering::Release);
        }
        Ok(Commit { changes, committed: Committed { seq: Seq(seq), durable } })
    }
}

/// Panics unless the two shortcuts of validation hold, under the commit lock (debug
/// builds check every commit): each touched document's lock-free version is its state's,
/// and when no commit came since the transaction began, none of them moved.
#[cfg(debug_assertions)]
fn check_shortcuts(docs: &[DocWrites], touched: &[u32], none_since: bool) {
    for writes in touched.iter().map(|at| &docs[*at as usize]) {
        let version = writes.entry.state.read().version;
        assert_eq!(writes.entry.version(), version, "the lock-free version of {} is not its state's", writes.id);
        assert!(
            !none_since || version == writes.read_version,
            "no commit came since the transaction began, yet {} moved from {:?} to {version:?}",
            writes.id,
            writes.read_version
        );
    }
}

/// A document changed since the transaction read it: the transaction may still commit
/// if none of the commits since then wrote a path it read.
fn validate<'p>(
    writes: &DocWrites,
    read: impl Iterator<Item = &'p Path> + Clone,
    version: Version,
    recent: &Recent,
) -> Result<(), Error> {
    let conflict = || Error::Conflict { doc: writes.id.clone() };
    if version < writes.read_version {
        return Err(conflict());
    }
    // Nothing read here: the writes replay onto the newest value, whatever came between.
    if read.clone().next().is_none() {
        return Ok(());
    }
    // The commits remembered start at the oldest: one before it is unknown (forgotten, or
    // let go of because the oldest wrote the whole document, which conflicts anyway).
    let oldest_known = recent.oldest().map_or(u64::MAX, |v| v.0);
    if writes.read_version.0.saturating_add(1) < oldest_known {
        return Err(conflict());
    }
    for written in recent.written_after(writes.read_version) {
        if read.clone().any(|read| read.overlaps(written)) {
            return Err(conflict());
        }
    }
    Ok(())
}
