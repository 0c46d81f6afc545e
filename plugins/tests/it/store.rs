//! The space's `plugins` document through `PluginStore`: install, load, enable and
//! disable, trust, and records damaged in the space.

use crate::common;

use serde_json::json;
use trellis_plugins::bundle::Bundle;
use trellis_plugins::manifest::Permission;
use trellis_plugins::signing::SecretKey;
use trellis_plugins::store::{InstallOptions, PluginStore, StoreError};
use trellis_plugins::trust::TrustFile;
use trellis_plugins::PluginManager;
use trellis_runner::{Link, Path, Read, Runtime, Value};

fn example(signed_by: Option<&SecretKey>) -> Bundle {
    let dir = tempfile::tempdir().expect("tempdir");
    common::build_example(dir.path());
    let mut bundle = Bundle::read(dir.path()).expect("bundle");
    bundle.signature = signed_by.map(|key| key.sign(&bundle.manifest_bytes, &bundle.module));
    bundle
}

/// The example under its own name, with another description: another bundle.
fn another_of_the_same_name() -> Bundle {
    let original = example(None);
    let text = String::from_utf8(original.manifest_bytes).expect("UTF-8").replace("Counts the words", "Counts words");
    Bundle::from_parts(text.into_bytes(), original.module, None).expect("a bundle")
}

/// A space and a user who installed the example in it unsigned.
fn with_the_example_unsigned() -> (Runtime, User) {
    let (rt, user) = (Runtime::in_memory(), User::new());
    user.store(&rt).install(&example(None), &unsigned_with_clock()).expect("install");
    (rt, user)
}

/// Installing unsigned, with the `clock` the example asks for.
fn unsigned_with_clock() -> InstallOptions {
    InstallOptions { allow_unsigned: true, ..grant_clock() }
}

fn grant_clock() -> InstallOptions {
    InstallOptions { allow_unsigned: false, granted: vec![Permission::Clock] }
}

fn loaded(store: &PluginStore<'_>) -> (PluginManager, Vec<(String, StoreError)>) {
    let manager = PluginManager::new();
    let failed = store.load(&manager, &[]).expect("the trust file reads");
    (manager, failed)
}

/// A user's trust file, in a directory of its own.
struct User(tempfile::TempDir);

impl User {
    fn new() -> User {
        User(tempfile::tempdir().expect("tempdir"))
    }

    fn store<'rt>(&self, rt: &'rt Runtime) -> PluginStore<'rt> {
        PluginStore::new(rt, TrustFile::at(self.0.path().join("plugins.json")))
    }
}

#[tokio::test]
async fn installed_plugins_load_until_disabled_or_their_key_is_untrusted() {
    let rt = Runtime::in_memory();
    let user = User::new();
    let store = user.store(&rt);
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
    let (rt, user) = with_the_example_unsigned();
    let store = user.store(&rt);
    let module = Link::new("plugins-module-text-tools", Path::root());
    rt.transact(|tx| tx.write(&module, Value::from("not base64!"))).expect("damage");
    let (_, failed) = loaded(&store);
    assert!(failed[0].1.to_string().contains("the stored plugin `text-tools` is damaged"), "{}", failed[0].1);

    let record = Link::new("plugins", Path::new(["installed", "text-tools"]));
    rt.transact(|tx| tx.write(&record, Value::from(7))).expect("damage more");
    let listed = store.list().expect("list");
    assert_eq!(listed.len(), 1);
    assert!(listed[0].description.contains("damaged") && listed[0].description.contains("install it again"));
    store.remove("text-tools").expect("a damaged plugin can be removed");
    assert!(store.list().expect("list").is_empty());
}

#[test]
fn each_module_is_kept_apart_from_the_records_and_a_record_holding_its_module_still_loads() {
    let (rt, user) = with_the_example_unsigned();
    let store = user.store(&rt);
    let record = Link::new("plugins", Path::new(["installed", "text-tools"]));
    let module = Link::new("plugins-module-text-tools", Path::root());
    let inline = record.child("module");
    assert!(rt.read_raw(&inline.doc, &inline.path).to_json().is_null(), "not in the record");
    let stored = rt.read_raw(&module.doc, &module.path);
    assert!(stored.as_str().is_some_and(|m| m.len() > 100), "in its own document");

    // As a space written before modules had their own documents holds it.
    rt.transact(|tx| {
        tx.write(&record.child("module"), stored.clone())?;
        tx.write(&module, Value::Null)
    })
    .expect("the old form");
    let (manager, failed) = loaded(&store);
    assert!(failed.is_empty(), "{failed:?}");
    assert!(manager.has_tool("count_words"));
    assert_eq!(store.list().expect("list")[0].hash.len(), 64, "listed whole");
    store.install(&example(None), &unsigned_with_clock()).expect("the same bundle, installed again");
    assert!(rt.read_raw(&module.doc, &module.path).as_str().is_some(), "now in its own document");
    store.remove("text-tools").expect("remove");
    assert!(rt.read_raw(&module.doc, &module.path).to_json().is_null(), "and gone with its plugin");
}

#[test]
fn install_applies_the_registration_rules_and_bounds_schemas() {
    let rt = Runtime::in_memory();
    let user = User::new();
    let store = user.store(&rt);
    let unsigned = unsigned_with_clock();
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
    // Patterns match in linear time: one that needs backtracking (a backreference) is
    // refused, since the arguments a model sends are checked before any timeout applies.
    let backtracking = serde_json::to_vec(&json!({
        "name": "backtracking", "version": "1",
        "tools": [{"name": "run", "parameters":
            {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a|aa)*(?=b)\\1c$"}}}}]
    }))
    .expect("json");
    common::write_bundle(dir.path(), &backtracking, &wat);
    let error = store.install(&Bundle::read(dir.path()).expect("read"), &unsigned).expect_err("refused");
    assert!(error.to_string().contains("rule: parameters are a JSON Schema"), "{error}");
    // Nesting is bounded by the JSON reader's depth limit, and then by a client tool's (the
    // model is offered a plugin's tools as client tools).
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
    let error =
        store.install(&Bundle::read(dir.path()).expect("read"), &unsigned).expect_err("deeper than a client tool");
    assert!(error.to_string().contains("rule `max-depth`"), "{error}");
    common::write_bundle(dir.path(), &nested(4), &wat);
    store.install(&Bundle::read(dir.path()).expect("read"), &unsigned).expect("a schema within a client tool's depth");
    assert!(store.list().expect("list").iter().all(|p| p.name != "remote" && p.name != "../escape"));
    assert!(rt.read_raw(&"plugins".into(), &Path::new(["installed", "../escape"])).to_json().is_null());
}

#[tokio::test]
async fn what_may_run_is_the_users_decision_not_the_spaces() {
    let rt = Runtime::in_memory();
    let (author, someone) = (User::new(), User::new());
    let key = SecretKey::generate().expect("key");
    let unsigned = unsigned_with_clock();
    author.store(&rt).install(&example(None), &unsigned).expect("the author accepts it unsigned");
    assert!(loaded(&author.store(&rt)).1.is_empty());

    // The same space, opened by someone who never installed it: it does not load.
    let theirs = someone.store(&rt);
    let (manager, failed) = loaded(&theirs);
    assert!(manager.client_tools().is_empty());
    assert!(matches!(&failed[..], [(name, StoreError::NotApproved(_))] if name == "text-tools"), "{failed:?}");
    assert!(failed[0].1.to_string().contains("install its bundle yourself"), "{}", failed[0].1);
    let listed = theirs.list().expect("list");
    assert!(!listed[0].approved && listed[0].granted.is_empty(), "{listed:?}");

    // Signed by a key they do not trust: a key written into the space's document as
    // trusted is not read, so its signer is still not trusted (read, it would be).
    theirs.remove("text-tools").expect("remove");
    author.store(&rt).trust(&key.public(), "author").expect("trust");
    author.store(&rt).install(&example(Some(&key)), &grant_clock()).expect("install signed");
    let forged = Link::new("plugins", Path::new(["trusted_keys", &key.public().to_hex()]));
    rt.transact(|tx| tx.write(&forged, Value::from(json!({"label": "trust me"})))).expect("forge");
    assert!(theirs.trusted_keys().expect("keys").is_empty());
    let failed = loaded(&theirs).1;
    let refused = failed.first().map(|(_, why)| why.to_string()).unwrap_or_else(|| "it loaded".into());
    assert!(refused.contains("which is not among your trusted keys"), "{refused}");

    // Signed by a key they trust, but installed by someone else: it loads with no
    // permissions, so a plugin that asks for one does not load; a grant written into the
    // space's record is not read (read, it would load).
    theirs.trust(&key.public(), "the author").expect("trust");
    let granted = Link::new("plugins", Path::new(["installed", "text-tools", "granted"]));
    rt.transact(|tx| tx.write(&granted, Value::from(json!(["clock"])))).expect("forge");
    let failed = loaded(&theirs).1;
    let refused = failed.first().map(|(_, why)| why.to_string()).unwrap_or_else(|| "it loaded".into());
    assert!(refused.contains("asks for the permission `clock`"), "{refused}");

    // Installing the bundle the space holds is how they accept it; another bundle of the
    // same name is refused.
    theirs.install(&example(Some(&key)), &grant_clock()).expect("accept it");
    let (manager, failed) = loaded(&theirs);
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(manager.execute("count_words", json!({"text": "a b"})).await, json!({"words": 2}));
    let error = theirs.install(&another_of_the_same_name(), &unsigned).expect_err("another bundle of that name");
    assert!(matches!(error, StoreError::AlreadyInstalled(_)), "{error}");
}

#[test]
fn a_refused_install_leaves_no_decision_behind() {
    let (rt, user) = with_the_example_unsigned();
    let store = user.store(&rt);
    let unsigned = unsigned_with_clock();
    let other = another_of_the_same_name();
    assert!(matches!(store.install(&other, &unsigned), Err(StoreError::AlreadyInstalled(_))));
    let trust = TrustFile::at(user.0.path().join("plugins.json")).load().expect("the trust file");
    let hash = trellis_plugins::signing::content_hash(&other.manifest_bytes, &other.module);
    assert!(trust.approval(&hash).is_none(), "the refused bundle was not accepted");
}

#[test]
fn removing_a_plugin_forgets_its_approval_so_rebuilds_do_not_fill_the_trust_file() {
    let (rt, user) = with_the_example_unsigned();
    let store = user.store(&rt);
    let trust_file = user.0.path().join("plugins.json");
    let size = || std::fs::metadata(&trust_file).expect("the trust file").len();
    let after_one = size();
    // An author's loop: remove, rebuild (another bundle of the same name), install.
    for _ in 0..20 {
        store.remove("text-tools").expect("remove");
        store.install(&another_of_the_same_name(), &unsigned_with_clock()).expect("install");
        store.remove("text-tools").expect("remove");
        store.install(&example(None), &unsigned_with_clock()).expect("install");
    }
    assert!(size() <= after_one + 64, "one approval, not forty: {} bytes, then {}", after_one, size());
    let bundle = example(None);
    let hash = trellis_plugins::signing::content_hash(&bundle.manifest_bytes, &bundle.module);
    assert!(TrustFile::at(&trust_file).load().expect("load").approval(&hash).is_some(), "the installed one stays");
    store.remove("text-tools").expect("remove");
    assert!(TrustFile::at(&trust_file).load().expect("load").approval(&hash).is_none(), "and goes with it");
}

#[tokio::test]
async fn installing_the_bundle_a_space_holds_makes_the_record_the_users() {
    let rt = Runtime::in_memory();
    let (someone, me) = (User::new(), User::new());
    let unsigned = unsigned_with_clock();
    someone.store(&rt).install(&example(None), &unsigned).expect("someone installs it unsigned");
    someone.store(&rt).set_enabled("text-tools", false).expect("and disables it");
    // The same content, signed by a key I trust.
    let key = SecretKey::generate().expect("key");
    let mine = me.store(&rt);
    mine.trust(&key.public(), "me").expect("trust");
    let listed = mine.install(&example(Some(&key)), &grant_clock()).expect("install");
    assert_eq!((listed.signed_by, listed.enabled), (Some(key.public().to_hex()), true));
    let (manager, failed) = loaded(&mine);
    assert!(failed.is_empty(), "the stored record is the one I installed: {failed:?}");
    assert_eq!(manager.execute("count_words", json!({"text": "a b"})).await, json!({"words": 2}));
}
