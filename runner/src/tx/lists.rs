//! The lists a transaction works in ([`Spare`]): what it touched, read and may undo (one
//! [`Ledger`]), its memo and its after-commit hooks, emptied after each commit and kept
//! for the next transaction with the documents it touched.

use std::cell::RefCell;

use super::docs::Docs;
use super::memo::Memo;
use super::AfterCommit;
use crate::link::DocId;
use crate::space::{Committing, Space};
use crate::value::{Path, Value};

/// How many documents a transaction's lists keep for the next transaction (see
/// [`Spare`]): beyond, they start afresh.
const KEPT_DOCS: usize = 1 << 16;

/// The lists of a transaction, emptied after its commit for the next one: a runtime
/// commits every few microseconds while it settles, and allocating them anew each time
/// costs more than the rest of a small commit. They keep the documents too: the next
/// transaction mostly touches the documents the last one did (a settle those of the same
/// computations, a handler its charm's), and one it finds kept needs no entry, no
/// snapshot (unless a commit moved it) and no place in a new index. Behind one box, so
/// that a transaction moves as a few words.
#[derive(Default)]
pub(crate) struct Spare(pub(super) Box<Lists>);

/// What a [`Tx`](super::Tx) reads and writes through, kept from one transaction to the next.
#[derive(Default)]
pub(super) struct Lists {
    pub(super) ledger: RefCell<Ledger>,
    /// Locations read again since the last write or savepoint, with their values. See
    /// [`Read::read`](crate::read::Read::read) of a [`Tx`](super::Tx).
    pub(super) memo: Memo,
    /// What to run once the transaction committed ([`Tx::after_commit`](super::Tx::after_commit)).
    pub(super) hooks: RefCell<Vec<AfterCommit>>,
    /// Whether these are the engine's lists (a settle's documents are kept for the next
    /// settle, a handler's for the next handler).
    pub(super) engine: bool,
    /// How many commits the space had made when the transaction began (see
    /// `Space::commit`).
    pub(super) began: u64,
}

/// What a transaction touched, read and may undo: one borrow for each step that needs
/// any of it (a computation's run takes several such steps, and a borrow is not free).
#[derive(Default)]
pub(super) struct Ledger {
    pub(super) docs: Docs,
    /// Every location read, as (position in `docs`, path), in the order first read: the
    /// read set that commit validates, and (since a savepoint) a computation's
    /// dependencies.
    pub(super) reads: Vec<(u32, Path)>,
    /// How to undo the writes made since the open savepoint (kept allocated between
    /// savepoints: a settle opens one per computation).
    pub(super) undo: Vec<Undo>,
}

impl Ledger {
    /// Where `doc` is among the documents, first touched now if it was not yet.
    #[inline]
    pub(super) fn position(&mut self, space: &Space, doc: &DocId) -> usize {
        match self.docs.find(doc, || space.entry(doc)) {
            Ok(index) => index,
            Err(entry) => {
                let snapshot = entry.snapshot();
                self.docs.push(doc.clone(), entry, snapshot)
            }
        }
    }
}

impl Spare {
    /// Lists for the engine's transactions.
    pub fn for_engine() -> Self {
        Spare(Box::new(Lists { engine: true, ..Lists::default() }))
    }

    /// Whether these are the engine's lists.
    pub fn is_engine(&self) -> bool {
        self.0.engine
    }

    /// Empties the lists after a commit (`committed`: whether it succeeded); what they
    /// held is not kept alive meanwhile, except kept documents (see [`Docs::untouch`]).
    /// Returns the after-commit hooks to run, if it committed and there are any.
    pub fn clear(&mut self, committed: bool) -> Option<Vec<AfterCommit>> {
        let lists = &mut *self.0;
        let hooks = lists.hooks.get_mut();
        let to_run = match hooks.is_empty() {
            true => None,
            false if committed => Some(std::mem::take(hooks)),
            false => {
                hooks.clear();
                None
            }
        };
        let ledger = lists.ledger.get_mut();
        if ledger.docs.list.len() <= KEPT_DOCS {
            ledger.docs.untouch(committed);
        } else {
            ledger.docs.clear();
        }
        ledger.reads.clear();
        ledger.undo.clear();
        lists.memo.clear();
        to_run
    }

    /// What a commit takes: the documents, those the transaction touched, what it read,
    /// and how many commits the space had made when it began.
    pub fn committing(&mut self) -> Committing<'_> {
        let lists = &mut *self.0;
        let Ledger { docs: Docs { list, touched, .. }, reads, .. } = lists.ledger.get_mut();
        Committing { docs: list, touched, reads, began: lists.began }
    }
}

/// The state of a document before the first write since the open [`Savepoint`](super::Savepoint).
pub(super) struct Undo {
    pub(super) doc: usize,
    pub(super) local: Value,
    pub(super) ops: usize,
}
