//! Installable plugins in the sandbox: the example runs; loops, traps, memory exhaustion
//! and ABI breaches end in error results; imports and permissions not granted are refused.

use crate::common;

use std::time::Instant;

use serde_json::{json, Value};
use trellis_plugins::bundle::{Bundle, BundleError};
use trellis_plugins::manifest::Permission;
use trellis_plugins::sandbox::SandboxError;
use trellis_plugins::PluginManager;

fn bundle(manifest: &[u8], wat: &str) -> Bundle {
    let dir = tempfile::tempdir().expect("tempdir");
    common::write_bundle(dir.path(), manifest, wat);
    Bundle::read(dir.path()).expect("readable bundle")
}

/// A manager holding the bundle's plugin, with `granted` permissions.
fn manager_of(bundle: &Bundle, granted: &[Permission]) -> PluginManager {
    let manager = PluginManager::new();
    manager.register(bundle.plugin(granted).expect("loads"), Vec::<String>::new()).expect("registers");
    manager
}

/// A one-tool plugin whose `run` export has `body` (params $ptr $len, result i64).
async fn run(body: &str, limits: Value) -> Value {
    let wat =
        common::module("", &format!(r#"(func (export "run") (param $ptr i32) (param $len i32) (result i64) {body})"#));
    let bundle = bundle(&common::manifest("test", &[], limits), &wat);
    manager_of(&bundle, &[]).execute("run", json!({})).await
}

fn error_of(result: &Value) -> &str {
    result["error"].as_str().unwrap_or_else(|| panic!("expected an error result, got {result}"))
}

#[tokio::test]
async fn the_example_plugin_counts_words_and_tells_the_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    common::build_example(dir.path());
    let bundle = Bundle::read(dir.path()).expect("the example is a bundle");
    let manager = manager_of(&bundle, &[Permission::Clock]);
    let names: Vec<String> = manager.client_tools().into_iter().map(|t| t.name).collect();
    assert_eq!(names, ["count_words", "unix_time"]);

    let count = |text: &str| manager.execute("count_words", json!({"text": text}));
    assert_eq!(count("hello big\nworld").await, json!({"words": 3}));
    assert_eq!(count("").await, json!({"words": 0}));
    assert_eq!(count("  a \"quoted\" text:\t\"with\" escapes  ").await, json!({"words": 5}));
    assert_eq!(count(&"word ".repeat(10_000)).await, json!({"words": 10_000}));
    let missing = manager.execute("count_words", json!({})).await;
    assert!(error_of(&missing).contains("invalid arguments"), "validated before the sandbox: {missing}");

    let before = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_millis();
    let time = manager.execute("unix_time", json!({})).await;
    let unix_ms = time["unix_ms"].as_u64().unwrap_or_else(|| panic!("{time}"));
    assert!(u128::from(unix_ms) >= before && u128::from(unix_ms) < before + 60_000, "{unix_ms} vs {before}");
}

#[tokio::test]
async fn a_plugin_that_loops_forever_is_stopped_by_its_fuel() {
    let started = Instant::now();
    let result = run("(loop $forever (br $forever)) (i64.const 0)", json!({"fuel": 5_000_000})).await;
    assert_eq!(
        error_of(&result),
        "`run` failed: the plugin used up its budget of 5000000 fuel units and was stopped (does it loop forever?)"
    );
    eprintln!("a loop with 5M fuel stopped after {:?}", started.elapsed());
    // With the default budget too (a bound, not a speed target: it must end).
    let result = run("(loop $forever (br $forever)) (i64.const 0)", json!({})).await;
    assert!(error_of(&result).contains("used up its budget of 50000000 fuel units"), "{result}");
}

#[tokio::test]
async fn a_plugin_that_loops_on_trellis_functions_pays_for_them_in_fuel() {
    // Each `random` call fills 64 KiB: free, a budget of a million units would let the
    // module make tens of gigabytes of random bytes (about a minute of work).
    let loops = [
        (
            "random",
            r#"(import "trellis" "random" (func $random (param i32 i32)))"#,
            Permission::Random,
            "(call $random (i32.const 0) (i32.const 65536))",
        ),
        (
            "env:HOME",
            r#"(import "trellis" "env" (func $env (param i32 i32 i32 i32) (result i32)))"#,
            Permission::Env("HOME".into()),
            "(drop (call $env (i32.const 0) (i32.const 200) (i32.const 0) (i32.const 0)))",
        ),
        ("clock", r#"(import "trellis" "now_ms" (func $now (result i64)))"#, Permission::Clock, "(drop (call $now))"),
    ];
    for (permission, import, granted, call) in loops {
        let wat = common::module(
            import,
            &format!(
                r#"(func (export "run") (param i32 i32) (result i64) (loop $again {call} (br $again)) (i64.const 0))"#
            ),
        );
        let bundle = bundle(&common::manifest("looper", &[permission], json!({"fuel": 1_000_000})), &wat);
        let started = Instant::now();
        let result = manager_of(&bundle, &[granted]).execute("run", json!({})).await;
        assert!(error_of(&result).contains("used up its budget of 1000000 fuel units"), "{permission}: {result}");
        // A bound, not a speed target: free calls took about a minute here.
        assert!(started.elapsed() < std::time::Duration::from_secs(20), "{permission}: {:?}", started.elapsed());
    }
    // A name longer than any variable's is refused before it is read.
    let wat = common::module(
        r#"(import "trellis" "env" (func $env (param i32 i32 i32 i32) (result i32)))"#,
        r#"(func (export "run") (param i32 i32) (result i64) (drop (call $env (i32.const 0) (i32.const 65536) (i32.const 0) (i32.const 0))) (i64.const 0))"#,
    );
    let bundle = bundle(&common::manifest("long-name", &["env:HOME"], json!({})), &wat);
    let result = manager_of(&bundle, &[Permission::Env("HOME".into())]).execute("run", json!({})).await;
    assert!(error_of(&result).contains("names of at most 256 bytes"), "{result}");
}

#[tokio::test]
async fn a_plugin_that_traps_gives_an_error_result() {
    let result = run("(unreachable)", json!({})).await;
    let message = error_of(&result);
    assert!(message.starts_with("`run` failed: the plugin failed:") && message.contains("unreachable"), "{message}");
    let result = run("(drop (i32.div_u (i32.const 1) (i32.const 0))) (i64.const 0)", json!({})).await;
    assert!(error_of(&result).contains("divi"), "{result}");
    // Endless recursion exhausts the interpreter's stack, not the host's.
    let wat = common::module(
        "",
        r#"(func $deeper (param i64) (result i64) (call $deeper (i64.add (local.get 0) (i64.const 1))))
           (func (export "run") (param i32 i32) (result i64) (call $deeper (i64.const 0)))"#,
    );
    let bundle = bundle(&common::manifest("deep", &[], json!({})), &wat);
    let result = manager_of(&bundle, &[]).execute("run", json!({})).await;
    assert!(error_of(&result).contains("stack"), "{result}");
}

#[tokio::test]
async fn a_plugin_that_exhausts_its_memory_is_stopped() {
    // Grows one page at a time, forever: the cap (2 MiB) stops it.
    let grow = "(loop $more (br_if $more (i32.ne (memory.grow (i32.const 1)) (i32.const -1)))) (i64.const 0)";
    let result = run(grow, json!({"memory_mib": 2})).await;
    assert_eq!(error_of(&result), "`run` failed: the plugin went past its memory cap of 2 MiB and was stopped");
    // A module that asks for more memory than the cap from the start.
    let wat = r#"(module (memory (export "memory") 100)
        (func (export "alloc") (param i32) (result i32) (i32.const 1024))
        (func (export "run") (param i32 i32) (result i64) (i64.const 0)))"#;
    let bundle = bundle(&common::manifest("big", &[], json!({"memory_mib": 2})), wat);
    let result = manager_of(&bundle, &[]).execute("run", json!({})).await;
    assert!(error_of(&result).contains("memory cap of 2 MiB"), "{result}");
}

#[tokio::test]
async fn a_plugin_that_breaks_the_abi_gives_an_error_result() {
    let outside = run("(i64.const 0x0000FFFF00000010)", json!({})).await;
    assert!(error_of(&outside).contains("outside its memory"), "{outside}");
    let not_json = run("(i64.const 0x0000000000000004)", json!({})).await;
    assert!(error_of(&not_json).contains("not JSON"), "{not_json}");
    let huge = run("(i64.const 0x00000000FFFFFFFF)", json!({})).await;
    assert!(error_of(&huge).contains("larger than"), "{huge}");
}

fn refused(manifest: &[u8], wat: &str, granted: &[Permission]) -> BundleError {
    match bundle(manifest, wat).plugin(granted) {
        Ok(_) => panic!("the plugin should have been refused"),
        Err(e) => e,
    }
}

#[test]
fn a_permission_the_user_did_not_grant_is_refused() {
    let wat = common::module(
        r#"(import "trellis" "now_ms" (func $now (result i64)))"#,
        r#"(func (export "run") (param i32 i32) (result i64) (call $now))"#,
    );
    let asks = common::manifest("clocky", &["clock"], json!({}));
    let error = refused(&asks, &wat, &[]);
    assert!(matches!(&error, BundleError::Sandbox(SandboxError::NotGranted { permission: Permission::Clock, .. })));
    assert_eq!(
        error.to_string(),
        "plugin `clocky` asks for the permission `clock`, which you did not grant (install it with --grant clock if \
         you trust it)"
    );
    let other = refused(&asks, &wat, &[Permission::Random, Permission::Env("HOME".into())]);
    assert!(other.to_string().contains("permission `clock`"), "{other}");
    assert!(bundle(&asks, &wat).plugin(&[Permission::Clock]).is_ok(), "granted, it loads");

    // The module imports what its manifest does not ask for: refused even if granted.
    let silent = common::manifest("sneaky", &[], json!({}));
    let error = refused(&silent, &wat, &[Permission::Clock]);
    assert!(error.to_string().contains("needs the permission `clock` that the manifest does not ask for"), "{error}");
}

#[test]
fn imports_beyond_the_trellis_functions_are_refused() {
    let cases = [
        (
            r#"(import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))"#,
            "which Trellis does not provide",
        ),
        (r#"(import "trellis" "open_file" (func (param i32 i32) (result i32)))"#, "which Trellis does not provide"),
        (r#"(import "trellis" "now_ms" (func (result i32)))"#, "with the wrong signature"),
        (r#"(import "trellis" "now_ms" (global i64))"#, "as something other than a function"),
    ];
    let manifest = common::manifest("importer", &["clock"], json!({}));
    for (import, expected) in cases {
        let wat = common::module(import, r#"(func (export "run") (param i32 i32) (result i64) (i64.const 0))"#);
        let error = refused(&manifest, &wat, &[Permission::Clock]);
        assert!(error.to_string().contains(expected), "{import}: {error}");
    }
}

#[test]
fn a_module_without_the_abi_is_refused_at_load() {
    let manifest = common::manifest("broken", &[], json!({}));
    let no_tool = common::module("", "");
    assert!(refused(&manifest, &no_tool, &[]).to_string().contains("does not export `run`"));
    let wrong = common::module("", r#"(func (export "run") (param i32) (result i32) (i32.const 0))"#);
    assert!(refused(&manifest, &wrong, &[]).to_string().contains("`run` does not have the ABI's signature"));
    // Structure beyond wasmi's strict limits (here 33 parameters) is refused before compiling.
    let params = "i32 ".repeat(33);
    let wide = common::module(
        "",
        &format!(r#"(func (param {params})) (func (export "run") (param i32 i32) (result i64) (i64.const 0))"#),
    );
    let error = refused(&manifest, &wide, &[]);
    assert!(error.to_string().contains("exceeds the limit of 32 parameters"), "{error}");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("manifest.json"), &manifest).expect("write");
    // Not a binary module (random bytes, nothing, WebAssembly text, which the page's
    // browser cannot run): refused as the bundle is read, saying what to do.
    for module in [&b"not wasm"[..], b"", b"(module)"] {
        std::fs::write(dir.path().join("plugin.wasm"), module).expect("write");
        let error = Bundle::read(dir.path()).expect_err("refused");
        assert!(error.to_string().contains("not a WebAssembly binary") && error.to_string().contains("wat2wasm"));
    }
    // A binary that does not validate is refused when its plugin is made.
    std::fs::write(dir.path().join("plugin.wasm"), b"\0asm\x01\0\0\0\x01").expect("write");
    let bundle = Bundle::read(dir.path()).expect("read");
    let error = bundle.plugin(&[]).err().expect("refused");
    assert!(error.to_string().starts_with("the plugin's module cannot be used"), "{error}");
    // A bundle is a directory of regular files; a pipe is not waited on.
    let file = dir.path().join("plugin.wasm");
    let not_a_dir = Bundle::read(&file).expect_err("refused");
    assert!(not_a_dir.to_string().contains("is not a directory: a bundle is a directory"), "{not_a_dir}");
    #[cfg(unix)]
    {
        std::fs::remove_file(dir.path().join("manifest.json")).expect("remove");
        let made = std::process::Command::new("mkfifo").arg(dir.path().join("manifest.json")).status();
        assert!(made.expect("mkfifo runs").success());
        let pipe = Bundle::read(dir.path()).expect_err("refused");
        assert!(
            pipe.to_string().contains("manifest.json of the bundle") && pipe.to_string().contains("not a regular file")
        );
    }
}

#[test]
fn manifests_are_checked() {
    let tool = json!({"name": "a", "parameters": {"type": "object"}});
    let cases = [
        (json!({"name": "x", "version": "1", "tools": [], "extra": 1}), "unknown field `extra`"),
        (json!({"name": "x", "version": "1", "tools": [], "permissions": ["network"]}), "unknown permission"),
        (json!({"name": "x", "version": "1", "tools": [tool], "limits": {"fuel": 1u64 << 40}}), "fuel is 10000 to"),
        (json!({"name": "x", "version": "1", "tools": [tool], "limits": {"fuel": 1}}), "fuel is 10000 to"),
        (json!({"name": "x", "version": "1", "tools": [tool], "limits": {"memory_mib": 0}}), "memory_mib is 1 to 32"),
        // Above the defaults: a bundle may not raise its own budget.
        (json!({"name": "x", "version": "1", "tools": [tool], "limits": {"fuel": 50_000_001}}), "only lower"),
        (json!({"name": "x", "version": "1", "tools": [tool], "limits": {"memory_mib": 33}}), "only lower"),
        (json!({"name": "x", "version": "1", "tools": []}), "it has no tools"),
        (
            json!({"name": "x", "version": "1", "tools": [
                {"name": "a", "parameters": {"type": "object"}, "export": "alloc"}]}),
            "not `memory` or `alloc`",
        ),
    ];
    for (manifest, expected) in cases {
        let error = trellis_plugins::manifest::Manifest::parse(manifest.to_string().as_bytes()).expect_err(expected);
        assert!(error.to_string().contains(expected), "{expected}: {error}");
    }
}

#[tokio::test]
async fn environment_variables_are_read_only_when_granted_by_name() {
    // The module asks `env` for a fixed name, "PATH" (granted) or "HOME" (not), and
    // answers whether it got a value.
    let body = |name: &str| {
        format!(
            r#"(data (i32.const 100) "{name}")
               (data (i32.const 200) "{{\"n\":")
               (func (export "run") (param i32 i32) (result i64)
                 (local $n i32)
                 (local.set $n (call $env (i32.const 100) (i32.const 4) (i32.const 300) (i32.const 0)))
                 ;; {{"n":1}} when set and granted, {{"n":0}} when -1.
                 (i32.store8 (i32.const 205) (i32.add (i32.const 48) (i32.ne (local.get $n) (i32.const -1))))
                 (i32.store8 (i32.const 206) (i32.const 125))
                 (i64.const 0x000000C800000007))"#
        )
    };
    let import = r#"(import "trellis" "env" (func $env (param i32 i32 i32 i32) (result i32)))"#;
    let manifest = common::manifest("envy", &["env:PATH"], json!({}));
    let granted = [Permission::Env("PATH".into())];
    let path = bundle(&manifest, &common::module(import, &body("PATH")));
    assert_eq!(manager_of(&path, &granted).execute("run", json!({})).await, json!({"n": 1}));
    let home = bundle(&manifest, &common::module(import, &body("HOME")));
    assert_eq!(manager_of(&home, &granted).execute("run", json!({})).await, json!({"n": 0}), "HOME is not granted");
}
