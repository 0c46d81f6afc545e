//! How much memory a part of a run takes at its peak, from the kernel's counters of the
//! process's resident memory: Linux keeps the peak (`VmHWM` in `/proc/self/status`) and
//! lets a process reset it to the current size (writing `5` to `/proc/self/clear_refs`).
//!
//! The figure is resident memory the part added at its peak over what was resident
//! before, so memory freed earlier and reused without growing the process is not counted;
//! threads the part starts (SQLite's writer, Tokio's workers) are.

use std::fs;

/// Runs `f` and returns what it returned and the resident memory it added at its peak,
/// in bytes (`None` where the kernel does not offer the counters).
pub fn peak_during<R>(f: impl FnOnce() -> R) -> (R, Option<u64>) {
    let before = fs::write("/proc/self/clear_refs", "5").ok().and_then(|()| status_kib("VmRSS:"));
    let result = f();
    let peak = status_kib("VmHWM:");
    let added = before.zip(peak).map(|(before, peak)| peak.saturating_sub(before) * 1024);
    (result, added)
}

/// A `kB` line of `/proc/self/status`.
fn status_kib(key: &str) -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].trim().trim_end_matches("kB").trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_allocation_shows_in_the_peak() {
        const SIZE: usize = 64 << 20;
        let (touched, added) = peak_during(|| {
            // Written, so the pages are resident, then freed before the peak is read.
            let block = vec![1u8; SIZE];
            block.iter().map(|&b| u64::from(b)).sum::<u64>()
        });
        assert_eq!(touched, SIZE as u64);
        if let Some(added) = added {
            assert!(added >= (SIZE as u64) * 9 / 10, "a {SIZE}-byte block added only {added} bytes");
        }
    }
}
