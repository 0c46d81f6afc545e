//! `trellis_http::serve` on loopback, against clients that stall in each way a connection
//! can: before or between requests, halfway through a body, never reading the answer, or
//! opening more connections than their address may hold. Each is cut off or refused, and
//! everyone else is answered meanwhile.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::http::StatusCode;
use axum::routing::{get, post};
use hyper::body::Bytes;
use trellis_http::Limits;

/// The size of `GET /big`'s answer: more than loopback's socket buffers hold (a few MiB
/// each way), so a client that does not read leaves the server's write waiting.
const BIG: usize = 32 << 20;

/// Generous for a loaded machine: each deadline in these tests is one second.
const PROMPTLY: Duration = Duration::from_secs(15);

struct Server {
    addr: SocketAddr,
    runtime: tokio::runtime::Runtime,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<()>>,
}

impl Server {
    fn start(limits: Limits) -> Server {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).expect("bind");
        let addr = listener.local_addr().expect("addr");
        let big = Bytes::from(vec![b'x'; BIG]);
        let router = axum::Router::new()
            .route("/", get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.ip().to_string() }))
            .route("/big", get(move || async move { Body::from(big.clone()) }))
            .route("/echo", post(echo));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = runtime.spawn(trellis_http::serve(listener, router, limits, async {
            let _ = stopped.await;
        }));
        Server { addr, runtime, stop: Some(stop), served: Some(served) }
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
        stream
    }

    /// A connection from `local`, another loopback address than the tests' 127.0.0.1.
    fn connect_from(&self, local: &str) -> TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket.bind(format!("{local}:0").parse().expect("an address")).expect("bind the client");
        let stream = self.runtime.block_on(socket.connect(self.addr)).expect("connect").into_std().expect("std");
        stream.set_nonblocking(false).expect("blocking");
        stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
        stream
    }

    /// `GET /` on a new connection: the answer, whole.
    fn ask(&self, mut stream: TcpStream) -> String {
        stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("write");
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let (Some(stop), Some(served)) = (self.stop.take(), self.served.take()) {
            let _ = stop.send(());
            let _ = self.runtime.block_on(async { tokio::time::timeout(Duration::from_secs(30), served).await });
        }
    }
}

/// Reads the body; says so when it did not arrive in time.
async fn echo(request: Request) -> (StatusCode, String) {
    match axum::body::to_bytes(request.into_body(), usize::MAX).await {
        Ok(bytes) => (StatusCode::OK, bytes.len().to_string()),
        Err(error) if trellis_http::is_body_timeout(&error) => (StatusCode::REQUEST_TIMEOUT, error.to_string()),
        Err(error) => (StatusCode::BAD_REQUEST, error.to_string()),
    }
}

fn limits(change: impl FnOnce(&mut Limits)) -> Limits {
    let mut limits = Limits::default();
    change(&mut limits);
    limits
}

/// Reads until the server closes; true if it did within [`PROMPTLY`] (not the client's
/// own read timeout).
fn closed_promptly(mut stream: TcpStream) -> bool {
    let started = Instant::now();
    let _ = stream.read_to_end(&mut Vec::new());
    started.elapsed() < PROMPTLY
}

/// A client that connects and says nothing, stops halfway through its headers, or goes
/// silent after an answer, is cut off after the deadline; one that asks is answered
/// meanwhile, with the address it came from (`ConnectInfo`).
#[test]
fn stalled_clients_are_cut_off_and_others_answered() {
    let server = Server::start(limits(|l| l.header_timeout = Duration::from_secs(1)));
    let silent = server.connect();
    let mut halfway = server.connect();
    halfway.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").expect("write");
    let mut idle = server.connect();
    idle.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
    let mut first = [0u8; 64];
    assert!(idle.read(&mut first).expect("an answer") > 0, "answered, and kept open for another request");
    let answer = server.ask(server.connect());
    assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("127.0.0.1"), "{answer}");
    for stream in [silent, halfway, idle] {
        assert!(closed_promptly(stream), "cut off after about a second");
    }
}

/// A client that asks for an answer larger than the sockets hold and never reads it is
/// cut off once the server's write has waited the deadline; others are answered meanwhile.
#[test]
fn a_client_that_never_reads_its_answer_is_cut_off() {
    let server = Server::start(limits(|l| l.write_timeout = Duration::from_secs(1)));
    let mut deaf = server.connect();
    deaf.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n").expect("write");
    assert!(server.ask(server.connect()).starts_with("HTTP/1.1 200"), "answered while another does not read");
    // Time for the buffers to fill and the deadline to pass, four times over.
    std::thread::sleep(Duration::from_secs(4));
    let mut got = Vec::new();
    let _ = deaf.read_to_end(&mut got);
    assert!(got.starts_with(b"HTTP/1.1 200"), "it was answered");
    assert!(got.len() < BIG, "the answer was cut off: the client read {} of {BIG} bytes", got.len());
    let mut reader = server.connect();
    reader.write_all(b"GET /big HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("write");
    let mut whole = Vec::new();
    reader.read_to_end(&mut whole).expect("a client that reads gets it all");
    assert!(whole.len() > BIG, "{} bytes", whole.len());
}

/// A body that stops halfway, or trickles in, is cut off at the body's deadline: the
/// handler learns why, and the client hears it.
#[test]
fn a_body_that_stalls_or_trickles_is_cut_off() {
    let server = Server::start(limits(|l| l.body_timeout = Duration::from_secs(1)));
    let head = b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n";
    let mut stalled = server.connect();
    stalled.write_all(head).expect("write");
    stalled.write_all(&[b'a'; 10]).expect("write");
    let mut trickling = server.connect();
    trickling.write_all(head).expect("write");
    let mut writer = trickling.try_clone().expect("a clone");
    // A byte every 200 ms: progress, but the whole body would take 20 s.
    let trickle = std::thread::spawn(move || {
        for _ in 0..100 {
            if writer.write_all(b"a").is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let started = Instant::now();
    for mut stream in [stalled, trickling] {
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("did not arrive within 1 s"), "{answer}");
    }
    assert!(started.elapsed() < PROMPTLY, "cut off after about a second");
    let mut whole = server.connect();
    whole
        .write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello")
        .expect("write");
    let mut answer = String::new();
    whole.read_to_string(&mut answer).expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with('5'), "{answer}");
    trickle.join().expect("the trickle ends");
}

/// An address that holds the most connections it may has the next one refused (503, or
/// closed), while another address is answered; once one of its connections closes, it is
/// answered again.
#[test]
fn connections_beyond_the_cap_per_address_are_refused() {
    let server = Server::start(limits(|l| l.per_address = 3));
    let held: Vec<TcpStream> = (0..3).map(|_| server.connect()).collect();
    // The server counts a connection once it accepts it: one answered from another
    // address was accepted after the three.
    assert!(server.ask(server.connect_from("127.0.0.2")).ends_with("127.0.0.2"));
    let refused = server.ask(server.connect());
    assert!(
        refused.is_empty() || (refused.starts_with("HTTP/1.1 503") && refused.contains("the limit is 3")),
        "{refused}"
    );
    drop(held);
    let started = Instant::now();
    loop {
        let answer = server.ask(server.connect());
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(started.elapsed() < PROMPTLY, "the closed connections' slots came back: {answer}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
