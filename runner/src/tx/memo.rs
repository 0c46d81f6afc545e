//! The memo of a transaction: the locations read again since its last write (or its
//! computation's savepoint), with their values, so that reading one again is a look at
//! a short list, not a read of its document. Only the transaction's own writes change
//! what it sees, so every write forgets the memo.
//!
//! In debug builds every answer of the memo (a value, or one of the two numbers kept
//! inline) is checked against the transaction's documents read the slow way, links
//! followed and nothing noted (the `check` module): every test is then a test of the
//! memo, and an answer found by an address that came to name another text would fail.

use std::cell::{Cell, Ref, RefCell};

use serde::de::DeserializeOwned;

use super::docs::text_key;
use super::{Tx, RECENT_READS};
use crate::link::{DocId, Link};
use crate::value::{same_text, typed_number, Path, Value};

/// How many locations a transaction remembers having read since its last write (see
/// [`Read::read`](crate::read::Read::read) of a [`Tx`]).
const MEMO: usize = 8;

/// A value read, and where: the addresses of the id and path asked for, kept alive by
/// [`Docs::list`](super::docs::Docs::list) and the transaction's reads (`read` is its place there) or, when links
/// led elsewhere, by `asked`.
pub(super) struct Remembered {
    doc: usize,
    path: usize,
    read: usize,
    value: Value,
    asked: Option<Link>,
}

impl Remembered {
    /// `value`, read at the location the transaction noted as its `read`th read: `path`
    /// in the document of `id`.
    pub(super) fn noted(id: &DocId, read: usize, path: &Path, value: &Value) -> Self {
        Remembered { doc: text_key(id), path: path.address(), read, value: value.clone(), asked: None }
    }
}

/// What a transaction remembers having read since its last write or savepoint: the
/// values ([`Remembered`]), and the two numbers among them remembered last once more, in
/// a form looked at without borrowing the list. A computation that reads a counter or a
/// sum (or two) many times finds them there in a few instructions, with no call.
#[derive(Default)]
pub(super) struct Memo {
    list: RefCell<Vec<Remembered>>,
    numbers: [Cell<Number>; 2],
    /// Where in `numbers` the next number remembered goes (the older of the two).
    next: Cell<usize>,
    /// Whether `list` holds anything, told without a borrow: most reads find it empty.
    any: Cell<bool>,
}

/// A number remembered, as the two number types a typed read may ask for it as.
#[derive(Clone, Copy, Default)]
struct Number {
    /// The [`text_key`] of its id (0, which no key is, when the place holds no number)
    /// and the address of its path, as in [`Remembered`].
    doc: usize,
    path: usize,
    int: Option<i64>,
    float: f64,
}

impl Number {
    /// As `T`, if `T` is `i64` or `f64` and this fits it ([`Value::number_as`]).
    #[inline(always)]
    fn read_as<T: Clone + 'static>(self) -> Option<T> {
        typed_number(|| self.int, || Some(self.float))
    }
}

impl Memo {
    /// Forgets everything.
    #[inline]
    pub fn clear(&self) {
        // Most code reads each location once: its memo is empty at every write.
        if self.any.replace(false) {
            self.forget();
        }
    }

    #[inline(never)]
    fn forget(&self) {
        self.list.borrow_mut().clear();
        self.numbers.iter().for_each(|n| n.set(Number::default()));
    }

    /// Whether nothing is remembered (no borrow).
    #[inline]
    pub fn is_empty(&self) -> bool {
        !self.any.get()
    }

    /// What is remembered.
    pub fn entries(&self) -> Ref<'_, Vec<Remembered>> {
        self.list.borrow()
    }

    /// The number remembered at `link` (under `link`'s texts) as `T`, when it is one of
    /// the two remembered last, `T` is `i64` or `f64` and the number fits it.
    #[inline(always)]
    pub fn number<T: Clone + 'static>(&self, link: &Link) -> Option<T> {
        use std::any::TypeId;
        if TypeId::of::<T>() != TypeId::of::<i64>() && TypeId::of::<T>() != TypeId::of::<f64>() {
            return None;
        }
        let (doc, path) = (text_key(&link.doc), link.path.address());
        let [first, second] = &self.numbers;
        let (first, second) = (first.get(), second.get());
        if first.doc == doc && first.path == path {
            return first.read_as();
        }
        if second.doc == doc && second.path == path {
            return second.read_as();
        }
        None
    }

    fn push(&self, remembered: Remembered) {
        let mut list = self.list.borrow_mut();
        if list.len() == MEMO {
            // The oldest goes: a computation reading more locations than this is rare.
            let oldest = list.remove(0);
            for number in &self.numbers {
                if (number.get().doc, number.get().path) == (oldest.doc, oldest.path) {
                    // Its addresses may name other texts once it is gone.
                    number.set(Number::default());
                }
            }
        }
        if let Value::Number(n) = &remembered.value {
            let (doc, path, next) = (remembered.doc, remembered.path, self.next.get());
            // `as_f64` answers for every number.
            self.numbers[next].set(Number { doc, path, int: n.as_i64(), float: n.as_f64().unwrap_or(f64::NAN) });
            self.next.set(1 - next);
        }
        list.push(remembered);
        self.any.set(true);
    }
}

impl Tx<'_> {
    /// The value read at `link` since the last write, if `link` shares its id's and
    /// path's texts with the read (handles share them, so this is nearly always how a
    /// location read again is recognised; the memo and this transaction keep those texts
    /// alive, so no other text can have their addresses). Small and inlined: a computation
    /// reads its inputs many times, and most of those reads end here.
    #[inline]
    pub(super) fn remembered_here(&self, link: &Link) -> Option<Value> {
        if self.lists.memo.is_empty() {
            return None;
        }
        let memo = self.lists.memo.entries();
        let (doc, path) = (text_key(&link.doc), link.path.address());
        let hit = memo.iter().find(|m| m.doc == doc && m.path == path).map(|hit| hit.value.clone());
        drop(memo);
        #[cfg(debug_assertions)]
        if let Some(hit) = &hit {
            self.check_remembered(link, hit);
        }
        hit
    }

    /// [`Tx::remembered_here`] read as `T`, from the value remembered (not a copy).
    pub(super) fn remembered_as<T>(&self, link: &Link) -> Option<std::result::Result<T, serde_json::Error>>
    where
        T: DeserializeOwned + Clone + Send + Sync + 'static,
    {
        let memo = self.lists.memo.entries();
        let (doc, path) = (text_key(&link.doc), link.path.address());
        let hit = memo.iter().find(|m| m.doc == doc && m.path == path)?;
        #[cfg(debug_assertions)]
        self.check_remembered(link, &hit.value);
        Some(hit.value.number_as().map_or_else(|| hit.value.read_as(), Ok))
    }

    /// The value read at `link` since the last write, found by content (another link to
    /// a location read; see [`Tx::remembered_here`] for the usual way).
    pub(super) fn remembered(&self, link: &Link) -> Option<Value> {
        if self.lists.memo.is_empty() {
            return None;
        }
        let memo = self.lists.memo.entries();
        let ledger = self.lists.ledger.borrow();
        let super::Ledger { docs, reads, .. } = &*ledger;
        let same = |m: &Remembered| match &m.asked {
            Some(asked) => asked == link,
            None => reads.get(m.read).is_some_and(|(doc, path)| {
                *path == link.path && docs.list.get(*doc as usize).is_some_and(|d| same_text(&d.id, &link.doc))
            }),
        };
        let hit = memo.iter().find(|m| same(m)).map(|m| m.value.clone());
        drop((memo, ledger));
        #[cfg(debug_assertions)]
        if let Some(hit) = &hit {
            self.check_remembered(link, hit);
        }
        hit
    }

    /// Remembers the value just read at `link`, which led to `at`, the latest of `reads`.
    pub(super) fn remember(&self, link: &Link, at: &Link, value: &Value) {
        let remembered = if at == link {
            // Its read was just noted, or found among the latest (see `note_read`).
            let ledger = self.lists.ledger.borrow();
            let super::Ledger { docs, reads, .. } = &*ledger;
            let floor = self.reads_floor.get().max(reads.len().saturating_sub(RECENT_READS + 1));
            let noted = reads.iter().enumerate().skip(floor).rev().find(|(_, (doc, path))| {
                *path == link.path && docs.list.get(*doc as usize).is_some_and(|d| same_text(&d.id, &link.doc))
            });
            let Some((read, (doc, path))) = noted else { return };
            Remembered::noted(&docs.list[*doc as usize].id, read, path, value)
        } else {
            // Links on the way: the location asked for is kept, so its addresses stay its.
            let asked = link.clone();
            let (doc, path) = (text_key(&asked.doc), asked.path.address());
            Remembered { doc, path, read: usize::MAX, value: value.clone(), asked: Some(asked) }
        };
        self.memorise(remembered);
    }

    pub(super) fn memorise(&self, remembered: Remembered) {
        self.lists.memo.push(remembered);
    }
}

/// The memo's answers, checked against the slow way in debug builds.
#[cfg(debug_assertions)]
mod check {
    use super::{Link, Memo, Tx, Value};
    use crate::link::DocId;
    use crate::read::{resolve, Read};
    use crate::value::Path;

    /// A transaction read without noting anything: what the slow way sees.
    struct Unnoted<'t, 's>(&'t Tx<'s>);

    impl Read for Unnoted<'_, '_> {
        fn read_raw(&self, doc: &DocId, path: &Path) -> Value {
            self.0.read_raw(doc, path)
        }

        fn note_read(&self, _: &Link) {}
    }

    impl Tx<'_> {
        /// Panics unless `hit`, what the memo answered for `link`, is what the
        /// transaction's documents hold there.
        pub(in crate::tx) fn check_remembered(&self, link: &Link, hit: &Value) {
            let slow = resolve(&Unnoted(self), link, false).map(|(_, value)| value);
            assert!(
                slow.as_ref().is_ok_and(|slow| slow == hit),
                "the memo answered {hit:?} for {link}, where the transaction holds {slow:?}"
            );
        }

        /// Panics unless the number the memo keeps inline for `link` is the value it
        /// remembers there, and that value what the transaction holds.
        pub(in crate::tx) fn check_number(&self, link: &Link) {
            let remembered = self.remembered_here(link);
            let memo: &Memo = &self.lists.memo;
            let (doc, path) = (super::text_key(&link.doc), link.path.address());
            let inline = memo.numbers.iter().map(std::cell::Cell::get).find(|n| n.doc == doc && n.path == path);
            let agrees = match (&remembered, inline) {
                (Some(Value::Number(n)), Some(inline)) => {
                    inline.int == n.as_i64() && inline.float.to_bits() == n.as_f64().unwrap_or(f64::NAN).to_bits()
                }
                _ => false,
            };
            assert!(agrees, "the memo's inline number for {link} is not the value it remembers ({remembered:?})");
        }
    }

    impl Memo {
        /// Makes every remembered value say `value`: what a wrong memo would answer, for
        /// the tests that show the checks catch it.
        #[cfg(test)]
        pub(in crate::tx) fn poison_values(&self, value: i64) {
            for remembered in self.list.borrow_mut().iter_mut() {
                remembered.value = Value::from(value);
            }
        }

        /// Makes the numbers kept inline say `value`, the values remembered unchanged.
        #[cfg(test)]
        pub(in crate::tx) fn poison_numbers(&self, value: i64) {
            for number in &self.numbers {
                number.set(super::Number { int: Some(value), float: value as f64, ..number.get() });
            }
        }
    }
}
