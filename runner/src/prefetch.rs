//! Asking memory into the cache ahead of use.

/// Asks the cache line holding `value` into every level of the cache (a hint: nothing on
/// machines without the instruction).
#[inline(always)]
pub(crate) fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    safe_arch::prefetch_t0(value);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
