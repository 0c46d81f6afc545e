//! The space's `plugins` document through `PluginStore`: install, load, enable and
//! disable, trust, and records damaged in the space.

mod common;

use serde_json::json;
use trellis_plugins::bundle::Bundle;
use trellis_plugins::manifest::Permission;
use trellis_plugins::signing::SecretKey;
use trellis_plugins::store::{InstallOptions, PluginStore, StoreError};
use trellis_plugins::PluginManager;
use trellis_runner::{Link, Path, Read, Runtime, Value};

fn example(signed_by: Option<&SecretKey>) -> Bundle {
    let dir = tempfile::tempdir().expect("tempdir");
    common::build_example(dir.path());
    let mut bundle = Bundle::read(dir.path()).expect("bundle");
    bundle.signature = signed_by.map(|key| key.sign(&bundle.manifest_bytes, &bundle.module));
    bundle
}

fn grant_clock() -> InstallOptions {
    InstallOptions { allow_unsigned: false, granted: vec![Permission::Clock] }
}

fn loaded(store: &PluginStore<'_>) -> (PluginManager, Vec<(String, StoreError)>) {
    let manager = PluginManager::new();
    let failed = store.load(&manager, &[]);
    (manager, failed)
}

#[tokio::test]
async fn installed_plugins_load_until_disabled_or_their_key_is_untrusted() {
    let rt = Runtime::in_memory();
    let store = PluginStore::new(&rt);
    let key = SecretKey::generate().expect("key");
    store.trust(&key.public(), "me").expect("trust");
    let listed = store.install(&example(Some(&key)), &grant_clock()).expect("install");
    assert_eq!(listed.signed_by, Some(key.public().to_hex()));

    let (manager, failed) = loaded(&store);
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(manager.execute("count_words", json!({"text": "a b c d"})).await, json!({"words": 4}));

    store.set_enabled("text-tools", false).expect("disable");
    let (manager, failed) = loaded(&store);
    assert!(failed.is_empty() && manager.client_tools().is_empty(), "a disabled plugin is not loaded");
    store.set_enabled("text-tools", true).expect("enable");

    assert!(store.untrust(&key.public()).expect("untrust"));
    assert!(!store.untrust(&key.public()).expect("untrust again"), "already untrusted");
    let (manager, failed) = loaded(&store);
    assert!(manager.client_tools().is_empty());
    assert_eq!(failed.len(), 1);
    assert!(failed[0].1.to_string().contains("not among your trusted keys"), "{}", failed[0].1);

    assert!(matches!(store.set_enabled("nope", true), Err(StoreError::NotInstalled(_))));
    assert!(matches!(store.remove("nope"), Err(StoreError::NotInstalled(_))));
}

#[test]
fn a_damaged_record_is_listed_reported_at_load_and_can_be_removed() {
    let rt = Runtime::in_memory();
    let store = PluginStore::new(&rt);
    let options = InstallOptions { allow_unsigned: true, granted: vec![Permission::Clock] };
    store.install(&example(None), &options).expect("install");
    let module = Link::new("plugins", Path::new(["installed", "text-tools", "module"]));
    rt.transact(|tx| tx.write(&module, Value::from("not base64!"))).expect("damage");
    let (_, failed) = loaded(&store);
    assert!(failed[0].1.to_string().contains("the stored plugin `text-tools` is damaged"), "{}", failed[0].1);

    let record = Link::new("plugins", Path::new(["installed", "text-tools"]));
    rt.transact(|tx| tx.write(&record, Value::from(7))).expect("damage more");
    let listed = store.list();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].description.contains("damaged") && listed[0].description.contains("install it again"));
    store.remove("text-tools").expect("a damaged plugin can be removed");
    assert!(store.list().is_empty());
}

#[test]
fn install_applies_the_registration_rules_and_bounds_schemas() {
    let rt = Runtime::in_memory();
    let store = PluginStore::new(&rt);
    let unsigned = InstallOptions { allow_unsigned: true, granted: vec![Permission::Clock] };
    // A plugin whose name breaks the rules is refused before anything is written.
    let dir = tempfile::tempdir().expect("tempdir");
    let wat = common::module("", r#"(func (export "run") (param i32 i32) (result i64) (i64.const 0))"#);
    common::write_bundle(dir.path(), &common::manifest("../escape", &[], json!({})), &wat);
    let error = store.install(&Bundle::read(dir.path()).expect("read"), &unsigned).expect_err("refused");
    assert!(error.to_string().contains("rule: a plugin name is 1 to 64"), "{error}");
    // Remote references are refused, never fetched.
    let remote = serde_json::to_vec(&json!({
        "name": "remote", "version": "1",
        "tools": [{"name": "run", "parameters":
            {"type": "object", "properties": {"a": {"$ref": "https://example.invalid/schema.json"}}}}]
    }))
    .expect("json");
    common::write_bundle(dir.path(), &remote, &wat);
    let error = store.install(&Bundle::read(dir.path()).expect("read"), &unsigned).expect_err("refused");
    assert!(error.to_string().contains("rule: parameters are a JSON Schema"), "{error}");
    // Nesting is bounded by the JSON reader's depth limit; below it, a deep schema is fine.
    let nested = |levels: usize| {
        let deep = (0..levels)
            .fold(json!({"type": "object"}), |inner, _| json!({"type": "object", "properties": {"a": inner}}));
        serde_json::to_vec(&json!({"name": "deep", "version": "1", "tools": [{"name": "run", "parameters": deep}]}))
            .expect("json")
    };
    common::write_bundle(dir.path(), &nested(100), &wat);
    let error = Bundle::read(dir.path()).expect_err("too deep");
    assert!(error.to_string().contains("recursion limit exceeded"), "{error}");
    common::write_bundle(dir.path(), &nested(60), &wat);
    store.install(&Bundle::read(dir.path()).expect("read"), &unsigned).expect("a deep but bounded schema");
    assert!(store.list().iter().all(|p| p.name != "remote" && p.name != "../escape"));
    assert!(rt.read_raw(&"plugins".into(), &Path::new(["installed", "../escape"])).to_json().is_null());
}
