//! Provider adapters against a real HTTP server on loopback that replays recorded
//! provider streams (tests/fixtures/providers, copied from shared/fixtures/providers).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::HeaderMap;
use axum::response::Response;
use futures::StreamExt;
use serde_json::{json, Value};
use trellis_builtins::message::{Message, Part, Role, ToolOutput};
use trellis_builtins::model::{EventStream, Model, ModelError, ModelEvent, ModelRequest, ToolChoice, ToolSpec, Usage};
use trellis_builtins::naming::stable_hash;
use trellis_builtins::provider::{
    model_from_str_with_env, AnthropicConfig, AnthropicModel, HttpSettings, OpenAiConfig, OpenAiModel, RetryPolicy,
};

// ---------------------------------------------------------------------------------------
// A scripted HTTP server
// ---------------------------------------------------------------------------------------

/// One canned HTTP response.
#[derive(Clone)]
pub(crate) struct Canned {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
    /// The body is sent in chunks of this many bytes, to split SSE events across reads.
    chunk: usize,
    /// Wait before answering at all.
    delay: Duration,
    /// What follows the body.
    after_body: After,
}

/// How a canned body goes on after its bytes.
#[derive(Clone)]
enum After {
    /// The body ends normally.
    End,
    /// The connection stays open and silent.
    Silence,
    /// The connection breaks.
    Break,
    /// These bytes again and again, forever, with this pause before each.
    Repeat(Vec<u8>, Duration),
}

impl Canned {
    pub(crate) fn sse(body: impl Into<Vec<u8>>) -> Self {
        Canned {
            status: 200,
            headers: vec![("content-type", "text/event-stream".into())],
            body: body.into(),
            chunk: 7,
            delay: Duration::ZERO,
            after_body: After::End,
        }
    }

    pub(crate) fn json(status: u16, body: Value) -> Self {
        Canned {
            status,
            headers: vec![("content-type", "application/json".into())],
            body: body.to_string().into_bytes(),
            chunk: usize::MAX,
            delay: Duration::ZERO,
            after_body: After::End,
        }
    }

    fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.to_string()));
        self
    }
}

/// What the server received.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    path: String,
    headers: HeaderMap,
    pub(crate) body: Value,
}

#[derive(Default)]
struct Script {
    responses: Mutex<VecDeque<Canned>>,
    received: Mutex<Vec<Received>>,
    /// Bytes of response bodies handed to the server to send.
    sent: AtomicUsize,
    /// How many response bodies the server has dropped: it does so when a body ends or
    /// its connection closes.
    closed: tokio::sync::watch::Sender<usize>,
}

/// Counts a response body as closed when dropped.
struct CloseGuard(Arc<Script>);

impl Drop for CloseGuard {
    fn drop(&mut self) {
        self.0.closed.send_modify(|closed| *closed += 1);
    }
}

pub(crate) struct Server {
    addr: SocketAddr,
    script: Arc<Script>,
}

impl Server {
    pub(crate) async fn start(responses: Vec<Canned>) -> Server {
        let script = Arc::new(Script { responses: Mutex::new(responses.into()), ..Script::default() });
        let handler_script = script.clone();
        let app = axum::Router::new().fallback(move |request: Request| {
            let script = handler_script.clone();
            async move { respond(script, request).await }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Server { addr, script }
    }

    pub(crate) fn received(&self) -> Vec<Received> {
        self.script.received.lock().expect("lock").clone()
    }

    /// Bytes of response bodies the server has sent (or buffered to send) so far.
    fn sent(&self) -> usize {
        self.script.sent.load(Ordering::SeqCst)
    }

    /// Waits until `count` response bodies have been dropped by the server.
    async fn bodies_closed(&self, count: usize) {
        let mut closed = self.script.closed.subscribe();
        let wait = closed.wait_for(|closed| *closed >= count);
        tokio::time::timeout(Duration::from_secs(20), wait)
            .await
            .unwrap_or_else(|_| {
                panic!("fewer than {count} response bodies were dropped: their connections stayed open")
            })
            .expect("the script lives");
    }

    pub(crate) fn openai(&self) -> OpenAiModel {
        openai_at(&self.addr.to_string(), fast_http())
    }

    pub(crate) fn anthropic(&self) -> AnthropicModel {
        AnthropicModel::new(AnthropicConfig {
            base_url: format!("http://{}", self.addr),
            api_key: "ak-test".into(),
            model: "claude-test".into(),
            default_max_tokens: 321,
            http: fast_http(),
        })
        .expect("client")
    }
}

async fn respond(script: Arc<Script>, request: Request) -> Response {
    let path = request.uri().path().to_string();
    let headers = request.headers().clone();
    let bytes = axum::body::to_bytes(request.into_body(), usize::MAX).await.unwrap_or_default();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    script.received.lock().expect("lock").push(Received { path, headers, body });
    let canned = script.responses.lock().expect("lock").pop_front();
    let Some(canned) = canned else {
        return Response::builder().status(500).body(Body::from("test server: no response left")).expect("response");
    };
    tokio::time::sleep(canned.delay).await;
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        canned.body.chunks(canned.chunk.max(1)).map(|c| Ok(c.to_vec())).collect();
    let body = futures::stream::iter(chunks);
    let body: futures::stream::BoxStream<'static, Result<Vec<u8>, std::io::Error>> = match canned.after_body {
        After::End => body.boxed(),
        After::Silence => body.chain(futures::stream::pending()).boxed(),
        After::Break => {
            body.chain(futures::stream::once(async { Err(std::io::Error::other("connection dropped")) })).boxed()
        }
        After::Repeat(bytes, pause) => body
            .chain(futures::stream::repeat(bytes).then(move |bytes| async move {
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
                Ok(bytes)
            }))
            .boxed(),
    };
    let guard = CloseGuard(script.clone());
    let body = body.inspect(move |chunk| {
        if let Ok(chunk) = chunk {
            guard.0.sent.fetch_add(chunk.len(), Ordering::SeqCst);
        }
    });
    let body = Body::from_stream(body);
    let mut response = Response::builder().status(canned.status);
    for (name, value) in canned.headers {
        response = response.header(name, value);
    }
    response.body(body).expect("response")
}

/// An OpenAI adapter for the server at `addr` (host:port), with a test key.
fn openai_at(addr: &str, http: HttpSettings) -> OpenAiModel {
    OpenAiModel::new(OpenAiConfig {
        provider: "openai".into(),
        base_url: format!("http://{addr}/v1"),
        api_key: Some("sk-test".into()),
        model: "gpt-test".into(),
        max_tokens_field: "max_completion_tokens".into(),
        http,
    })
    .expect("client")
}

fn fast_http() -> HttpSettings {
    HttpSettings {
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(5),
        answer_timeout: Duration::from_secs(20),
        retry: RetryPolicy {
            max_retries: 3,
            initial_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
            max_retry_after: Duration::from_secs(1),
        },
    }
}

// ---------------------------------------------------------------------------------------
// Fixtures and helpers
// ---------------------------------------------------------------------------------------

pub(crate) fn fixture(name: &str) -> String {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/providers");
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// An Anthropic recording (one payload a line) as the SSE the API sends.
pub(crate) fn anthropic_sse(name: &str) -> String {
    fixture(name)
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let kind = serde_json::from_str::<Value>(line).expect("fixture line is JSON")["type"]
                .as_str()
                .expect("fixture line has a type")
                .to_string();
            format!("event: {kind}\ndata: {line}\n\n")
        })
        .collect()
}

async fn collect(model: &dyn Model, request: ModelRequest) -> Result<Vec<ModelEvent>, ModelError> {
    let stream: EventStream = model.stream(request).await?;
    stream.collect::<Vec<_>>().await.into_iter().collect()
}

fn hello() -> ModelRequest {
    ModelRequest { messages: vec![Message::user("hi")], ..ModelRequest::default() }
}

fn tool_call(id: &str, name: &str, input: Value) -> ModelEvent {
    ModelEvent::ToolCall { id: id.into(), name: name.into(), input }
}

fn text(t: &str) -> ModelEvent {
    ModelEvent::TextDelta(t.into())
}

fn finish(reason: &str) -> ModelEvent {
    ModelEvent::Finish { reason: reason.into(), usage: None }
}

fn finish_counted(reason: &str, input_tokens: u64, output_tokens: u64) -> ModelEvent {
    ModelEvent::Finish { reason: reason.into(), usage: Some(Usage { input_tokens, output_tokens }) }
}

// ---------------------------------------------------------------------------------------
// Recorded streams
// ---------------------------------------------------------------------------------------

/// The recordings the tests replay, with the stable hash (64-bit FNV-1a) of each as it
/// was copied from shared/fixtures/providers.
const RECORDINGS: [(&str, u64); 3] = [
    ("openai-compatible-tool-call.sse", 0x9008_38d3_9839_0231),
    ("anthropic-tool-no-args.jsonl", 0x803f_092a_889a_78df),
    ("anthropic-json-tool.jsonl", 0x1678_04b7_2119_447d),
];

/// The copies in tests/fixtures/providers are the recordings as they were copied: a
/// missing or edited copy fails here with its name. Where shared/fixtures/providers is
/// checked out in a parent directory (the development machines; a clean clone has only
/// the copies), the originals must still be those recordings too.
#[test]
fn the_recordings_are_the_copies_of_the_originals() {
    for (name, hash) in RECORDINGS {
        assert_eq!(stable_hash(&fixture(name)), hash, "tests/fixtures/providers/{name} is not the recording it was");
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let Some(shared) = manifest.ancestors().map(|dir| dir.join("shared/fixtures/providers")).find(|dir| dir.is_dir())
    else {
        eprintln!("note: no shared/fixtures/providers above {}; only the copies were checked", manifest.display());
        return;
    };
    for (name, hash) in RECORDINGS {
        let original = std::fs::read_to_string(shared.join(name))
            .unwrap_or_else(|e| panic!("{name} is missing from {}: {e}", shared.display()));
        assert_eq!(stable_hash(&original), hash, "{name} in {} changed since it was copied", shared.display());
    }
}

#[tokio::test]
async fn openai_recorded_tool_call() {
    let server = Server::start(vec![Canned::sse(fixture("openai-compatible-tool-call.sse"))]).await;
    let events = collect(&server.openai(), hello()).await.expect("events");
    assert_eq!(
        events,
        vec![
            text("Reading"),
            text(" it."),
            tool_call("toolu_sanitized", "read_file", json!({"path": "a.txt"})),
            finish("tool_calls"),
        ]
    );
    let received = server.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].path, "/v1/chat/completions");
    assert_eq!(received[0].headers["authorization"], "Bearer sk-test");
    assert_eq!(received[0].body["stream"], json!(true));
    assert_eq!(received[0].body["stream_options"], json!({"include_usage": true}));
    assert_eq!(received[0].body["model"], json!("gpt-test"));
}

/// The token usage of an OpenAI-compatible stream, in the shapes real servers send: a
/// chunk with the usage and no choices after the finish (OpenAI, Ollama; Azure puts
/// `usage: null` on every chunk and one more chunk for the choice after the finish), or
/// the usage on the finish chunk itself (llama.cpp). Finish comes once, with it.
#[tokio::test]
async fn openai_usage_after_the_finish() {
    let chunk = |choices: Value, usage: Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": choices, "usage": usage})
        )
    };
    let delta = |delta: Value, finish: Value| json!([{"index": 0, "delta": delta, "finish_reason": finish}]);
    let counts = json!({"prompt_tokens": 15, "completion_tokens": 5, "total_tokens": 20, "prompt_tokens_details": {"cached_tokens": 0}});
    let azure = [
        chunk(delta(json!({"role": "assistant", "content": ""}), Value::Null), Value::Null),
        chunk(delta(json!({"content": "Hello"}), Value::Null), Value::Null),
        chunk(delta(json!({}), json!("stop")), Value::Null),
        chunk(json!([{"index": 0, "finish_reason": null, "content_filter_results": {}}]), Value::Null),
        chunk(json!([]), counts.clone()),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    let llama_cpp = [
        chunk(delta(json!({"content": "Hello"}), Value::Null), Value::Null),
        chunk(delta(json!({}), json!("stop")), counts),
        "data: [DONE]\n\n".to_string(),
    ]
    .concat();
    let server = Server::start(vec![Canned::sse(azure), Canned::sse(llama_cpp)]).await;
    for _ in 0..2 {
        let events = collect(&server.openai(), hello()).await.expect("events");
        assert_eq!(events, vec![text("Hello"), finish_counted("stop", 15, 5)]);
    }
}

#[tokio::test]
async fn anthropic_recorded_tool_without_arguments() {
    let server = Server::start(vec![Canned::sse(anthropic_sse("anthropic-tool-no-args.jsonl"))]).await;
    let events = collect(&server.anthropic(), hello()).await.expect("events");
    assert_eq!(
        events,
        vec![
            text("I'll update the issue list for"),
            text(" you."),
            tool_call("toolu_01QE1WLsSVp5hy5Q3GmGTmjP", "updateIssueList", json!({})),
            finish_counted("tool_calls", 565, 48),
        ]
    );
    let received = server.received();
    assert_eq!(received[0].path, "/v1/messages");
    assert_eq!(received[0].headers["x-api-key"], "ak-test");
    assert_eq!(received[0].headers["anthropic-version"], "2023-06-01");
    assert_eq!(received[0].body["max_tokens"], json!(321));
}

#[tokio::test]
async fn anthropic_recorded_json_fragments() {
    let server = Server::start(vec![Canned::sse(anthropic_sse("anthropic-json-tool.jsonl"))]).await;
    let events = collect(&server.anthropic(), hello()).await.expect("events");
    assert_eq!(
        events,
        vec![
            tool_call(
                "toolu_01KFbKqPYSuAKujiL6mTfzYA",
                "json",
                json!({"elements": [{"location": "San Francisco", "temperature": 58, "condition": "sunny"}]}),
            ),
            finish_counted("tool_calls", 849, 47),
        ]
    );
}

#[tokio::test]
async fn byte_order_mark_crlf_and_byte_by_byte() {
    let body = format!("\u{feff}{}", fixture("openai-compatible-tool-call.sse").replace('\n', "\r\n"));
    let mut canned = Canned::sse(body);
    canned.chunk = 1;
    let server = Server::start(vec![canned]).await;
    let events = collect(&server.openai(), hello()).await.expect("events");
    assert_eq!(events.len(), 4);
    assert_eq!(events[2], tool_call("toolu_sanitized", "read_file", json!({"path": "a.txt"})));
}

#[tokio::test]
async fn ollama_needs_no_key_and_uses_its_base_url() {
    let server = Server::start(vec![Canned::sse(fixture("openai-compatible-tool-call.sse"))]).await;
    let base = format!("http://{}/v1", server.addr);
    let env = move |var: &str| (var == "OLLAMA_BASE_URL").then(|| base.clone());
    let model = model_from_str_with_env("ollama:llama3.2", &env).expect("ollama model");
    assert_eq!(model.name(), "ollama:llama3.2");
    let request = ModelRequest { max_tokens: Some(64), ..hello() };
    let events = collect(model.as_ref(), request).await.expect("events");
    assert_eq!(events.len(), 4);
    let received = server.received();
    assert!(received[0].headers.get("authorization").is_none());
    assert_eq!(received[0].body["max_tokens"], json!(64));
    assert_eq!(received[0].body["model"], json!("llama3.2"));
}

// ---------------------------------------------------------------------------------------
// Retries and errors
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn rate_limited_then_success() {
    let limited = Canned::json(429, json!({"error": {"message": "Rate limit reached"}})).header("retry-after", "0");
    let server = Server::start(vec![limited, Canned::sse(fixture("openai-compatible-tool-call.sse"))]).await;
    let events = collect(&server.openai(), hello()).await.expect("retried");
    assert_eq!(events.last(), Some(&finish("tool_calls")));
    assert_eq!(server.received().len(), 2);
}

#[tokio::test]
async fn overloaded_twice_then_success_anthropic() {
    let overloaded =
        Canned::json(529, json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}));
    let server = Server::start(vec![
        overloaded.clone(),
        Canned::json(503, json!({})),
        Canned::sse(anthropic_sse("anthropic-json-tool.jsonl")),
    ])
    .await;
    let events = collect(&server.anthropic(), hello()).await.expect("retried");
    assert_eq!(events.len(), 2);
    assert_eq!(server.received().len(), 3);
}

#[tokio::test]
async fn server_errors_give_up_after_the_retries() {
    let failing = Canned::json(500, json!({"error": {"message": "The server had an error"}}));
    let server = Server::start(vec![failing; 6]).await;
    let error = collect(&server.openai(), hello()).await.expect_err("should fail");
    match error {
        ModelError::Refused { status: 500, message, .. } => assert_eq!(message, "The server had an error"),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(server.received().len(), 4, "one attempt and three retries");
}

#[tokio::test]
async fn a_redirect_is_not_followed_and_says_where_it_points() {
    // Followed, it would post the whole conversation to whatever server it names.
    let moved = Canned::json(307, json!({})).header("location", "http://elsewhere.invalid/v1/chat/completions");
    let server = Server::start(vec![moved, Canned::sse(fixture("openai-compatible-tool-call.sse"))]).await;
    let error = collect(&server.openai(), hello()).await.expect_err("not followed");
    let ModelError::Refused { status: 307, message, .. } = &error else { panic!("unexpected {error:?}") };
    assert!(message.contains("redirects (307) to http://elsewhere.invalid/"), "{message}");
    assert_eq!(server.received().len(), 1);
}

#[tokio::test]
async fn long_retry_after_is_not_waited_for() {
    let limited = Canned::json(429, json!({"error": {"message": "slow down"}})).header("retry-after", "3600");
    let server = Server::start(vec![limited]).await;
    let error = collect(&server.openai(), hello()).await.expect_err("should fail");
    assert!(matches!(error, ModelError::Refused { status: 429, .. }), "{error:?}");
    assert_eq!(server.received().len(), 1);
}

#[tokio::test]
async fn bad_request_is_refused_with_the_provider_message() {
    let body = json!({"error": {"message": "The model `gpt-nope` does not exist", "type": "invalid_request_error", "code": "model_not_found"}});
    let server = Server::start(vec![Canned::json(404, body)]).await;
    let error = collect(&server.openai(), hello()).await.expect_err("should fail");
    match &error {
        ModelError::Refused { provider, status: 404, message } => {
            assert_eq!(provider, "openai");
            assert_eq!(message, "The model `gpt-nope` does not exist");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(error.to_string().contains("gpt-nope"));
    assert_eq!(server.received().len(), 1, "4xx is not retried");

    let body =
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: must be positive"}});
    let server = Server::start(vec![Canned::json(400, body)]).await;
    let error = collect(&server.anthropic(), hello()).await.expect_err("should fail");
    assert!(
        matches!(&error, ModelError::Refused { status: 400, message, .. } if message == "max_tokens: must be positive"),
        "{error:?}"
    );
}

#[tokio::test]
async fn unauthorized_is_refused() {
    let body = json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}});
    let server = Server::start(vec![Canned::json(401, body)]).await;
    let error = collect(&server.anthropic(), hello()).await.expect_err("should fail");
    assert!(
        matches!(&error, ModelError::Refused { status: 401, message, .. } if message == "invalid x-api-key"),
        "{error:?}"
    );
    let body = json!({"error": {"message": "Incorrect API key provided: sk-test.", "type": "invalid_request_error"}});
    let server = Server::start(vec![Canned::json(401, body)]).await;
    let error = collect(&server.openai(), hello()).await.expect_err("should fail");
    assert!(matches!(&error, ModelError::Refused { status: 401, .. }), "{error:?}");
    assert_eq!(server.received().len(), 1);
}

#[test]
fn missing_keys_and_unknown_models() {
    let no_env = |_: &str| None;
    match model_from_str_with_env("openai:gpt-4o", &no_env) {
        Err(ModelError::MissingKey { var, provider }) => {
            assert_eq!((var.as_str(), provider.as_str()), ("OPENAI_API_KEY", "openai"))
        }
        other => panic!("unexpected {:?}", other.map(|m| m.name())),
    }
    let empty_key = |var: &str| (var == "ANTHROPIC_API_KEY").then(|| "  ".to_string());
    match model_from_str_with_env("anthropic:claude", &empty_key) {
        Err(error @ ModelError::MissingKey { .. }) => {
            assert!(error.to_string().contains("ANTHROPIC_API_KEY"), "{error}")
        }
        other => panic!("unexpected {:?}", other.map(|m| m.name())),
    }
    for spec in ["gpt-4o", "openai:", "mystery:model", ""] {
        assert!(matches!(model_from_str_with_env(spec, &no_env), Err(ModelError::UnknownModel(_))), "{spec}");
    }
    let offline = model_from_str_with_env(" offline ", &no_env).expect("offline needs nothing");
    assert_eq!(offline.name(), "offline");
    let keyed = |var: &str| (var == "OPENAI_API_KEY").then(|| "sk-x".to_string());
    let model = model_from_str_with_env("openai:gpt-4o", &keyed).expect("model");
    assert_eq!(model.name(), "openai:gpt-4o");
}

#[test]
fn the_connect_timeout_and_answer_deadline_come_from_the_environment() {
    let env = |var: &str| match var {
        "TRELLIS_CONNECT_TIMEOUT" => Some("2.5".to_string()),
        "TRELLIS_ANSWER_TIMEOUT" => Some("90".to_string()),
        _ => None,
    };
    let settings = HttpSettings::from_env(&env).expect("valid");
    assert_eq!(settings.connect_timeout, Duration::from_millis(2500));
    assert_eq!(settings.answer_timeout, Duration::from_secs(90));
    assert_eq!(HttpSettings::from_env(&|_| None).expect("defaults"), HttpSettings::default());
    let bad = |var: &str| (var == "TRELLIS_ANSWER_TIMEOUT").then(|| "soon".to_string());
    let error = model_from_str_with_env("ollama:llama3.2", &bad).err().expect("refused");
    assert!(error.to_string().contains("TRELLIS_ANSWER_TIMEOUT must be a positive number of seconds"), "{error}");
}

#[tokio::test]
async fn scripted_model_from_a_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("script.json");
    std::fs::write(&path, r#"[{"text": "Hello from the script"}]"#).expect("write");
    let spec = format!("scripted:{}", path.display());
    let model = model_from_str_with_env(&spec, &|_| None).expect("scripted");
    let events = collect(model.as_ref(), hello()).await.expect("events");
    assert_eq!(events.last(), Some(&finish("stop")));
    let error = collect(model.as_ref(), hello()).await.expect_err("should fail");
    assert!(matches!(error, ModelError::Script(_)));
}

#[tokio::test]
async fn malformed_sse_line() {
    // A line that is no SSE field is skipped, as the SSE rules say; the answer it leaves
    // unfinished is still an error.
    let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\nthis is not sse\n\n";
    let server = Server::start(vec![Canned::sse(body)]).await;
    let stream = server.openai().stream(hello()).await.expect("stream starts");
    let items: Vec<_> = stream.collect().await;
    assert!(matches!(&items[0], Ok(ModelEvent::TextDelta(t)) if t == "Hi"));
    match &items[1] {
        Err(ModelError::Malformed { provider, message }) => {
            assert_eq!(provider, "openai");
            assert!(message.contains("ended before the answer was finished"), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(items.len(), 2, "the stream ends at the error");
}

#[tokio::test]
async fn success_status_without_an_event_stream() {
    let json = Canned::json(200, json!({"error": {"message": "Your quota is exhausted"}}));
    let mut html = Canned::sse("<html>\n<head><title>502 Bad Gateway</title></head>\n</html>\n");
    html.headers = vec![("content-type", "text/html".into())];
    let server = Server::start(vec![json, html]).await;
    let error = collect(&server.openai(), hello()).await.expect_err("should fail");
    match &error {
        ModelError::Malformed { message, .. } => assert_eq!(
            message,
            "the response is not an event stream (content-type `application/json`): Your quota is exhausted"
        ),
        other => panic!("unexpected {other:?}"),
    }
    let error = collect(&server.anthropic(), hello()).await.expect_err("should fail");
    assert!(
        matches!(&error, ModelError::Malformed { message, .. }
            if message.contains("not an event stream (content-type `text/html`)") && message.contains("502 Bad Gateway")),
        "{error:?}"
    );
    assert_eq!(server.received().len(), 2, "a stream that started is not retried");
}

#[tokio::test]
async fn malformed_json_payload_and_mid_stream_error() {
    let server =
        Server::start(vec![Canned::sse("event: message_start\ndata: {\"type\": \"message_start\",\n\n")]).await;
    let error = collect(&server.anthropic(), hello()).await.expect_err("should fail");
    assert!(matches!(error, ModelError::Malformed { .. }), "{error:?}");

    let body = "data: {\"type\":\"ping\"}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let server = Server::start(vec![Canned::sse(body)]).await;
    let error = collect(&server.anthropic(), hello()).await.expect_err("should fail");
    match error {
        ModelError::Interrupted { provider, message } => {
            assert_eq!(provider, "anthropic");
            assert_eq!(message, "overloaded_error: Overloaded");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn anthropic_stream_ending_before_it_starts_is_malformed() {
    // Its end before its start: a broken stream, not an empty answer.
    let body = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n\
                event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n";
    let server = Server::start(vec![Canned::sse(body)]).await;
    let error = collect(&server.anthropic(), hello()).await.expect_err("should fail");
    assert_eq!(error.to_string(), "malformed stream from anthropic: the stream sent message_stop before message_start");
}

#[tokio::test]
async fn stream_cut_short_is_an_error() {
    let full = fixture("openai-compatible-tool-call.sse");
    let cut = &full[..full.find("finish_reason\":\"tool_calls").expect("fixture has a finish") - 40];
    let mut truncated = Canned::sse(cut.rsplit_once("\n\n").expect("whole events").0.to_string());
    truncated.after_body = After::End;
    let mut dropped = Canned::sse(cut.to_string());
    dropped.after_body = After::Break;
    let server = Server::start(vec![truncated, dropped]).await;
    let error = collect(&server.openai(), hello()).await.expect_err("should fail");
    assert!(matches!(&error, ModelError::Malformed { message, .. } if message.contains("ended")), "{error:?}");
    let error = collect(&server.openai(), hello()).await.expect_err("should fail");
    assert!(matches!(&error, ModelError::Network { message, .. } if message.contains("cut off")), "{error:?}");
}

#[tokio::test]
async fn timeouts() {
    let mut slow = Canned::sse(fixture("openai-compatible-tool-call.sse"));
    slow.delay = Duration::from_secs(2);
    let mut stalled = Canned::sse("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n");
    stalled.after_body = After::Silence;
    let server = Server::start(vec![slow.clone(), stalled]).await;
    let quick = |mut model: OpenAiConfig| {
        model.http.request_timeout = Duration::from_millis(200);
        model.http.idle_timeout = Duration::from_millis(200);
        model.http.retry.max_retries = 0;
        OpenAiModel::new(model).expect("client")
    };
    let model = quick(server.openai().config().clone());
    let error = collect(&model, hello()).await.expect_err("should fail");
    assert!(matches!(&error, ModelError::TimedOut { message, .. } if message.contains("no response")), "{error:?}");

    let items: Vec<_> = model.stream(hello()).await.expect("headers arrive").collect().await;
    assert!(matches!(&items[0], Ok(ModelEvent::TextDelta(_))));
    assert!(matches!(&items[1], Err(ModelError::TimedOut { message, .. }) if message.contains("stalled")), "{items:?}");
}

#[tokio::test]
async fn connection_refused_is_reported() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let model = openai_at(&addr.to_string(), fast_http());
    let error = tokio::time::timeout(Duration::from_secs(20), collect(&model, hello())).await.expect("no hang");
    assert!(matches!(error, Err(ModelError::Network { .. })), "{error:?}");
}

/// Connections that break before an answer are retried: the server counts them.
#[tokio::test]
async fn broken_connections_are_retried_then_reported() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    let model = openai_at(&addr.to_string(), fast_http());
    let error = tokio::time::timeout(Duration::from_secs(20), collect(&model, hello())).await.expect("no hang");
    assert!(matches!(&error, Err(ModelError::Network { .. })), "{error:?}");
    // Counted before each connection is closed, so before the client sees it break.
    assert_eq!(accepted.load(Ordering::SeqCst), 4, "one attempt and three retries");
}

/// A server whose accept queue is full never completes a connection: the connect timeout
/// ends the wait, and the message names the model and the URL.
#[tokio::test]
async fn connect_timeout() {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.bind("127.0.0.1:0".parse().expect("address")).expect("bind");
    let addr = socket.local_addr().expect("addr");
    // Backlog 0: one connection waits in the queue, never accepted; later ones hang in
    // the handshake.
    let _listener = socket.listen(0).expect("listen");
    let mut queued = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_millis(500), tokio::net::TcpStream::connect(addr)).await {
            Ok(Ok(stream)) if queued.len() < 16 => queued.push(stream),
            Ok(Ok(_)) => panic!("the accept queue of {addr} does not fill up"),
            Ok(Err(error)) => panic!("connecting to {addr}: {error}"),
            Err(_) => break,
        }
    }
    let mut http = fast_http();
    http.connect_timeout = Duration::from_millis(300);
    http.retry.max_retries = 0;
    let model = openai_at(&addr.to_string(), http);
    let error = tokio::time::timeout(Duration::from_secs(20), collect(&model, hello())).await.expect("no hang");
    match &error {
        Err(error @ ModelError::TimedOut { message, .. }) => {
            assert!(message.contains("could not connect within 300ms"), "{message}");
            assert!(
                error.to_string().starts_with(&format!("openai:gpt-test at http://{addr}/v1/chat/completions: ")),
                "{error}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// A 500 whose body never ends: each attempt reads only the start of it, then closes the
/// connection. (The body was read whole, again on each retry: a 400 MB error page took
/// the CLI to 1.2 GB.)
#[tokio::test]
async fn an_endless_error_body_is_read_only_in_part() {
    let mut endless = Canned::json(500, Value::Null);
    endless.headers = vec![("content-type", "text/plain".into())];
    endless.body = b"upstream exploded: ".to_vec();
    endless.after_body = After::Repeat(vec![b'x'; 64 * 1024], Duration::ZERO);
    let server = Server::start(vec![endless.clone(), endless]).await;
    let mut config = server.openai().config().clone();
    config.http.retry.max_retries = 1;
    let model = OpenAiModel::new(config).expect("client");
    let error =
        tokio::time::timeout(Duration::from_secs(60), collect(&model, hello())).await.expect("the call returns");
    match &error {
        Err(ModelError::Refused { status: 500, message, .. }) => {
            assert!(message.starts_with("upstream exploded: xxxx"), "{message}");
            assert!(message.ends_with("(the error body is longer than 64 KiB; only its start was read)"), "{message}");
            assert!(message.len() < 1000, "the message quotes only the start: {} bytes", message.len());
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(server.received().len(), 2, "one attempt and one retry");
    server.bodies_closed(2).await;
    // What the kernel's socket buffers take before the server's writes block, per
    // connection; the body itself is endless.
    let sent = server.sent();
    eprintln!("the server sent {sent} bytes of two endless error bodies");
    assert!(sent < 64 << 20, "the server sent {sent} bytes");
}

/// A server that keeps an answer alive without finishing it (keep-alive comments, or one
/// character at a time of an event that never ends) is given up on at the answer's
/// deadline, with the model and the URL in the message.
#[tokio::test]
async fn a_trickling_answer_meets_its_deadline() {
    let mut pings = Canned::sse("");
    pings.after_body = After::Repeat(b": ping\n\n".to_vec(), Duration::from_millis(20));
    let mut characters = Canned::sse("event: content_block_delta\ndata: ");
    characters.after_body = After::Repeat(b"x".to_vec(), Duration::from_millis(20));
    let server = Server::start(vec![pings, characters]).await;
    let deadline = |mut http: HttpSettings| {
        http.answer_timeout = Duration::from_millis(500);
        http.idle_timeout = Duration::from_secs(10);
        http
    };
    let openai_config = server.openai().config().clone();
    let openai =
        OpenAiModel::new(OpenAiConfig { http: deadline(openai_config.http.clone()), ..openai_config }).expect("client");
    let anthropic_config = server.anthropic().config().clone();
    let anthropic =
        AnthropicModel::new(AnthropicConfig { http: deadline(anthropic_config.http.clone()), ..anthropic_config })
            .expect("client");
    let cases: [(&dyn Model, String); 2] = [
        (&openai, format!("http://{}/v1/chat/completions", server.addr)),
        (&anthropic, format!("http://{}/v1/messages", server.addr)),
    ];
    for (model, url) in cases {
        let answer = tokio::time::timeout(Duration::from_secs(30), collect(model, hello()));
        let error = answer.await.expect("the deadline ends the answer").expect_err("no answer");
        match &error {
            ModelError::TimedOut { model: name, url: at, message } => {
                assert_eq!((name, at), (&model.name(), &url));
                assert!(message.contains("not finished within 500ms"), "{message}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(error.to_string().starts_with(&format!("{} at {url}: ", model.name())), "{error}");
    }
    server.bodies_closed(2).await;
}

/// The deadline counts from the request: waiting to retry is part of it.
#[tokio::test]
async fn the_deadline_covers_retries() {
    let busy = Canned::json(503, json!({"error": {"message": "busy"}})).header("retry-after", "5");
    let server = Server::start(vec![busy]).await;
    let mut config = server.openai().config().clone();
    config.http.answer_timeout = Duration::from_secs(1);
    config.http.retry.max_retry_after = Duration::from_secs(10);
    let model = OpenAiModel::new(config).expect("client");
    let error = tokio::time::timeout(Duration::from_secs(30), collect(&model, hello())).await.expect("no hang");
    assert!(
        matches!(&error, Err(ModelError::TimedOut { message, .. }) if message.contains("not finished within 1s")),
        "{error:?}"
    );
    assert_eq!(server.received().len(), 1, "the retry would have come after the deadline");
}

// ---------------------------------------------------------------------------------------
// Request bodies
// ---------------------------------------------------------------------------------------

fn conversation() -> ModelRequest {
    ModelRequest {
        system: Some("You are terse.".into()),
        messages: vec![
            Message::new(
                Role::User,
                vec![Part::Text { text: "Read a.txt".into() }, Part::Text { text: String::new() }],
            ),
            Message::new(
                Role::Assistant,
                vec![
                    Part::Text { text: String::new() },
                    Part::ToolCall { id: "call_1".into(), name: "read_file".into(), input: json!({"path": "a.txt"}) },
                    Part::ToolCall { id: "call_2".into(), name: "Counter_increment".into(), input: json!({}) },
                ],
            ),
            Message::new(
                Role::Tool,
                vec![
                    Part::ToolResult {
                        id: "call_1".into(),
                        name: "read_file".into(),
                        output: ToolOutput::Json(json!({"text": "hello"})),
                    },
                    Part::ToolResult {
                        id: "call_2".into(),
                        name: "Counter_increment".into(),
                        output: ToolOutput::ErrorText("charm is not running".into()),
                    },
                ],
            ),
            Message::new(Role::Assistant, vec![Part::Text { text: String::new() }]),
            Message::assistant("It says hello."),
        ],
        tools: vec![
            ToolSpec {
                name: "read_file".into(),
                display_name: "read_file".into(),
                description: "Read a file".into(),
                input_schema:
                    json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}).into(),
            },
            ToolSpec {
                name: "Counter_increment".into(),
                display_name: "Counter.increment".into(),
                description: "`increment` handler from `Counter`".into(),
                input_schema: json!({"type": "object", "properties": {}}).into(),
            },
        ],
        max_tokens: Some(100),
        tool_choice: Default::default(),
        result: None,
    }
}

/// Every `content` or `text` string in the body is non-empty, except the `""` content
/// OpenAI-compatible servers need beside an assistant's `tool_calls`.
fn assert_no_empty_text(value: &Value) {
    match value {
        Value::Object(map) => {
            for (key, field) in map {
                let calls_only = key == "content" && map.contains_key("tool_calls");
                if (key == "content" || key == "text") && !calls_only {
                    assert_ne!(field, &json!(""), "empty {key} in {value}");
                    assert_ne!(field, &json!([]), "empty {key} in {value}");
                }
                assert_no_empty_text(field);
            }
        }
        Value::Array(items) => items.iter().for_each(assert_no_empty_text),
        _ => {}
    }
}

#[tokio::test]
async fn openai_request_body_shape() {
    let server = Server::start(vec![Canned::sse(fixture("openai-compatible-tool-call.sse"))]).await;
    collect(&server.openai(), conversation()).await.expect("events");
    let body = &server.received()[0].body;
    assert_no_empty_text(body);
    assert_eq!(body["max_completion_tokens"], json!(100));
    assert_eq!(body.get("tool_choice"), None, "the default is not sent");
    assert_eq!(
        body["tools"][0],
        json!({"type": "function", "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        }})
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Read a.txt"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "Counter_increment", "arguments": "{}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"text\":\"hello\"}"},
            {"role": "tool", "tool_call_id": "call_2", "content": "Error: charm is not running"},
            {"role": "assistant", "content": "It says hello."},
        ])
    );
}

#[tokio::test]
async fn anthropic_request_body_shape() {
    let server = Server::start(vec![Canned::sse(anthropic_sse("anthropic-tool-no-args.jsonl"))]).await;
    collect(&server.anthropic(), conversation()).await.expect("events");
    let body = &server.received()[0].body;
    assert_no_empty_text(body);
    assert_eq!(body.get("tool_choice"), None, "the default is not sent");
    assert_eq!(body["system"], json!("You are terse."));
    assert_eq!(body["max_tokens"], json!(100));
    assert_eq!(
        body["tools"][1],
        json!({"name": "Counter_increment", "description": "`increment` handler from `Counter`", "input_schema": {"type": "object", "properties": {}}})
    );
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Read a.txt"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "call_1", "name": "read_file", "input": {"path": "a.txt"}},
                {"type": "tool_use", "id": "call_2", "name": "Counter_increment", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "{\"text\":\"hello\"}"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": "charm is not running", "is_error": true},
            ]},
            {"role": "assistant", "content": [{"type": "text", "text": "It says hello."}]},
        ])
    );
}

/// A required tool reaches each provider in its own words, by wire name.
#[tokio::test]
async fn tool_choice_in_request_bodies() {
    let server = Server::start(vec![
        Canned::sse(fixture("openai-compatible-tool-call.sse")),
        Canned::sse(anthropic_sse("anthropic-tool-no-args.jsonl")),
    ])
    .await;
    let request = ModelRequest { tool_choice: ToolChoice::Tool("Counter_increment".into()), ..conversation() };
    collect(&server.openai(), request.clone()).await.expect("events");
    collect(&server.anthropic(), request).await.expect("events");
    let received = server.received();
    assert_eq!(received[0].body["tool_choice"], json!({"type": "function", "function": {"name": "Counter_increment"}}));
    assert_eq!(received[1].body["tool_choice"], json!({"type": "tool", "name": "Counter_increment"}));
}

/// Dropping an answer's stream closes its connection: the server sees it.
#[tokio::test]
async fn dropping_the_stream_cancels_the_request() {
    let mut stalled = Canned::sse("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n");
    stalled.after_body = After::Silence;
    let server = Server::start(vec![stalled]).await;
    let model = server.openai();
    let mut stream = model.stream(hello()).await.expect("stream");
    assert!(matches!(stream.next().await, Some(Ok(ModelEvent::TextDelta(_)))));
    assert_eq!(*server.script.closed.borrow(), 0, "the answer is still open");
    drop(stream);
    server.bodies_closed(1).await;
}
