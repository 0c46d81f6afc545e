//! The OpenAI-compatible provider end to end against a real server: llama-cpp-python's
//! (PyPI) serving SmolLM2-135M-Instruct, installed pinned under the target directory by
//! `tests/llama/install.sh` (which `.ci/run` runs up front, and this test runs on first use
//! outside CI). A tool call, then the answer after its result: the second request carries
//! the assistant's tool-call message, which this server validates strictly (it refuses a
//! `null` or missing `content`), so a recorded request could not stand in for it.
//!
//! The model is tiny and samples: the test asserts only what the protocol decides (the
//! requests are accepted, the forced tool runs, an answer in text follows), never what
//! the model says.

use crate::common;
use crate::common::install;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{json_of, output_within, space};
use serde_json::Value;

/// How long the server may take to load the model and answer its first request.
const STARTUP: Duration = Duration::from_secs(180);
/// How long the whole chat (two requests to a 135M model on one thread) may take.
const CHAT: Duration = Duration::from_secs(300);

/// The virtual environment and the model file, after `install.sh` made sure they are
/// there (a cold install builds llama.cpp: minutes). Under `CI=true` they must already
/// be installed: `.ci/run` installs them before the tests.
fn installed() -> (PathBuf, PathBuf) {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/llama/install.sh");
    let how = format!(
        "install it with `sh {} {}` (needs python3 with venv and a C++ compiler)",
        script.display(),
        dir.display()
    );
    let python = dir.join("llama-venv/bin/python");
    let model = dir.join("llama-model/SmolLM2-135M-Instruct.Q4_1.gguf");
    if std::env::var("CI").is_ok_and(|ci| ci == "true") {
        assert!(python.is_file() && model.is_file(), "the llama-cpp-python server or its model is missing; {how}");
    }
    install::run(&script, &dir, "the llama-cpp-python server is", &how);
    (python, model)
}

/// A running llama-cpp-python server on a loopback port, killed when dropped.
struct LlamaServer {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl LlamaServer {
    /// Starts the server (model alias `smollm`) and waits until it answers.
    fn start(logs: &Path) -> LlamaServer {
        let (python, model) = installed();
        // A port the system just gave out and took back: free unless another process
        // takes it in between, which the wait below would report.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free loopback port")
            .port();
        let log = logs.join("llama-server.log");
        let file = std::fs::File::create(&log).expect("the server's log file");
        let child = Command::new(python)
            .args(["-m", "llama_cpp.server", "--model"])
            .arg(model)
            .args(["--model_alias", "smollm", "--host", "127.0.0.1", "--port", &port.to_string()])
            // One thread leaves the other core to the test; a fixed seed makes the tiny
            // model's sampling repeatable.
            .args(["--n_threads", "1", "--seed", "7", "--chat_format", "chatml-function-calling"])
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("the log file again"))
            .stderr(file)
            .spawn()
            .expect("the llama-cpp-python server starts");
        let mut server = LlamaServer { child, port, log };
        server.wait_until_ready();
        server
    }

    /// Polls `GET /v1/models` until it answers 200; fails (with the server's log) if the
    /// server exits or [`STARTUP`] passes.
    fn wait_until_ready(&mut self) {
        let started = Instant::now();
        loop {
            if self.get("/v1/models").is_some_and(|response| response.starts_with("HTTP/1.1 200")) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the llama-cpp-python server exited ({status}):\n{}", self.log_tail());
            }
            assert!(
                started.elapsed() < STARTUP,
                "the llama-cpp-python server did not answer within {STARTUP:?}:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// One plain HTTP request; `None` while the server does not accept connections.
    fn get(&self, path: &str) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
        write!(stream, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n", self.port).ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        Some(response)
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// The end of what the server printed, for failure messages.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The parts of type `kind` in the messages of a `--json` chat.
fn parts<'a>(messages: &'a [Value], kind: &str) -> Vec<&'a Value> {
    messages
        .iter()
        .flat_map(|message| message["content"].as_array().into_iter().flatten())
        .filter(|part| part["type"] == kind)
        .collect()
}

/// `trellis --json chat --model openai:smollm ARGS` against `server`; its standard output,
/// after checking it succeeded and no request was refused, and what to show on failure.
fn chat(space: &Path, server: &LlamaServer, args: &[&str]) -> (String, String) {
    let mut command = common::trellis(space);
    command
        .args(["--json", "chat", "--model", "openai:smollm"])
        .args(args)
        .env("OPENAI_API_KEY", "not-checked")
        .env("OPENAI_BASE_URL", server.base_url())
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = output_within(command.spawn().expect("run trellis"), CHAT, "trellis chat with the llama server");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let context = format!("stdout:\n{stdout}\nstderr:\n{stderr}\nserver:\n{}", server.log_tail());
    assert!(!stderr.contains("refused the request"), "a request was refused:\n{context}");
    assert!(out.status.success(), "the chat failed:\n{context}");
    (stdout.into_owned(), context)
}

#[test]
fn a_tool_call_then_the_answer_after_it() {
    let s = space();
    let server = LlamaServer::start(s.path.parent().expect("the space's directory"));
    let (stdout, context) = chat(&s.path, &server, &["--tool-choice", "Counter.increment", "-m", "@Counter add 3"]);
    let messages: Vec<Value> = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{context}"));

    // The forced tool was called first, and ran.
    let calls = parts(&messages, "tool-call");
    assert_eq!(calls.first().map(|call| &call["name"]), Some(&Value::from("Counter_increment")), "{context}");
    let results = parts(&messages, "tool-result");
    assert_eq!(results.len(), calls.len(), "one result a call:\n{context}");
    assert_eq!(results[0]["output"]["type"], "json", "the tool ran without an error:\n{context}");
    // Each call that succeeded ran exactly once: the count is the sum of their amounts.
    let added: i64 = calls
        .iter()
        .zip(&results)
        .filter(|(_, result)| result["output"]["type"] == "json")
        .map(|(call, _)| call["input"].get("amount").map_or(1, |amount| amount.as_i64().expect("an integer amount")))
        .sum();
    assert_eq!(json_of(&s.path, &["charm", "get", "Counter"])["count"], added, "{context}");

    // The request after the result was accepted, and its answer is text.
    let last = messages.last().expect("messages");
    assert_eq!(last["role"], "assistant", "{context}");
    let text: String = parts(std::slice::from_ref(last), "text").iter().filter_map(|p| p["text"].as_str()).collect();
    assert!(!text.trim().is_empty(), "an answer in text after the tool's result:\n{context}");
}

/// The server constrains the answer to the schema (an integer: its grammar lets a string
/// hold a raw line break, which is no JSON); the value is checked again here, and which
/// number the model picks does not matter. This server knows only the older `json_object`
/// response format: it refuses the first request, and Trellis asks again that way. Tool
/// choice `none`: with tools it may call, this server's function-calling format ignores
/// the response format.
#[test]
fn a_result_schema_is_answered_with_a_value_that_fits() {
    let s = space();
    let server = LlamaServer::start(s.path.parent().expect("the space's directory"));
    let schema = serde_json::json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let file = s.path.with_file_name("schema.json");
    std::fs::write(&file, schema.to_string()).expect("write the schema");
    let schema = file.to_str().expect("a UTF-8 path");
    let args = ["--result-schema", schema, "--tool-choice", "none", "-m", "Pick a number."];
    let (stdout, context) = chat(&s.path, &server, &args);
    let value: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{context}"));
    assert!(value["n"].is_i64(), "{context}");
}
