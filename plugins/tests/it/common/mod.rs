//! Building plugin bundles for tests: the repository's example, and small modules whose
//! manifest and WebAssembly text a test writes itself.

#![allow(dead_code)] // Each test binary uses part of this.

use std::path::{Path, PathBuf};

/// The example plugin's source directory (this file serves the plugins crate's tests and
/// the root package's).
pub fn example_dir() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let crate_dir = if here.join("plugins").is_dir() { here.join("plugins") } else { here.to_path_buf() };
    crate_dir.join("examples/text-tools")
}

/// Assembles the example into a bundle directory at `dir` (manifest + plugin.wasm).
pub fn build_example(dir: &Path) {
    let source = example_dir();
    let manifest = std::fs::read(source.join("manifest.json")).expect("example manifest");
    let wat = std::fs::read_to_string(source.join("plugin.wat")).expect("example source");
    write_bundle(dir, &manifest, &wat);
}

/// Writes a bundle: `manifest` as is, `wat` assembled into plugin.wasm.
pub fn write_bundle(dir: &Path, manifest: &[u8], wat: &str) {
    std::fs::create_dir_all(dir).expect("bundle dir");
    std::fs::write(dir.join("manifest.json"), manifest).expect("manifest");
    std::fs::write(dir.join("plugin.wasm"), wat::parse_str(wat).expect("valid WebAssembly text")).expect("module");
}

/// A manifest with one tool `run` (export `run`), the given permissions and limits.
pub fn manifest(name: &str, permissions: &[&str], limits: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "name": name,
        "version": "0.1.0",
        "permissions": permissions,
        "limits": limits,
        "tools": [{"name": "run", "description": "a test tool", "parameters": {"type": "object"}}]
    }))
    .expect("json")
}

/// A module with the ABI's `memory` and a bump `alloc`, plus `items` (imports must come
/// first in `imports`).
pub fn module(imports: &str, items: &str) -> String {
    format!(
        r#"(module {imports}
             (memory (export "memory") 1)
             (global $heap (mut i32) (i32.const 1024))
             (func (export "alloc") (param $len i32) (result i32)
               (global.get $heap)
               (global.set $heap (i32.add (global.get $heap) (local.get $len))))
             {items})"#
    )
}
