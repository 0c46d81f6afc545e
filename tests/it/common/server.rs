//! `trellis serve` in a child process, and a plain HTTP/1.1 client for it (requests as
//! any client writes them, so the tests can send what browsers send, and worse).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

/// A running `trellis serve`, stopped when dropped.
pub struct Served {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub authority: String,
    /// The start URL, with its one-time token.
    pub sign_in: String,
    /// What it has written on standard error since it said where it listens.
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Served {
    /// Starts `trellis --space SPACE serve --addr 127.0.0.1:0 EXTRA...` with `env`.
    pub fn start(space: &Path, extra: &[&str], env: &[(&str, &str)]) -> Served {
        let mut command = crate::common::trellis(space);
        command.args(["serve", "--addr", "127.0.0.1:0"]).args(extra);
        for (key, value) in env {
            command.env(key, value);
        }
        Served::spawn(command)
    }

    /// Runs `command`, a `trellis ... serve`, until it says where it listens.
    pub fn spawn(mut command: std::process::Command) -> Served {
        let mut child = command.stderr(Stdio::piped()).spawn().expect("trellis serve starts");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let sign_in = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|line| line.split_once(" http://").map(|(_, url)| format!("http://{}", url.trim())))
            .expect("trellis serve says where it listens");
        // Keep reading what it says, so it never blocks on a full pipe.
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let mut log = kept.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let authority = sign_in.trim_start_matches("http://").split('/').next().unwrap_or_default().to_string();
        Served { child, authority, sign_in, log }
    }

    /// The value of the counter `name{labels}` in the server's `/metrics` (0 when absent).
    pub fn metric(&self, series: &str) -> f64 {
        let page = self.request("GET", "/metrics", &[], None);
        assert_eq!(page.status, 200, "/metrics: {}", page.body);
        let value = page.body.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok());
        value.unwrap_or(0.0)
    }

    /// The base URL, `http://127.0.0.1:PORT`.
    pub fn base(&self) -> String {
        format!("http://{}", self.authority)
    }

    /// Sends one request (`headers` as `Name: value` lines; `Host` is added unless given, and
    /// `Content-Type: application/json` to one with a body or other than GET, unless given).
    pub fn request(&self, method: &str, path: &str, headers: &[&str], body: Option<&str>) -> Response {
        let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
        if !headers.iter().any(|h| h.to_ascii_lowercase().starts_with("host:")) {
            head.push_str(&format!("Host: {}\r\n", self.authority));
        }
        for header in headers {
            head.push_str(&format!("{header}\r\n"));
        }
        let body = body.unwrap_or_default();
        if !body.is_empty() || method != "GET" {
            if !headers.iter().any(|h| h.to_ascii_lowercase().starts_with("content-type:")) {
                head.push_str("Content-Type: application/json\r\n");
            }
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        head.push_str(body);
        self.raw(&head)
    }

    /// Sends `request` as it is, on a connection of its own; the response.
    pub fn raw(&self, request: &str) -> Response {
        let mut stream = TcpStream::connect(&self.authority).expect("the server accepts connections");
        stream.set_read_timeout(Some(Duration::from_secs(60))).expect("a read timeout");
        stream.write_all(request.as_bytes()).expect("the request is sent");
        let mut raw = Vec::new();
        let _ = stream.read_to_end(&mut raw);
        Response::parse(&raw)
    }

    /// Opens a stream of server-sent events at `path`.
    pub fn events(&self, path: &str, headers: &[&str]) -> Events {
        let mut stream = TcpStream::connect(&self.authority).expect("the server accepts connections");
        stream.set_read_timeout(Some(Duration::from_secs(60))).expect("a read timeout");
        let mut head = format!("GET {path} HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n", self.authority);
        for header in headers {
            head.push_str(&format!("{header}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).expect("the request is sent");
        Events { reader: BufReader::new(stream), event: String::new(), chat: None }
    }
}

impl Served {
    /// What the server has logged so far (after the line saying where it listens).
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    #[cfg(unix)]
    /// Stops the process (SIGSTOP) or lets it go on (SIGCONT), as a machine that hangs
    /// for a while would.
    pub fn pause(&self, paused: bool) {
        let signal = if paused { nix::sys::signal::Signal::SIGSTOP } else { nix::sys::signal::Signal::SIGCONT };
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).expect("signal the server");
    }

    #[cfg(unix)]
    /// Stops the server as an operator does (SIGTERM), and waits (at most 30 s) for it
    /// to end.
    pub fn terminate(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("signal the server");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().expect("the server's status").is_none() {
            assert!(std::time::Instant::now() < deadline, "the server did not stop on SIGTERM: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server at once (SIGKILL), as a machine going down would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response: status, headers (names lowercased), body (as text, and as bytes).
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub bytes: Vec<u8>,
}

impl Response {
    fn parse(raw: &[u8]) -> Response {
        let split = raw.windows(4).position(|w| w == b"\r\n\r\n");
        let (head, bytes) = match split {
            Some(at) => (String::from_utf8_lossy(&raw[..at]), raw[at + 4..].to_vec()),
            None => (String::from_utf8_lossy(raw), Vec::new()),
        };
        let mut lines = head.lines();
        let status = lines.next().and_then(|l| l.split(' ').nth(1)?.parse().ok()).unwrap_or(0);
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Response { status, headers, body: String::from_utf8_lossy(&bytes).into_owned(), bytes }
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The body as JSON (panics, naming the body, when it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }
}

/// Server-sent events as they arrive.
pub struct Events {
    reader: BufReader<TcpStream>,
    event: String,
    /// The chat's state: its first `chat` event, with each `change` since applied.
    chat: Option<serde_json::Value>,
}

impl Events {
    /// The next event as (name, data), a chat's `change` as the `chat` state it makes; the
    /// read times out (a failure) after 60 s.
    pub fn next(&mut self) -> (String, serde_json::Value) {
        let (event, data) = self.next_raw();
        match event.as_str() {
            "chat" => self.chat = Some(data.clone()),
            "change" => {
                let chat = self.chat.as_mut().expect("the whole chat comes before its changes");
                let from = data["from"].as_u64().unwrap() as usize;
                let messages = chat["messages"].as_array_mut().unwrap();
                assert!(from <= messages.len(), "a change from {from} of {} messages", messages.len());
                messages.truncate(from);
                messages.extend(data["messages"].as_array().unwrap().iter().cloned());
                for (key, value) in data.as_object().unwrap() {
                    if key != "from" && key != "messages" {
                        chat[key] = value.clone();
                    }
                }
                return ("chat".into(), chat.clone());
            }
            _ => {}
        }
        (event, data)
    }

    /// The next event as (name, data), as it came; the read times out (a failure) after 60 s.
    pub fn next_raw(&mut self) -> (String, serde_json::Value) {
        loop {
            let mut line = String::new();
            let read = self.reader.read_line(&mut line).expect("an event within 60 s");
            assert!(read > 0, "the event stream ended");
            let line = line.trim_end();
            if let Some(name) = line.strip_prefix("event: ") {
                self.event = name.to_string();
            } else if let Some(data) = line.strip_prefix("data: ") {
                if let Ok(json) = serde_json::from_str(data) {
                    return (std::mem::take(&mut self.event), json);
                }
            }
        }
    }

    /// Whether the stream ends (its chunked body's last chunk, or the connection closing)
    /// before the client's read times out, skipping what comes first.
    pub fn ends(&mut self) -> bool {
        let mut line = String::new();
        loop {
            line.clear();
            match self.reader.read_line(&mut line) {
                Ok(0) => return true,
                Ok(_) if line == "0\r\n" => return true,
                Ok(_) => {}
                Err(e) => return e.kind() == std::io::ErrorKind::ConnectionReset,
            }
        }
    }

    /// Reads events until one named `name` satisfies `done`; returns its data.
    pub fn until(&mut self, name: &str, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        loop {
            let (event, data) = self.next();
            if event == name && done(&data) {
                return data;
            }
        }
    }
}
