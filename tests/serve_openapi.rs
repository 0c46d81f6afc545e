//! `/openapi.json` checked by schemathesis (PyPI) against the running server: every
//! operation with generated valid and invalid requests, every response against the
//! document (statuses, content types, schemas), no server errors.

#![cfg(unix)]
#![allow(clippy::unwrap_used)] // a failing unwrap is a failing test

mod common;
#[path = "common/python.rs"]
mod python;
#[path = "common/server.rs"]
mod server;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The schemathesis release.
const SCHEMATHESIS: &str = "schemathesis==4.32.5";

/// How long the whole run may take.
const DEADLINE: Duration = Duration::from_secs(300);

#[test]
fn schemathesis_finds_the_api_true_to_its_openapi_document() {
    let python = python::venv("schemathesis-venv", &[SCHEMATHESIS]);
    let s = common::space();
    let out = common::trellis(&s.path).args(["--json", "token", "new"]).output().unwrap();
    let token =
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["token"].as_str().unwrap().to_string();
    // Schemathesis sends hundreds of requests: the rate limit is not what it checks.
    let served = server::Served::start(&s.path, &["--rate-limit", "1000000"], &[]);
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openapi/schemathesis.toml");
    let schemathesis = python.with_file_name("schemathesis");
    let child = Command::new(schemathesis)
        .arg("--config-file")
        .arg(config)
        .args(["run", &format!("{}/openapi.json", served.base())])
        .args(["--header", &format!("Authorization: Bearer {token}")])
        // An event stream never ends: its operations are checked in tests/serve.rs.
        .args(["--exclude-path-regex", "events$", "--max-examples", "20", "--workers", "1", "--no-color"])
        .current_dir(env!("CARGO_TARGET_TMPDIR"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    let Ok(out) = finished.recv_timeout(DEADLINE) else {
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        panic!("schemathesis took longer than {DEADLINE:?}");
    };
    let out = out.unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "schemathesis found failures:\n{report}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(report.contains("passed"), "{report}");
}
