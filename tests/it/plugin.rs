//! `trellis plugin ...` through the binary: keygen, sign, trust, install (signed, unsigned,
//! tampered, without a grant), list, call, enable, disable, remove; and the plugins it
//! installed loaded from the space through the library, as the chat will.

use crate::bundles;
use crate::common;

use common::Finish;
use std::path::Path;

use serde_json::{json, Value};
use trellis_plugins::store::PluginStore;
use trellis_plugins::PluginManager;

use common::{fails, json_of, ok, run as trellis};

/// A temporary directory with the example bundle (unsigned) at `bundle/` and an author's
/// key pair at `author.key` / `author.key.pub`.
struct Workshop {
    dir: tempfile::TempDir,
    public_key: String,
}

impl Workshop {
    fn new(space: &Path) -> Workshop {
        let dir = tempfile::tempdir().unwrap();
        bundles::build_example(&dir.path().join("bundle"));
        let key = dir.path().join("author.key");
        let made = json_of(space, &["plugin", "keygen", key.to_str().unwrap()]);
        let public_key = made["public_key"].as_str().unwrap().to_string();
        Workshop { dir, public_key }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_string()
    }

    fn sign(&self, space: &Path) {
        ok(space, &["plugin", "sign", &self.path("bundle"), "--key", &self.path("author.key")]);
    }
}

#[test]
fn sign_trust_install_list_and_call_through_the_binary() {
    let space = common::space();
    let shop = Workshop::new(&space.path);
    assert!(!space.path.exists(), "keygen touches no space");
    let again = fails(&space.path, &["plugin", "keygen", &shop.path("author.key")]);
    assert!(again.contains("cannot write the key file"), "a key is never overwritten: {again}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(shop.path("author.key")).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "the secret key is readable by its owner only");
    }
    shop.sign(&space.path);
    let bundle = shop.path("bundle");

    let untrusted = fails(&space.path, &["plugin", "install", &bundle, "--grant", "clock"]);
    assert!(untrusted.contains(&format!("signed by {}, which is not among your trusted keys", shop.public_key)));
    assert!(untrusted.contains("trellis plugin trust"), "{untrusted}");
    ok(&space.path, &["plugin", "trust", &shop.path("author.key.pub"), "--label", "the author"]);

    let not_granted = fails(&space.path, &["plugin", "install", &bundle]);
    assert!(
        not_granted.contains("asks for the permission `clock`, which you did not grant (install it with --grant clock"),
        "{not_granted}"
    );
    let bad_grant = fails(&space.path, &["plugin", "install", &bundle, "--grant", "network"]);
    assert!(bad_grant.contains("unknown permission \"network\""), "{bad_grant}");

    let installed = ok(&space.path, &["plugin", "install", &bundle, "--grant", "clock"]);
    assert!(installed.contains("installed text-tools 1.0.0  enabled  signed by"), "{installed}");
    // The same bundle again only records the decision again; another one of that name is refused.
    ok(&space.path, &["plugin", "install", &bundle, "--grant", "clock"]);

    let listed = json_of(&space.path, &["plugin", "list"]);
    let plugin = &listed["plugins"][0];
    assert_eq!(plugin["name"], "text-tools");
    assert_eq!(plugin["signed_by"], json!(shop.public_key));
    assert_eq!(plugin["tools"], json!(["count_words", "unix_time"]));
    assert_eq!(plugin["granted"], json!(["clock"]));
    assert_eq!(listed["trusted_keys"], json!([shop.public_key]));

    let counted = json_of(&space.path, &["plugin", "call", "count_words", r#"{"text": "one two  three"}"#]);
    assert_eq!(counted, json!({"words": 3}));
    let (invalid, why) = failed_call(&space.path, &["count_words", r#"{"text": 3}"#]);
    assert!(invalid["error"].as_str().unwrap().contains("invalid arguments"), "{invalid}");
    assert!(why.contains("error: the call failed: ") && why.contains("invalid arguments"), "{why}");

    ok(&space.path, &["plugin", "disable", "text-tools"]);
    assert!(ok(&space.path, &["plugin", "list"]).contains("text-tools 1.0.0  disabled"));
    let disabled = fails(&space.path, &["plugin", "call", "count_words", r#"{"text": "a"}"#]);
    assert!(disabled.contains("no enabled plugin has a tool \"count_words\""), "{disabled}");
    ok(&space.path, &["plugin", "enable", "text-tools"]);

    // What the chat will do: load the space's enabled plugins into a manager.
    {
        let rt = trellis_runner::Runtime::open(&space.path).unwrap();
        let manager = PluginManager::new();
        let store = PluginStore::new(&rt, common::trust_file(&space.path));
        let failed = store.load(&manager, &["count_words_server".to_string()]).unwrap();
        assert!(failed.is_empty(), "{failed:?}");
        let names: Vec<String> = manager.client_tools().into_iter().map(|t| t.name).collect();
        assert_eq!(names, ["count_words", "unix_time"]);
        let async_rt = tokio::runtime::Runtime::new().unwrap();
        assert_eq!(async_rt.block_on(manager.execute("count_words", json!({"text": "x y"}))), json!({"words": 2}));
        // A server tool of the same name keeps a plugin from loading beside it.
        let clashing = store.load(&PluginManager::new(), &["unix_time".to_string()]).unwrap();
        assert_eq!(clashing.len(), 1);
        assert!(clashing[0].1.to_string().contains("has the name of a server tool"), "{}", clashing[0].1);
    }

    ok(&space.path, &["plugin", "untrust", &shop.public_key]);
    let out = trellis(&space.path, &["plugin", "call", "count_words", r#"{"text": "a"}"#]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: plugin text-tools was not loaded") && stderr.contains("not among your trusted keys")
    );
    assert!(!out.status.success(), "no tool once its signer is no longer trusted");

    ok(&space.path, &["plugin", "remove", "text-tools"]);
    assert!(ok(&space.path, &["plugin", "list"]).contains("no plugins installed"));
    let gone = fails(&space.path, &["plugin", "remove", "text-tools"]);
    assert!(gone.contains("no plugin named \"text-tools\" is installed"), "{gone}");
}

#[test]
fn an_unsigned_bundle_is_refused_unless_allowed_and_then_listed_as_unsigned() {
    let space = common::space();
    let shop = Workshop::new(&space.path);
    let bundle = shop.path("bundle");
    let refused = fails(&space.path, &["plugin", "install", &bundle, "--grant", "clock"]);
    assert!(refused.contains("the bundle is not signed; install it with --allow-unsigned"), "{refused}");
    assert!(json_of(&space.path, &["plugin", "list"])["plugins"].as_array().unwrap().is_empty());

    let installed = ok(&space.path, &["plugin", "install", &bundle, "--grant", "clock", "--allow-unsigned"]);
    assert!(installed.contains("UNSIGNED (installed with --allow-unsigned)"), "{installed}");
    assert!(ok(&space.path, &["plugin", "list"]).contains("text-tools 1.0.0  enabled  UNSIGNED"));
    assert_eq!(json_of(&space.path, &["plugin", "list"])["plugins"][0]["signed_by"], Value::Null);
    let counted = json_of(&space.path, &["plugin", "call", "count_words", r#"{"text": "unsigned but allowed"}"#]);
    assert_eq!(counted, json!({"words": 3}));
}

#[test]
fn a_bundle_changed_after_signing_is_refused() {
    let space = common::space();
    let shop = Workshop::new(&space.path);
    shop.sign(&space.path);
    ok(&space.path, &["plugin", "trust", &shop.public_key]);
    let bundle = shop.path("bundle");
    let manifest_path = shop.dir.path().join("bundle/manifest.json");
    let module_path = shop.dir.path().join("bundle/plugin.wasm");
    let (manifest, module) = (std::fs::read(&manifest_path).unwrap(), std::fs::read(&module_path).unwrap());

    // A description changed: even --allow-unsigned does not let a broken signature through.
    let changed = String::from_utf8(manifest.clone()).unwrap().replace("Counts the words", "Steals the words");
    std::fs::write(&manifest_path, changed).unwrap();
    for extra in [&[][..], &["--allow-unsigned"][..]] {
        let mut args = vec!["plugin", "install", bundle.as_str(), "--grant", "clock"];
        args.extend_from_slice(extra);
        let refused = fails(&space.path, &args);
        assert!(refused.contains("does not match its content: it changed after it was signed"), "{refused}");
    }
    std::fs::write(&manifest_path, &manifest).unwrap();

    // One byte of the module changed (in the error text of a data segment).
    let mut tampered = module.clone();
    let at = tampered.windows(8).position(|w| w == b"expected").unwrap();
    tampered[at] = b'X';
    std::fs::write(&module_path, &tampered).unwrap();
    let refused = fails(&space.path, &["plugin", "install", &bundle, "--grant", "clock"]);
    assert!(refused.contains("it changed after it was signed"), "{refused}");
    std::fs::write(&module_path, &module).unwrap();

    // Restored, it installs; changed in the space afterwards, it no longer loads.
    ok(&space.path, &["plugin", "install", &bundle, "--grant", "clock"]);
    {
        let rt = trellis_runner::Runtime::open(&space.path).unwrap();
        let at =
            trellis_runner::Link::new("plugins", trellis_runner::Path::new(["installed", "text-tools", "manifest"]));
        let forged = String::from_utf8(manifest).unwrap().replace("\"fuel\": 10000000", "\"fuel\": 40000000");
        rt.transact(|tx| tx.write(&at, trellis_runner::Value::from(forged.as_str()))).unwrap();
    }
    let out = trellis(&space.path, &["plugin", "call", "count_words", r#"{"text": "a"}"#]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("was not loaded") && stderr.contains("changed after it was signed"), "{stderr}");
}

#[test]
fn a_tool_name_taken_by_an_installed_plugin_is_refused() {
    let space = common::space();
    let shop = Workshop::new(&space.path);
    ok(&space.path, &["plugin", "install", &shop.path("bundle"), "--grant", "clock", "--allow-unsigned"]);
    let other = shop.dir.path().join("other");
    let manifest = std::fs::read_to_string(shop.dir.path().join("bundle/manifest.json")).unwrap();
    let wat = std::fs::read_to_string(bundles::example_dir().join("plugin.wat")).unwrap();
    bundles::write_bundle(&other, manifest.replace("\"text-tools\"", "\"copycat\"").as_bytes(), &wat);
    let refused =
        fails(&space.path, &["plugin", "install", other.to_str().unwrap(), "--grant", "clock", "--allow-unsigned"]);
    assert!(
        refused.contains("tool `count_words` is already provided by plugin `text-tools` (rule: tool names are unique"),
        "{refused}"
    );
    // Another bundle under an installed plugin's name is refused, never installed over it.
    bundles::write_bundle(&other, manifest.replace("Counts the words", "Counts words").as_bytes(), &wat);
    let refused =
        fails(&space.path, &["plugin", "install", other.to_str().unwrap(), "--grant", "clock", "--allow-unsigned"]);
    assert!(
        refused.contains("a plugin named `text-tools` is already installed; remove the installed one (`trellis plugin remove NAME`) first"),
        "{refused}"
    );
}

/// `trellis --json plugin call ARGS` for a call that fails: the result the model would
/// read, printed all the same, and the command's error (its exit status is 1).
fn failed_call(space: &Path, args: &[&str]) -> (Value, String) {
    let out = trellis(space, &[&["--json", "plugin", "call"], args].concat());
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "a failed call fails the command: {stderr}");
    (serde_json::from_slice(&out.stdout).expect("the result is printed"), stderr)
}

#[test]
fn a_plugin_that_loops_forever_gives_an_error_result_and_the_command_goes_on() {
    let space = common::space();
    let dir = tempfile::tempdir().unwrap();
    let wat =
        bundles::module("", r#"(func (export "run") (param i32 i32) (result i64) (loop $l (br $l)) (i64.const 0))"#);
    bundles::write_bundle(dir.path(), &bundles::manifest("spinner", &[], json!({"fuel": 2_000_000})), &wat);
    ok(&space.path, &["plugin", "install", dir.path().to_str().unwrap(), "--allow-unsigned"]);
    let (result, _) = failed_call(&space.path, &["run"]);
    assert_eq!(
        result,
        json!({"error": "`run` failed: the plugin used up its budget of 2000000 fuel units and was stopped (does it loop forever?)"})
    );
}

#[test]
fn bad_plugin_commands_are_refused_clearly() {
    let space = common::space();
    let missing = tempfile::tempdir().unwrap();
    let nowhere = missing.path().join("nowhere");
    let nowhere = nowhere.to_str().unwrap();
    let cases: [(&[&str], &str); 7] = [
        (&["plugin", "trust", "abc"], "\"abc\" is not an ed25519 key (64 hex digits)"),
        (&["plugin", "sign", nowhere, "--key", nowhere], "cannot read manifest.json of the bundle"),
        (&["plugin", "install", nowhere], "cannot read manifest.json of the bundle"),
        (&["plugin", "call", "count_words", "{not json"], "the arguments are not JSON"),
        (&["plugin", "enable", "ghost"], "no plugin named \"ghost\" is installed"),
        (&["plugin", "untrust", &"a".repeat(64)], "was not trusted (`trellis plugin list` shows the trusted keys)"),
        (&["plugin", "install", nowhere, "--grant", "env:"], "unknown permission \"env:\""),
    ];
    for (args, expected) in cases {
        let stderr = fails(&space.path, args);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }

    // The two key files `keygen` writes both hold 64 hex digits; each is refused where the
    // other belongs, and the secret is never shown or kept.
    let shop = Workshop::new(&space.path);
    shop.sign(&space.path);
    let (secret, public) = (shop.path("author.key"), shop.path("author.key.pub"));
    let trusted_secret = fails(&space.path, &["plugin", "trust", &secret]);
    assert!(trusted_secret.contains("is a secret key") && trusted_secret.contains("give"), "{trusted_secret}");
    let secret_hex = std::fs::read_to_string(&secret).unwrap();
    assert!(!trusted_secret.contains(secret_hex.trim()), "the secret is not shown: {trusted_secret}");
    assert!(!ok(&space.path, &["plugin", "list"]).contains(secret_hex.trim()), "nor trusted");
    let signed_with_public = fails(&space.path, &["plugin", "sign", &shop.path("bundle"), "--key", &public]);
    assert!(signed_with_public.contains("is a public key file; sign with the secret key"), "{signed_with_public}");

    // Only small regular files are key files: a directory, a pipe or a device is named as
    // none (reading a pipe would wait for ever, `/dev/zero` would fill the memory).
    let pipe = shop.dir.path().join("pipe");
    assert!(std::process::Command::new("mkfifo").arg(&pipe).status().unwrap().success());
    let zero = shop.dir.path().join("zero");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let large = shop.dir.path().join("large");
    std::fs::write(&large, "a".repeat(64) + &" ".repeat(5000)).unwrap();
    for file in [&pipe, &zero, &large, &shop.dir.path().to_path_buf()] {
        let file = file.to_str().unwrap();
        for args in [vec!["plugin", "trust", file], vec!["plugin", "sign", &shop.path("bundle"), "--key", file]] {
            let refused = fails(&space.path, &args);
            assert!(refused.contains(&format!("{file} is not a key file")), "{args:?}: {refused}");
        }
    }

    // Signing replaces `signature.json`, never writes through it: a bundle from someone
    // else may hold one that is a symbolic link to a file of yours.
    let victim = shop.dir.path().join("victim.txt");
    let signature = Path::new(&shop.path("bundle")).join("signature.json");
    std::fs::remove_file(&signature).unwrap();
    std::os::unix::fs::symlink(&victim, &signature).unwrap();
    ok(&space.path, &["plugin", "sign", &shop.path("bundle"), "--key", &secret]);
    assert!(!victim.exists(), "nothing was written where the link pointed");
    assert!(!signature.is_symlink() && std::fs::read_to_string(&signature).unwrap().contains("public_key"));
}

#[test]
fn a_plugin_tool_the_model_calls_in_chat_runs_here_and_the_conversation_goes_on() {
    let space = common::space();
    let shop = Workshop::new(&space.path);
    shop.sign(&space.path);
    ok(&space.path, &["plugin", "trust", &shop.path("author.key.pub")]);
    ok(&space.path, &["plugin", "install", &shop.path("bundle"), "--grant", "clock"]);
    let script = shop.dir.path().join("script.json");
    let turns = json!([
        {"tool_calls": [{"name": "count_words", "arguments": {"text": "one two three four"}}]},
        {"text": "That text has four words."}
    ]);
    std::fs::write(&script, turns.to_string()).unwrap();
    let model = format!("scripted:{}", script.display());

    let chat = ok(&space.path, &["chat", "--model", &model, "-m", "count the words of: one two three four"]);
    // The result only exists if the plugin ran: the server never executes a client tool.
    assert!(chat.contains(r#"{"words":4}"#), "the plugin's result reaches the model: {chat}");
    assert!(chat.contains("That text has four words."), "the conversation goes on: {chat}");
    assert!(ok(&space.path, &["pending"]).contains("nothing is waiting"));

    let offered = json_of(&space.path, &["charm", "get", "Chat"]);
    let tools: Vec<&str> =
        offered["flattened_tools"].as_array().unwrap().iter().filter_map(|t| t["wire"].as_str()).collect();
    assert!(tools.contains(&"count_words") && tools.contains(&"unix_time"), "offered beside the others: {tools:?}");
    // Every chat loads it again, beside the client tools the last one offered (its own).
    for _ in 0..2 {
        let again = trellis(&space.path, &["chat", "--model", "offline", "-m", "hello"]);
        let warned = String::from_utf8_lossy(&again.stderr);
        assert!(again.status.success() && !warned.contains("not loaded"), "{warned}");
        let offered = json_of(&space.path, &["charm", "get", "Chat"]);
        assert!(offered["flattened_tools"].to_string().contains("count_words"), "offered again: {offered}");
    }
    ok(&space.path, &["plugin", "disable", "text-tools"]);
    ok(&space.path, &["chat", "--model", "offline", "-m", "hello"]);
    let offered = json_of(&space.path, &["charm", "get", "Chat"]);
    let tools = offered["flattened_tools"].to_string();
    assert!(!tools.contains("count_words"), "a disabled plugin's tools are withdrawn: {tools}");
}

#[test]
fn a_plugin_that_came_with_a_space_does_not_run_until_the_user_installs_it() {
    let space = common::space();
    let shop = Workshop::new(&space.path);
    let bundle = shop.path("bundle");
    // Whoever made the space installed it unsigned, with a permission.
    ok(&space.path, &["plugin", "install", &bundle, "--grant", "clock", "--allow-unsigned"]);
    // Another user (their own configuration) opens the same space.
    let elsewhere = tempfile::tempdir().unwrap();
    let as_other =
        |args: &[&str]| common::trellis(&space.path).env("XDG_CONFIG_HOME", elsewhere.path()).args(args).finish();
    let listed = String::from_utf8(as_other(&["plugin", "list"]).stdout).unwrap();
    assert!(listed.contains("UNSIGNED, came with the space (does not load until you install it)"), "{listed}");
    let call = as_other(&["plugin", "call", "count_words", r#"{"text": "a"}"#]);
    let stderr = String::from_utf8_lossy(&call.stderr);
    assert!(!call.status.success(), "{stderr}");
    assert!(stderr.contains("is unsigned and you did not install it (it came with the space)"), "{stderr}");
    // Nor does the chat offer it.
    let chat = as_other(&["chat", "--model", "offline", "-m", "hello"]);
    assert!(String::from_utf8_lossy(&chat.stderr).contains("plugin text-tools is not loaded"));
    // Installing the bundle themselves is how they accept it.
    assert!(as_other(&["plugin", "install", &bundle, "--grant", "clock", "--allow-unsigned"]).status.success());
    let counted = as_other(&["--json", "plugin", "call", "count_words", r#"{"text": "a b"}"#]);
    assert_eq!(serde_json::from_slice::<Value>(&counted.stdout).unwrap(), json!({"words": 2}));
    // The decision lives in each user's own file, not in the space.
    let mine = std::fs::read_to_string(common::trust_file(&space.path).path()).unwrap();
    assert!(mine.contains("\"unsigned\": true"), "{mine}");
    assert!(elsewhere.path().join("trellis/plugins.json").is_file());
}

#[test]
fn trusting_a_key_touches_the_users_trust_file_not_the_space() {
    let space = common::space();
    let shop = Workshop::new(&space.path);
    ok(&space.path, &["plugin", "trust", &shop.path("author.key.pub")]);
    assert!(!space.path.exists(), "no space was opened");
    let trust = std::fs::read_to_string(common::trust_file(&space.path).path()).unwrap();
    assert!(trust.contains(&shop.public_key), "{trust}");
    ok(&space.path, &["plugin", "untrust", &shop.public_key]);
    assert!(!space.path.exists());
}
