//! JSON arrays, with the Rust value last read from them.
//!
//! A computation that reads a list reads it as a Rust type (`Vec<T>`), and many
//! computations often read the same list after one write: deserialising it once per
//! reader costs more than everything else they do. An [`Array`] keeps what it was read as
//! the first time, so the next reader of that type gets a copy of it instead. Arrays are
//! persistent: a changed array is a new one (writing through [`Array`]'s `DerefMut`
//! forgets what it was read as), so what is kept always matches the items.
//!
//! In debug builds the value kept also keeps the items it was read from (shared, not
//! copied), and each copy handed out checks that they equal the items now: a change
//! that did not forget what was kept fails the check. (The kept value itself cannot be
//! compared with a fresh read: a type read need not implement `PartialEq`.)

use std::any::Any;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::OnceLock;

use imbl::Vector;

use super::Value;

/// The items of a JSON array (a persistent vector: see [`Vector`]), and the Rust value
/// they were first read as through [`Value::read_as`].
#[derive(Default)]
pub struct Array {
    items: Vector<Value>,
    read_as: OnceLock<Kept>,
}

/// What an array was first read as, and in debug builds the items it was read from.
struct Kept {
    value: Box<dyn Any + Send + Sync>,
    #[cfg(debug_assertions)]
    from: Vector<Value>,
}

impl Array {
    /// `T` read from these items, a copy of the one read before when there was one.
    pub(super) fn read_as<T>(&self, read: impl FnOnce() -> Result<T, serde_json::Error>) -> Result<T, serde_json::Error>
    where
        T: Clone + Send + Sync + 'static,
    {
        if let Some(kept) = self.read_as.get() {
            if let Some(value) = kept.value.downcast_ref::<T>() {
                #[cfg(debug_assertions)]
                assert!(kept.from == self.items, "an array changed without forgetting what it was read as");
                return Ok(value.clone());
            }
        }
        let value = read()?;
        // Only the first type read is kept: an array is nearly always read as one type.
        let _ = self.read_as.set(Kept {
            value: Box::new(value.clone()),
            #[cfg(debug_assertions)]
            from: self.items.clone(),
        });
        Ok(value)
    }
}

impl Deref for Array {
    type Target = Vector<Value>;

    fn deref(&self) -> &Vector<Value> {
        &self.items
    }
}

impl DerefMut for Array {
    /// The items, to change: what they were read as is forgotten.
    fn deref_mut(&mut self) -> &mut Vector<Value> {
        self.read_as = OnceLock::new();
        &mut self.items
    }
}

impl Clone for Array {
    /// The items only (a clone is made to be changed).
    fn clone(&self) -> Self {
        Array { items: self.items.clone(), read_as: OnceLock::new() }
    }
}

impl PartialEq for Array {
    fn eq(&self, other: &Self) -> bool {
        self.items == other.items
    }
}

impl fmt::Debug for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(Items::of(&self.items)).finish()
    }
}

impl From<Vector<Value>> for Array {
    fn from(items: Vector<Value>) -> Self {
        Array { items, read_as: OnceLock::new() }
    }
}

impl FromIterator<Value> for Array {
    fn from_iter<I: IntoIterator<Item = Value>>(iter: I) -> Self {
        Array::from(iter.into_iter().collect::<Vector<Value>>())
    }
}

/// The items of an array, leaf by leaf (a vector's own iterator looks every item up from
/// the root), with their exact count, so a list built from them is allocated once.
pub(super) struct Items<'a> {
    leaves: std::iter::Flatten<imbl::vector::Chunks<'a, Value, imbl::shared_ptr::DefaultSharedPtr>>,
    left: usize,
}

impl<'a> Items<'a> {
    pub(super) fn of(items: &'a Vector<Value>) -> Self {
        Items { leaves: items.leaves().flatten(), left: items.len() }
    }
}

impl<'a> Iterator for Items<'a> {
    type Item = &'a Value;

    fn next(&mut self) -> Option<&'a Value> {
        let item = self.leaves.next()?;
        self.left -= 1;
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Items<'_> {}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use serde::{Deserialize, Deserializer};
    use serde_json::json;

    use super::super::{Path, Value};

    /// Numbers that count how often a list of them is deserialised.
    #[derive(Clone, Debug, PartialEq)]
    struct Counted(Vec<i64>);

    static READS: AtomicUsize = AtomicUsize::new(0);

    impl<'de> Deserialize<'de> for Counted {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            READS.fetch_add(1, Ordering::SeqCst);
            Vec::deserialize(d).map(Counted)
        }
    }

    #[test]
    fn a_list_is_read_into_a_type_once_and_again_after_it_changes() {
        let list = Value::from(json!([1, 2, 3]));
        let shared = list.clone();
        let before = READS.load(Ordering::SeqCst);
        assert_eq!(list.read_as::<Counted>().unwrap(), Counted(vec![1, 2, 3]));
        assert_eq!(shared.read_as::<Counted>().unwrap(), Counted(vec![1, 2, 3]), "a copy of the value shares it");
        assert_eq!(READS.load(Ordering::SeqCst) - before, 1);

        let mut changed = list.clone();
        changed.set_at(Path::new(["1"]).segments(), Value::from(20)).unwrap();
        assert_eq!(changed.read_as::<Counted>().unwrap(), Counted(vec![1, 20, 3]));
        assert_eq!(list.read_as::<Counted>().unwrap(), Counted(vec![1, 2, 3]), "the original is unchanged");
        assert_eq!(READS.load(Ordering::SeqCst) - before, 2);
    }

    #[test]
    fn a_list_read_as_another_type_is_read_as_that_type() {
        let list = Value::from(json!([1, 2]));
        assert_eq!(list.read_as::<Vec<i64>>().unwrap(), vec![1, 2]);
        assert_eq!(list.read_as::<Vec<f64>>().unwrap(), vec![1.0, 2.0]);
        assert_eq!(list.read_as::<Vec<i64>>().unwrap(), vec![1, 2]);
        assert!(list.read_as::<Vec<String>>().is_err(), "a list of numbers is not a list of strings");
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "changed without forgetting")]
    fn a_change_that_keeps_what_was_read_trips_the_check() {
        let mut list = super::Array::from_iter([Value::from(1), Value::from(2)]);
        assert_eq!(list.read_as(|| Ok(vec![1, 2])).unwrap(), vec![1, 2]);
        // Changed behind `DerefMut`'s back: what it was read as is still kept.
        list.items.push_back(Value::from(3));
        let _ = list.read_as(|| Ok(vec![1, 2, 3]));
    }
}
