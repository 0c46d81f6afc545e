//! `trellis serve`'s event streams against clients that misbehave, and the credential that
//! opened them: a chat stream sends changes, not the conversation each time; a stream
//! whose client stops reading is dropped; a stream opened with a token ends when the token
//! is revoked.

use crate::common;
use crate::common::server;

use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use server::Served;

fn token(served: &Served, auth: &str, name: &str) -> Value {
    let made = served.request("POST", "/api/tokens", &[auth], Some(&json!({ "name": name }).to_string()));
    assert_eq!(made.status, 201, "{}", made.body);
    made.json()
}

fn signed_in(served: &Served) -> String {
    let sign_in = served.request("GET", served.sign_in.trim_start_matches(&served.base()), &[], None);
    format!("Cookie: {}", sign_in.header("set-cookie").unwrap().split(';').next().unwrap())
}

/// Streams opened with a token end soon after it is revoked; one opened with a session
/// goes on, and the token is refused from then on.
#[test]
fn revoking_a_token_ends_the_streams_it_opened() {
    let s = common::space();
    let served = Served::start(&s.path, &[], &[]);
    let cookie = signed_in(&served);
    let made = token(&served, &cookie, "streams");
    let bearer = format!("Authorization: Bearer {}", made["token"].as_str().unwrap());
    let mut chat = served.events("/api/chat/events", &[&bearer]);
    let mut charm = served.events("/api/charms/Counter/events", &[&bearer]);
    let mut session = served.events("/api/chat/events", &[&cookie]);
    chat.until("chat", |_| true);
    charm.until("charm", |_| true);
    session.until("chat", |_| true);
    let revoked = served.request("DELETE", &format!("/api/tokens/{}", made["id"].as_str().unwrap()), &[&cookie], None);
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    let started = Instant::now();
    assert!(chat.ends() && charm.ends(), "the token's streams end");
    assert!(started.elapsed() < Duration::from_secs(30), "promptly, not at a read timeout");
    assert_eq!(served.request("GET", "/api/chat", &[&bearer], None).status, 401);
    let sent = served.request("POST", "/api/chat/messages", &[&cookie], Some(r#"{"text":"still here"}"#));
    assert_eq!(sent.status, 202, "{}", sent.body);
    session.until("chat", |s| s["messages"].to_string().contains("still here"));
}

/// After the first whole state, a chat stream sends each message once: a change carries
/// the new messages, not the conversation before them.
#[test]
fn a_chat_stream_sends_changes_not_the_whole_conversation() {
    let s = common::space();
    let served = Served::start(&s.path, &[], &[]);
    let cookie = signed_in(&served);
    let mut chat = served.events("/api/chat/events", &[&cookie]);
    chat.until("chat", |_| true);
    for text in ["first words", "second words"] {
        let body = json!({ "text": text }).to_string();
        assert_eq!(served.request("POST", "/api/chat/messages", &[&cookie], Some(&body)).status, 202);
        chat.until("chat", |s| s["messages"].to_string().contains(text) && s["pending"] == false);
    }
    let mut more = served.events("/api/chat/events", &[&cookie]);
    let whole = more.until("chat", |_| true);
    assert!(whole["messages"].to_string().contains("second words"), "a new stream starts with all of it");
    let body = json!({ "text": "third words" }).to_string();
    assert_eq!(served.request("POST", "/api/chat/messages", &[&cookie], Some(&body)).status, 202);
    let (mut changes, mut seen) = (Vec::new(), Value::Null);
    while seen["pending"] != false || !seen["messages"].to_string().contains("third words") {
        let (event, data) = more.next_raw();
        if event == "change" {
            changes.push(data.clone());
        }
        seen = more_state(&whole, &changes);
    }
    for change in &changes {
        let text = change["messages"].to_string();
        assert!(!text.contains("first words") && !text.contains("second words"), "{change}");
        assert!(change["from"].as_u64().unwrap() >= 4, "{change}");
    }
}

/// The state `changes` make of `whole`, as a page applies them.
fn more_state(whole: &Value, changes: &[Value]) -> Value {
    let mut state = whole.clone();
    for change in changes {
        let messages = state["messages"].as_array_mut().unwrap();
        messages.truncate(change["from"].as_u64().unwrap() as usize);
        messages.extend(change["messages"].as_array().unwrap().iter().cloned());
        for (key, value) in change.as_object().unwrap() {
            if key != "from" && key != "messages" {
                state[key] = value.clone();
            }
        }
    }
    state
}

/// Messages of 15,000 characters: more than the server's send buffer and the client's
/// receive buffer hold together.
const TURNS: usize = 60;

/// Event streams whose clients never read are dropped once the server's writes to them
/// wait `--write-timeout`, while a client that reads follows the whole conversation.
#[test]
fn event_streams_that_are_not_read_are_dropped() {
    let s = common::space();
    let served = Served::start(&s.path, &["--write-timeout", "2"], &[]);
    let cookie = signed_in(&served);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // Clients with small receive buffers, so that what they do not read fills them soon.
    let deaf: Vec<std::net::TcpStream> = (0..8)
        .map(|_| {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.set_recv_buffer_size(4096).unwrap();
            let stream = runtime.block_on(socket.connect(served.authority.parse().unwrap())).unwrap();
            let stream = stream.into_std().unwrap();
            stream.set_nonblocking(false).unwrap();
            let request = format!("GET /api/chat/events HTTP/1.1\r\nHost: {}\r\n{cookie}\r\n\r\n", served.authority);
            std::io::Write::write_all(&mut &stream, request.as_bytes()).unwrap();
            stream
        })
        .collect();
    let mut reading = served.events("/api/chat/events", &[&cookie]);
    let long = "w".repeat(15_000);
    for turn in 0..TURNS {
        let body = json!({ "text": format!("{turn} {long}") }).to_string();
        let sent = served.request("POST", "/api/chat/messages", &[&cookie], Some(&body));
        assert_eq!(sent.status, 202, "{}", sent.body);
        reading.until("chat", |s| s["pending"] == false && s["messages"].to_string().contains(&format!("{turn} w")));
    }
    // The writes have waited the deadline, several times over.
    std::thread::sleep(Duration::from_secs(8));
    for mut stream in deaf {
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut got = Vec::new();
        let ended = stream.read_to_end(&mut got);
        assert!(
            ended.is_ok() || ended.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
            "dropped by the server, not waiting out the read timeout: {ended:?} after {} bytes",
            got.len()
        );
        assert!(got.len() < TURNS * 15_000, "cut off before the whole conversation: {} bytes", got.len());
    }
    let state = served.request("GET", "/api/chat", &[&cookie], None).json();
    assert!(state["messages"].as_array().unwrap().len() >= 2 * TURNS, "the conversation went on");
}
