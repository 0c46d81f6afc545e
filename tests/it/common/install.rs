//! Running a script that installs third-party parts the tests drive (pinned, under the
//! target directory), failing the test clearly when it cannot.

use std::path::Path;
use std::process::Command;

/// Runs `sh SCRIPT DIR`. If it fails, the test fails saying `what` is missing (a phrase
/// ending in "is" or "are") and `how` to install it.
pub fn run(script: &Path, dir: &Path, what: &str, how: &str) {
    let out = Command::new("sh")
        .arg(script)
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}; {how}", script.display()));
    assert!(
        out.status.success(),
        "{what} missing and cannot be installed: {}; {how}",
        String::from_utf8_lossy(&out.stderr)
    );
}
