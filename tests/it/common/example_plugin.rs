//! Plugins installed into a space through the binary as a person does it: the bundle
//! signed with a fresh key, the key trusted, the bundle installed with its grants; the
//! repository's example (`plugins/examples/text-tools`, granted `clock`) by default. It
//! uses `crate::bundles` (`plugins/tests/it/common/mod.rs`).

use std::path::{Path, PathBuf};

/// A plugin author whose key the space trusts, and a folder for their bundles.
pub struct Author {
    dir: tempfile::TempDir,
    key: String,
    /// The public key, hex.
    pub public_key: String,
}

impl Author {
    /// A fresh key pair, trusted by `space`.
    pub fn new(space: &Path) -> Author {
        let dir = tempfile::tempdir().expect("temporary directory");
        let key = dir.path().join("author.key").to_str().expect("UTF-8 path").to_string();
        let made = crate::common::json_of(space, &["plugin", "keygen", &key]);
        crate::common::ok(space, &["plugin", "trust", &format!("{key}.pub")]);
        let public_key = made["public_key"].as_str().expect("keygen names the public key").to_string();
        Author { dir, key, public_key }
    }

    /// A folder for the bundle `name`.
    pub fn bundle_dir(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Signs the bundle in `dir` and installs it into `space` with `grants`; its module.
    pub fn install(&self, space: &Path, dir: &Path, grants: &[&str]) -> Vec<u8> {
        let bundle = dir.to_str().expect("UTF-8 path");
        crate::common::ok(space, &["plugin", "sign", bundle, "--key", &self.key]);
        let mut install = vec!["plugin", "install", bundle];
        install.extend(grants.iter().flat_map(|grant| ["--grant", grant]));
        crate::common::ok(space, &install);
        std::fs::read(dir.join("plugin.wasm")).expect("the assembled module")
    }

    /// Installs the repository's example into `space`; its module.
    pub fn install_example(&self, space: &Path) -> Vec<u8> {
        let dir = self.bundle_dir("text-tools");
        crate::bundles::build_example(&dir);
        self.install(space, &dir, &["clock"])
    }
}
