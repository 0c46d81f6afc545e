//! `counter`: a number you can increment, decrement and reset.

use trellis_runner::prelude::*;

/// The counter's argument.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct CounterArgs {
    /// The starting value (default 0).
    #[serde(default)]
    pub start: i64,
}

/// Increase the count by `amount` (default 1).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Increment {
    /// How much to add; defaults to 1.
    #[serde(default = "one")]
    pub amount: i64,
}

/// Decrease the count by `amount` (default 1).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct Decrement {
    /// How much to subtract; defaults to 1.
    #[serde(default = "one")]
    pub amount: i64,
}

/// Set the count back to zero.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct Reset {}

fn one() -> i64 {
    1
}

/// Adds `amount` to the count, refusing to overflow.
fn add(count: &Cell<i64>, tx: &Tx, amount: i64) -> trellis_runner::Result<()> {
    let n = count.get(tx)?;
    let next = n.checked_add(amount).ok_or_else(|| format!("{n} + {amount} does not fit in a counter"))?;
    count.set(tx, next)
}

/// The counter pattern: state `count`, derived `label`, handlers `increment`,
/// `decrement`, `reset`.
pub fn counter() -> Pattern {
    Pattern::new("counter", |b, args: CounterArgs| {
        b.name("Counter")?;
        let count = b.state("count", args.start)?;
        b.lift("label", count, |n: i64| format!("Count: {n}"))?;
        b.handler("increment", move |tx, e: Increment| add(&count, tx, e.amount))?;
        b.handler("decrement", move |tx, e: Decrement| {
            add(&count, tx, e.amount.checked_neg().ok_or("that amount is too large")?)
        })?;
        b.handler("reset", move |tx, _: Reset| count.set(tx, 0))?;
        Ok(())
    })
    .description("A number you can increment, decrement and reset")
}
