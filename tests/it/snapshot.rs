//! The commands that only read a space (`charm list`, `charm get`, `tools`, `pending`) read
//! it while another `trellis` has it open, and when its file is not writable: from a
//! snapshot, saying so, and writing nothing. The commands that change it say which ones can.

use crate::common;

use common::Finish;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{json_of, ok, space};

/// `charm get Counter --json`'s count.
fn count_in(out: &[u8]) -> i64 {
    let value: serde_json::Value = serde_json::from_slice(out).unwrap();
    value["count"].as_i64().unwrap_or_else(|| panic!("no count in {value}"))
}

#[test]
fn a_space_a_chat_holds_is_read_as_last_saved_and_changing_it_is_refused_clearly() {
    let s = space();
    ok(&s.path, &["charm", "send", "Counter", "increment", r#"{"amount": 3}"#]);
    let mut chat = common::trellis(&s.path).arg("chat").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut stdin = chat.stdin.take().unwrap();
    let (lines, said) = std::sync::mpsc::channel();
    let stdout = BufReader::new(chat.stdout.take().unwrap());
    std::thread::spawn(move || stdout.lines().map_while(Result::ok).for_each(|l| drop(lines.send(l))));
    writeln!(stdin, "@Counter add 2").unwrap();
    loop {
        let line = said.recv_timeout(Duration::from_secs(60)).expect("the chat answers while its input stays open");
        if line.starts_with("assistant:") {
            break;
        }
    }

    // The chat still runs, holding the space: what it saved is there to read.
    let out = common::run(&s.path, &["--json", "charm", "get", "Counter"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(count_in(&out.stdout), 5, "the chat's change, saved before it answered");
    assert!(err.contains("is in use by another trellis process: showing it as it was last saved"), "{err}");
    let listed = common::run(&s.path, &["charm", "list"]);
    assert!(listed.status.success() && String::from_utf8_lossy(&listed.stdout).contains("Counter"));
    let tools = common::run(&s.path, &["tools", "Counter"]);
    assert!(String::from_utf8_lossy(&tools.stdout).contains("Counter.increment"), "{tools:?}");

    let refused = common::run(&s.path, &["charm", "send", "Counter", "increment"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(err.contains("in use by another trellis process") && err.contains("(`charm list`, `charm get`"), "{err}");

    drop(stdin);
    assert!(chat.wait().unwrap().success());
    assert_eq!(json_of(&s.path, &["charm", "get", "Counter"])["count"], 5, "the refused send changed nothing");
}

/// Whether the tests run as root (who may write any file): the space file they made is
/// root's.
#[cfg(unix)]
fn as_root(space: &Path) -> bool {
    std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(space).unwrap()) == 0
}

/// `trellis ARGS` on `space` as a user who may read the space but not write it: `nobody`
/// when the tests run as root, else the test's own user once the file and its directory
/// are made read-only.
#[cfg(unix)]
fn as_a_reader(space: &Path, args: &[&str]) -> std::process::Output {
    let mut command = if as_root(space) {
        let mut setpriv = Command::new("setpriv");
        setpriv.args(["--reuid=65534", "--regid=65534", "--clear-groups", env!("CARGO_BIN_EXE_trellis")]);
        setpriv
    } else {
        Command::new(env!("CARGO_BIN_EXE_trellis"))
    };
    command.arg("--space").arg(space).args(args).env("XDG_CONFIG_HOME", common::config_dir(space));
    command.finish()
}

#[cfg(unix)]
#[test]
fn a_space_that_is_not_writable_is_read_and_left_as_it_was() {
    use std::os::unix::fs::PermissionsExt;
    let s = space();
    ok(&s.path, &["charm", "send", "Counter", "increment", r#"{"amount": 4}"#]);
    let dir = s.path.parent().unwrap();
    let (file_mode, dir_mode) = if as_root(&s.path) { (0o644, 0o755) } else { (0o444, 0o555) };
    std::fs::set_permissions(&s.path, std::fs::Permissions::from_mode(file_mode)).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(dir_mode)).unwrap();
    let before = std::fs::read(&s.path).unwrap();
    let entries = || std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name()).collect::<Vec<_>>();
    let present = entries();

    let out = as_a_reader(&s.path, &["--json", "charm", "get", "Counter"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(count_in(&out.stdout), 4);
    assert!(err.contains("is not writable: showing it as it was last saved"), "{err}");

    let refused = as_a_reader(&s.path, &["charm", "send", "Counter", "increment"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(err.contains("(`charm list`, `charm get`, `tools`, `pending`) still can"), "{err}");

    assert_eq!(std::fs::read(&s.path).unwrap(), before, "the file is as it was");
    assert_eq!(entries(), present, "and nothing was made beside it");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}
