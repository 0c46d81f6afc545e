//! An OpenAI-compatible model server on loopback for tests that run the binary: it keeps
//! the body of every request it receives, and answers each with the next of its replies
//! as the chat-completions event stream.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// One answer of the server.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Words.
    Text(String),
    /// A call of the tool of this wire name with these arguments.
    Call(String, Value),
    /// Calls of these tools (wire name, arguments), in one answer.
    Calls(Vec<(String, Value)>),
    /// A word every 100 ms for a minute: a generation to cancel.
    Slow,
    /// A word every 100 ms, this many words, then the end of the answer.
    Words(usize),
    /// A call of this tool whose answer then stalls for a minute without ending: the call
    /// has arrived, and nothing has run it yet.
    Stalled(String, Value),
    /// Words, but a request that carries an image is refused the way llama.cpp's server
    /// refuses it without a vision projector (the turn goes on to the next reply).
    Blind(String),
    /// Words, and the tokens the request and the answer took (input, output), as a
    /// provider reports them in the stream's last chunk.
    Counted(String, u64, u64),
}

/// The server; it runs until the test process ends.
pub struct Provider {
    /// Its base URL, for `OPENAI_BASE_URL` (`http://127.0.0.1:PORT/v1`).
    pub url: String,
    received: Arc<Mutex<Vec<(Instant, Value)>>>,
}

impl Provider {
    /// Starts a server answering request `n` with `replies[n]`, and the last reply to
    /// every request after them.
    pub fn start(replies: Vec<Reply>) -> Provider {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Vec::new()));
        let kept = received.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (kept, replies) = (kept.clone(), replies.clone());
                std::thread::spawn(move || answer(stream, &kept, &replies));
            }
        });
        Provider { url, received }
    }

    /// The request bodies received so far, in order.
    pub fn received(&self) -> Vec<Value> {
        self.received.lock().unwrap().iter().map(|(_, body)| body.clone()).collect()
    }

    /// `trellis --space SPACE` (see [`super::trellis`]) with this server as its
    /// OpenAI-compatible provider (`--model openai:NAME`) and no MCP configuration of the
    /// person running the tests.
    pub fn trellis(&self, space: &std::path::Path) -> std::process::Command {
        let mut command = super::trellis(space);
        command
            .env("TRELLIS_MCP_CONFIG", "")
            .env("OPENAI_API_KEY", "not-checked")
            .env("OPENAI_BASE_URL", &self.url)
            .env("NO_PROXY", "127.0.0.1")
            .env_remove("http_proxy")
            .env_remove("HTTP_PROXY");
        command
    }

    /// `trellis chat --model openai:loopback -m MESSAGE` against this server; fails the
    /// test unless it succeeds; its standard output.
    pub fn chat(&self, space: &std::path::Path, message: &str) -> String {
        use super::Finish;
        let out = self.trellis(space).args(["chat", "--model", "openai:loopback", "-m", message]).finish();
        assert!(out.status.success(), "chat -m {message:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// When each request arrived, in order.
    pub fn arrivals(&self) -> Vec<Instant> {
        self.received.lock().unwrap().iter().map(|(at, _)| *at).collect()
    }
}

/// Reads one request, keeps its body and streams the reply its turn calls for.
fn answer(stream: TcpStream, received: &Mutex<Vec<(Instant, Value)>>, replies: &[Reply]) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let turn = {
        let mut received = received.lock().unwrap();
        received.push((Instant::now(), serde_json::from_slice(&body).unwrap_or(Value::Null)));
        received.len() - 1
    };
    let reply = replies.get(turn).or(replies.last()).cloned().unwrap_or(Reply::Text(String::new()));
    let mut stream = stream;
    let reply = match reply {
        Reply::Blind(_) if String::from_utf8_lossy(&body).contains("\"image_url\"") => {
            let refusal = json!({"error": {"code": 400, "type": "invalid_request_error",
                "message": "image input is not supported - hint: if this is unexpected, you may need to provide the mmproj"}})
            .to_string();
            let head = format!(
                "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                refusal.len()
            );
            let _ = stream.write_all(format!("{head}{refusal}").as_bytes());
            return;
        }
        Reply::Blind(text) => Reply::Text(text),
        Reply::Slow => Reply::Words(600),
        other => other,
    };
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
    if stream.write_all(head.as_bytes()).is_err() {
        return;
    }
    let chunk = |delta: Value, finish: Value| {
        let chunk = json!({
            "id": "loopback", "object": "chat.completion.chunk", "model": "loopback",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
        });
        format!("data: {chunk}\n\n")
    };
    let events: Vec<String> = match reply {
        Reply::Text(text) => vec![chunk(json!({"content": text}), Value::Null), chunk(json!({}), json!("stop"))],
        Reply::Counted(text, input, output) => {
            let usage = json!({"id": "loopback", "object": "chat.completion.chunk", "model": "loopback", "choices": [],
                "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}});
            let words = [chunk(json!({"content": text}), Value::Null), chunk(json!({}), json!("stop"))];
            words.into_iter().chain([format!("data: {usage}\n\n")]).collect()
        }
        Reply::Call(name, arguments) => calls(&[(name, arguments)], chunk),
        Reply::Calls(all) => calls(&all, chunk),
        Reply::Blind(_) => Vec::new(),
        Reply::Slow => unreachable!("made Words above"),
        Reply::Stalled(name, arguments) => {
            let call = calls(&[(name, arguments)], chunk).swap_remove(0);
            if stream.write_all(call.as_bytes()).and_then(|()| stream.flush()).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_secs(60));
            return;
        }
        Reply::Words(count) => {
            for i in 0..count {
                let word = chunk(json!({"content": format!("word{i} ")}), Value::Null);
                if stream.write_all(word.as_bytes()).and_then(|()| stream.flush()).is_err() {
                    return; // the client hung up: cancelled
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            vec![chunk(json!({}), json!("stop"))]
        }
    };
    for event in events.iter().map(String::as_str).chain(["data: [DONE]\n\n"]) {
        if stream.write_all(event.as_bytes()).and_then(|()| stream.flush()).is_err() {
            return;
        }
    }
}

/// The events of an answer that calls `tools` (wire name, arguments), made by `chunk`.
fn calls(tools: &[(String, Value)], chunk: impl Fn(Value, Value) -> String) -> Vec<String> {
    let calls: Vec<Value> = tools
        .iter()
        .enumerate()
        .map(|(index, (name, arguments))| {
            json!({"index": index, "id": format!("call_{}", index + 1), "type": "function",
                   "function": {"name": name, "arguments": arguments.to_string()}})
        })
        .collect();
    vec![chunk(json!({"tool_calls": calls}), Value::Null), chunk(json!({}), json!("tool_calls"))]
}
