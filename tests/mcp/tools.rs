//! The third-party MCP parts the tests run: the official Python SDK and `mcp-server-time`
//! (PyPI, one virtual environment) and `@modelcontextprotocol/server-everything` (npm),
//! pinned and installed under the target directory by `tests/mcp/install.sh` (which
//! `.ci/run` runs up front, and these helpers run on first use).
//!
//! Shared by `tests/it/mcp.rs`, `tests/it/mcp_client.rs` and `mcp/tests/client.rs` (included
//! with `#[path]`); each includer declares `install` (`tests/it/common/install.rs`) beside it.

#![allow(dead_code)] // each test file uses part of it

use super::install;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Where the parts are: the workspace's `target/tmp` (every package's
/// `CARGO_TARGET_TMPDIR`), after `install.sh` made sure they are there.
fn installed() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .map(|root| root.join("tests/mcp/install.sh"))
            .find(|script| script.is_file())
            .expect("tests/mcp/install.sh is in the workspace");
        let how =
            format!("install them with `sh {} {}` (needs python3 with venv, and npm)", script.display(), dir.display());
        install::run(&script, &dir, "the MCP test servers and SDK are", &how);
        dir
    })
}

/// The Python of the virtual environment with the SDK and the time server.
pub fn python() -> PathBuf {
    installed().join("mcp-sdk-venv/bin/python")
}

/// The command line of `mcp-server-time` (stdio), with UTC as its local zone.
pub fn time_server() -> Vec<String> {
    let python = python().display().to_string();
    vec![python, "-m".into(), "mcp_server_time".into(), "--local-timezone".into(), "UTC".into()]
}

/// The command line of server-everything over stdio.
pub fn everything() -> Vec<String> {
    let script = installed().join("mcp-npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    vec!["node".into(), script.display().to_string(), "stdio".into()]
}

/// Quotes `words` for a `--mcp 'name=command args'` value.
pub fn flag(name: &str, words: &[String]) -> String {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    format!("{name}={}", quoted.join(" "))
}
