//! `trellis mcp serve` driven by the official MCP Python SDK (PyPI `mcp`), as an MCP host
//! drives it: initialize, list the tools, call them, subscribe to a charm; and as a client
//! of the current revision (2026-07-28) does: `server/discover`, `subscriptions/listen`.

use crate::common;
use crate::common::mcp_tools as tools;

use common::Finish;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use trellis_mcp::MAX_SUBSCRIPTIONS;

/// Runs the SDK client (`tests/mcp/client.py`) speaking `revision` with `args`; what it saw.
fn client(revision: &str, args: &[&std::ffi::OsStr]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    let child = Command::new(tools::python())
        .arg(script)
        .arg(revision)
        .args(args)
        .env_remove("TRELLIS_SPACE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = common::output_within(child, Duration::from_secs(180), "the MCP client");
    assert!(out.status.success(), "the client failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The client of the current revision, against a server of [`MAX_SUBSCRIPTIONS`].
fn current() -> String {
    format!("current:{MAX_SUBSCRIPTIONS}")
}

/// What the client saw, as a host should see it (the same over stdio and HTTP).
fn check(seen: &Value) {
    assert_eq!(seen["server"], "trellis");
    assert_eq!(seen["tools"]["Counter_increment"], "Counter.increment", "wire names, titled by display name");
    assert_eq!(seen["tools"]["Todo_add"], "Todo.add");
    assert_eq!(seen["destructive"], serde_json::json!(["Notes_delete"]), "the approval policy, as a hint");
    assert!(seen["tools"].as_object().unwrap().keys().all(|name| !name.starts_with("Chat")), "no chatbot streams");

    assert_eq!(seen["added_error"], false);
    assert_eq!(seen["added"]["result"]["count"], 2);
    assert!(seen["added"]["summary"].as_str().unwrap().contains("count: 0 → 2"), "{seen}");
    assert_eq!(seen["refused_error"], true, "arguments are validated like a model's");
    assert!(seen["refused_text"].as_str().unwrap().contains("/amount"), "{seen}");
    assert_eq!(seen["approval_error"], true, "a handler that needs approval does not run");
    assert!(seen["unknown"].as_str().unwrap().contains("Nope_nothing"), "{seen}");

    // Each charm's data is a resource; reading it shows the change, without the streams.
    let resources: Vec<&str> = seen["resources"].as_array().unwrap().iter().map(|r| r.as_str().unwrap()).collect();
    assert_eq!(resources, ["Counter", "Dice", "Notes", "Todo"]);
    assert!(seen["counter_uri"].as_str().unwrap().starts_with("trellis://charm/"), "{seen}");
    assert_eq!(seen["counter_mime"], "application/json");
    assert_eq!(seen["counter"]["count"], 2);
    assert!(seen["counter"].get("increment").is_none(), "streams are tools, not data: {seen}");
    // The client subscribed to the counter before calling increment: it heard of the change.
    assert_eq!(seen["updated"][0], seen["counter_uri"], "{seen}");

    // A new charm (created through the server) announces itself: its tools are listed.
    assert_eq!(seen["created"]["data"]["$NAME"], "Steps", "{seen}");
    assert!(seen["relisted"].as_array().unwrap().iter().any(|t| t == "Steps_increment"), "{seen}");
    assert_eq!(seen["stepped"]["result"]["count"], 3);

    // A handler that answers: its result as structured content, the same as text, and its
    // output schema in the listing (a handler that answers nothing has none).
    let added = &seen["todo_added"];
    assert_eq!(added["returned"]["title"], "milk", "{seen}");
    assert!(added["returned"]["index"].is_u64(), "{seen}");
    assert_eq!(seen["todo_added_text"], *added, "the text content is the same JSON");
    let schema = &seen["todo_output_schema"];
    assert_eq!(schema["type"], "object", "{seen}");
    assert_eq!(schema["properties"]["returned"]["properties"]["index"]["type"], "integer", "{seen}");
    assert!(seen["counter_output_schema"].is_null(), "{seen}");
}

/// What a client of the current revision saw (the same over stdio and HTTP, but for
/// `leeway`: see [`check_current`]'s callers).
fn check_current(seen: &Value, leeway: u64) {
    assert_eq!(seen["version"], "2026-07-28", "server/discover chose the current revision: {seen}");
    let counter = seen["counter_uri"].as_str().unwrap();
    // Of the filter asked for, the server honours what it has: no charm at `nope`.
    let honored = serde_json::json!({
        "toolsListChanged": true, "resourcesListChanged": true, "resourceSubscriptions": [counter]
    });
    assert_eq!(seen["honored"], honored, "{seen}");
    assert_eq!(seen["added"]["result"]["count"], 2);
    assert_eq!(seen["first"], counter, "the increment reached the listen stream: {seen}");
    assert_eq!(seen["created"]["data"]["$NAME"], "Steps", "{seen}");
    assert!(seen["relisted"].as_array().unwrap().iter().any(|t| t == "Steps_increment"), "{seen}");
    assert_eq!(seen["stepped"]["result"]["count"], 3);
    // More streams than the cap, opened and cancelled one by one, were all honoured.
    assert_eq!(seen["reopened"], serde_json::json!([counter]), "{seen}");
    // At once: each stream of one resource counts two (itself and the resource).
    let at_once = seen["opened_at_once"].as_u64().unwrap();
    let cap = MAX_SUBSCRIPTIONS as u64 / 2;
    assert!(at_once <= cap && at_once + leeway >= cap, "{at_once} opened at once, the cap is {cap}: {seen}");
    assert!(seen["refused"].as_str().unwrap().contains("too many subscriptions"), "{seen}");
    // The room is free as soon as the server reads the cancellations, before the streams'
    // tasks end: the next stream, asked for at once, gets its resource.
    assert_eq!(seen["after_honored"], serde_json::json!([counter]), "closing the streams made room again: {seen}");
    assert_eq!(seen["after"], counter, "{seen}");
    assert_eq!(seen["counter"]["count"], 3);
}

/// The counter's count as `trellis charm get` reads it after the server is gone.
fn count(space: &Path) -> Value {
    let counter = common::trellis(space).args(["--json", "charm", "get", "Counter"]).finish();
    serde_json::from_slice::<Value>(&counter.stdout).unwrap()["count"].clone()
}

#[test]
fn an_mcp_host_over_stdio_lists_and_calls_the_charms_handlers() {
    let s = common::space();
    let binary = env!("CARGO_BIN_EXE_trellis");
    check(&client("legacy", &["stdio".as_ref(), binary.as_ref(), s.path.as_os_str()]));
    // The change is in the space, for every other front end.
    assert_eq!(count(&s.path), 2);
}

/// A line that is not JSON (broken, two messages on one line, nested past any reader)
/// gets JSON-RPC's parse error, and a request that is JSON but no MCP request gets an
/// error under its id that says why, so a host waiting for an answer is not left waiting;
/// the lines around them are answered as ever.
#[test]
fn every_line_a_host_sends_over_stdio_is_answered() {
    use std::io::Write;
    let s = common::space();
    let mut child = common::trellis(&s.path)
        .args(["mcp", "serve"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let long_name = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "x".repeat(1 << 20)}});
    let long_name = long_name.to_string();
    let lines = [
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","#,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
        &deep,
        r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":5}}"#,
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":"oops"}"#,
        r#"{"jsonrpc":"2.0","id":"seven","method":7}"#,
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/explode","params":{}}"#,
        &long_name,
    ];
    let mut stdin = child.stdin.take().unwrap();
    for line in lines {
        writeln!(stdin, "{line}").unwrap();
    }
    // A host reads its answers, then closes: read until every line is answered (the
    // three parse errors and the seven requests with ids), however long the server takes.
    let (answered, answers_read) = std::sync::mpsc::channel();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(stdout).map_while(Result::ok) {
            let _ = answered.send(line);
        }
    });
    let mut answers: Vec<Value> = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while answers.len() < 10 {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = answers_read.recv_timeout(left).unwrap_or_else(|_| panic!("unanswered lines: {answers:?}"));
        answers.push(serde_json::from_str(&line).unwrap());
    }
    drop(stdin);
    let out = common::output_within(child, Duration::from_secs(60), "trellis mcp serve");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let parse_errors: Vec<&Value> = answers.iter().filter(|a| a["error"]["code"] == -32700).collect();
    assert_eq!(parse_errors.len(), 3, "{answers:?}");
    assert!(parse_errors
        .iter()
        .all(|a| a["id"].is_null() && a["error"]["message"].as_str().unwrap().contains("not JSON")));
    let ids: Vec<&Value> = answers.iter().filter(|a| a.get("result").is_some()).map(|a| &a["id"]).collect();
    assert_eq!(ids, [0, 4], "{answers:?}");
    let refusal = |id: Value| {
        let answer = answers.iter().find(|a| a["id"] == id).unwrap_or_else(|| panic!("{id} unanswered: {answers:?}"));
        (answer["error"]["code"].as_i64().unwrap(), answer["error"]["message"].as_str().unwrap().to_string())
    };
    let (code, message) = refusal(json!(5));
    assert_eq!(code, -32602, "invalid params");
    assert!(message.contains("the params of `tools/call` do not fit it: invalid type: integer `5`"), "{message}");
    assert_eq!(refusal(json!(6)), (-32600, "Invalid request: its `params` is not an object".to_string()));
    assert_eq!(refusal(json!("seven")), (-32600, "Invalid request: its `method` is not a text".to_string()));
    assert_eq!(refusal(json!(8)), (-32601, "no method `tools/explode`".to_string()));
    // A name a megabyte long is echoed short, saying how long it was.
    let (_, message) = refusal(json!(9));
    assert!(message.len() < 500 && message.contains("(1048576 bytes in all)"), "{message}");
}

#[test]
fn a_client_of_the_current_revision_listens_over_stdio() {
    let s = common::space();
    let binary = env!("CARGO_BIN_EXE_trellis");
    check_current(&client(&current(), &["stdio".as_ref(), binary.as_ref(), s.path.as_os_str()]), 0);
}

#[test]
fn a_client_of_the_current_revision_listens_over_streamable_http() {
    let s = common::space();
    let server = HttpServer::start(&s.path);
    // Over HTTP a stream ends when its request does. Now and then (about one run in ten
    // on a busy machine) the SDK's client keeps the connections of streams it cancelled
    // open: the server's keep-alives reach them for as long as it runs, and the server
    // rightly still counts those streams. Two was the most seen until a CI run on
    // 2026-11-28 saw five, so the leeway is eight; the cap itself is still never passed.
    check_current(&client(&current(), &["http".as_ref(), server.url.as_ref()]), 8);
}

/// `trellis mcp serve --http`, stopped when the test ends.
pub(crate) struct HttpServer {
    _child: common::Reaped,
    pub(crate) url: String,
}

impl HttpServer {
    fn start(space: &Path) -> HttpServer {
        HttpServer::start_with(space, &[])
    }

    /// Starts it with `extra` flags.
    pub(crate) fn start_with(space: &Path, extra: &[&str]) -> HttpServer {
        use std::io::BufRead;
        let mut child = common::trellis(space)
            .args(["mcp", "serve", "--http", "127.0.0.1:0"])
            .args(extra)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let mut lines = std::io::BufReader::new(stderr).lines();
        let url = lines
            .find_map(|line| line.ok()?.split_once(" at ").map(|(_, url)| url.to_string()))
            .expect("the server says where it listens");
        HttpServer { _child: common::Reaped::new(child), url }
    }

    /// The raw HTTP status line of an `initialize` POST carrying `origin`.
    fn status_with_origin(&self, origin: &str) -> String {
        let authority = self.url.trim_start_matches("http://").trim_end_matches("/mcp");
        self.status_with_origin_on(std::net::TcpStream::connect(authority).unwrap(), origin)
    }

    /// The same, from another loopback address than 127.0.0.1, with a web page's origin.
    fn status_with_origin_from_another_address(&self) -> String {
        let authority = self.url.trim_start_matches("http://").trim_end_matches("/mcp");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let stream = runtime.block_on(socket.connect(authority.parse().unwrap())).unwrap().into_std().unwrap();
        stream.set_nonblocking(false).unwrap();
        self.status_with_origin_on(stream, "http://evil.example")
    }

    fn status_with_origin_on(&self, mut stream: std::net::TcpStream, origin: &str) -> String {
        use std::io::{Read, Write};
        let authority = self.url.trim_start_matches("http://").trim_end_matches("/mcp");
        let body = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","clientInfo":{"name":"t","version":"1"},"capabilities":{}}}"#;
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nOrigin: {origin}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response.lines().next().unwrap_or_default().to_string()
    }
}

#[test]
fn an_mcp_host_over_streamable_http_sees_the_same_and_web_pages_are_refused() {
    let s = common::space();
    let server = HttpServer::start(&s.path);
    check(&client("legacy", &["http".as_ref(), server.url.as_ref()]));
    let refused = server.status_with_origin("http://evil.example");
    assert!(refused.contains(" 403 "), "a web page's request must be refused: {refused}");
    drop(server);
    assert_eq!(count(&s.path), 2);
}

/// A plain TCP connection to `authority`, reads held to 30 s.
fn connect(authority: &str) -> std::net::TcpStream {
    let stream = std::net::TcpStream::connect(authority).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    stream
}

/// `mcp serve --http` holds its connections to the same limits as `trellis serve`: a body
/// that stalls is cut off at `--body-timeout`, and an address over
/// `--connections-per-address` is refused while another is served.
#[test]
fn http_connections_are_held_to_a_body_deadline_and_a_cap_per_address() {
    use std::io::{Read, Write};
    let s = common::space();
    let server = HttpServer::start_with(&s.path, &["--body-timeout", "1", "--connections-per-address", "2"]);
    let authority = server.url.trim_start_matches("http://").trim_end_matches("/mcp").to_string();
    let mut stalled = connect(&authority);
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: 100\r\n\r\n{{\"jsonrpc\""
    );
    stalled.write_all(head.as_bytes()).unwrap();
    let started = std::time::Instant::now();
    let mut answer = String::new();
    let _ = stalled.read_to_string(&mut answer);
    assert!(started.elapsed() < Duration::from_secs(15), "cut off after about a second: {answer}");
    assert!(!answer.starts_with("HTTP/1.1 200"), "{answer}");
    // The cap on a server of its own: the stalled connection, cut off, may still be
    // counted for a moment on the first, and would take one of the two places.
    drop(server);
    let server = HttpServer::start_with(&s.path, &["--connections-per-address", "2"]);
    let authority = server.url.trim_start_matches("http://").trim_end_matches("/mcp").to_string();
    let held = [connect(&authority), connect(&authority)];
    // The two are counted once the server answers another's request after them.
    assert!(server.status_with_origin_from_another_address().contains(" 403 "));
    let mut refused = connect(&authority);
    refused.write_all(format!("GET /mcp HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = refused.read_to_string(&mut answer);
    assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 503"), "{answer}");
    drop(held);
}

/// Defect: each session of an earlier revision took a subscription at
/// `notifications/initialized`, so clients that only initialised used the whole budget
/// and a later client's `resources/subscribe` was refused for minutes.
#[test]
fn clients_that_only_initialise_over_http_leave_room_for_one_that_subscribes() {
    let s = common::space();
    let server = HttpServer::start(&s.path);
    let crowd = format!("crowd:{}", MAX_SUBSCRIPTIONS + 2);
    let seen = client(&crowd, &["http".as_ref(), server.url.as_ref()]);
    assert_eq!(seen["subscribe_error"], Value::Null, "{seen}");
    assert_eq!(seen["heard"], true, "{seen}");
}

#[test]
fn http_on_a_non_loopback_address_needs_allow_remote() {
    let s = common::space();
    let out = common::trellis(&s.path).args(["mcp", "serve", "--http", "0.0.0.0:0"]).finish();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a loopback address") && err.contains("--allow-remote"), "{err}");
}

/// One raw Streamable HTTP session, driven by reqwest.
struct RawSession {
    url: String,
    id: String,
}

impl RawSession {
    const REVISION: &str = "2025-11-25";

    /// Initialises a session and says it is ready.
    async fn start(http: &reqwest::Client, url: &str) -> RawSession {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": Self::REVISION, "clientInfo": {"name": "raw", "version": "1"}, "capabilities": {}}});
        let answer = Self::post_to(http, url, None, &init).await;
        assert_eq!(answer.status(), 200);
        let id = answer.headers()["mcp-session-id"].to_str().unwrap().to_string();
        answer.bytes().await.unwrap();
        let session = RawSession { url: url.to_string(), id };
        let ready = session.post(http, &json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
        assert_eq!(ready.status(), 202);
        session
    }

    async fn post_to(http: &reqwest::Client, url: &str, id: Option<&str>, body: &Value) -> reqwest::Response {
        let mut request = http
            .post(url)
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", Self::REVISION)
            .json(body);
        if let Some(id) = id {
            request = request.header("Mcp-Session-Id", id);
        }
        request.send().await.unwrap()
    }

    async fn post(&self, http: &reqwest::Client, body: &Value) -> reqwest::Response {
        Self::post_to(http, &self.url, Some(&self.id), body).await
    }

    /// The status of a `tools/list` in this session.
    async fn list_tools(&self, http: &reqwest::Client) -> u16 {
        let answer = self.post(http, &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).await;
        let status = answer.status().as_u16();
        answer.bytes().await.unwrap();
        status
    }
}

/// Defect: a session that only initialised held its place for rmcp's five minutes. Now a
/// session with no stream open that stays silent for `--session-idle` is closed (404
/// from then on), and one listening on an open stream, quiet as it is, stays.
#[test]
fn a_silent_http_session_with_no_stream_is_closed_and_a_listening_one_stays() {
    let s = common::space();
    let server = HttpServer::start_with(&s.path, &["--session-idle", "2"]);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let http = reqwest::Client::new();
        let silent = RawSession::start(&http, &server.url).await;
        let listening = RawSession::start(&http, &server.url).await;
        assert_eq!(silent.list_tools(&http).await, 200, "a fresh session is served");
        let stream = http
            .get(&server.url)
            .header("Accept", "text/event-stream")
            .header("MCP-Protocol-Version", RawSession::REVISION)
            .header("Mcp-Session-Id", &listening.id)
            .send()
            .await
            .unwrap();
        assert_eq!(stream.status(), 200);
        // Read what comes (keep-alives) so the server never waits on this client.
        let reader = tokio::spawn(async move {
            let mut stream = stream;
            while let Ok(Some(_)) = stream.chunk().await {}
        });
        // Twice the idle time and then some: the sweeper looks four times per idle time.
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(silent.list_tools(&http).await, 404, "the silent session was closed");
        assert_eq!(listening.list_tools(&http).await, 200, "the listening session stays");
        reader.abort();
    });
}
