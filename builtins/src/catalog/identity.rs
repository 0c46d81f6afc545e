//! Identity keys: what tells apart two tools with the same display name, and what their
//! wire names' suffixes derive from (see [`naming`](super::naming)). A stream's tool is
//! identified by the stream's location, so it keeps its wire name across builds.
//!
//! A build makes one key per tool and needs them only until the names are assigned, so
//! they are written end to end into one buffer rather than each into a string of its own.

use trellis_runner::Link;

/// What a tool's identity key is made of.
pub(super) enum Identity {
    /// The location of the tool's stream, as the link's text (`doc/key`).
    Stream(Link),
    /// A key of its own (e.g. `pattern:ENTRY`).
    Text(String),
}

/// The identity keys of a build's tools, in order.
#[derive(Default)]
pub(super) struct Identities {
    text: String,
    /// Where each key ends in `text`.
    ends: Vec<usize>,
}

impl Identities {
    /// Adds the next tool's key.
    pub(super) fn push(&mut self, identity: &Identity) {
        match identity {
            Identity::Stream(stream) => write_link(&mut self.text, stream),
            Identity::Text(text) => self.text.push_str(text),
        }
        self.ends.push(self.text.len());
    }

    /// How many keys there are.
    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    /// The key of tool `index`.
    pub(super) fn get(&self, index: usize) -> &str {
        let start = index.checked_sub(1).map_or(0, |before| self.ends[before]);
        &self.text[start..self.ends[index]]
    }

    /// The keys, in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).map(|index| self.get(index))
    }

    /// Keeps the keys of the tools marked in `keep` (one mark per key).
    pub(super) fn retain(&mut self, keep: &[bool]) {
        let mut kept = Identities::default();
        for (key, _) in self.iter().zip(keep).filter(|(_, keep)| **keep) {
            kept.text.push_str(key);
            kept.ends.push(kept.text.len());
        }
        *self = kept;
    }
}

/// Appends `link`'s text, as its `Display` writes it, without the formatting machinery.
fn write_link(out: &mut String, link: &Link) {
    out.push_str(&link.doc);
    let segments = link.path.segments();
    if segments.is_empty() {
        out.push('/');
    }
    for segment in segments {
        out.push('/');
        out.push_str(segment);
    }
}

#[cfg(test)]
mod tests {
    use trellis_runner::Path;

    use super::*;

    #[test]
    fn a_stream_key_is_the_link_as_text() {
        for path in [Path::root(), Path::new(["set0"]), Path::new(["a", "0", "b c"])] {
            let link = Link::new("charm-1f", path);
            let mut keys = Identities::default();
            keys.push(&Identity::Stream(link.clone()));
            assert_eq!(keys.get(0), link.to_string());
        }
    }

    #[test]
    fn keys_are_kept_apart_and_retained_in_order() {
        let mut keys = Identities::default();
        for key in ["a", "", "pattern:p", "a"] {
            keys.push(&Identity::Text(key.into()));
        }
        assert_eq!(keys.iter().collect::<Vec<_>>(), ["a", "", "pattern:p", "a"]);
        keys.retain(&[true, true, false, true]);
        assert_eq!(keys.iter().collect::<Vec<_>>(), ["a", "", "a"]);
        assert_eq!(keys.len(), 3);
    }
}
