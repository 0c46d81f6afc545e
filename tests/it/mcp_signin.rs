//! Signing in to an MCP server that wants OAuth 2.1 (`trellis mcp login`, `logout`), with
//! a server nobody here wrote: the Python SDK's authorization and resource server over
//! loopback HTTPS (`tests/mcp/oauth_server.py`, a throwaway CA). The login is scripted as
//! a browser would go: the printed URL is opened, the authorization server approves and
//! redirects to the loopback address `trellis mcp login` listens on. The token goes to
//! the server's calls, is refreshed once it expires, and shows in no output, log, list
//! or space.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common;
use crate::mcp_remote::{space_holds, throwaway_ca, PythonHttps};
use common::Finish;

/// How long the test server's access tokens last, in seconds.
const LIFETIME: u64 = 3;

fn browser(ca: &Path) -> reqwest::blocking::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(ca).unwrap()).unwrap();
    let builder = reqwest::blocking::Client::builder().add_root_certificate(ca);
    builder.redirect(reqwest::redirect::Policy::none()).no_proxy().build().unwrap()
}

/// Where the authorization server sends the browser that opened `url` (it approves at
/// once): the loopback redirect, with a code.
fn approved(url: &str, ca: &Path) -> String {
    let approved = browser(ca).get(url).send().unwrap();
    assert!(approved.status().is_redirection(), "{:?}", approved.status());
    let back = approved.headers()["location"].to_str().unwrap().to_string();
    assert!(back.starts_with("http://127.0.0.1:") && back.contains("code="), "{back}");
    back
}

/// Opens `url` as a browser would: the authorization server's redirect, then the loopback
/// address it redirects to.
fn browse(url: &str, ca: &Path) {
    let back = approved(url, ca);
    let page = browser(ca).get(&back).send().unwrap().text().unwrap();
    assert!(page.contains("close this tab"), "{page}");
}

/// `trellis mcp login py`, with the browser scripted; its standard output.
fn login(space: &Path, config: &str, ca: &Path) -> String {
    let mut child = common::trellis(space)
        .args(["mcp", "login", "py", "--mcp-config", config, "--timeout", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    let mut lines = stderr.lines().map_while(Result::ok);
    let url = lines
        .by_ref()
        .inspect(|line| said.push_str(&format!("{line}\n")))
        .find(|line| line.starts_with("https://"))
        .unwrap_or_else(|| panic!("no URL to open: {said}"));
    assert!(url.contains("code_challenge_method=S256") && url.contains("resource="), "PKCE, RFC 8707: {url}");
    browse(&url, ca);
    std::thread::spawn(move || lines.for_each(drop));
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    text
}

fn listed(space: &Path, config: &str) -> (Value, std::process::Output) {
    let out = common::trellis(space).args(["--json", "mcp", "list", "--mcp-config", config]).finish();
    (serde_json::from_slice(&out.stdout).unwrap(), out)
}

#[test]
fn a_server_behind_oauth_is_signed_in_to_its_token_refreshed_and_never_shown() {
    let s = common::space();
    let dir = s.path.parent().unwrap();
    let (ca, cert, key) = throwaway_ca(dir);
    let server = PythonHttps::script("oauth_server.py", &cert, &key, &[&LIFETIME.to_string()]);
    let config = dir.join("mcp.json");
    let entry = json!({"mcpServers": {"py": {"url": server.url, "ca": ca, "trusted": true}}});
    std::fs::write(&config, entry.to_string()).unwrap();
    let config = config.display().to_string();

    // Not signed in: the server's 401 says so, and how to sign in.
    let (before, out) = listed(&s.path, &config);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(before[0]["sign_in"], "none", "{before}");
    assert!(before[0]["state"].as_str().unwrap().contains("run `trellis mcp login py`"), "{before}");

    assert!(login(&s.path, &config, &ca).starts_with("py: signed in"));
    let file = dir.join("config/trellis/mcp-sign-ins.json");
    let kept = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    #[cfg(unix)]
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions()) & 0o777,
        0o600
    );
    let tokens: Vec<String> = ["access-", "refresh-"]
        .iter()
        .filter_map(|prefix| kept.split('"').find(|piece| piece.starts_with(prefix)).map(str::to_string))
        .collect();
    assert_eq!(tokens.len(), 2, "an access and a refresh token kept: {}", kept.len());
    let (after, _) = listed(&s.path, &config);
    assert_eq!(after[0]["sign_in"]["signed_in"]["refreshable"], true, "{after}");

    let turns = json!([{"tool_calls": [{"name": "py.whoami", "arguments": {}}]}, {"text": "First."},
                       {"tool_calls": [{"name": "py.whoami", "arguments": {}}]}, {"text": "Second."}]);
    let script = dir.join("whoami.json");
    std::fs::write(&script, turns.to_string()).unwrap();
    let model = format!("scripted:{}", script.display());
    let chat = |message: &str| {
        common::trellis(&s.path)
            .args(["chat", "--model", &model, "--mcp-config", &config, "-m", message])
            .env("TRELLIS_LOG", "debug")
            .finish()
    };
    let first = chat("who am I?");
    let said = String::from_utf8_lossy(&first.stdout);
    assert!(first.status.success(), "{said}{}", String::from_utf8_lossy(&first.stderr));
    assert!(said.contains("← {\"result\":\"token 1; refused 0\"}"), "{said}");

    // Once the token expired, the next call refreshes it first: a new token, none refused.
    std::thread::sleep(Duration::from_secs(LIFETIME + 1));
    let second = chat("and now?");
    let said = String::from_utf8_lossy(&second.stdout);
    assert!(second.status.success(), "{said}{}", String::from_utf8_lossy(&second.stderr));
    assert!(said.contains("← {\"result\":\"token 2; refused 0\"}"), "{said}");

    // Expired again: two processes refresh at once, one after the other (the server
    // refuses a refresh token used twice), and both stay signed in.
    std::thread::sleep(Duration::from_secs(LIFETIME + 1));
    let both: Vec<_> = (0..2)
        .map(|_| {
            common::trellis(&s.path)
                .args(["--json", "mcp", "list", "--mcp-config", &config])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for listing in both {
        let out = listing.wait_with_output().unwrap();
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        assert_eq!(listed[0]["state"], "ready", "{listed} {}", String::from_utf8_lossy(&out.stderr));
    }

    // No token in any output, log, list or the space.
    let (_, list) = listed(&s.path, &config);
    let kept = std::fs::read_to_string(&file).unwrap();
    let now: Vec<&str> = kept.split('"').filter(|p| p.starts_with("access-") || p.starts_with("refresh-")).collect();
    for token in tokens.iter().map(String::as_str).chain(now) {
        for (what, text) in [
            ("the chats' output", [&first.stdout, &second.stdout]),
            ("their logs", [&first.stderr, &second.stderr]),
            ("mcp list", [&list.stdout, &list.stderr]),
        ] {
            assert!(!text.iter().any(|t| String::from_utf8_lossy(t).contains(token)), "a token is in {what}");
        }
        assert!(!space_holds(&s.path, token), "a token is in the space");
    }

    // Signed out: the tokens are forgotten, and the server asks again.
    let out = common::trellis(&s.path).args(["mcp", "logout", "py", "--mcp-config", &config]).finish();
    assert!(String::from_utf8_lossy(&out.stdout).contains("signed out of `py`"), "{out:?}");
    assert!(!std::fs::read_to_string(&file).unwrap().contains("access-"));
    let (gone, _) = listed(&s.path, &config);
    assert_eq!(gone[0]["sign_in"], "none", "{gone}");

    // With the browser on another machine, the address it ended on is pasted instead.
    let mut child = common::trellis(&s.path)
        .args(["mcp", "login", "py", "--mcp-config", &config, "--timeout", "60"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok);
    let url = lines.by_ref().find(|line| line.starts_with("https://")).expect("a URL to open");
    std::thread::spawn(move || lines.for_each(drop));
    let ended_on = approved(&url, &ca);
    writeln!(child.stdin.take().unwrap(), "{ended_on}").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("py: signed in"), "{out:?}");
}

#[test]
fn signing_in_to_a_server_started_as_a_command_or_unknown_is_refused_clearly() {
    let s = common::space();
    let out = common::trellis(&s.path).args(["mcp", "login", "time", "--mcp", "time=python3 -m x"]).finish();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("only servers reached by URL sign in"), "{err}");
    let out = common::trellis(&s.path).args(["mcp", "logout", "nope", "--mcp", "time=python3 -m x"]).finish();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("no MCP server named `nope`") && err.contains("time"), "{err}");
}
