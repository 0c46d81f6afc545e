//! Display and wire names for tools.
//!
//! A tool is **displayed** as `Charm.handler` (the charm's NAME, a dot, the handler key).
//! Providers only accept tool names matching `^[a-zA-Z0-9_-]{1,64}$`, so every tool also
//! gets a **wire name**, allocated by [`WireNames`]:
//!
//! - [`sanitize`] keeps ASCII letters, digits and `_`; everything else (`.`, spaces, `-`,
//!   non-ASCII) becomes `_`, runs of `_` collapse to one and leading/trailing `_` are
//!   trimmed. `Counter.increment` becomes `Counter_increment`.
//! - `-` never appears in a sanitised name: it is reserved as the separator of the
//!   disambiguation suffix, so a suffixed name can never equal a plain one.
//! - A name that is too long, or that several tools share after sanitising (two charms
//!   both named `Counter`, or `a.b` and `a b`), becomes `base-xxxxxx`: the base cut to fit
//!   and six hex digits of a stable FNV-1a hash of the tool's identity key.
//! - **Every** tool of a colliding group gets a suffix, not all but one: no tool is
//!   arbitrarily promoted to "the" `Counter_increment`, and a suffix always signals to the
//!   model (and the UI) that the display name alone is ambiguous.
//!
//! Names depend only on the set of (display, identity) pairs, never on their order.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// The longest wire name providers accept.
pub const MAX_WIRE_LEN: usize = 64;

/// Length of the hex disambiguation suffix (without its `-`).
const SUFFIX_HEX: usize = 6;

/// The wire name used when sanitising leaves nothing.
const EMPTY_NAME: &str = "tool";

/// The display name of a charm's handler: `Charm.handler`.
pub fn display_name(charm: &str, handler: &str) -> String {
    // Built in place rather than with `format!`: a catalog makes one per tool.
    let mut name = String::with_capacity(charm.len() + 1 + handler.len());
    name.push_str(charm);
    name.push('.');
    name.push_str(handler);
    name
}

/// Sanitises a display name into wire-name characters (see the module docs).
///
/// The result is non-empty and matches `^[a-zA-Z0-9_]+$`; it is not length-capped.
pub fn sanitize(display: &str) -> String {
    let mut out = String::with_capacity(display.len());
    for c in display.chars() {
        let c = if c.is_ascii_alphanumeric() { c } else { '_' };
        if c == '_' && (out.is_empty() || out.ends_with('_')) {
            continue;
        }
        out.push(c);
    }
    while out.ends_with('_') {
        out.pop();
    }
    if out.is_empty() {
        out.push_str(EMPTY_NAME);
    }
    out
}

/// Whether `name` matches `^[a-zA-Z0-9_-]{1,64}$`.
pub fn is_valid_wire_name(name: &str) -> bool {
    (1..=MAX_WIRE_LEN).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// 64-bit FNV-1a of `text`: stable across Rust versions and platforms, unlike `DefaultHasher`.
pub fn stable_hash(text: &str) -> u64 {
    let mut hasher = StableHasher::default();
    hasher.write(text.as_bytes());
    hasher.finish()
}

/// 64-bit FNV-1a as a [`Hasher`]: stable (wire-name suffixes derive from it) and much
/// cheaper than SipHash on the short keys and strings tool names and schemas are made of.
/// Not collision-resistant: users compare values on a hash match.
pub struct StableHasher(u64);

impl Default for StableHasher {
    fn default() -> Self {
        StableHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for StableHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// The hash of the catalog's own lookup tables: FxHash (the multiply-rotate hash rustc
/// uses), a word at a time, several times cheaper than SipHash on tool names. Not
/// resistant to crafted collisions, which only the space's own charms could craft; not
/// stable across versions either, so wire names use [`StableHasher`].
#[derive(Default, Clone, Copy)]
pub(crate) struct FastHasher(u64);

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        // The table indexes by the low bits: bring the well-mixed high bits down.
        self.0.rotate_left(26)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for word in &mut words {
            let mut buf = [0u8; 8];
            buf.copy_from_slice(word);
            self.add(u64::from_le_bytes(buf));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut buf = [0u8; 8];
            buf[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(buf));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
}

/// A hash map of the catalog's own, with [`FastHasher`].
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// A hash set of the catalog's own, with [`FastHasher`].
pub(crate) type FastSet<T> = HashSet<T, BuildHasherDefault<FastHasher>>;

/// One allocated tool name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireEntry {
    /// The name sent to providers.
    pub wire: String,
    /// The name shown to people, e.g. `Counter.increment`.
    pub display: String,
    /// The stable identity the suffix derives from (e.g. charm id + handler key).
    pub identity: String,
    /// Whether the wire name carries a disambiguation suffix (collision or truncation).
    pub suffixed: bool,
}

/// Wire names for a set of tools, with lookups both ways.
#[derive(Debug, Clone, Default)]
pub struct WireNames {
    entries: Vec<WireEntry>,
    by_wire: HashMap<String, usize>,
    by_identity: HashMap<String, usize>,
}

impl WireNames {
    /// Allocates wire names for `(display name, identity key)` pairs.
    ///
    /// Entries keep their input order; names are unique and independent of that order.
    /// Identity keys should be unique; for a repeated identity, [`Self::wire_name`]
    /// returns the first entry's name (each entry still gets its own wire name).
    pub fn assign<I, D, K>(tools: I) -> Self
    where
        I: IntoIterator<Item = (D, K)>,
        D: Into<String>,
        K: Into<String>,
    {
        let tools: Vec<(String, String)> = tools.into_iter().map(|(d, k)| (d.into(), k.into())).collect();
        let borrowed: Vec<(&str, &str)> = tools.iter().map(|(d, k)| (d.as_str(), k.as_str())).collect();
        let wires = wire_names(&borrowed);
        let mut names = WireNames::default();
        for ((display, identity), wire) in tools.into_iter().zip(wires) {
            let index = names.entries.len();
            names.by_wire.insert(wire.clone(), index);
            names.by_identity.entry(identity.clone()).or_insert(index);
            let suffixed = wire.contains('-');
            names.entries.push(WireEntry { wire, display, identity, suffixed });
        }
        names
    }

    /// All entries, in the order they were given.
    pub fn entries(&self) -> &[WireEntry] {
        &self.entries
    }

    /// The entry a wire name was allocated to.
    pub fn lookup(&self, wire: &str) -> Option<&WireEntry> {
        self.by_wire.get(wire).map(|&i| &self.entries[i])
    }

    /// The wire name allocated to an identity key.
    pub fn wire_name(&self, identity: &str) -> Option<&str> {
        self.by_identity.get(identity).map(|&i| self.entries[i].wire.as_str())
    }

    /// How many entries there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The wire names of `(display name, identity key)` pairs, in their order (see
/// [`WireNames::assign`]); a name is suffixed exactly when it contains `-`.
pub(crate) fn wire_names(tools: &[(&str, &str)]) -> Vec<String> {
    let names = DisplayNames::group(tools.iter().map(|(display, _)| *display));
    assign(&names, |index| tools[index].1)
}

/// Tools grouped by display name: the charms of one pattern share their names, so a
/// catalog has far fewer distinct names than tools, and each is looked at once.
pub(crate) struct DisplayNames<'a> {
    /// The distinct display names in order of first use, each with how many tools have
    /// it.
    pub(crate) names: Vec<DisplayName<'a>>,
    /// The number (in `names`) of each tool's display name.
    pub(crate) of: Vec<usize>,
}

/// One distinct display name of [`DisplayNames`].
pub(crate) struct DisplayName<'a> {
    pub(crate) display: &'a str,
    /// How many tools have it.
    pub(crate) tools: usize,
}

impl<'a> DisplayNames<'a> {
    /// Groups the display names of tools given in order.
    pub(crate) fn group(displays: impl ExactSizeIterator<Item = &'a str>) -> Self {
        let mut names: Vec<DisplayName<'a>> = Vec::new();
        let mut numbers: FastMap<&str, usize> = FastMap::default();
        let mut of = Vec::with_capacity(displays.len());
        for display in displays {
            let number = *numbers.entry(display).or_insert_with(|| {
                names.push(DisplayName { display, tools: 0 });
                names.len() - 1
            });
            names[number].tools += 1;
            of.push(number);
        }
        DisplayNames { names, of }
    }
}

/// The wire names of tools with these display names and identity keys (`identity` of
/// each tool's index), as [`wire_names`].
pub(crate) fn assign<'i>(names: &DisplayNames<'_>, identity: impl Fn(usize) -> &'i str) -> Vec<String> {
    let name_of = &names.of;
    // Each distinct name is sanitised, counted and cut once.
    let bases: Vec<(String, usize)> = names.names.iter().map(|n| (sanitize(n.display), n.tools)).collect();
    let mut base_counts: FastMap<&str, usize> = FastMap::with_capacity_and_hasher(bases.len(), Default::default());
    for (base, count) in &bases {
        *base_counts.entry(base).or_default() += count;
    }
    // Plain names: unique bases that fit. They contain no `-`, so they can never clash
    // with suffixed names, and they are unique among themselves.
    let plain: Vec<bool> = bases
        .iter()
        .map(|(base, _)| base.len() <= MAX_WIRE_LEN && base_counts.get(base.as_str()) == Some(&1))
        .collect();
    // Names whose cut bases are equal share one number, so that suffixes are told apart
    // by (number, suffix) without hashing the cut base for every tool.
    let mut cuts: Vec<&str> = Vec::new();
    let mut cut_numbers: FastMap<&str, usize> = FastMap::default();
    let cut_of: Vec<usize> = bases
        .iter()
        .map(|(base, _)| {
            let cut = cut_base(base);
            *cut_numbers.entry(cut).or_insert_with(|| {
                cuts.push(cut);
                cuts.len() - 1
            })
        })
        .collect();

    let mut wires: Vec<String> = Vec::with_capacity(name_of.len());
    let mut pending: Vec<usize> = Vec::new();
    for (i, &name) in name_of.iter().enumerate() {
        if plain[name] {
            wires.push(bases[name].0.clone());
        } else {
            wires.push(String::new());
            pending.push(i);
        }
    }

    // Suffixed names, allocated in an order that depends only on the entries themselves;
    // a hash clash is resolved by salting the hash. A suffixed name is its cut base and
    // its suffix, so those two tell names apart without building each candidate. When
    // no two first choices clash, every entry keeps its first choice in any order, so
    // the sort (string comparisons of every pair it meets) is only paid after a clash.
    let mut taken: FastSet<(usize, u64)> = FastSet::with_capacity_and_hasher(pending.len(), Default::default());
    let first: Vec<u64> = pending.iter().map(|&i| suffix_of(identity(i), 0)).collect();
    let clash = !pending.iter().zip(&first).all(|(&i, &suffix)| taken.insert((cut_of[name_of[i]], suffix)));
    if clash {
        taken.clear();
        let mut order: Vec<usize> = (0..pending.len()).collect();
        order.sort_by_key(|&p| (identity(pending[p]), names.names[name_of[pending[p]]].display));
        for p in order {
            let i = pending[p];
            let cut = cut_of[name_of[i]];
            let salted = (1u64..).map(|salt| suffix_of(identity(i), salt));
            let suffix =
                std::iter::once(first[p]).chain(salted).find(|&suffix| taken.insert((cut, suffix))).unwrap_or_default(); // unreachable: the range is unbounded
            wires[i] = suffixed_name(cuts[cut], suffix);
        }
    } else {
        for (&i, &suffix) in pending.iter().zip(&first) {
            wires[i] = suffixed_name(cuts[cut_of[name_of[i]]], suffix);
        }
    }
    wires
}

/// `cut-xxxxxx`: the cut base and the suffix as six hex digits.
fn suffixed_name(cut: &str, suffix: u64) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut name = String::with_capacity(cut.len() + 1 + SUFFIX_HEX);
    name.push_str(cut);
    name.push('-');
    for shift in (0..SUFFIX_HEX).rev() {
        name.push(char::from(HEX[((suffix >> (4 * shift)) & 0xf) as usize]));
    }
    name
}

/// `base` cut to leave room for a suffix.
fn cut_base(base: &str) -> &str {
    let keep = MAX_WIRE_LEN - SUFFIX_HEX - 1;
    // `base` is ASCII, so any byte index is a char boundary.
    let cut = base.get(..keep.min(base.len())).unwrap_or(base).trim_end_matches('_');
    if cut.is_empty() {
        EMPTY_NAME
    } else {
        cut
    }
}

/// Six hex digits' worth of the (salted) identity hash.
fn suffix_of(identity: &str, salt: u64) -> u64 {
    let hash = if salt == 0 { stable_hash(identity) } else { stable_hash(&format!("{identity}\u{0}{salt}")) };
    hash & 0x00ff_ffff
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(tools: &[(&str, &str)]) -> Vec<String> {
        WireNames::assign(tools.iter().copied()).entries().iter().map(|e| e.wire.clone()).collect()
    }

    #[test]
    fn wire_names_stay_the_strings_they_were() {
        // Wire names are stored in conversations: these are the names the catalog gave
        // before its cold build was rewritten (computed then, at c93d5fb).
        let long = "L".repeat(70);
        let pairs: Vec<(&str, &str)> = vec![
            ("Counter.increment", "charm-1/increment"),
            ("Counter.increment", "charm-2/increment"),
            ("Notes.add", "charm-3/add"),
            ("weird name!.do it", "charm-4/do it"),
            (long.as_str(), "charm-5/x"),
            ("grow.t0", "source:grow:t0"),
        ];
        let cut = format!("{}-228459", "L".repeat(57));
        assert_eq!(
            wire_names(&pairs),
            ["Counter_increment-c6a82c", "Counter_increment-664f5d", "Notes_add", "weird_name_do_it", &cut, "grow_t0"]
        );
    }

    #[test]
    fn simple_and_dotted_names() {
        assert_eq!(sanitize("Counter"), "Counter");
        assert_eq!(sanitize("Counter.increment"), "Counter_increment");
        assert_eq!(names(&[("Counter.increment", "c1/increment")]), ["Counter_increment"]);
        assert_eq!(display_name("Counter", "increment"), "Counter.increment");
    }

    #[test]
    fn spaces_unicode_and_punctuation_become_single_underscores() {
        assert_eq!(sanitize("My Notes.add note"), "My_Notes_add_note");
        assert_eq!(sanitize("Crème brûlée.bake"), "Cr_me_br_l_e_bake");
        assert_eq!(sanitize("  --to-do!!.x  "), "to_do_x");
        assert_eq!(sanitize("日本"), "tool");
        assert_eq!(sanitize(""), "tool");
    }

    #[test]
    fn long_names_are_truncated_with_a_suffix() {
        let long = format!("{}.{}", "C".repeat(200), "h");
        let wire = names(&[(long.as_str(), "doc1/h")]).remove(0);
        assert!(is_valid_wire_name(&wire), "{wire}");
        assert_eq!(wire.len(), MAX_WIRE_LEN);
        assert!(wire.starts_with(&"C".repeat(57)));
        assert_eq!(wire, names(&[(long.as_str(), "doc1/h")]).remove(0));
        // Exactly 64 sanitised characters still fit without a suffix.
        let fits = "x".repeat(64);
        assert_eq!(names(&[(fits.as_str(), "k")]), [fits]);
    }

    #[test]
    fn two_charms_with_the_same_name_both_get_suffixes() {
        let tools =
            WireNames::assign([("Counter.increment", "doc-a/increment"), ("Counter.increment", "doc-b/increment")]);
        let [a, b] = [&tools.entries()[0], &tools.entries()[1]];
        assert_ne!(a.wire, b.wire);
        assert!(a.suffixed && b.suffixed);
        assert!(a.wire.starts_with("Counter_increment-") && b.wire.starts_with("Counter_increment-"));
        assert_eq!(tools.lookup(&a.wire).map(|e| e.identity.as_str()), Some("doc-a/increment"));
        assert_eq!(tools.wire_name("doc-b/increment"), Some(b.wire.as_str()));
        assert!(tools.lookup("Counter_increment").is_none());
    }

    #[test]
    fn names_that_sanitise_alike_never_overwrite() {
        let tools = WireNames::assign([("a.b", "1"), ("a_b", "2"), ("a b", "3"), ("c", "4")]);
        let wires: HashSet<&str> = tools.entries().iter().map(|e| e.wire.as_str()).collect();
        assert_eq!(wires.len(), 4);
        assert_eq!(tools.entries()[3].wire, "c");
        assert!(!tools.entries()[3].suffixed);
        for entry in tools.entries() {
            assert_eq!(tools.lookup(&entry.wire), Some(entry));
        }
    }

    #[test]
    fn order_does_not_matter() {
        let long = "x".repeat(90);
        let tools = [("Counter.inc", "a"), ("Counter.inc", "b"), ("Notes.add", "c"), (long.as_str(), "d")];
        let forward = WireNames::assign(tools);
        let mut reversed = tools;
        reversed.reverse();
        let backward = WireNames::assign(reversed);
        for entry in forward.entries() {
            assert_eq!(backward.wire_name(&entry.identity), Some(entry.wire.as_str()));
        }
    }

    #[test]
    fn hash_clashes_are_resolved() {
        // Same identity twice with the same display: both still get distinct names.
        let wires = names(&[("A.x", "same"), ("A.x", "same")]);
        assert_ne!(wires[0], wires[1]);
        assert!(wires.iter().all(|w| is_valid_wire_name(w)));
    }

    #[test]
    fn suffixed_names_are_the_cut_base_and_six_hex_digits() {
        for suffix in [0, 0xa, 0x0b_c0de, 0xff_ffff] {
            assert_eq!(suffixed_name("Counter_inc", suffix), format!("Counter_inc-{suffix:06x}"));
        }
    }

    #[test]
    fn stable_hash_is_fnv1a() {
        assert_eq!(stable_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(stable_hash("a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn random_strings_always_give_valid_unique_names() {
        let alphabet: Vec<char> = "aZ09_.- é日\t@$Counter".chars().collect();
        let mut next = crate::test_rng::xorshift(0x2545_f491_4f6c_dd1d);
        for round in 0..50 {
            let tools: Vec<(String, String)> = (0..40)
                .map(|i| {
                    let len = (next() % 90) as usize;
                    let display: String =
                        (0..len).map(|_| alphabet[(next() % alphabet.len() as u64) as usize]).collect();
                    (display, format!("doc{round}/{i}"))
                })
                .collect();
            let assigned = WireNames::assign(tools.clone());
            let mut seen = HashSet::new();
            for entry in assigned.entries() {
                assert!(is_valid_wire_name(&entry.wire), "{:?} -> {:?}", entry.display, entry.wire);
                assert!(seen.insert(entry.wire.clone()), "duplicate {}", entry.wire);
                assert_eq!(assigned.lookup(&entry.wire), Some(entry));
            }
            let mut shuffled = tools;
            shuffled.rotate_left(round % 40);
            shuffled.swap(0, 39);
            let again = WireNames::assign(shuffled);
            for entry in assigned.entries() {
                assert_eq!(again.wire_name(&entry.identity), Some(entry.wire.as_str()));
            }
        }
    }
}
