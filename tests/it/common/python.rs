//! Python tools from PyPI for the tests that drive Trellis with someone else's client
//! (the MCP SDK, Playwright, schemathesis): a virtual environment per set of packages,
//! made once under the target directory and reused while its packages stay the same.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The Python of the virtual environment `name` (a folder under the target directory)
/// with `packages` (pinned requirements) installed; made on first use, once per run.
pub fn venv(name: &str, packages: &[&str]) -> PathBuf {
    static MADE: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let mut made = MADE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    made.get_or_insert_with(HashMap::new).entry(name.to_string()).or_insert_with(|| make(name, packages)).clone()
}

fn make(name: &str, packages: &[&str]) -> PathBuf {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let python = venv.join("bin/python");
    let ready = venv.join(".installed");
    let wanted = packages.join(" ");
    if std::fs::read_to_string(&ready).is_ok_and(|installed| installed == wanted) {
        return python;
    }
    let run = |command: &mut Command, what: &str| {
        let out = command.output().unwrap_or_else(|e| panic!("cannot {what}: {e}; the test needs python3"));
        assert!(out.status.success(), "cannot {what}: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv), "make a Python virtual environment");
    run(
        Command::new(&python).args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]).args(packages),
        &format!("install {wanted} from PyPI"),
    );
    std::fs::write(&ready, wanted).unwrap_or_else(|e| panic!("cannot mark {} as made: {e}", venv.display()));
    python
}
