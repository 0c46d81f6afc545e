//! `dice`: roll dice; the last roll is kept in `last`, recent totals in `history`.
//!
//! The random numbers come from SplitMix64, whose whole state is one `u64` kept in the
//! `$rng` cell: a restarted charm continues the sequence instead of repeating it, and a
//! `seed` argument makes the rolls repeatable. Fine for games, never for secrets.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

use trellis_runner::prelude::*;

/// The most dice one roll can throw.
pub const MAX_COUNT: u32 = 100;
/// The most sides a die can have.
pub const MAX_SIDES: u32 = 1000;
/// How many totals `history` keeps.
pub const HISTORY: usize = 20;

/// The dice's argument.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct DiceArgs {
    /// Seed for repeatable rolls (default: from the clock and the charm's id).
    #[serde(default)]
    pub seed: Option<u64>,
}

/// Roll `count` dice with `sides` sides each. Returns the outcome (each die in `rolls`,
/// their sum in `total`), which is also kept in `last`; the total is added to `history`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Roll {
    /// How many dice, 1 to 100 (default 1).
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = MAX_COUNT))]
    pub count: u32,
    /// Sides on each die, 2 to 1000 (default 6).
    #[serde(default = "six")]
    #[schemars(range(min = 2, max = MAX_SIDES))]
    pub sides: u32,
}

fn one() -> u32 {
    1
}

fn six() -> u32 {
    6
}

/// What one roll gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Outcome {
    /// How many dice were rolled.
    pub count: u32,
    /// Sides on each die.
    pub sides: u32,
    /// Each die's face, from 1 to `sides`.
    pub rolls: Vec<u32>,
    /// The sum of `rolls`.
    pub total: u32,
}

/// SplitMix64 (Steele, Lea and Flood, 2014): a counter passed through a mixing function.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`, every value equally likely: draws below `2^64 mod n` are
    /// rejected so that plain `%` has no bias.
    fn below(&mut self, n: u64) -> u64 {
        let threshold = n.wrapping_neg() % n;
        loop {
            let r = self.next();
            if r >= threshold {
                return r % n;
            }
        }
    }
}

/// A seed for a charm created without one: two charms created at once still differ.
fn clock_seed(charm: &str) -> u64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let mut hasher = DefaultHasher::new();
    charm.hash(&mut hasher);
    nanos ^ hasher.finish()
}

fn check(what: &str, value: u32, min: u32, max: u32) -> trellis_runner::Result<()> {
    if (min..=max).contains(&value) {
        return Ok(());
    }
    Err(format!("{what} must be from {min} to {max}, got {value}").into())
}

/// The dice pattern: state `last`, `history`, `$rng`; handler `roll`, which returns the
/// outcome.
pub fn dice() -> Pattern {
    Pattern::new("dice", |b, args: DiceArgs| {
        b.name("Dice")?;
        let seed = args.seed.unwrap_or_else(|| clock_seed(b.charm_id()));
        // `$`-prefixed: internal state, not data for people or models (no summaries, no read tool).
        let rng = b.state::<u64>("$rng", seed)?;
        let last = b.state::<Option<Outcome>>("last", None)?;
        let history = b.state::<Vec<u32>>("history", Vec::new())?;
        b.handler("roll", move |tx, e: Roll| -> Result<Outcome> {
            check("count", e.count, 1, MAX_COUNT)?;
            check("sides", e.sides, 2, MAX_SIDES)?;
            let mut random = SplitMix64(rng.get(tx)?);
            // `below(sides)` is under `sides`, a u32, so `as u32` is exact.
            let rolls: Vec<u32> = (0..e.count).map(|_| random.below(u64::from(e.sides)) as u32 + 1).collect();
            let total = rolls.iter().sum();
            rng.set(tx, random.0)?;
            let outcome = Outcome { count: e.count, sides: e.sides, rolls, total };
            last.set(tx, Some(outcome.clone()))?;
            history.update(tx, |mut totals| {
                totals.push(total);
                let excess = totals.len().saturating_sub(HISTORY);
                totals.drain(..excess);
                totals
            })?;
            Ok(outcome)
        })?;
        Ok(())
    })
    .description("Dice: roll up to 100 dice with 2 to 1000 sides each; totals kept in a history")
}
