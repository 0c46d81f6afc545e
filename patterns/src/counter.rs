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

/// The counter pattern: state `count`, derived `label`, handlers `increment`,
/// `decrement`, `reset`.
pub fn counter() -> Pattern {
    Pattern::new("counter", |b, args: CounterArgs| {
        b.name("Counter");
        let count = b.state("count", args.start)?;
        b.lift("label", &count, |n: i64| format!("Count: {n}"));
        let c = count.clone();
        b.handler("increment", move |tx, e: Increment| Ok(c.update(tx, |n| n + e.amount)?));
        let c = count.clone();
        b.handler("decrement", move |tx, e: Decrement| Ok(c.update(tx, |n| n - e.amount)?));
        b.handler("reset", move |tx, _: Reset| Ok(count.set(tx, 0)?));
        Ok(())
    })
    .description("A number you can increment, decrement and reset")
}
