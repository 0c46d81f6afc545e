//! The random numbers of the crate's property tests: deterministic, so a failure repeats.

/// An xorshift64 generator from `seed` (never 0).
pub(crate) fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}
