//! `trellis mcp serve --http` facing a network: TLS from a certificate and key (a
//! throwaway CA the test makes with `openssl`), and bearer tokens of the space required.
//! The MCP Python SDK's OAuth client gets in with a Trellis token and is refused without
//! one; a raw client sees the 401's `WWW-Authenticate` pointing at the protected-resource
//! metadata (RFC 9728), which is served without a token.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common;
use crate::common::mcp_tools as tools;
use crate::mcp::HttpServer;

/// A CA, and a certificate it signed for `localhost` and 127.0.0.1, in `dir`:
/// (CA certificate, server certificate, server key), PEM.
pub(crate) fn throwaway_ca(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl runs");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.pem", "-days", "1", "-subj", "/CN=Trellis test CA"],
        ]
        .concat(),
    );
    openssl(&[&["req"][..], &ec, &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"]].concat());
    std::fs::write(dir.join("san.ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n").expect("written");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "1",
        "-extfile",
        "san.ext",
    ]);
    (dir.join("ca.pem"), dir.join("server.pem"), dir.join("server.key"))
}

/// `tests/mcp/SCRIPT ARGS...` on the MCP Python SDK: the one JSON object it printed.
fn sdk(script: &str, args: &[&std::ffi::OsStr], what: &str) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp").join(script);
    let child = Command::new(tools::python())
        .arg(script)
        .args(args)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs");
    let out = common::output_within(child, Duration::from_secs(120), what);
    assert!(out.status.success(), "{what} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// `tests/mcp/oauth_client.py URL CA [TOKEN]`: what it printed.
fn oauth_client(url: &str, ca: &Path, token: Option<&str>) -> Value {
    let mut args = vec![std::ffi::OsStr::new(url), ca.as_os_str()];
    args.extend(token.map(std::ffi::OsStr::new));
    sdk("oauth_client.py", &args, "the SDK's OAuth client")
}

#[test]
fn over_https_only_the_holders_of_a_token_of_the_space_get_in() {
    let s = common::space();
    let dir = s.path.parent().expect("the space's folder");
    let (ca, cert, key) = throwaway_ca(dir);
    let made = common::json_of(&s.path, &["token", "new", "--name", "host"]);
    let token = made["token"].as_str().expect("a token").to_string();
    let (cert, key) = (cert.display().to_string(), key.display().to_string());
    let server = HttpServer::start_with(&s.path, &["--tls-cert", &cert, "--tls-key", &key, "--require-token"]);
    assert!(server.url.starts_with("https://127.0.0.1:"), "{}", server.url);
    assert!(!space_holds(&s.path, &token), "the space keeps only the token's hash");

    let signed_in = oauth_client(&server.url, &ca, Some(&token));
    let names = signed_in["tools"].as_array().cloned().unwrap_or_default();
    assert!(names.iter().any(|n| n == "Counter_increment"), "{signed_in}");
    let refused = oauth_client(&server.url, &ca, None);
    assert!(refused["refused"].is_string() && refused.get("tools").is_none(), "{refused}");

    let trusted = reqwest::Certificate::from_pem(&std::fs::read(&ca).expect("the CA")).expect("a PEM certificate");
    let http = reqwest::blocking::Client::builder().add_root_certificate(trusted).no_proxy().build().expect("a client");
    let origin = server.url.trim_end_matches("/mcp");
    let metadata_url = format!("{origin}/.well-known/oauth-protected-resource/mcp");
    let metadata: Value = http.get(&metadata_url).send().expect("answered").json().expect("JSON");
    assert_eq!(metadata["resource"], server.url.as_str(), "{metadata}");
    assert_eq!(metadata["bearer_methods_supported"][0], "header");
    let initialize = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let post = |bearer: Option<&str>| {
        let mut request = http
            .post(&server.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body(initialize);
        if let Some(bearer) = bearer {
            request = request.bearer_auth(bearer);
        }
        request.send().expect("answered")
    };
    let none = post(None);
    assert_eq!(none.status(), 401);
    let challenge = none.headers()["www-authenticate"].to_str().expect("text").to_string();
    assert_eq!(challenge, format!("Bearer resource_metadata=\"{metadata_url}\""));
    let wrong = post(Some("not-a-token"));
    assert_eq!(wrong.status(), 401);
    assert!(wrong.headers()["www-authenticate"].to_str().is_ok_and(|c| c.contains("error=\"invalid_token\"")));
    assert_eq!(post(Some(&token)).status(), 200);
    // Plain HTTP to a TLS port gets no answer.
    let plain = reqwest::blocking::Client::builder().no_proxy().build().expect("a client");
    assert!(plain.get(server.url.replace("https://", "http://")).send().is_err());
}

#[test]
fn a_server_other_machines_reach_asks_for_tokens_and_bad_tls_files_are_refused() {
    let s = common::space();
    let dir = s.path.parent().expect("the space's folder");
    std::fs::write(dir.join("empty.pem"), "").expect("written");
    let empty = dir.join("empty.pem").display().to_string();
    let out = common::trellis(&s.path)
        .args(["mcp", "serve", "--http", "127.0.0.1:0", "--tls-cert", &empty, "--tls-key", &empty])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds no CERTIFICATE block"), "{out:?}");
    let remote = HttpServer::start_with(&s.path, &["--allow-remote"]);
    let http = reqwest::blocking::Client::builder().no_proxy().build().expect("a client");
    let refused = http.post(&remote.url).body("{}").send().expect("answered");
    assert_eq!(refused.status(), 401, "remote means tokens, without asking for them");
}

/// `tests/mcp/SCRIPT PORT CERT KEY ARGS...`: a Python SDK server over HTTPS on a free
/// loopback port, killed when dropped.
pub(crate) struct PythonHttps {
    _child: common::Reaped,
    pub(crate) url: String,
}

impl PythonHttps {
    /// `http_server.py`.
    fn start(cert: &Path, key: &Path) -> PythonHttps {
        PythonHttps::script("http_server.py", cert, key, &[])
    }

    /// `SCRIPT` with `args` after the certificate and key.
    pub(crate) fn script(script: &str, cert: &Path, key: &Path, args: &[&str]) -> PythonHttps {
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp").join(script);
        let mut child = Command::new(tools::python())
            .arg(script)
            .arg(port.to_string())
            .args([cert, key])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python runs");
        let stderr = child.stderr.take().expect("its standard error");
        let mut lines = std::io::BufReader::new(stderr).lines();
        let started = lines.by_ref().map_while(Result::ok).any(|line| line.contains("Uvicorn running on"));
        assert!(started, "the Python SDK's server did not start");
        std::thread::spawn(move || lines.for_each(drop));
        PythonHttps { _child: common::Reaped::new(child), url: format!("https://127.0.0.1:{port}/mcp") }
    }
}

#[test]
fn chat_reaches_an_https_server_trusting_the_ca_it_is_given_and_no_other() {
    use crate::common::provider::{Provider, Reply};
    use common::Finish;
    let s = common::space();
    let dir = s.path.parent().expect("the space's folder");
    let (ca, cert, key) = throwaway_ca(dir);
    let server = PythonHttps::start(&cert, &key);
    let provider = Provider::start(vec![
        Reply::Call("py_add".into(), serde_json::json!({"a": 2, "b": 3})),
        Reply::Text("It is 5.".into()),
    ]);
    let flag = format!("py={}", server.url);
    let ca = ca.display().to_string();
    // Its own CA, in its entry; trusted, so `add` runs without asking; a token from the
    // environment in a header.
    let file = dir.join("mcp.json");
    let headers = serde_json::json!({"Authorization": "Bearer ${PY_TOKEN}"});
    let entry =
        serde_json::json!({"mcpServers": {"py": {"url": server.url, "ca": ca, "trusted": true, "headers": headers}}});
    std::fs::write(&file, entry.to_string()).expect("written");
    let file = file.display().to_string();
    let out = provider
        .trellis(&s.path)
        .args(["chat", "--model", "openai:loopback", "--mcp-config", &file, "-m", "add 2 and 3"])
        .env("PY_TOKEN", SECRET)
        .env("TRELLIS_LOG", "debug")
        .finish();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // The token is in no log, no output, no list and not in the space.
    let listed = common::trellis(&s.path)
        .args(["mcp", "list", "--mcp-config", &file, "--json"])
        .env("PY_TOKEN", SECRET)
        .finish();
    assert!(String::from_utf8_lossy(&listed.stdout).contains("\"add\""), "{listed:?}");
    for (what, text) in [("the chat's output", &out.stdout), ("its log", &out.stderr), ("mcp list", &listed.stdout)] {
        assert!(!String::from_utf8_lossy(text).contains(SECRET), "the token is in {what}");
    }
    assert!(space_holds(&s.path, "Counter") && !space_holds(&s.path, SECRET), "the token is in the space");
    assert!(said.contains("← 5") || said.contains("5"), "{said}");
    let received = provider.received();
    let result = received[1]["messages"].to_string();
    assert!(result.contains("\"role\":\"tool\"") && result.contains('5'), "{result}");

    // Without the CA, the server's certificate is not trusted: no tools from it.
    let listed = common::trellis(&s.path).args(["mcp", "list", "--mcp", &flag, "--json"]).finish();
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(listed.contains("handshake failed") && listed.contains("--mcp-ca"), "{listed}");
    let trusted = common::trellis(&s.path).args(["mcp", "list", "--mcp", &flag, "--mcp-ca", &ca, "--json"]).finish();
    assert!(String::from_utf8_lossy(&trusted.stdout).contains("\"add\""), "{trusted:?}");
}

/// Whether the space's file, or its write-ahead log, holds `text`.
pub(crate) fn space_holds(space: &Path, text: &str) -> bool {
    let wal = PathBuf::from(format!("{}-wal", space.display()));
    [space.to_path_buf(), wal]
        .iter()
        .filter_map(|file| std::fs::read(file).ok())
        .any(|bytes| bytes.windows(text.len()).any(|w| w == text.as_bytes()))
}

/// A token an MCP server's entry sends, which must never show.
const SECRET: &str = "s3cret-py-token-4b1e";

/// `tests/mcp/elicit_client.py` against `trellis mcp serve` on `space`, answering `answer`.
fn elicit_client(space: &Path, answer: &str) -> Value {
    let args = [std::ffi::OsStr::new(env!("CARGO_BIN_EXE_trellis")), space.as_os_str(), std::ffi::OsStr::new(answer)];
    sdk("elicit_client.py", &args, "the SDK's host with elicitation")
}

#[test]
fn a_call_that_needs_approval_asks_the_hosts_person_and_runs_only_when_they_accept() {
    let s = common::space();
    let declined = elicit_client(&s.path, "decline");
    let asked = declined["asked"].as_array().cloned().unwrap_or_default();
    assert_eq!(asked.len(), 1, "{declined}");
    assert!(asked[0].as_str().is_some_and(|m| m.starts_with("Approve Notes.delete {\"id\":1}? ")), "{declined}");
    assert!(
        declined["error"] == true && declined["text"].as_str().is_some_and(|t| t.contains("declined")),
        "{declined}"
    );
    let notes = common::json_of(&s.path, &["charm", "get", "Notes"])["notes"].clone();
    assert_eq!(notes.as_array().map(Vec::len), Some(1), "declining leaves the note: {notes}");

    let accepted = elicit_client(&s.path, "accept");
    assert_eq!(accepted["error"], false, "{accepted}");
    let notes = common::json_of(&s.path, &["charm", "get", "Notes"])["notes"].clone();
    let titles: Vec<&str> = notes.as_array().into_iter().flatten().filter_map(|n| n["title"].as_str()).collect();
    assert_eq!(titles, ["milk"], "the first note went, the second added stays: {notes}");
}
