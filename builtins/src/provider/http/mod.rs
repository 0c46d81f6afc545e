//! What both provider adapters share, one job a module:
//!
//! - `retry`: sending a request with retries and backoff, and reading error bodies
//!   (capped, so a huge error page cannot exhaust memory);
//! - `sse`: decoding an event stream (Server-Sent Events, by the `eventsource-stream`
//!   crate) into parser calls, with its size limit and the pure [`StreamParser`] interface;
//! - `driver`: one answer from request to last event: the retried request, then the
//!   body through `sse` and a parser to [`crate::model::ModelEvent`]s, under the idle
//!   timeout and the answer's deadline;
//! - here: the settings, the endpoint errors name, and small helpers both adapters use.

mod driver;
mod retry;
mod sse;

use std::time::Duration;

use crate::model::ModelError;

pub(crate) use driver::answer;
pub use retry::{error_message, RetryPolicy, MAX_ERROR_BODY_BYTES};
pub use sse::{parse_body, parse_chunks, ParseError, StreamParser, MAX_EVENT_BYTES};

/// How an adapter talks HTTP: timeouts and retries.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpSettings {
    /// Longest wait for a connection (TCP and TLS) to the server.
    pub connect_timeout: Duration,
    /// Longest wait for the response headers of one attempt.
    pub request_timeout: Duration,
    /// Longest silence between two chunks of a streamed answer.
    pub idle_timeout: Duration,
    /// Longest time for one whole answer, from sending the request (retries included) to
    /// the end of its stream: a server that keeps the stream alive with keep-alive
    /// comments or a character now and then is given up on after this long.
    pub answer_timeout: Duration,
    /// When and how often to try again.
    pub retry: RetryPolicy,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(300),
            answer_timeout: Duration::from_secs(600),
            retry: RetryPolicy::default(),
        }
    }
}

/// The environment variables that set [`HttpSettings::connect_timeout`] and
/// [`HttpSettings::answer_timeout`], in seconds.
pub const TIMEOUT_VARS: [&str; 2] = ["TRELLIS_CONNECT_TIMEOUT", "TRELLIS_ANSWER_TIMEOUT"];

impl HttpSettings {
    /// The defaults, with the connect timeout and the answer deadline taken from
    /// [`TIMEOUT_VARS`] (seconds) where they are set.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<HttpSettings, ModelError> {
        let seconds = |var: &str| -> Result<Option<Duration>, ModelError> {
            let Some(text) = env(var) else { return Ok(None) };
            match text.trim().parse::<f64>().ok().and_then(|s| Duration::try_from_secs_f64(s).ok()) {
                Some(duration) if !duration.is_zero() => Ok(Some(duration)),
                _ => Err(ModelError::Config(format!("{var} must be a positive number of seconds, not `{text}`"))),
            }
        };
        let mut settings = HttpSettings::default();
        if let Some(connect) = seconds(TIMEOUT_VARS[0])? {
            settings.connect_timeout = connect;
        }
        if let Some(answer) = seconds(TIMEOUT_VARS[1])? {
            settings.answer_timeout = answer;
        }
        Ok(settings)
    }
}

/// Where one answer comes from, as errors name it.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    /// Provider name (`openai`, `ollama`, `anthropic`).
    pub provider: String,
    /// The model's full name (`openai:gpt-4o`).
    pub model: String,
    /// The URL the request goes to.
    pub url: String,
}

impl Endpoint {
    /// A [`ModelError::TimedOut`] naming this endpoint.
    pub fn timed_out(&self, message: String) -> ModelError {
        ModelError::TimedOut { model: self.model.clone(), url: self.url.clone(), message }
    }

    /// A [`ModelError::Network`] from this endpoint's provider.
    pub fn network(&self, message: String) -> ModelError {
        ModelError::Network { provider: self.provider.clone(), message }
    }
}

/// The HTTP client of one adapter: the user agent and `settings.connect_timeout`.
pub(crate) fn client(provider: &str, settings: &HttpSettings) -> Result<reqwest::Client, ModelError> {
    reqwest::Client::builder()
        .user_agent(concat!("trellis/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(settings.connect_timeout)
        // A redirect would send the whole conversation to another server; the provider's
        // URL is the user's to set (the 3xx is reported with where it points).
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| ModelError::Network {
            provider: provider.to_string(),
            message: format!("could not set up the HTTP client: {e}"),
        })
}

/// `duration` for messages (`200ms`, `600s`, `2.5s`).
pub(crate) fn seconds(duration: Duration) -> String {
    let secs = duration.as_secs_f64();
    if secs < 1.0 {
        format!("{}ms", duration.as_millis())
    } else if secs.fract() == 0.0 {
        format!("{secs:.0}s")
    } else {
        format!("{secs:.1}s")
    }
}

/// An error and its sources, joined: reqwest's own message alone hides the cause.
pub(crate) fn describe(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

pub(crate) use crate::text::truncate;

/// Parsed tool-call arguments: empty means `{}`, unparsable JSON is kept as a string so
/// nothing the model said is lost and the tool's validation can report it.
pub fn parse_arguments(raw: &str) -> serde_json::Value {
    if raw.trim().is_empty() {
        return serde_json::Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| serde_json::Value::String(raw.to_string()))
}

/// The text sent to a provider for a tool's output; never empty.
pub(crate) fn tool_output_text(output: &crate::message::ToolOutput, prefix_errors: bool) -> String {
    use crate::message::ToolOutput;
    let text = match output {
        ToolOutput::ErrorText(text) if prefix_errors => format!("Error: {text}"),
        other => other.as_text(),
    };
    if text.trim().is_empty() {
        match output {
            ToolOutput::ErrorText(_) => "Error: the tool failed without a message".to_string(),
            _ => "(no output)".to_string(),
        }
    } else {
        text
    }
}

/// How both providers take a file part.
#[derive(Debug, PartialEq)]
pub(crate) enum FileForm<'a> {
    /// An image of a kind both accept (PNG, JPEG, GIF, WebP), with its bytes (base64).
    Image { media_type: &'a str, data: &'a str },
    /// A PDF, with its bytes (base64).
    Pdf { data: &'a str },
    /// Text the model reads in its place: a text file's contents, or a placeholder.
    Text(String),
}

/// How a file part goes to a provider: natively when both providers take its kind, as
/// text when it is text, else (or when its bytes were withheld) as a placeholder that says
/// what it was.
pub(crate) fn file_form(file: &crate::message::FilePart) -> FileForm<'_> {
    const IMAGES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];
    let media_type = file.media_type.as_str();
    match file.data.as_deref() {
        Some(data) if IMAGES.contains(&media_type) => FileForm::Image { media_type, data },
        Some(data) if media_type == "application/pdf" => FileForm::Pdf { data },
        _ => FileForm::Text(crate::files::as_text(file).unwrap_or_else(|| file.placeholder())),
    }
}

/// Fixtures the adapters' unit tests share.
#[cfg(test)]
pub(crate) mod test_support {
    use super::{ParseError, StreamParser};
    use crate::message::{Message, Part, Role, ToolOutput};
    use crate::model::ModelEvent;

    /// Feeds `payloads` to `parser` as `data:` payloads of unnamed (`message`) events, then
    /// ends the stream: every event until the first error.
    pub(crate) fn run(mut parser: impl StreamParser, payloads: &[String]) -> Result<Vec<ModelEvent>, ParseError> {
        let mut events = Vec::new();
        for payload in payloads {
            events.extend(parser.push("message", payload)?);
        }
        events.extend(parser.finish()?);
        Ok(events)
    }

    /// One round of tool use: the assistant's calls (after an empty text part, as streamed
    /// answers often start) and the tool turn answering each call, in order. A call is
    /// `(id, name, input, output)`.
    pub(crate) fn tool_round(calls: Vec<(&str, &str, serde_json::Value, ToolOutput)>) -> [Message; 2] {
        let mut asked = vec![Part::Text { text: String::new() }];
        let mut answered = Vec::new();
        for (id, name, input, output) in calls {
            asked.push(Part::ToolCall { id: id.into(), name: name.into(), input });
            answered.push(Part::ToolResult { id: id.into(), name: name.into(), output });
        }
        [Message::new(Role::Assistant, asked), Message::new(Role::Tool, answered)]
    }

    /// A file part named `name` of `media_type` with `bytes`.
    pub(crate) fn file(media_type: &str, name: &str, bytes: &[u8]) -> Part {
        Part::File(crate::message::FilePart::from_bytes(media_type, Some(name.into()), bytes))
    }

    /// A request whose user message is "look" and `files`, whose answer calls `snap`, and
    /// whose result is the text "here" and a GIF `e.gif`.
    pub(crate) fn files_request(files: Vec<Part>) -> crate::model::ModelRequest {
        let asked =
            Message::new(Role::User, std::iter::once(Part::Text { text: "look".into() }).chain(files).collect());
        let [call, _] = tool_round(vec![("c1", "snap", serde_json::json!({}), ToolOutput::Text(String::new()))]);
        let output = ToolOutput::Content(vec![Part::Text { text: "here".into() }, file("image/gif", "e.gif", b"gif")]);
        let result = Message::new(Role::Tool, vec![Part::ToolResult { id: "c1".into(), name: "snap".into(), output }]);
        crate::model::ModelRequest { messages: vec![asked, call, result], ..Default::default() }
    }
}
