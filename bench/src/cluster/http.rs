//! A plain HTTP/1.1 client for `trellis serve`: requests on a kept-alive connection (a
//! client's, so a sample holds no TCP handshake) and server-sent events read as they
//! come, each event stamped with the time it arrived.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a response may take.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// An answer: status and body.
pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) body: String,
}

impl Answer {
    /// The body as JSON (panics, naming the body, when it is not).
    pub(super) fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("cluster: not JSON ({e}): {} {}", self.status, self.body))
    }
}

/// Requests to one server, on one connection kept open between them.
pub(super) struct Http {
    authority: String,
    conn: Option<BufReader<TcpStream>>,
}

impl Http {
    /// A client of the server at `authority` (`127.0.0.1:PORT`); it connects on its first
    /// request.
    pub(super) fn new(authority: &str) -> Http {
        Http { authority: authority.to_owned(), conn: None }
    }

    /// Sends one request (`headers` as `Name: value`; JSON bodies) and reads its answer.
    /// A kept connection the server closed meanwhile is opened again, once, if nothing of
    /// an answer came (so the request was not taken).
    pub(super) fn request(&mut self, method: &str, path: &str, headers: &[&str], body: Option<&str>) -> Answer {
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.authority);
        for header in headers {
            head.push_str(header);
            head.push_str("\r\n");
        }
        let body = body.unwrap_or_default();
        if method != "GET" {
            head.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        head.push_str(body);
        for attempt in 0..2 {
            let reused = self.conn.is_some();
            match self.exchange(&head) {
                Ok(answer) => return answer,
                Err(Failure::BeforeAnswer(_)) if reused && attempt == 0 => self.conn = None,
                Err(Failure::BeforeAnswer(e) | Failure::InAnswer(e)) => {
                    self.conn = None;
                    panic!("cluster: {method} {path} on {}: {e}", self.authority)
                }
            }
        }
        unreachable!("the second attempt returns or panics")
    }

    fn exchange(&mut self, request: &str) -> Result<Answer, Failure> {
        let conn = match &mut self.conn {
            Some(conn) => conn,
            None => self.conn.insert(BufReader::new(connect(&self.authority).map_err(Failure::BeforeAnswer)?)),
        };
        conn.get_mut().write_all(request.as_bytes()).map_err(Failure::BeforeAnswer)?;
        let mut first = String::new();
        match conn.read_line(&mut first) {
            Ok(0) => return Err(Failure::BeforeAnswer(io::ErrorKind::UnexpectedEof.into())),
            Ok(_) => {}
            Err(e) => return Err(Failure::BeforeAnswer(e)),
        }
        let (status, headers) = head(conn, &first).map_err(Failure::InAnswer)?;
        let mut body = Vec::new();
        let close = header(&headers, "connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        if header(&headers, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            while let Some(chunk) = read_chunk(conn).map_err(Failure::InAnswer)? {
                body.extend(chunk);
            }
        } else if let Some(length) = header(&headers, "content-length").and_then(|v| v.parse::<usize>().ok()) {
            body.resize(length, 0);
            conn.read_exact(&mut body).map_err(Failure::InAnswer)?;
        } else {
            conn.read_to_end(&mut body).map_err(Failure::InAnswer)?;
            self.conn = None;
        }
        if close {
            self.conn = None;
        }
        Ok(Answer { status, body: String::from_utf8_lossy(&body).into_owned() })
    }
}

enum Failure {
    /// Nothing of an answer arrived.
    BeforeAnswer(io::Error),
    /// The answer broke off.
    InAnswer(io::Error),
}

fn connect(authority: &str) -> io::Result<TcpStream> {
    let stream = TcpStream::connect(authority)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    Ok(stream)
}

/// The status (from the first line, already read) and the headers (names lowercased).
fn head(conn: &mut impl BufRead, first: &str) -> io::Result<(u16, Vec<(String, String)>)> {
    let status = first
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("not an HTTP status line: {first:?}")))?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if conn.read_line(&mut line)? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let line = line.trim_end();
        if line.is_empty() {
            return Ok((status, headers));
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
        }
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// The next chunk of a chunked body, `None` after the last.
fn read_chunk(conn: &mut impl BufRead) -> io::Result<Option<Vec<u8>>> {
    let mut line = String::new();
    if conn.read_line(&mut line)? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    let size = line.trim_end().split(';').next().unwrap_or_default();
    let size = usize::from_str_radix(size.trim(), 16)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("not a chunk size: {line:?}")))?;
    if size == 0 {
        // Trailers, up to the empty line.
        loop {
            line.clear();
            if conn.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
                return Ok(None);
            }
        }
    }
    let mut chunk = vec![0; size + 2];
    conn.read_exact(&mut chunk)?;
    chunk.truncate(size);
    Ok(Some(chunk))
}

/// A stream of server-sent events, read on a thread of its own: each `charm` event's
/// count and when it arrived.
pub(super) struct Observer {
    socket: TcpStream,
    thread: Option<JoinHandle<()>>,
    seen: Arc<Seen>,
}

/// The counts seen so far, in order, with when each arrived.
#[derive(Default)]
struct Seen {
    counts: Mutex<Vec<(Instant, i64)>>,
    grew: Condvar,
}

impl Observer {
    /// Opens the event stream at `path` of the server at `authority`.
    pub(super) fn open(authority: &str, path: &str, headers: &[&str]) -> Observer {
        let socket = connect(authority).expect("cluster: connect for events");
        let mut request = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: text/event-stream\r\n");
        for header in headers {
            request.push_str(header);
            request.push_str("\r\n");
        }
        request.push_str("\r\n");
        let mut reader = BufReader::new(socket.try_clone().expect("cluster: the socket"));
        reader.get_mut().write_all(request.as_bytes()).expect("cluster: ask for events");
        let mut first = String::new();
        reader.read_line(&mut first).expect("cluster: the events' answer");
        let (status, headers) = head(&mut reader, &first).expect("cluster: the events' headers");
        assert_eq!(status, 200, "cluster: events at {path}: {first}");
        let chunked = header(&headers, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
        let seen = Arc::new(Seen::default());
        let kept = Arc::clone(&seen);
        let thread = std::thread::spawn(move || read_events(reader, chunked, &kept));
        Observer { socket, thread: Some(thread), seen }
    }

    /// Waits until a count of at least `count` was seen, at most `timeout`; whether it was.
    pub(super) fn wait_for(&self, count: i64, timeout: Duration) -> bool {
        let counts = self.seen.counts.lock().unwrap_or_else(|e| e.into_inner());
        let (counts, waited) = self
            .seen
            .grew
            .wait_timeout_while(counts, timeout, |counts| counts.last().is_none_or(|(_, c)| *c < count))
            .unwrap_or_else(|e| e.into_inner());
        drop(counts);
        !waited.timed_out()
    }

    /// Closes the stream; every count seen, with when it arrived.
    pub(super) fn close(mut self) -> Vec<(Instant, i64)> {
        let _ = self.socket.shutdown(Shutdown::Both);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        std::mem::take(&mut *self.seen.counts.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        let _ = self.socket.shutdown(Shutdown::Both);
    }
}

/// Reads events until the stream ends, noting each `charm` event's `data.count`.
fn read_events(mut reader: BufReader<TcpStream>, chunked: bool, seen: &Seen) {
    let mut text = String::new();
    loop {
        let bytes = if chunked {
            match read_chunk(&mut reader) {
                Ok(Some(chunk)) => chunk,
                _ => return,
            }
        } else {
            let mut buf = vec![0; 64 << 10];
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    buf.truncate(n);
                    buf
                }
            }
        };
        let arrived = Instant::now();
        text.push_str(&String::from_utf8_lossy(&bytes).replace("\r\n", "\n"));
        while let Some(end) = text.find("\n\n") {
            let event: String = text.drain(..end + 2).collect();
            if let Some(count) = charm_count(&event) {
                seen.counts.lock().unwrap_or_else(|e| e.into_inner()).push((arrived, count));
                seen.grew.notify_all();
            }
        }
    }
}

/// The count of a `charm` event (`event: charm`, `data: {"data": {"count": N}, ...}`).
fn charm_count(event: &str) -> Option<i64> {
    let mut name = "message";
    let mut data = String::new();
    for line in event.lines() {
        if let Some(value) = line.strip_prefix("event:") {
            name = value.trim();
        } else if let Some(value) = line.strip_prefix("data:") {
            data.push_str(value.trim_start());
        }
    }
    if name != "charm" {
        return None;
    }
    serde_json::from_str::<serde_json::Value>(&data).ok()?["data"]["count"].as_i64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_charm_events_count() {
        assert_eq!(charm_count("event: charm\ndata: {\"data\": {\"count\": 7}}\n\n"), Some(7));
        assert_eq!(charm_count("event: chat\ndata: {\"data\": {\"count\": 7}}\n\n"), None);
        assert_eq!(charm_count(": keep-alive\n\n"), None);
    }

    #[test]
    fn reads_chunks() {
        let mut body = io::Cursor::new(b"5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\n\r\n".to_vec());
        assert_eq!(read_chunk(&mut body).unwrap(), Some(b"hello".to_vec()));
        assert_eq!(read_chunk(&mut body).unwrap(), Some(b"abc".to_vec()));
        assert_eq!(read_chunk(&mut body).unwrap(), None);
    }
}
