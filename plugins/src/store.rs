//! Installed plugins, kept in the space's `plugins` document: each bundle's exact
//! manifest and signature, and whether it is enabled; its module (base64) has a document
//! of its own, `plugins-module-NAME`, so that listing, installing or enabling a plugin
//! reads and writes no other plugin's module.
//!
//! ```json
//! {"installed": {"text-tools": {"manifest": "{…}", "signature": {…} | null, "enabled": true}}}
//! ```
//!
//! A record written before modules had their own documents holds its module as `module`,
//! and still loads.
//!
//! What may run is not the space's to say: the keys trusted to sign bundles, the
//! permissions granted and the bundles accepted unsigned are the user's own decisions, in
//! their [`TrustFile`]. A bundle is verified at install and again each time it is loaded:
//! a signer no longer trusted, a record changed since, or an unsigned record the user never
//! installed (a space made elsewhere) keeps the plugin from loading; a signed one the user
//! never installed loads with no permissions.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use trellis_runner::{DocId, Link, Path, Read, Runtime, Value};

use crate::bundle::{Bundle, BundleError};
use crate::manager::PluginManager;
use crate::manifest::{Manifest, ManifestError, Permission};
use crate::rules::RegisterError;
use crate::signing::{content_hash, encode_hex, verify, PublicKey, Signature};
use crate::trust::{Approval, Decisions, TrustError, TrustFile};

/// The space's document holding the installed plugins.
pub const PLUGINS_DOC: &str = "plugins";

/// An installed plugin's record (its module is apart: see the module's text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The manifest's exact text.
    pub manifest: String,
    /// Its signature, or none when installed with `allow_unsigned`.
    pub signature: Option<Signature>,
    /// Whether its tools are offered.
    pub enabled: bool,
}

/// An installed plugin as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Listed {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Its description.
    pub description: String,
    /// Its tools.
    pub tools: Vec<String>,
    /// Whether its tools are offered.
    pub enabled: bool,
    /// The signer's key, or none: unsigned.
    pub signed_by: Option<String>,
    /// The permissions this user granted.
    pub granted: Vec<String>,
    /// Whether this user installed this very bundle (else it came with the space, and
    /// loads only if signed by a key they trust, with no permissions).
    pub approved: bool,
    /// The content hash, hex.
    pub hash: String,
}

/// An enabled plugin that loaded: its bundle, verified, and the permissions granted.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The bundle (its signature checked against the trusted keys, its module by the sandbox).
    pub bundle: Bundle,
    /// The permissions the user granted.
    pub granted: Vec<Permission>,
}

/// The plugins that could not load, each with why.
pub type Failed = Vec<(String, StoreError)>;

/// What installing asks of the user.
#[derive(Debug, Clone, Default)]
pub struct InstallOptions {
    /// Install a bundle without a signature (it is listed as unsigned).
    pub allow_unsigned: bool,
    /// The permissions granted.
    pub granted: Vec<Permission>,
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The space refused.
    #[error(transparent)]
    Runtime(#[from] trellis_runner::Error),
    /// The bundle was refused.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// The plugin's tools break a registration rule beside the installed ones.
    #[error(transparent)]
    Register(#[from] RegisterError),
    /// No plugin of that name.
    #[error("no plugin named {0:?} is installed; {list} to see the installed ones", list = crate::actions::LIST_PLUGINS)]
    NotInstalled(String),
    /// A plugin of that name is installed.
    #[error("a plugin named `{0}` is already installed; {remove} first", remove = crate::actions::REMOVE_PLUGIN)]
    AlreadyInstalled(String),
    /// A stored record is not readable.
    #[error("the stored plugin `{0}` is damaged ({1}); remove it and install it again")]
    Damaged(String, String),
    /// An unsigned plugin the user never accepted (it came with the space).
    #[error(
        "the plugin `{0}` is unsigned and you did not install it (it came with the space); if you trust it, \
         {install}",
        install = crate::actions::INSTALL_UNSIGNED
    )]
    NotApproved(String),
    /// The user's trust file could not be read or written.
    #[error(transparent)]
    Trust(#[from] TrustError),
}

/// The installed plugins of a space, as the user of a [`TrustFile`] sees them.
pub struct PluginStore<'rt> {
    rt: &'rt Runtime,
    trust: TrustFile,
}

fn link(path: &[&str]) -> Link {
    Link::new(PLUGINS_DOC, Path::new(path.iter().copied()))
}

/// Where the module (base64) of the installed plugin `name` is kept.
fn module_link(name: &str) -> Link {
    Link::new(format!("{PLUGINS_DOC}-module-{name}"), Path::root())
}

/// The module (base64) of the installed plugin `name`: in its own document, else in a
/// record written before modules had one.
fn module_of(reader: &impl Read, name: &str) -> Result<std::sync::Arc<str>, StoreError> {
    let legacy = || reader.read_raw(&DocId::from(PLUGINS_DOC), &Path::new(["installed", name, "module"]));
    let module = match reader.read_raw(&module_link(name).doc, &Path::root()) {
        Value::Null => legacy(),
        module => module,
    };
    match module {
        Value::String(module) => Ok(module),
        _ => Err(StoreError::Damaged(name.to_string(), "its module is missing".into())),
    }
}

/// The entries of the object at `key`, each read as a `T` or the reason it cannot be.
fn read_map<T: serde::de::DeserializeOwned>(reader: &impl Read, key: &str) -> BTreeMap<String, Result<T, String>> {
    let value = reader.read_raw(&DocId::from(PLUGINS_DOC), &Path::new([key]));
    match value.to_json() {
        serde_json::Value::Object(map) => map
            .into_iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| (k, serde_json::from_value(v).map_err(|e| e.to_string())))
            .collect(),
        _ => BTreeMap::new(),
    }
}

impl<'rt> PluginStore<'rt> {
    /// The store of `rt`'s space, with the decisions in `trust`.
    pub fn new(rt: &'rt Runtime, trust: TrustFile) -> PluginStore<'rt> {
        PluginStore { rt, trust }
    }

    /// The store of `rt`'s space, with the decisions of the user running this program
    /// ([`TrustFile::of_user`]).
    pub fn of_user(rt: &'rt Runtime) -> Result<PluginStore<'rt>, StoreError> {
        Ok(PluginStore::new(rt, TrustFile::of_user()?))
    }

    /// The keys trusted to sign bundles.
    pub fn trusted_keys(&self) -> Result<Vec<PublicKey>, StoreError> {
        Ok(self.trust.load()?.trusted_keys())
    }

    /// Trusts `key` to sign bundles, with a label for people.
    pub fn trust(&self, key: &PublicKey, label: &str) -> Result<(), StoreError> {
        Ok(self.trust.update(|trust| trust.trust(key, label))?)
    }

    /// Stops trusting `key`; false if it was not trusted. Plugins it signed no longer load.
    pub fn untrust(&self, key: &PublicKey) -> Result<bool, StoreError> {
        Ok(self.trust.update(|trust| trust.untrust(key))?)
    }

    /// Installs `bundle`: verifies its signature against the trusted keys (or allows it
    /// unsigned), checks its module and permissions in the sandbox, and its tools against
    /// the registration rules beside every installed plugin; records the user's decision
    /// (permissions, unsigned) in their trust file. Enabled at once. Installing the bundle
    /// the space already holds under that name records the decision again (so a user can
    /// accept a plugin that came with a space).
    pub fn install(&self, bundle: &Bundle, options: &InstallOptions) -> Result<Listed, StoreError> {
        let (manifest, module) = (&bundle.manifest_bytes, &bundle.module);
        verify(manifest, module, bundle.signature.as_ref(), &self.trusted_keys()?, options.allow_unsigned)
            .map_err(BundleError::from)?;
        let plugin = bundle.plugin(&options.granted)?;
        let name = bundle.manifest.name.clone();
        let manifest_text = String::from_utf8(manifest.clone())
            .map_err(|_| BundleError::Manifest(ManifestError::Invalid("not UTF-8".into())))?;
        let encoded = Value::String(base64::engine::general_purpose::STANDARD.encode(module).into());
        let record = Record { manifest: manifest_text, signature: bundle.signature.clone(), enabled: true };
        let value = Value::from_serialize(&record).map_err(|e| StoreError::Damaged(name.clone(), e.to_string()))?;
        let outcome = self.rt.transact(|tx| {
            let installed: BTreeMap<String, Result<Record, String>> = read_map(tx, "installed");
            if let Some(present) = installed.get(&name) {
                let same_module = || module_of(tx, &name).is_ok_and(|m| encoded.as_str() == Some(&*m));
                if !present.as_ref().is_ok_and(|r| r.manifest == record.manifest) || !same_module() {
                    return Ok(Err(StoreError::AlreadyInstalled(name.clone())));
                }
                // The same bundle: the record becomes this install's (its signature,
                // enabled), so what was verified here is what loads.
                tx.write(&module_link(&name), encoded.clone())?;
                tx.write(&link(&["installed", &name]), value.clone())?;
                return Ok(Ok(()));
            }
            // The rules, beside every installed plugin's tools (enabled or not: enabling
            // one later must not conflict).
            let owners: BTreeMap<String, &String> = installed
                .iter()
                .filter_map(|(other, r)| Some((other, Manifest::parse(r.as_ref().ok()?.manifest.as_bytes()).ok()?)))
                .flat_map(|(other, m)| m.tools.into_iter().map(move |t| (t.name, other)))
                .collect();
            let owner = |tool: &str| owners.get(tool).map(|o| (*o).clone());
            if let Err(e) = crate::rules::check(&plugin, owner, &Default::default()) {
                return Ok(Err(e.into()));
            }
            tx.write(&module_link(&name), encoded.clone())?;
            tx.write(&link(&["installed", &name]), value.clone())?;
            Ok(Ok(()))
        })?;
        outcome?;
        // The decision after the record: a refused install leaves no decision behind, and
        // a record whose decision could not be written does not load until the same
        // bundle is installed again (which writes it).
        let approval =
            Approval { name: name.clone(), granted: options.granted.clone(), unsigned: bundle.signature.is_none() };
        let hash = content_hash(manifest, module);
        let trust = self.trust.update(|trust| {
            trust.approve(hash, approval);
            trust.clone()
        })?;
        Ok(self.listed(&name, &record, &trust))
    }

    /// Every installed plugin, by name.
    pub fn list(&self) -> Result<Vec<Listed>, StoreError> {
        let trust = self.trust.load()?;
        let installed: BTreeMap<String, Result<Record, String>> = read_map(self.rt, "installed");
        let listed = installed
            .iter()
            .map(|(name, record)| match record {
                Ok(record) => self.listed(name, record, &trust),
                Err(why) => Listed {
                    name: name.clone(),
                    version: "?".into(),
                    description: StoreError::Damaged(name.clone(), why.clone()).to_string(),
                    tools: Vec::new(),
                    enabled: false,
                    signed_by: None,
                    granted: Vec::new(),
                    approved: false,
                    hash: String::new(),
                },
            })
            .collect();
        Ok(listed)
    }

    /// Removes the plugin `name`, and the user's approval of its bundle with it: an
    /// author who removes and installs each build would otherwise leave one approval per
    /// build in the trust file, until the file is too large to read. (Another space holding
    /// the same bundle needs it installed again there.)
    pub fn remove(&self, name: &str) -> Result<(), StoreError> {
        let record = self.get(name);
        if let Err(StoreError::NotInstalled(_)) = record {
            return record.map(drop);
        }
        // A damaged record has no bundle to name: it goes, and its approval (if any) stays.
        let hash = record
            .and_then(|record| self.bundle(name, &record))
            .ok()
            .map(|b| content_hash(&b.manifest_bytes, &b.module));
        self.rt.transact(|tx| {
            tx.write(&module_link(name), Value::Null)?;
            tx.write(&link(&["installed", name]), Value::Null)
        })?;
        if let Some(hash) = hash {
            self.trust.update(|trust| trust.forget(&hash))?;
        }
        Ok(())
    }

    /// Enables or disables the plugin `name`.
    pub fn set_enabled(&self, name: &str, enabled: bool) -> Result<(), StoreError> {
        self.get(name)?;
        self.rt.transact(|tx| tx.write(&link(&["installed", name, "enabled"]), Value::from(enabled)))?;
        Ok(())
    }

    /// Registers every enabled plugin with `manager` (server tools taking `server_tools`
    /// names), verifying each again against the user's decisions: the plugins that could
    /// not load, with why. Fails only when the user's trust file cannot be read.
    pub fn load(&self, manager: &PluginManager, server_tools: &[String]) -> Result<Failed, StoreError> {
        Ok(self.load_bundles(manager, server_tools)?.1)
    }

    /// As [`PluginStore::load`], and also the bundles that loaded, verified, for a client
    /// that runs their modules itself (the web page of `trellis serve`).
    pub fn load_bundles(
        &self,
        manager: &PluginManager,
        server_tools: &[String],
    ) -> Result<(Vec<Loaded>, Failed), StoreError> {
        let installed: BTreeMap<String, Result<Record, String>> = read_map(self.rt, "installed");
        let (mut loaded, mut failed) = (Vec::new(), Vec::new());
        if installed.values().all(|record| record.as_ref().is_ok_and(|r| !r.enabled)) {
            // Nothing to load: the user's trust file is not even read.
            return Ok((loaded, failed));
        }
        let trust = self.trust.load()?;
        let trusted = trust.trusted_keys();
        for (name, record) in installed {
            let record = match record {
                Ok(record) if record.enabled => record,
                Ok(_) => continue,
                Err(why) => {
                    failed.push((name.clone(), StoreError::Damaged(name, why)));
                    continue;
                }
            };
            let verified = self.bundle(&name, &record).and_then(|bundle| {
                let (manifest, module) = (&bundle.manifest_bytes, &bundle.module);
                let approval = trust.approval(&content_hash(manifest, module));
                let unsigned = approval.is_some_and(|a| a.unsigned);
                if record.signature.is_none() && !unsigned {
                    return Err(StoreError::NotApproved(name.clone()));
                }
                verify(manifest, module, record.signature.as_ref(), &trusted, unsigned).map_err(BundleError::from)?;
                let granted = approval.map(|a| a.granted.clone()).unwrap_or_default();
                let plugin = bundle.plugin(&granted)?;
                manager.register(plugin, server_tools)?;
                Ok(Loaded { bundle, granted })
            });
            match verified {
                Ok(plugin) => loaded.push(plugin),
                Err(e) => failed.push((name, e)),
            }
        }
        Ok((loaded, failed))
    }

    fn get(&self, name: &str) -> Result<Record, StoreError> {
        let value = self.rt.read_raw(&DocId::from(PLUGINS_DOC), &Path::new(["installed", name]));
        if matches!(value, Value::Null) {
            return Err(StoreError::NotInstalled(name.to_string()));
        }
        serde_json::from_value(value.to_json()).map_err(|e| StoreError::Damaged(name.to_string(), e.to_string()))
    }

    fn bundle(&self, name: &str, record: &Record) -> Result<Bundle, StoreError> {
        let module = base64::engine::general_purpose::STANDARD
            .decode(&*module_of(self.rt, name)?)
            .map_err(|e| StoreError::Damaged(name.to_string(), e.to_string()))?;
        let bundle = Bundle::from_parts(record.manifest.clone().into_bytes(), module, record.signature.clone())?;
        if bundle.manifest.name != name {
            return Err(StoreError::Damaged(name.to_string(), "its manifest names another plugin".into()));
        }
        Ok(bundle)
    }

    fn listed(&self, name: &str, record: &Record, trust: &Decisions) -> Listed {
        let bundle = self.bundle(name, record).ok();
        let manifest = bundle.as_ref().map(|b| &b.manifest);
        let hash = bundle.as_ref().map(|b| content_hash(&b.manifest_bytes, &b.module));
        let approval = hash.as_ref().and_then(|hash| trust.approval(hash));
        Listed {
            name: name.to_string(),
            version: manifest.map(|m| m.version.clone()).unwrap_or_else(|| "?".into()),
            description: manifest.map(|m| m.description.clone()).unwrap_or_default(),
            tools: manifest.map(|m| m.tools.iter().map(|t| t.name.clone()).collect()).unwrap_or_default(),
            enabled: record.enabled,
            signed_by: record.signature.as_ref().map(|s| s.public_key.clone()),
            granted: approval.map(|a| a.granted.iter().map(ToString::to_string).collect()).unwrap_or_default(),
            approved: approval.is_some(),
            hash: hash.map(|h| encode_hex(&h)).unwrap_or_default(),
        }
    }
}
