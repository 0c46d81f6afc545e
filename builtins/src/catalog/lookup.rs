//! Finding a catalog's tools by name (wire or display) without a copy of every name.
//!
//! A map from name to tool would copy each tool's names into it at every build (a
//! thousand tools, a thousand strings per map), only to find the tool that holds the same
//! string. The index keeps each name's hash instead, and a lookup checks the name against
//! the tool it finds.

use std::collections::hash_map::Entry;
use std::hash::BuildHasher;

use crate::naming::{FastHasher, FastMap};

/// Tool indexes by the hash of one of their names.
#[derive(Debug, Clone, Default)]
pub(super) struct NameIndex {
    by_hash: FastMap<u64, usize>,
    /// Tools whose names hash like an earlier one's ([`FastHasher`] is not collision
    /// resistant: a space's names may clash on purpose), searched one by one.
    clashes: Vec<usize>,
}

impl NameIndex {
    /// An empty index with room for `tools` names.
    pub(super) fn with_capacity(tools: usize) -> Self {
        NameIndex { by_hash: FastMap::with_capacity_and_hasher(tools, Default::default()), clashes: Vec::new() }
    }

    /// Adds tool `index` under `name`; the names added must differ from each other.
    pub(super) fn insert(&mut self, name: &str, index: usize) {
        self.insert_hashed(hash(name), index);
    }

    /// The tool added under `name`, where `name_of` gives a tool's name by its index.
    pub(super) fn find<'a>(&self, name: &str, name_of: impl Fn(usize) -> &'a str) -> Option<usize> {
        self.find_hashed(hash(name), name, name_of)
    }

    fn insert_hashed(&mut self, hash: u64, index: usize) {
        match self.by_hash.entry(hash) {
            // The first tool with this hash keeps its place: lookups find it at once.
            Entry::Occupied(_) => self.clashes.push(index),
            Entry::Vacant(slot) => drop(slot.insert(index)),
        }
    }

    fn find_hashed<'a>(&self, hash: u64, name: &str, name_of: impl Fn(usize) -> &'a str) -> Option<usize> {
        let first = *self.by_hash.get(&hash)?;
        if name_of(first) == name {
            return Some(first);
        }
        self.clashes.iter().copied().find(|&index| name_of(index) == name)
    }
}

fn hash(name: &str) -> u64 {
    std::hash::BuildHasherDefault::<FastHasher>::default().hash_one(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_found_and_strangers_are_not() {
        let names = ["Counter_increment", "Counter_reset", "x"];
        let mut index = NameIndex::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            index.insert(name, i);
        }
        for (i, name) in names.iter().enumerate() {
            assert_eq!(index.find(name, |i| names[i]), Some(i));
        }
        assert_eq!(index.find("Counter", |i| names[i]), None);
    }

    #[test]
    fn names_with_the_same_hash_are_told_apart() {
        // Every name under one hash, as crafted names could make it.
        let names = ["a", "b", "c"];
        let mut index = NameIndex::default();
        for i in 0..names.len() {
            index.insert_hashed(7, i);
        }
        for (i, name) in names.iter().enumerate() {
            assert_eq!(index.find_hashed(7, name, |i| names[i]), Some(i));
        }
        assert_eq!(index.find_hashed(7, "d", |i| names[i]), None);
    }
}
