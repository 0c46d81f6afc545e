//! A server run as a child process, spoken to over its standard input and output: one
//! JSON-RPC message a line, as MCP's stdio transport says.
//!
//! rmcp's own child transport drops a line it cannot read as a message, so a request whose
//! answer is malformed would wait out its whole timeout and then be reported as unanswered.
//! This one reads each line itself: a malformed answer that still names its request's id
//! settles that request at once, with an error saying what was wrong with it. So does an
//! answer nested too deeply to read (its id is found by skipping over the deep part, which
//! reads only brackets), or longer than [`MAX_LINE`] when its id stands in the first
//! [`HEAD`] bytes (as every SDK writes it: `jsonrpc`, `id`, then `result`; see [`head`]).

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ErrorCode, ErrorData, JsonRpcError, JsonRpcMessage, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::RoleClient;
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::Mutex;
use trellis_builtins::text::Throttle;

/// The longest line read as one message (rmcp's limit too); a longer one is dropped.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// How long a server may take to exit once its input is closed, and again once it is
/// asked to terminate, before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(3);

/// What a server writes that is not for the client (junk lines, requests that are none,
/// lines too long) is warned of a few times a minute, not once a line.
static JUNK: Throttle = Throttle::new();

/// How much of a line longer than [`MAX_LINE`] is kept to find its id in.
const HEAD: usize = 64 * 1024;

/// The code of the error a malformed answer becomes: JSON-RPC's "parse error" (what was
/// received is not a message).
const MALFORMED: ErrorCode = ErrorCode(-32700);

/// The transport of a server started as a child process (see the module's text). The child
/// is killed if this is dropped before [`Transport::close`] ends it.
pub(super) struct ChildTransport {
    child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
    /// `None` once closed. Shared with the futures that send, which must be `'static`.
    stdin: Arc<Mutex<Option<ChildStdin>>>,
}

/// The lines of a server's output, each at most `max` bytes (a longer one is skipped).
struct Lines<R> {
    reader: R,
    max: usize,
    /// The line being read (see [`Lines::next_line`]).
    line: Vec<u8>,
    /// Whether the rest of a line too long to keep is being skipped.
    skipping: bool,
    /// The start of the line too long to keep, once it has been skipped: `line` is empty.
    cut: Option<Vec<u8>>,
}

impl ChildTransport {
    /// Starts `command` with its standard streams piped; returns its standard error too.
    pub(super) fn spawn(mut command: Command) -> std::io::Result<(ChildTransport, Option<ChildStderr>)> {
        let mut child =
            command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true).spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(std::io::Error::other("the server's standard input or output could not be piped"));
        };
        let stderr = child.stderr.take();
        let transport = ChildTransport {
            child,
            stdout: Lines::new(BufReader::new(stdout), MAX_LINE),
            stdin: Arc::new(Mutex::new(Some(stdin))),
        };
        Ok((transport, stderr))
    }

    /// The child's process id, while it runs.
    pub(super) fn id(&self) -> Option<u32> {
        self.child.id()
    }

    /// Closes the server's input, then waits for it to exit; asks it to terminate, then
    /// kills it, if it lingers (the stdio shutdown MCP describes).
    async fn shut_down(&mut self) -> std::io::Result<()> {
        drop(self.stdin.lock().await.take());
        if tokio::time::timeout(EXIT_GRACE, self.child.wait()).await.is_ok() {
            return Ok(());
        }
        #[cfg(unix)]
        if let Some(pid) = self.child.id().and_then(|pid| i32::try_from(pid).ok()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
            if tokio::time::timeout(EXIT_GRACE, self.child.wait()).await.is_ok() {
                return Ok(());
            }
        }
        self.child.kill().await
    }
}

impl<R: AsyncBufRead + Unpin> Lines<R> {
    fn new(reader: R, max: usize) -> Self {
        Lines { reader, max, line: Vec::new(), skipping: false, cut: None }
    }

    /// Reads until `self.line` holds a whole line (with its end), or a line longer than
    /// `max` has been skipped whole (then `self.cut` holds its start); false at the end of
    /// the output or on a read error.
    ///
    /// Cancel-safe, as rmcp's service loop needs (it drops `receive` whenever another of
    /// its branches is ready first): what was read of a line stays in `self.line`, and of
    /// a line being skipped, `self.skipping` says so; the caller empties `self.line` only
    /// once it has taken the line.
    async fn next_line(&mut self) -> bool {
        loop {
            if self.skipping {
                if !self.skip_rest_of_line().await {
                    return false;
                }
                self.skipping = false;
                if self.cut.is_some() {
                    return true;
                }
            }
            let room = (self.max + 1).saturating_sub(self.line.len()) as u64;
            match (&mut self.reader).take(room).read_until(b'\n', &mut self.line).await {
                // The end of the output; a last line without its end is no message.
                Ok(0) => return false,
                Ok(_) if self.line.ends_with(b"\n") => return true,
                Ok(_) if self.line.len() > self.max => {
                    self.line.truncate(HEAD);
                    self.cut = Some(std::mem::take(&mut self.line));
                    self.skipping = true;
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::error!(%error, "cannot read the MCP server's output");
                    return false;
                }
            }
        }
    }

    /// Reads up to the end of the current line, keeping nothing; false at the end of the
    /// output. Cancel-safe: each piece is let go of as soon as it is looked at.
    async fn skip_rest_of_line(&mut self) -> bool {
        loop {
            let (used, done) = match self.reader.fill_buf().await {
                Ok([]) | Err(_) => return false,
                Ok(buf) => match buf.iter().position(|b| *b == b'\n') {
                    Some(end) => (end + 1, true),
                    None => (buf.len(), false),
                },
            };
            self.reader.consume(used);
            if done {
                return true;
            }
        }
    }
}

impl Transport<RoleClient> for ChildTransport {
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl std::future::Future<Output = Result<(), Self::Error>> + Send + 'static {
        let stdin = Arc::clone(&self.stdin);
        async move {
            let mut line = serde_json::to_vec(&item)?;
            line.push(b'\n');
            let mut stdin = stdin.lock().await;
            let stdin = stdin.as_mut().ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotConnected))?;
            stdin.write_all(&line).await?;
            stdin.flush().await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        while self.stdout.next_line().await {
            let line = self.stdout.line.trim_ascii_end();
            let read = match self.stdout.cut.take() {
                Some(start) => too_long(&start, self.stdout.max),
                None if line.is_empty() => Read::Skipped,
                None => read_message(line),
            };
            self.stdout.line.clear();
            match read {
                Read::Message(message) => return Some(*message),
                // Sent apart, so that a `receive` dropped mid-way leaves no half line.
                Read::Refused(answer) => drop(tokio::spawn(self.send(*answer))),
                Read::Skipped => {}
            }
        }
        None
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.shut_down().await
    }
}

/// What a line of the server's output gave.
enum Read {
    /// A message for rmcp: what the server sent, or the error a malformed answer is.
    Message(Box<RxJsonRpcMessage<RoleClient>>),
    /// A malformed request of the server's: the error that answers it.
    Refused(Box<TxJsonRpcMessage<RoleClient>>),
    /// Nothing to hand on (logged).
    Skipped,
}

/// The message a line holds. A line that is JSON but no message becomes, when it answers
/// a request (it names an id and no method), an error answering that request; when it is
/// a request (an id and a method), the "invalid request" error the server gets; anything
/// else unreadable is logged and skipped, as MCP's SDKs do.
fn read_message(line: &[u8]) -> Read {
    let error = match serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(line) {
        Ok(message) => return Read::Message(Box::new(message)),
        Err(error) => error,
    };
    let shown = trellis_builtins::text::echo_bytes(line);
    let fields = match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(fields)) => fields,
        // Too deep to read, or broken after its id: an answer still settles its request.
        Err(unreadable) => match head(line) {
            Head { id: Some(id), method: false } => {
                return answered_badly(id, format!("the server's answer cannot be read ({unreadable})"));
            }
            _ => {
                if let Some(held) = JUNK.admit() {
                    tracing::warn!(line = %shown, "an MCP server wrote a line that is not JSON; skipped{}", Throttle::held_back(held));
                }
                return Read::Skipped;
            }
        },
        Ok(_) => {
            if let Some(held) = JUNK.admit() {
                tracing::warn!(line = %shown, "an MCP server wrote a line that is not JSON-RPC; skipped{}", Throttle::held_back(held));
            }
            return Read::Skipped;
        }
    };
    let id = fields.get("id").and_then(|id| serde_json::from_value::<RequestId>(id.clone()).ok());
    match id {
        Some(id) if !fields.contains_key("method") => {
            // Told by the answer itself; logged for whoever reads the debug log.
            tracing::debug!(line = %shown, "a malformed answer");
            answered_badly(id, format!("the server's answer is not a JSON-RPC response ({})", why(&fields, &error)))
        }
        Some(id) => {
            if let Some(held) = JUNK.admit() {
                tracing::warn!(line = %shown, %error, "an MCP server sent a request that is not JSON-RPC; refused{}", Throttle::held_back(held));
            }
            let refusal = ErrorData::invalid_request(format!("not a JSON-RPC request: {error}"), None);
            Read::Refused(Box::new(JsonRpcMessage::Error(JsonRpcError::new(Some(id), refusal))))
        }
        None => {
            if let Some(held) = JUNK.admit() {
                tracing::warn!(line = %shown, %error, "an MCP server sent a message that is not JSON-RPC; skipped{}", Throttle::held_back(held));
            }
            Read::Skipped
        }
    }
}

/// The error that answers request `id` in place of its malformed answer; `what` says what
/// was wrong with it.
fn answered_badly(id: RequestId, what: String) -> Read {
    let message = format!("{what}; the server is at fault");
    let error = JsonRpcError::new(Some(id), ErrorData::new(MALFORMED, message, None));
    Read::Message(Box::new(JsonRpcMessage::Error(error)))
}

/// A line longer than `max` bytes, of which `start` was kept: an answer whose id stands
/// there settles its request; anything else is dropped, and said.
fn too_long(start: &[u8], max: usize) -> Read {
    match head(start) {
        Head { id: Some(id), method: false } => answered_badly(
            id,
            format!("the server's answer is longer than {} MiB, the most a message may be", max >> 20),
        ),
        _ => {
            if let Some(held) = JUNK.admit() {
                tracing::error!(
                    limit = max,
                    "an MCP server's message is longer than the limit; dropped{}",
                    Throttle::held_back(held)
                );
            }
            Read::Skipped
        }
    }
}

/// What the members of a message before its first unreadable part say: its id, and
/// whether it has a method (then it is no answer).
#[derive(Default)]
struct Head {
    id: Option<RequestId>,
    method: bool,
}

/// The [`Head`] of `line`, read member by member until the line ends, breaks, or nests
/// too deeply: what was read by then stays.
fn head(line: &[u8]) -> Head {
    use serde::de::{Deserializer as _, IgnoredAny, MapAccess, Visitor};
    struct Members<'h>(&'h mut Head);
    impl<'de> Visitor<'de> for Members<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON-RPC message")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<std::borrow::Cow<'_, str>>()? {
                match &*key {
                    "id" => self.0.id = map.next_value::<RequestId>().ok(),
                    "method" => {
                        self.0.method = true;
                        map.next_value::<IgnoredAny>()?;
                    }
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
    }
    let mut found = Head::default();
    let _ = serde_json::Deserializer::from_slice(line).deserialize_map(Members(&mut found));
    found
}

/// What is wrong with an answer `fields` that is no message: its error or its version read
/// alone say it better than the whole message's error (`error`), which only says that no
/// kind of message matched.
fn why(fields: &serde_json::Map<String, Value>, error: &serde_json::Error) -> String {
    if fields.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return "its `jsonrpc` is not \"2.0\"".to_string();
    }
    match (fields.get("result"), fields.get("error")) {
        (None, None) => "it has neither `result` nor `error`".to_string(),
        (Some(_), Some(_)) => "it has both `result` and `error`".to_string(),
        (None, Some(bad)) => match serde_json::from_value::<ErrorData>(bad.clone()) {
            Err(detail) => format!("its `error`: {detail}"),
            Ok(_) => error.to_string(),
        },
        (Some(_), None) => format!("its `result`: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(line: &str) -> ErrorData {
        match read_message(line.as_bytes()) {
            Read::Message(message) => match *message {
                JsonRpcMessage::Error(error) => error.error,
                _ => panic!("not an error: {line}"),
            },
            Read::Refused(_) | Read::Skipped => panic!("not handed on: {line}"),
        }
    }

    #[test]
    fn a_malformed_answer_becomes_an_error_answering_its_request() {
        let error = error_of(r#"{"jsonrpc":"2.0","id":7,"error":{"code":"broken"}}"#);
        assert_eq!(error.code, MALFORMED);
        assert!(error.message.contains("its `error`: invalid type: string \"broken\""), "{}", error.message);
        let error = error_of(r#"{"jsonrpc":"1.0","id":"a","result":{}}"#);
        assert!(error.message.contains("`jsonrpc` is not \"2.0\""), "{}", error.message);
        let error = error_of(r#"{"jsonrpc":"2.0","id":3}"#);
        assert!(error.message.contains("neither `result` nor `error`"), "{}", error.message);
    }

    #[test]
    fn an_answer_too_deep_or_too_long_to_read_settles_its_request_when_its_id_comes_first() {
        let deep = format!(r#"{{"jsonrpc":"2.0","id":4,"result":{}{}}}"#, "[".repeat(200), "]".repeat(200));
        let error = error_of(&deep);
        assert_eq!(error.code, MALFORMED);
        assert!(error.message.contains("cannot be read (recursion limit exceeded"), "{}", error.message);
        let broken = error_of(r#"{"jsonrpc":"2.0","id":"x","result":{"content": [}"#);
        assert!(broken.message.contains("cannot be read"), "{}", broken.message);
        let Read::Message(message) =
            too_long(br#"{"jsonrpc":"2.0","id":5,"result":{"content":[{"text":"aaaa"#, 16 << 20)
        else {
            panic!("an answer");
        };
        let JsonRpcMessage::Error(error) = *message else { panic!("an error") };
        assert_eq!(error.id, Some(RequestId::Number(5)));
        assert!(error.error.message.contains("longer than 16 MiB"), "{}", error.error.message);
        // Skipping a member reads no deeper than its brackets (no recursion, however deep).
        let late = format!(r#"{{"jsonrpc":"2.0","result":{}{},"id":4}}"#, "[".repeat(1 << 20), "]".repeat(1 << 20));
        assert!(error_of(&late).message.contains("cannot be read"));
        // No id in what was kept, or a request: nothing to settle.
        assert!(matches!(too_long(br#"{"jsonrpc":"2.0","result":{"content":[{"text":"aaaa"#, 16 << 20), Read::Skipped));
        assert!(matches!(too_long(br#"{"jsonrpc":"2.0","id":5,"method":"x","params":{"#, 16 << 20), Read::Skipped));
    }

    #[tokio::test]
    async fn a_line_read_in_pieces_across_cancelled_reads_comes_whole_and_a_long_one_is_skipped() {
        let (mut server, client) = tokio::io::duplex(64);
        let mut lines = Lines::new(BufReader::new(client), 16);
        server.write_all(b"{\"half").await.unwrap();
        // The service loop drops `receive` when another branch is ready first.
        let pending = tokio::time::timeout(Duration::from_millis(20), lines.next_line()).await;
        assert!(pending.is_err(), "no whole line yet");
        server.write_all(b"\": 1}\n").await.unwrap();
        assert!(lines.next_line().await);
        assert_eq!(lines.line, b"{\"half\": 1}\n");
        lines.line.clear();
        server.write_all(b"a line far longer than sixteen bytes").await.unwrap();
        let pending = tokio::time::timeout(Duration::from_millis(20), lines.next_line()).await;
        assert!(pending.is_err(), "still skipping: its end has not come");
        server.write_all(b" ends here\nnext\n").await.unwrap();
        assert!(lines.next_line().await);
        assert_eq!(lines.cut.take().as_deref(), Some(&b"a line far longer"[..]), "its start, as much as was read");
        assert!(lines.line.is_empty(), "the long line is skipped whole");
        assert!(lines.next_line().await);
        assert_eq!(lines.line, b"next\n");
        lines.line.clear();
        server.write_all(b"no end").await.unwrap();
        drop(server);
        assert!(!lines.next_line().await, "a last line without its end is no message");
    }

    #[test]
    fn a_good_message_passes_a_bad_request_is_refused_and_other_bad_lines_are_skipped() {
        let good = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
        assert!(matches!(read_message(good.as_bytes()), Read::Message(m) if matches!(*m, JsonRpcMessage::Response(_))));
        let Read::Refused(answer) = read_message(br#"{"jsonrpc":"2.0","method":7,"id":9}"#) else {
            panic!("a malformed request is answered");
        };
        let answer = serde_json::to_value(*answer).expect("an answer is JSON");
        assert_eq!((&answer["id"], &answer["error"]["code"]), (&serde_json::json!(9), &serde_json::json!(-32600)));
        for bad in
            ["not json", "[1,2]", r#"{"jsonrpc":"2.0","method":7}"#, r#"{"jsonrpc":"2.0","id":{"no":1},"result":{}}"#]
        {
            assert!(matches!(read_message(bad.as_bytes()), Read::Skipped), "{bad}");
        }
    }
}
