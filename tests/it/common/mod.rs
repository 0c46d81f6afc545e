//! Helpers shared by the tests that run the `trellis` binary.

pub mod example_plugin;
pub mod install;
#[path = "../../mcp/tools.rs"]
pub mod mcp_tools;
pub mod otlp;
pub mod postgres;
pub mod provider;
pub mod python;
pub mod server;
pub mod slow_model;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// A temporary space file that disappears with the value.
pub struct Space {
    _dir: tempfile::TempDir,
    /// The SQLite file (not created until `trellis` first opens it).
    pub path: PathBuf,
}

/// A fresh temporary space.
pub fn space() -> Space {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("space.sqlite");
    Space { _dir: dir, path }
}

/// The `trellis` binary with `--space` set, no provider keys in its environment, and the
/// user's configuration (the plugin trust file) in [`config_dir`].
pub fn trellis(space: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_trellis"));
    command
        .arg("--space")
        .arg(space)
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env("XDG_CONFIG_HOME", config_dir(space));
    command
}

/// The configuration directory of the user of the test's space: beside the space, so a
/// test never reads or writes the real user's.
pub fn config_dir(space: &Path) -> PathBuf {
    space.parent().unwrap_or(space).join("config")
}

/// The plugin trust file `trellis` uses with the test's space.
pub fn trust_file(space: &Path) -> trellis_plugins::trust::TrustFile {
    trellis_plugins::trust::TrustFile::at(config_dir(space).join("trellis/plugins.json"))
}

/// How long one `trellis` command of a test may take.
const COMMAND_DEADLINE: Duration = Duration::from_secs(120);

/// Runs `trellis --space SPACE ARGS`, killed (failing the test) after two minutes.
pub fn run(space: &Path, args: &[&str]) -> Output {
    let child = trellis(space).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run trellis");
    output_within(child, COMMAND_DEADLINE, &format!("trellis {args:?}"))
}

/// Standard output of a `trellis` command that must succeed.
pub fn ok(space: &Path, args: &[&str]) -> String {
    let out = run(space, args);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "trellis {args:?} failed: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// Standard error of a `trellis` command that must fail.
pub fn fails(space: &Path, args: &[&str]) -> String {
    let out = run(space, args);
    assert!(!out.status.success(), "trellis {args:?} should fail: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// The JSON a `trellis --json ...` command that must succeed prints.
pub fn json_of(space: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&ok(space, &all)).expect("valid JSON output")
}

/// A command run to its end, its output captured (its input empty), within two minutes:
/// past them it is killed and the test fails, so a command that hangs never hangs the suite.
pub trait Finish {
    /// Runs the command: `Command::output` with a deadline.
    fn finish(&mut self) -> Output;
}

impl Finish for Command {
    fn finish(&mut self) -> Output {
        let what = format!("{self:?}");
        let child = self
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        output_within(child, COMMAND_DEADLINE, &what)
    }
}

/// Waits for `child` (its output piped) to finish; past `deadline` it is killed and the
/// test fails, naming `what`, so a hung process never hangs the suite.
pub fn output_within(child: Child, deadline: Duration, what: &str) -> Output {
    let pid = child.id();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    match finished.recv_timeout(deadline) {
        Ok(output) => output.unwrap_or_else(|e| panic!("cannot read what {what} printed: {e}")),
        Err(_) => {
            kill(pid);
            panic!("{what} did not finish within {deadline:?}");
        }
    }
}

#[cfg(unix)]
fn kill(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
}

#[cfg(not(unix))]
fn kill(_pid: u32) {}

/// A scripted model string whose script (`turns`) is written beside the space.
pub fn script(space: &Path, turns: serde_json::Value) -> String {
    let path = space.with_file_name("script.json");
    std::fs::write(&path, turns.to_string()).expect("the script is written");
    format!("scripted:{}", path.display())
}

/// The results of the tool calls in `messages`, in order.
pub fn tool_results(messages: &[trellis::builtins::message::Message]) -> Vec<trellis::builtins::message::ToolOutput> {
    use trellis::builtins::message::Part;
    let parts = messages.iter().flat_map(|m| &m.content);
    parts
        .filter_map(|part| match part {
            Part::ToolResult { output, .. } => Some(output.clone()),
            _ => None,
        })
        .collect()
}

/// A child process a test started, killed and reaped when dropped (unless taken back with
/// [`Reaped::take`]): a test that fails midway leaves none running.
pub struct Reaped(Option<std::process::Child>);

impl Reaped {
    pub fn new(child: std::process::Child) -> Reaped {
        Reaped(Some(child))
    }

    /// The child, for the test to wait for it itself.
    pub fn take(&mut self) -> std::process::Child {
        self.0.take().expect("the child was taken already")
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
