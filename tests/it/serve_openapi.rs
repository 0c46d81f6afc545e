//! `/openapi.json` checked by schemathesis (PyPI) against the running server: every
//! operation with generated valid and invalid requests, every response against the
//! document (statuses, content types, schemas), no server errors.

#![cfg(unix)]

use crate::common;
use crate::common::example_plugin;
use crate::common::python;
use crate::common::server;

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
    // A plugin installed, so that what `GET /api/plugins` answers is checked too.
    example_plugin::Author::new(&s.path).install_example(&s.path);
    // Schemathesis sends hundreds of requests: the rate limit is not what it checks.
    let served = server::Served::start(&s.path, &["--rate-limit", "1000000"], &[]);
    // A session, as the page has (see tests/openapi/schemathesis.toml).
    let sign_in = served.request("GET", served.sign_in.trim_start_matches(&served.base()), &[], None);
    let cookie = sign_in.header("set-cookie").unwrap().split(';').next().unwrap().to_string();
    let session = cookie.split_once('=').unwrap().1.to_string();
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openapi/schemathesis.toml");
    let schemathesis = python.with_file_name("schemathesis");
    let child = Command::new(schemathesis)
        .arg("--config-file")
        .arg(config)
        .args(["run", &format!("{}/openapi.json", served.base())])
        .env("TRELLIS_SESSION", session)
        // An event stream never ends: its operations are checked in tests/it/serve.rs.
        .args(["--exclude-path-regex", "events$", "--max-examples", "20", "--workers", "1", "--no-color"])
        .current_dir(env!("CARGO_TARGET_TMPDIR"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::output_within(child, DEADLINE, "schemathesis");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "schemathesis found failures:\n{report}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(report.contains("passed"), "{report}");
    // Its requests were signed in: the tokens it made through the API are there.
    let tokens = served.request("GET", "/api/tokens", &[&format!("Cookie: {cookie}")], None).json();
    assert!(!tokens.as_array().unwrap().is_empty(), "schemathesis made no token: its requests were refused\n{report}");
}
