//! MCP over standard input and output, with every line a client sends answered. rmcp
//! drops a line that is not JSON (or one longer than it reads) without a word, and answers
//! a request it cannot read as a message without its id, so a host waiting for the answer
//! waits for ever. So lines pass through here first: one that is not JSON, or is too long,
//! is answered with JSON-RPC's parse error (`"id": null`, since no id could be read); a
//! request that is JSON but no message (its `params` not an object, say) is answered, under
//! its id, with "invalid request" and why; the rest go on to rmcp. rmcp's answers and these
//! errors reach standard output a whole line at a time, never one inside the other.

use rmcp::model::ClientJsonRpcMessage;
use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// The longest line read: rmcp's own limit.
const MAX_LINE: usize = 16 << 20;

/// Room in each pipe between these tasks and rmcp.
const PIPE: usize = 64 << 10;

/// How many refusals wait at most to be written.
const REFUSALS: usize = 64;

/// JSON-RPC's code for a message that is not JSON.
const PARSE_ERROR: i32 = -32700;

/// JSON-RPC's code for JSON that is no request.
const INVALID_REQUEST: i32 = -32600;

/// The two ends rmcp is served over (what it reads, where it writes), and the task that
/// writes to `output`: await it once rmcp is done, so the last answers are written.
pub(super) fn transport(
    input: impl AsyncRead + Unpin + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
) -> ((DuplexStream, DuplexStream), JoinHandle<()>) {
    let (rmcp_reads, feed) = tokio::io::duplex(PIPE);
    let (rmcp_writes, answers) = tokio::io::duplex(PIPE);
    // Bounded: a client that sends refused lines and never reads its answers waits.
    let (errors, refused) = mpsc::channel(REFUSALS);
    tokio::spawn(read_lines(BufReader::new(input), feed, errors));
    let writer = tokio::spawn(write_lines(BufReader::new(answers), refused, output));
    ((rmcp_reads, rmcp_writes), writer)
}

/// Passes each JSON line of `input` to `feed`, and says why each other line is refused.
async fn read_lines(mut input: impl AsyncBufRead + Unpin, mut feed: DuplexStream, errors: mpsc::Sender<String>) {
    let mut line = Vec::new();
    loop {
        let (id, code, refusal) = match read_line(&mut input, &mut line).await {
            Ok(Line::End) | Err(_) => return,
            Ok(Line::TooLong) => {
                (None, PARSE_ERROR, format!("Parse error: the message is longer than {MAX_LINE} bytes"))
            }
            Ok(Line::Read) if line.trim_ascii().is_empty() => continue,
            // Read whole, as rmcp reads it (`IgnoredAny` would skip nesting past the depth
            // rmcp reads); only a line rmcp could not read is read again.
            Ok(Line::Read) => {
                match serde_json::from_slice::<ClientJsonRpcMessage>(&line).map_err(|e| unreadable(&line, e)) {
                    Ok(_) | Err(Unreadable::Other) => {
                        line.push(b'\n');
                        if feed.write_all(&line).await.is_err() {
                            return;
                        }
                        continue;
                    }
                    Err(Unreadable::Request { id, why }) => {
                        (Some(id), INVALID_REQUEST, format!("Invalid request: {why}"))
                    }
                    Err(Unreadable::NotJson(error)) => {
                        (None, PARSE_ERROR, format!("Parse error: the message is not JSON: {error}"))
                    }
                }
            }
        };
        let answer = serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": code, "message": refusal},
        });
        if errors.send(answer.to_string()).await.is_err() {
            return;
        }
    }
}

/// Why rmcp cannot read a line.
enum Unreadable {
    /// It is not JSON.
    NotJson(serde_json::Error),
    /// It is a request (an id and a method) that is no MCP message: its id, and why.
    Request { id: Value, why: String },
    /// Anything else, which is rmcp's to answer or ignore.
    Other,
}

/// Why rmcp cannot read `line` as a message, given what reading it said (`error`).
fn unreadable(line: &[u8], error: serde_json::Error) -> Unreadable {
    let message = match serde_json::from_slice::<Value>(line) {
        Ok(message) => message,
        Err(error) => return Unreadable::NotJson(error),
    };
    let Some(id) = message.get("id").filter(|id| id.is_string() || id.is_i64() || id.is_u64()) else {
        return Unreadable::Other;
    };
    let why = match (message.get("method"), message.get("params")) {
        (None, _) => return Unreadable::Other,
        (Some(method), _) if !method.is_string() => "its `method` is not a text".to_string(),
        (_, Some(params)) if !params.is_object() => "its `params` is not an object".to_string(),
        _ => error.to_string(),
    };
    Unreadable::Request { id: id.clone(), why }
}

/// What [`read_line`] read.
enum Line {
    /// A line (without its end), in the buffer.
    Read,
    /// A line longer than [`MAX_LINE`], skipped to its end.
    TooLong,
    /// The end of the input.
    End,
}

/// Reads one line into `line`, keeping at most [`MAX_LINE`] bytes of it.
async fn read_line(input: &mut (impl AsyncBufRead + Unpin), line: &mut Vec<u8>) -> std::io::Result<Line> {
    line.clear();
    let mut too_long = false;
    loop {
        let available = input.fill_buf().await?;
        if available.is_empty() {
            return Ok(if too_long {
                Line::TooLong
            } else if line.is_empty() {
                Line::End
            } else {
                Line::Read
            });
        }
        let (part, ended) = match available.iter().position(|&byte| byte == b'\n') {
            Some(at) => (&available[..at], at + 1),
            None => (available, 0),
        };
        too_long |= line.len() + part.len() > MAX_LINE;
        if !too_long {
            line.extend_from_slice(part);
        }
        let used = if ended > 0 { ended } else { part.len() };
        input.consume(used);
        if ended > 0 {
            return Ok(if too_long { Line::TooLong } else { Line::Read });
        }
    }
}

/// Writes rmcp's answers and the refusals to `output`, each a whole line, until rmcp is
/// done.
async fn write_lines(
    mut answers: impl AsyncBufRead + Unpin,
    mut refused: mpsc::Receiver<String>,
    mut output: impl AsyncWrite + Unpin,
) {
    // Part of an answer read when a refusal came stays here: `read_until` goes on with it.
    let mut line = Vec::new();
    loop {
        let written = tokio::select! {
            read = answers.read_until(b'\n', &mut line) => match read {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let written = output.write_all(&line).await;
                    line.clear();
                    written
                }
            },
            Some(refusal) = refused.recv() => output.write_all(format!("{refusal}\n").as_bytes()).await,
        };
        if written.is_err() || output.flush().await.is_err() {
            return;
        }
    }
    // rmcp is done: what it wrote last, and the refusals still queued, go out too.
    let mut rest = line;
    while let Ok(refusal) = refused.try_recv() {
        rest.extend_from_slice(format!("{refusal}\n").as_bytes());
    }
    if output.write_all(&rest).await.is_ok() {
        let _ = output.flush().await;
    }
}
