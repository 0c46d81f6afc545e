//! A small, pure Server-Sent Events decoder.
//!
//! Bytes go in (split anywhere, even inside a UTF-8 character), complete events come out.
//! It follows the SSE line rules (`field: value`, `:` comments, blank line dispatches,
//! `\n`, `\r\n` or `\r` line ends) but is stricter than a browser about lines that are not
//! SSE at all: a provider that answers with something else (a bare JSON error body, an
//! HTML page) gets a clear [`SseError`] instead of being silently ignored.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field, if the server sent one.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Why the byte stream is not valid SSE.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// A line is not UTF-8.
    #[error("line {line} is not valid UTF-8")]
    NotUtf8 {
        /// 1-based line number.
        line: u64,
    },
    /// A line is neither a comment nor a known field.
    #[error("line {line} is not an SSE field: `{text}`")]
    NotAField {
        /// 1-based line number.
        line: u64,
        /// The start of the offending line.
        text: String,
    },
    /// A line or an event grew past the size limit.
    #[error("a line or event is longer than {limit} bytes")]
    TooLong {
        /// The limit in bytes.
        limit: usize,
    },
}

/// The longest line or event accepted, so a misbehaving server cannot exhaust memory.
pub const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

/// Incremental SSE decoder: feed bytes with [`SseDecoder::feed`], then call
/// [`SseDecoder::finish`] at the end of the body.
///
/// ```
/// use trellis_builtins::provider::sse::SseDecoder;
///
/// let mut decoder = SseDecoder::new();
/// let mut events = decoder.feed(b"event: ping\nda").unwrap();
/// events.extend(decoder.feed(b"ta: {}\n\n").unwrap());
/// assert_eq!(events.len(), 1);
/// assert_eq!(events[0].event.as_deref(), Some("ping"));
/// assert_eq!(events[0].data, "{}");
/// ```
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// Bytes of the line not yet terminated.
    pending: Vec<u8>,
    /// The previous chunk ended with `\r`: a `\n` starting the next chunk belongs to it.
    after_cr: bool,
    event: Option<String>,
    data: String,
    data_lines: u32,
    line_number: u64,
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes `bytes`, returning every event completed by them.
    ///
    /// After an error the decoder's state is unspecified; stop feeding it.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut events = Vec::new();
        let mut start = 0;
        for (i, &byte) in bytes.iter().enumerate() {
            // A `\r\n` split across two chunks is one line end, not two.
            if std::mem::take(&mut self.after_cr) && byte == b'\n' {
                start = i + 1;
                continue;
            }
            if byte == b'\n' || byte == b'\r' {
                self.pending.extend_from_slice(&bytes[start..i]);
                let line = std::mem::take(&mut self.pending);
                self.line(&line, &mut events)?;
                start = i + 1;
                self.after_cr = byte == b'\r';
            }
        }
        self.pending.extend_from_slice(&bytes[start..]);
        if self.pending.len() > MAX_EVENT_BYTES || self.data.len() > MAX_EVENT_BYTES {
            return Err(SseError::TooLong { limit: MAX_EVENT_BYTES });
        }
        Ok(events)
    }

    /// Ends the stream: a last line without a line end and a last event without a blank
    /// line after it still count.
    pub fn finish(&mut self) -> Result<Vec<SseEvent>, SseError> {
        let mut events = Vec::new();
        if !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            self.line(&line, &mut events)?;
        }
        self.dispatch(&mut events);
        Ok(events)
    }

    fn line(&mut self, raw: &[u8], events: &mut Vec<SseEvent>) -> Result<(), SseError> {
        self.line_number += 1;
        let line_number = self.line_number;
        let line = std::str::from_utf8(raw).map_err(|_| SseError::NotUtf8 { line: line_number })?;
        // A byte-order mark may start the stream.
        let line = if line_number == 1 { line.strip_prefix('\u{feff}').unwrap_or(line) } else { line };
        if line.is_empty() {
            self.dispatch(events);
            return Ok(());
        }
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.data_lines > 0 {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.data_lines = self.data_lines.saturating_add(1);
            }
            "event" => self.event = Some(value.to_string()),
            "id" | "retry" => {}
            _ => {
                return Err(SseError::NotAField { line: line_number, text: truncate(line, 200) });
            }
        }
        Ok(())
    }

    fn dispatch(&mut self, events: &mut Vec<SseEvent>) {
        let event = self.event.take();
        let data = std::mem::take(&mut self.data);
        // Per the SSE rules an event without data lines is not dispatched.
        if std::mem::take(&mut self.data_lines) > 0 {
            events.push(SseEvent { event, data });
        }
    }
}

/// The first `max` characters of `text`, with `…` when cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests {
    use super::*;

    fn decode_in_pieces(body: &[u8], cuts: &[usize]) -> Result<Vec<SseEvent>, SseError> {
        let mut decoder = SseDecoder::new();
        let mut events = Vec::new();
        let mut start = 0;
        for &cut in cuts {
            events.extend(decoder.feed(&body[start..cut])?);
            start = cut;
        }
        events.extend(decoder.feed(&body[start..])?);
        events.extend(decoder.finish()?);
        Ok(events)
    }

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    #[test]
    fn fixture_split_at_every_byte_offset() {
        let body = include_bytes!("../../tests/fixtures/providers/openai-compatible-tool-call.sse");
        let whole = decode_in_pieces(body, &[]).unwrap();
        assert_eq!(whole.len(), 9);
        assert_eq!(whole[8].data, "[DONE]");
        for cut in 0..=body.len() {
            assert_eq!(decode_in_pieces(body, &[cut]).unwrap(), whole, "cut at {cut}");
        }
    }

    #[test]
    fn line_ends_and_multibyte_characters_split_anywhere() {
        let body = "event: a\r\ndata: ünï\r\n\r\ndata: x\rdata: y\r\r: comment\ndata:z\n\n".as_bytes();
        let expected = vec![
            SseEvent { event: Some("a".into()), data: "ünï".into() },
            SseEvent { event: None, data: "x\ny".into() },
            SseEvent { event: None, data: "z".into() },
        ];
        for i in 0..=body.len() {
            for j in i..=body.len() {
                assert_eq!(decode_in_pieces(body, &[i, j]).unwrap(), expected, "cuts at {i}, {j}");
            }
        }
    }

    #[test]
    fn spec_corner_cases() {
        let events =
            decode_in_pieces(b"\xEF\xBB\xBFdata\n\ndata:\ndata:\n\nevent: lonely\n\nid: 1\nretry: 5\ndata: last", &[])
                .unwrap();
        assert_eq!(data(&events), vec!["", "\n", "last"]);
        assert_eq!(events[2].event, None, "an event without data is not dispatched and its name is dropped");
    }

    #[test]
    fn not_sse_is_an_error() {
        assert!(matches!(
            decode_in_pieces(b"{\"error\": \"not sse\"}\n\n", &[]),
            Err(SseError::NotAField { line: 1, .. })
        ));
        assert!(matches!(decode_in_pieces(b"data: \xFF\xFE\n\n", &[]), Err(SseError::NotUtf8 { line: 1 })));
    }

    /// Deterministic fuzzing: mutated and random inputs never panic.
    #[test]
    fn garbage_never_panics() {
        let seed_body = include_bytes!("../../tests/fixtures/providers/openai-compatible-tool-call.sse");
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..300 {
            let mut body = seed_body.to_vec();
            for _ in 0..(next() % 20) {
                let at = (next() as usize) % body.len();
                match next() % 3 {
                    0 => body[at] = next() as u8,
                    1 => {
                        body.remove(at);
                    }
                    _ => body.insert(at, b"\n\r:{}\"\\ "[(next() % 8) as usize]),
                }
            }
            let cut = (next() as usize) % (body.len() + 1);
            let _ = decode_in_pieces(&body, &[cut]);
        }
    }
}
