//! `trellis serve`'s API over loopback, as clients use it: each route with a bearer
//! token, the one-time sign-in link and its cookie, refusals without a token and from
//! other origins, and the limits (413, 422, 429). Files in the chat: `serve_files.rs`.

use crate::common;
use crate::common::example_plugin;
use crate::common::server;

use common::Finish;
use serde_json::{json, Value};
use server::Served;

/// A bearer token made with `trellis token new` before the server starts.
fn new_token(space: &std::path::Path) -> String {
    let out = common::trellis(space).args(["--json", "token", "new", "--name", "tests"]).finish();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    json["token"].as_str().unwrap().to_string()
}

/// A server and the `Authorization` header of a bearer token for it.
pub(crate) struct Client {
    pub(crate) served: Served,
    pub(crate) auth: String,
}

impl Client {
    pub(crate) fn call(&self, method: &str, path: &str, body: Option<Value>) -> server::Response {
        let body = body.map(|b| b.to_string());
        self.served.request(method, path, &[&self.auth], body.as_deref())
    }

    pub(crate) fn ok(&self, method: &str, path: &str, body: Option<Value>, status: u16) -> Value {
        let response = self.call(method, path, body);
        assert_eq!(response.status, status, "{method} {path}: {}", response.body);
        if response.body.is_empty() {
            Value::Null
        } else {
            response.json()
        }
    }
}

/// `trellis serve EXTRA...` on `space`, with a bearer token made before it started.
pub(crate) fn client(space: &std::path::Path, extra: &[&str]) -> Client {
    client_with(space, extra, &[])
}

/// [`client`] of a server with `env` in its environment.
pub(crate) fn client_with(space: &std::path::Path, extra: &[&str], env: &[(&str, &str)]) -> Client {
    let token = new_token(space);
    Client { served: Served::start(space, extra, env), auth: format!("Authorization: Bearer {token}") }
}

/// A message sent while a reply streams is taken (202) and waits in `queued`, which every
/// client sees; a cancel drops it with the reply.
#[test]
fn a_message_sent_while_a_reply_runs_waits_for_it() {
    let s = common::space();
    let slow = crate::common::slow_model::server();
    let c = client_with(&s.path, &[], &[("OLLAMA_BASE_URL", &slow)]);
    c.ok("PUT", "/api/chat/model", Some(json!({"model": "ollama:slow"})), 204);
    let mut events = c.served.events("/api/chat/events", &[&c.auth]);
    c.ok("POST", "/api/chat/messages", Some(json!({"text": "tell me a long story"})), 202);
    events.until("chat", |s| s["pending"] == true);
    c.ok("POST", "/api/chat/messages", Some(json!({"text": "and make it short"})), 202);
    let waiting = events.until("chat", |s| !s["queued"].as_array().unwrap().is_empty());
    assert_eq!(waiting["queued"][0]["content"][0]["text"], "and make it short");
    assert_eq!(c.ok("GET", "/api/chat", None, 200)["queued"], waiting["queued"]);
    c.ok("POST", "/api/chat/cancel", None, 204);
    let stopped = events.until("chat", |s| s["pending"] == false);
    assert_eq!(stopped["queued"], json!([]), "a cancel drops it");
}

#[test]
fn every_route_answers_a_bearer_token() {
    let s = common::space();
    let c = client(&s.path, &[]);
    let patterns = c.ok("GET", "/api/patterns", None, 200);
    assert!(patterns.as_array().unwrap().iter().any(|p| p["id"] == "counter"), "{patterns}");
    let charms = c.ok("GET", "/api/charms", None, 200);
    let names: Vec<&str> = charms.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"Counter") && names.contains(&"Notes"), "{names:?}");

    let created = c.ok(
        "POST",
        "/api/charms",
        Some(json!({"pattern": "counter", "name": "Steps", "argument": {"start": 3}})),
        201,
    );
    assert_eq!(created["data"]["count"], 3);
    let handlers: Vec<&String> = created["handlers"].as_object().unwrap().keys().collect();
    assert_eq!(handlers, ["decrement", "increment", "reset"]);
    assert!(created["handlers"]["increment"]["properties"]["amount"].is_object(), "each with its event's schema");
    assert_eq!(c.ok("GET", "/api/charms/Steps", None, 200)["id"], created["id"]);
    assert_eq!(c.ok("PATCH", "/api/charms/Steps", Some(json!({"name": "Walks"})), 200)["name"], "Walks");
    let sent = c.ok("POST", "/api/charms/Walks/handlers/increment", Some(json!({"amount": 2})), 200);
    assert!(sent["summary"].as_str().unwrap().contains("count: 3 → 5"), "{sent}");
    assert_eq!(sent["result"]["count"], 5);
    // Validated as a model's call is; an unknown handler or charm is not found.
    let refused = c.call("POST", "/api/charms/Walks/handlers/increment", Some(json!({"amount": "two"})));
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert!(refused.json()["error"].as_str().unwrap().contains("amount"), "{}", refused.body);
    let missing = c.call("POST", "/api/charms/Walks/handlers/nope", Some(json!({})));
    assert_eq!(missing.status, 404);
    assert!(missing.json()["error"].as_str().unwrap().contains("increment"), "names the handlers: {}", missing.body);
    assert_eq!(c.call("GET", "/api/charms/Nobody", None).status, 404);
    let tools = c.ok("GET", "/api/charms/Counter/tools", None, 200);
    assert!(tools.as_array().unwrap().iter().any(|t| t["display"] == "Counter.increment"), "{tools}");

    // A charm's changes, as events: its data now, then after a change.
    let mut counter = c.served.events("/api/charms/Counter/events", &[&c.auth]);
    assert_eq!(counter.until("charm", |_| true)["data"]["count"], 0);
    c.ok("POST", "/api/charms/Counter/handlers/increment", Some(json!({"amount": 7})), 200);
    let seen = counter.until("charm", |d| d["data"]["count"] == 7);
    assert_eq!(seen["data"]["label"], "Count: 7", "the derived label comes with the count, never behind it");

    // The chat: a message with a mention, followed on the chat's events to its end.
    let mut chat = c.served.events("/api/chat/events", &[&c.auth]);
    let accepted = c.ok("POST", "/api/chat/messages", Some(json!({"text": "@Counter add 5"})), 202);
    assert_eq!(accepted["index"], 0);
    // The panel's value comes first: a batch of events sends the charms before the chat.
    chat.until("charm", |d| d["name"] == "Counter" && d["data"]["count"] == 12);
    let done = chat.until("chat", |s| !s["pending"].as_bool().unwrap() && s["messages"].as_array().unwrap().len() > 2);
    let text = done["messages"].to_string();
    assert!(text.contains("Counter_increment") && text.contains("count: 7 → 12"), "{text}");
    assert!(done["tools"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["display"] == "Counter.increment" && t["from"] == "Counter"));
    assert_eq!(done["attachments"][0]["name"], "Counter");
    assert_eq!(c.ok("GET", "/api/chat", None, 200)["messages"], done["messages"]);
    // What the server did, for operators: `/metrics` needs no token.
    let metric = |series: &str| c.served.metric(series);
    assert!(metric(r#"trellis_commits_total{outcome="durable"}"#) >= 2.0);
    assert!(metric(r#"trellis_tool_calls_total{outcome="done"}"#) >= 1.0);
    assert!(
        metric(r#"trellis_model_requests_total{provider="offline",outcome="answered"}"#) >= 2.0,
        "a request per round"
    );
    assert_eq!(metric(r#"trellis_forwarded_requests_total{outcome="answered"}"#), 0.0);
    let unknown = c.call("POST", "/api/chat/messages", Some(json!({"text": "@Nobody hi"})));
    assert_eq!(unknown.status, 422, "{}", unknown.body);

    // Attach and detach, the model, cancel.
    c.ok("POST", "/api/chat/attachments", Some(json!({"charm": "Dice"})), 204);
    chat.until("chat", |s| s["attachments"].as_array().unwrap().iter().any(|a| a["name"] == "Dice"));
    c.ok("DELETE", "/api/chat/attachments/Dice", None, 204);
    assert_eq!(c.call("DELETE", "/api/chat/attachments/Dice", None).status, 404);
    assert_eq!(c.call("PUT", "/api/chat/model", Some(json!({"model": "nonsense"}))).status, 422);
    // A model backed by a file is for the command line: the server opens no file a client
    // names (this one was started without --scripts), and says nothing of what is there.
    let secret = s.path.with_file_name("secret.json");
    std::fs::write(&secret, r#"["sk-not-for-you"]"#).unwrap();
    for path in [secret.display().to_string(), "/nonexistent".into()] {
        let refused = c.call("PUT", "/api/chat/model", Some(json!({"model": format!("scripted:{path}")})));
        assert_eq!(refused.status, 422, "{}", refused.body);
        assert!(refused.body.contains("--scripts DIR") && !refused.body.contains("sk-"), "{}", refused.body);
    }
    c.ok("PUT", "/api/chat/model", Some(json!({"model": "offline"})), 204);
    c.ok("POST", "/api/chat/cancel", None, 204);
    // A method a route does not take is refused as every refusal is: JSON, saying why.
    let wrong_method = c.call("PUT", "/api/charms", Some(json!({})));
    assert_eq!(wrong_method.status, 405, "{}", wrong_method.body);
    assert!(wrong_method.json()["error"].as_str().unwrap().contains("does not take that method"));
    assert!(
        wrong_method.header("allow").is_some_and(|allow| allow.contains("GET")),
        "{:?}",
        wrong_method.header("allow")
    );

    // A call that needs approval waits; the answer lets it run, and only once.
    c.ok("POST", "/api/charms/Notes/handlers/add", Some(json!({"title": "milk"})), 200);
    c.ok("POST", "/api/chat/messages", Some(json!({"text": "@Notes delete note 1"})), 202);
    let waiting = chat.until("chat", |s| !s["interactions"].as_array().unwrap().is_empty());
    let call = waiting["interactions"][0]["call_id"].as_str().unwrap().to_string();
    assert_eq!(waiting["interactions"][0]["tool"], "Notes.delete");
    assert_eq!(c.ok("GET", "/api/interactions", None, 200), waiting["interactions"]);
    // Meanwhile the chat takes no message, and says how to end the wait over this API.
    let busy = c.call("POST", "/api/chat/messages", Some(json!({"text": "hello"})));
    assert_eq!(busy.status, 409, "{}", busy.body);
    let why = busy.json()["error"].as_str().unwrap().to_string();
    assert!(why.contains("waiting for your answer") && why.contains("POST /api/chat/cancel"), "{why}");
    let number = c.call("POST", &format!("/api/interactions/{call}/resolve"), Some(json!({"answer": 5})));
    assert_eq!(number.status, 422, "an answer is text: {}", number.body);
    for shape in [json!({}), json!([]), json!({"deny": "x", "answer": "y"})] {
        let wrong = c.call("POST", &format!("/api/interactions/{call}/resolve"), Some(shape));
        assert_eq!(wrong.status, 422, "valid JSON of the wrong shape: {}", wrong.body);
        assert!(wrong.json()["error"].as_str().unwrap().contains("does not fit"), "{}", wrong.body);
    }
    // An answer to an approval approves nothing: refused, and the call still waits.
    let answered = c.call("POST", &format!("/api/interactions/{call}/resolve"), Some(json!({"answer": "yes"})));
    assert_eq!(answered.status, 422, "{}", answered.body);
    c.ok("POST", &format!("/api/interactions/{call}/resolve"), Some(json!("approve")), 202);
    chat.until("chat", |s| s["interactions"].as_array().unwrap().is_empty() && !s["pending"].as_bool().unwrap());
    let again = c.call("POST", &format!("/api/interactions/{call}/resolve"), Some(json!("approve")));
    assert_eq!(again.status, 409, "{}", again.body);
    assert_eq!(c.ok("GET", "/api/charms/Notes", None, 200)["data"]["notes"], json!([]));
}

/// Every operation of the OpenAPI document, with its path parameters filled in.
fn operations(served: &Served) -> Vec<(String, String)> {
    let doc = served.request("GET", "/openapi.json", &[], None).json();
    let mut all = Vec::new();
    for (path, methods) in doc["paths"].as_object().unwrap() {
        let path = path.replace("{charm}", "Counter").replace("{handler}", "increment").replace("{call}", "x");
        let path = path.replace("{name}", "Counter").replace("{id}", "x").replace("{doc}", "x").replace("{tool}", "x");
        for method in methods.as_object().unwrap().keys() {
            all.push((method.to_uppercase(), path.clone()));
        }
    }
    assert!(all.len() >= 20, "{all:?}");
    all
}

#[test]
fn without_a_token_or_from_another_origin_every_route_is_refused() {
    let s = common::space();
    let c = client(&s.path, &[]);
    for (method, path) in operations(&c.served) {
        let bare = c.served.request(&method, &path, &[], Some("{}"));
        assert_eq!(bare.status, 401, "{method} {path} without a token: {}", bare.body);
        assert!(bare.json()["error"].as_str().unwrap().contains("trellis token new"), "{}", bare.body);
        let wrong = c.served.request(&method, &path, &["Authorization: Bearer trellis_0000"], Some("{}"));
        assert_eq!(wrong.status, 401, "{method} {path} with a wrong token");
        let evil = c.served.request(&method, &path, &[&c.auth, "Origin: http://evil.example"], Some("{}"));
        assert_eq!(evil.status, 403, "{method} {path} from another origin: {}", evil.body);
    }
    // DNS rebinding: a page at another name that resolves here.
    let rebound = c.served.request("GET", "/api/charms", &[&c.auth, "Host: evil.example"], None);
    assert_eq!(rebound.status, 403);
    let page = c.served.request("GET", "/", &["Host: evil.example"], None);
    assert_eq!(page.status, 403, "the page too");
    let cross = c.served.request("GET", "/api/charms", &[&c.auth, "Sec-Fetch-Site: cross-site"], None);
    assert_eq!(cross.status, 403);
    let own = format!("Origin: {}", c.served.base());
    assert_eq!(c.served.request("GET", "/api/charms", &[&c.auth, &own], None).status, 200, "the page's own origin");
    // Host names are compared as names: in any case.
    let port = c.served.authority.rsplit_once(':').unwrap().1;
    let (host, origin) = (format!("Host: LocalHost:{port}"), format!("Origin: http://localhost:{port}"));
    assert_eq!(c.served.request("GET", "/api/charms", &[&c.auth, &host, &origin], None).status, 200);
}

#[test]
fn the_sign_in_link_works_once_and_gives_a_strict_http_only_cookie() {
    let s = common::space();
    let served = Served::start(&s.path, &[], &[]);
    let path = served.sign_in.trim_start_matches(&served.base()).to_string();
    let first = served.request("GET", &path, &[], None);
    assert_eq!(first.status, 303, "{}", first.body);
    assert_eq!(first.header("location"), Some("/"));
    let cookie = first.header("set-cookie").unwrap().to_string();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    let session = cookie.split(';').next().unwrap();
    let listed = served.request("GET", "/api/charms", &[&format!("Cookie: {session}")], None);
    assert_eq!(listed.status, 200, "{}", listed.body);
    let second = served.request("GET", &path, &[], None);
    assert_eq!(second.status, 401, "the link works once");
    assert!(second.header("set-cookie").is_none());
    let forged = served.request("GET", "/api/charms", &["Cookie: trellis_session=00"], None);
    assert_eq!(forged.status, 401);
    let page = served.request("GET", "/", &[], None);
    assert_eq!(page.status, 200);
    let policy = page.header("content-security-policy").unwrap();
    // WebAssembly may be compiled (plugins), JavaScript may not be evaluated.
    assert!(policy.contains("script-src 'self' 'wasm-unsafe-eval';") && policy.contains("worker-src 'self'"));
    assert!(!policy.contains("'unsafe-eval'") && !policy.contains("unsafe-inline"), "{policy}");
    let worker = served.request("GET", "/plugin-worker.js", &[], None);
    assert_eq!(worker.status, 200);
    assert_eq!(worker.header("content-type"), Some("text/javascript; charset=utf-8"));
}

#[test]
fn limits_are_answered_with_413_422_and_429() {
    let s = common::space();
    let c = client(&s.path, &["--rate-limit", "12"]);
    let start = std::time::Instant::now();
    let big = json!({"model": "x".repeat(70_000)});
    let too_large = c.call("PUT", "/api/chat/model", Some(big));
    assert_eq!(too_large.status, 413, "{}", too_large.body);
    assert!(too_large.json()["error"].as_str().unwrap().contains("65536"), "{}", too_large.body);
    let long = c.call("POST", "/api/chat/messages", Some(json!({"text": "y".repeat(16_001)})));
    assert_eq!(long.status, 422, "{}", long.body);
    assert!(long.json()["error"].as_str().unwrap().contains("16000"), "{}", long.body);
    let not_json = c.served.request("POST", "/api/chat/messages", &[&c.auth], Some("{nope"));
    assert_eq!(not_json.status, 400, "{}", not_json.body);
    let wrong_shape = c.call("POST", "/api/chat/messages", Some(json!({"words": 1})));
    assert_eq!(wrong_shape.status, 422, "{}", wrong_shape.body);
    // Four requests so far; the rest of the minute's twelve pass, then one is refused. The
    // allowance refills by one every 5 s, so on a slow machine one more may pass per 5 s.
    let mut passed = 0;
    let refused = loop {
        let answer = c.call("GET", "/api/patterns", None);
        if answer.status != 200 {
            break answer;
        }
        passed += 1;
        let refilled = start.elapsed().as_secs() / 5 + 1;
        assert!(passed <= 8 + refilled, "{passed} passed within {:?}: more than the minute's 12", start.elapsed());
    };
    assert!(passed >= 8, "only {passed} of the minute's 12 passed: {}", refused.body);
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(refused.json()["error"].as_str().unwrap().contains("--rate-limit"), "{}", refused.body);
    assert!(refused.header("retry-after").unwrap().parse::<u64>().unwrap() >= 1);
}

/// Every write (POST, PUT, PATCH) must say it is JSON: a form post with the session
/// cookie and no `Origin`, text, or no type at all is refused with 415 and changes nothing;
/// JSON, with parameters or in any case, is taken.
#[test]
fn writes_that_are_not_json_are_refused_with_415() {
    let s = common::space();
    let served = Served::start(&s.path, &[], &[]);
    let sign_in = served.request("GET", served.sign_in.trim_start_matches(&served.base()), &[], None);
    let cookie = format!("Cookie: {}", sign_in.header("set-cookie").unwrap().split(';').next().unwrap());
    let form = "Content-Type: application/x-www-form-urlencoded";
    let refused = [
        served.request("POST", "/api/chat/messages", &[&cookie, form], Some("text=hello")),
        served.request("POST", "/api/chat/messages", &[&cookie, "Content-Type: text/plain"], Some(r#"{"text":"hi"}"#)),
        served.request("PUT", "/api/chat/model", &[&cookie, form], Some("model=offline")),
        served.request("PATCH", "/api/charms/Counter", &[&cookie, "Content-Type: text/plain"], Some(r#"{"name":"X"}"#)),
        served.raw(&format!(
            "POST /api/chat/cancel HTTP/1.1\r\nHost: {}\r\n{cookie}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            served.authority
        )),
    ];
    for response in refused {
        assert_eq!(response.status, 415, "{}", response.body);
        let why = response.json()["error"].as_str().unwrap().to_string();
        assert!(why.contains("Content-Type: application/json"), "{why}");
    }
    let chat = served.request("GET", "/api/chat", &[&cookie], None).json();
    assert_eq!(chat["messages"], json!([]), "nothing was sent");
    assert_eq!(served.request("GET", "/api/charms/Counter", &[&cookie], None).status, 200, "nor renamed");
    let json = "Content-Type: Application/JSON; charset=utf-8";
    let sent = served.request("POST", "/api/chat/messages", &[&cookie, json], Some(r#"{"text":"hi"}"#));
    assert_eq!(sent.status, 202, "{}", sent.body);
    // Reading needs no type; DELETE is always preflighted by browsers, and needs none either.
    let unattached = served.raw(&format!(
        "DELETE /api/chat/attachments/Nobody HTTP/1.1\r\nHost: {}\r\n{cookie}\r\nConnection: close\r\n\r\n",
        served.authority
    ));
    assert_eq!(unattached.status, 404, "{}", unattached.body);
}

/// A client that connects and stalls, or sends its headers and stops halfway, is cut off
/// after `--header-timeout`; meanwhile, and after, everyone else is answered.
#[test]
fn a_stalled_client_is_cut_off_and_others_are_served() {
    use std::io::{Read, Write};
    let s = common::space();
    let c = client(&s.path, &["--header-timeout", "1"]);
    let stalled = |first_bytes: &[u8]| {
        let mut stream = std::net::TcpStream::connect(&c.served.authority).unwrap();
        stream.write_all(first_bytes).unwrap();
        stream.set_read_timeout(Some(std::time::Duration::from_secs(20))).unwrap();
        stream
    };
    let silent = stalled(b"");
    let halfway = stalled(format!("GET /api/patterns HTTP/1.1\r\nHost: {}\r\n", c.served.authority).as_bytes());
    assert_eq!(c.call("GET", "/api/patterns", None).status, 200, "answered while others stall");
    let started = std::time::Instant::now();
    for mut stream in [silent, halfway] {
        // Closed by the server: the read ends (with whatever it says) instead of waiting
        // out its own 20 s.
        let _ = stream.read_to_end(&mut Vec::new());
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(15), "cut off after about a second");
    assert_eq!(c.call("GET", "/api/patterns", None).status, 200);
    let bad = common::trellis(&s.path).args(["serve", "--header-timeout", "0"]).finish();
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--header-timeout"), "{bad:?}");
}

#[test]
fn binding_beyond_loopback_needs_allow_remote_and_says_why() {
    let s = common::space();
    let out = common::trellis(&s.path).args(["serve", "--addr", "0.0.0.0:0"]).finish();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a loopback address") && err.contains("--allow-remote"), "{err}");
}

#[test]
fn tokens_are_listed_and_revoked_and_the_space_keeps_only_their_hashes() {
    let s = common::space();
    let token = new_token(&s.path);
    let list = common::trellis(&s.path).args(["--json", "token", "list"]).finish();
    let list: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(list[0]["name"], "tests");
    let id = list[0]["id"].as_str().unwrap().to_string();
    assert!(list[0].get("token").is_none() && !list.to_string().contains(&token));
    let file = std::fs::read(&s.path).unwrap();
    assert!(!String::from_utf8_lossy(&file).contains(&token), "the token itself is not in the space");

    let served = Served::start(&s.path, &[], &[]);
    let auth = format!("Authorization: Bearer {token}");
    assert_eq!(served.request("GET", "/api/charms", &[&auth], None).status, 200);
    drop(served);
    let revoked = common::trellis(&s.path).args(["token", "revoke", &id]).finish();
    assert!(revoked.status.success(), "{}", String::from_utf8_lossy(&revoked.stderr));
    let served = Served::start(&s.path, &[], &[]);
    assert_eq!(served.request("GET", "/api/charms", &[&auth], None).status, 401, "a revoked token is refused");
    drop(served);
    let unknown = common::trellis(&s.path).args(["token", "revoke", "nope"]).finish();
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("token list"));
}

#[test]
fn other_commands_on_the_space_talk_to_the_server_that_holds_it() {
    let s = common::space();
    let served = Served::start(&s.path, &[], &[]);
    let run = |args: &[&str]| common::trellis(&s.path).args(args).finish();
    let text = |out: &std::process::Output| String::from_utf8_lossy(&out.stdout).into_owned();

    let sent = run(&["charm", "send", "Counter", "increment", r#"{"amount": 2}"#]);
    assert!(sent.status.success(), "{}", String::from_utf8_lossy(&sent.stderr));
    assert!(text(&sent).contains("count: 0 → 2"), "{}", text(&sent));
    let got = run(&["charm", "get", "Counter"]);
    assert!(text(&got).contains("count: 2") && text(&got).contains("increment: handler(amount)"), "{}", text(&got));
    assert!(run(&["charm", "send", "Notes", "add", r#"{"title": "milk"}"#]).status.success());

    // A turn that waits for approval ends with status 3, as on its own; resolve goes on.
    let chat = run(&["chat", "-m", "@Notes delete note 1"]);
    assert_eq!(chat.status.code(), Some(3), "{}", String::from_utf8_lossy(&chat.stderr));
    assert!(text(&chat).contains("→ Notes.delete {\"id\":1}"), "{}", text(&chat));
    let pending: Value = serde_json::from_slice(&run(&["--json", "pending"]).stdout).unwrap();
    assert_eq!(pending["waiting"][0]["tool"], "Notes.delete");
    let resolved = run(&["resolve", "--approve"]);
    assert!(resolved.status.success(), "{}", String::from_utf8_lossy(&resolved.stderr));
    assert!(text(&resolved).contains("←"), "{}", text(&resolved));

    // Tokens too: made, listed and revoked through the server, refused at once.
    let made: Value = serde_json::from_slice(&run(&["--json", "token", "new", "--name", "beside"]).stdout).unwrap();
    let beside = format!("Authorization: Bearer {}", made["token"].as_str().unwrap());
    assert_eq!(served.request("GET", "/api/charms", &[&beside], None).status, 200);
    let listed: Value = serde_json::from_slice(&run(&["--json", "token", "list"]).stdout).unwrap();
    assert_eq!(listed[0]["name"], "beside");
    assert!(run(&["token", "revoke", made["id"].as_str().unwrap()]).status.success());
    assert_eq!(served.request("GET", "/api/charms", &[&beside], None).status, 401, "revoked while it runs");

    // What needs the space itself says how to get it.
    let demo = run(&["demo"]);
    assert!(!demo.status.success());
    assert!(String::from_utf8_lossy(&demo.stderr).contains("stop the server first"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let handoff = std::fs::metadata(format!("{}.serve", s.path.display())).unwrap();
        assert_eq!(handoff.permissions().mode() & 0o777, 0o600, "the hand-off token is the owner's only");
    }
    // A server that is gone (killed: its hand-off file stays) leaves the space to the command.
    drop(served);
    let listed = run(&["charm", "list"]);
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    let notes = run(&["--json", "charm", "get", "Notes"]);
    assert_eq!(serde_json::from_slice::<Value>(&notes.stdout).unwrap()["notes"], json!([]));
}

#[test]
fn the_page_gets_the_enabled_plugins_and_their_verified_modules_and_their_calls_wait_for_it() {
    let s = common::space();
    let author = example_plugin::Author::new(&s.path);
    let installed = author.install_example(&s.path);
    let scripts = s.path.parent().unwrap().display().to_string();
    let c = client(&s.path, &["--scripts", &scripts]);
    for path in ["/api/plugins", "/api/plugins/text-tools/module"] {
        let refused = c.served.request("GET", path, &[], None);
        assert_eq!(refused.status, 401, "{path} needs a session or a token: {}", refused.body);
        assert!(refused.bytes.len() < 1000 && refused.json()["error"].is_string(), "no module without auth");
    }

    let listed = c.ok("GET", "/api/plugins", None, 200);
    let plugin = &listed[0];
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(plugin["name"], "text-tools");
    assert_eq!(plugin["signed_by"], json!(author.public_key));
    assert_eq!(plugin["granted"], json!(["clock"]));
    assert_eq!(plugin["memory_mib"], 2, "the manifest's own cap");
    let exports: Vec<(&str, &str)> = plugin["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["export"].as_str().unwrap()))
        .collect();
    assert_eq!(exports, [("count_words", "count_words"), ("unix_time", "now")]);
    assert_eq!(plugin["tools"][0]["parameters"]["required"], json!(["text"]));

    let module = c.call("GET", plugin["module"].as_str().unwrap(), None);
    assert_eq!(module.status, 200, "{}", module.body);
    assert_eq!(module.header("content-type"), Some("application/wasm"));
    assert_eq!(module.bytes, installed, "the module as installed");
    let unknown = c.call("GET", "/api/plugins/nope/module", None);
    assert_eq!(unknown.status, 404);
    assert!(unknown.json()["error"].as_str().unwrap().contains("trellis plugin list"), "{}", unknown.body);

    // The server offered the plugin's tools: the model has them, from the plugin; its call
    // waits for the client (the page), which resolves it with the result; the first
    // answer wins.
    let tools = c.ok("GET", "/api/chat", None, 200)["tools"].clone();
    let count_words = tools.as_array().unwrap().iter().find(|t| t["wire"] == "count_words");
    assert_eq!(count_words.map(|t| t["from"].clone()), Some(json!("plugin text-tools")), "{tools}");
    let script = s.path.with_file_name("script.json");
    let turns = json!([
        {"tool_calls": [{"name": "count_words", "arguments": {"text": "one two three"}}]},
        {"text": "Three words."}
    ]);
    std::fs::write(&script, turns.to_string()).unwrap();
    c.ok("PUT", "/api/chat/model", Some(json!({"model": format!("scripted:{}", script.display())})), 204);
    let mut events = c.served.events("/api/chat/events", &[&c.auth]);
    c.ok("POST", "/api/chat/messages", Some(json!({"text": "count the words of: one two three"})), 202);
    let waiting = events.until("chat", |chat| !chat["interactions"].as_array().unwrap().is_empty());
    let call = &waiting["interactions"][0];
    assert_eq!((call["kind"].as_str(), call["wire"].as_str()), (Some("client_execution"), Some("count_words")));
    assert_eq!(call["arguments"], json!({"text": "one two three"}));
    let path = format!("/api/interactions/{}/resolve", call["call_id"].as_str().unwrap());
    c.ok("POST", &path, Some(json!({"output": {"words": 3}})), 202);
    let again = c.call("POST", &path, Some(json!({"output": {"error": "a second tab's result"}})));
    assert_eq!(again.status, 409, "the first answer wins: {}", again.body);
    let done = events.until("chat", |chat| chat["messages"].to_string().contains("Three words."));
    assert!(done["messages"].to_string().contains(r#"{"words":3}"#), "{}", done["messages"]);

    // A disabled plugin is neither listed nor served.
    drop(c);
    common::ok(&s.path, &["plugin", "disable", "text-tools"]);
    let c = client(&s.path, &[]);
    assert_eq!(c.ok("GET", "/api/plugins", None, 200), json!([]));
    assert_eq!(c.call("GET", "/api/plugins/text-tools/module", None).status, 404);
}
