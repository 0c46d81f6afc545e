//! `trellis plugin ...`: signing keys, signing bundles, and the plugins installed in the
//! space (install, list, remove, enable, disable, call), on `trellis_plugins`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Subcommand;
use serde_json::json;
use trellis_plugins::bundle::{Bundle, SIGNATURE_FILE};
use trellis_plugins::manifest::Permission;
use trellis_plugins::signing::{content_hash, encode_hex, PublicKey, SecretKey};
use trellis_plugins::store::{InstallOptions, Listed, PluginStore};
use trellis_plugins::trust::TrustFile;
use trellis_plugins::PluginManager;
use trellis_runner::Runtime;

use super::output::{emit_json, print};
use super::Format;
use crate::terminal::safe_line;

/// The subcommands of `trellis plugin`.
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Make an ed25519 signing key: FILE holds the secret key (readable by you only),
    /// FILE.pub the public key others trust.
    Keygen {
        /// Where to write the secret key (it is never overwritten).
        file: PathBuf,
    },
    /// Sign a bundle (a directory with manifest.json and plugin.wasm): writes its
    /// signature.json.
    Sign {
        /// The bundle directory.
        bundle: PathBuf,
        /// The secret key file (from `keygen`).
        #[arg(long, value_name = "FILE")]
        key: PathBuf,
    },
    /// Trust a public key (64 hex digits, or a .pub file) to sign the plugins you install.
    /// Kept in your own trust file ($XDG_CONFIG_HOME/trellis/plugins.json), not in the
    /// space.
    Trust {
        /// The key, or a file holding it.
        key: String,
        /// A name for people (whose key it is).
        #[arg(long, default_value = "")]
        label: String,
    },
    /// Stop trusting a key: the plugins it signed no longer load.
    Untrust {
        /// The key, or a file holding it.
        key: String,
    },
    /// Install a plugin bundle into the space. It must be signed by a trusted key, unless
    /// --allow-unsigned; every permission its manifest asks for must be granted. What you
    /// allowed is kept in your own trust file, so a space made elsewhere cannot allow it
    /// for you; installing the bundle a space already holds accepts it.
    Install {
        /// The bundle directory.
        path: PathBuf,
        /// Install it although it is not signed (it is listed as unsigned).
        #[arg(long)]
        allow_unsigned: bool,
        /// Grant a permission the manifest asks for: clock, random, env:NAME (repeatable).
        #[arg(long = "grant", value_name = "PERMISSION")]
        grants: Vec<String>,
    },
    /// List the installed plugins and the trusted keys.
    List,
    /// Remove an installed plugin.
    Remove {
        /// The plugin's name.
        name: String,
    },
    /// Offer an installed plugin's tools again.
    Enable {
        /// The plugin's name.
        name: String,
    },
    /// Stop offering an installed plugin's tools (it stays installed).
    Disable {
        /// The plugin's name.
        name: String,
    },
    /// Run a tool of an enabled plugin as the chat would, and print its JSON result.
    Call {
        /// The tool's name.
        tool: String,
        /// Its arguments, a JSON object.
        #[arg(default_value = "{}")]
        arguments: String,
    },
}

impl PluginCommand {
    /// Whether the command works on the space (`keygen` and `sign` only touch files,
    /// `trust` and `untrust` only the user's trust file).
    pub fn needs_space(&self) -> bool {
        !matches!(
            self,
            PluginCommand::Keygen { .. }
                | PluginCommand::Sign { .. }
                | PluginCommand::Trust { .. }
                | PluginCommand::Untrust { .. }
        )
    }
}

/// Runs `keygen`, `sign`, `trust` and `untrust`, which need no space.
pub fn run_local(command: &PluginCommand, format: Format) -> anyhow::Result<()> {
    match command {
        PluginCommand::Keygen { file } => {
            let key = SecretKey::generate()?;
            let public_file = key.write(file)?;
            let public = key.public().to_hex();
            print(
                format,
                &json!({"public_key": public, "secret_key_file": file, "public_key_file": public_file}),
                || {
                    format!(
                        "public key: {public}\nwrote {} (secret: keep it to yourself) and {}",
                        safe_line(&file.display().to_string()),
                        safe_line(&public_file.display().to_string())
                    )
                },
            );
            Ok(())
        }
        PluginCommand::Sign { bundle, key } => {
            let read = Bundle::read(bundle)?;
            let key = SecretKey::read(key)?;
            let signature = key.sign(&read.manifest_bytes, &read.module);
            let path = bundle.join(SIGNATURE_FILE);
            let text = serde_json::to_string_pretty(&signature)?;
            trellis_runner::dirs::replace(&path, format!("{text}\n").as_bytes(), false)
                .with_context(|| format!("cannot write {}", path.display()))?;
            let hash = encode_hex(&content_hash(&read.manifest_bytes, &read.module));
            print(format, &json!({"hash": hash, "public_key": signature.public_key}), || {
                format!(
                    "signed {} {} (content hash sha256:{hash}) with key {}",
                    safe_line(&read.manifest.name),
                    safe_line(&read.manifest.version),
                    signature.public_key
                )
            });
            Ok(())
        }
        PluginCommand::Trust { key, label } => {
            let key = read_key(key)?;
            TrustFile::of_user()?.update(|trust| trust.trust(&key, label))?;
            print(format, &json!({"trusted": key.to_hex()}), || format!("trusted key {key}"));
            Ok(())
        }
        PluginCommand::Untrust { key } => {
            let key = read_key(key)?;
            if !TrustFile::of_user()?.update(|trust| trust.untrust(&key))? {
                anyhow::bail!(
                    "the key {key} was not trusted (`{} plugin list` shows the trusted keys)",
                    crate::program::name()
                );
            }
            print(format, &json!({"untrusted": key.to_hex()}), || format!("no longer trusted: {key}"));
            Ok(())
        }
        _ => anyhow::bail!("this plugin command needs the space"),
    }
}

/// Runs the commands that work on the space.
pub async fn run(rt: &Runtime, command: PluginCommand, format: Format) -> anyhow::Result<()> {
    let store = PluginStore::of_user(rt)?;
    match command {
        PluginCommand::Keygen { .. }
        | PluginCommand::Sign { .. }
        | PluginCommand::Trust { .. }
        | PluginCommand::Untrust { .. } => run_local(&command, format),
        PluginCommand::Install { path, allow_unsigned, grants } => {
            let granted = grants
                .iter()
                .map(|g| g.parse::<Permission>().map_err(anyhow::Error::msg))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let refused = || format!("cannot install the plugin bundle {}", path.display());
            let bundle = Bundle::read(&path).with_context(refused)?;
            let listed = store.install(&bundle, &InstallOptions { allow_unsigned, granted }).with_context(refused)?;
            print(format, &json!(listed), || format!("installed {}", describe(&listed)));
            Ok(())
        }
        PluginCommand::List => {
            let plugins = store.list()?;
            let keys: Vec<String> = store.trusted_keys()?.iter().map(PublicKey::to_hex).collect();
            print(format, &json!({"plugins": plugins, "trusted_keys": keys}), || {
                let mut lines: Vec<String> = plugins.iter().map(describe).collect();
                if lines.is_empty() {
                    lines.push(format!("no plugins installed (`{} plugin install PATH`)", crate::program::name()));
                }
                lines.push(match keys.is_empty() {
                    true => format!("trusted keys: none (`{} plugin trust KEY`)", crate::program::name()),
                    false => format!("trusted keys: {}", keys.join(", ")),
                });
                lines.join("\n")
            });
            Ok(())
        }
        PluginCommand::Remove { name } => {
            store.remove(&name)?;
            print(format, &json!({"removed": name}), || format!("removed {}", safe_line(&name)));
            Ok(())
        }
        PluginCommand::Enable { name } => set_enabled(&store, &name, true, format),
        PluginCommand::Disable { name } => set_enabled(&store, &name, false, format),
        PluginCommand::Call { tool, arguments } => {
            let arguments: serde_json::Value = serde_json::from_str(&arguments)
                .context("the arguments are not JSON; pass an object like '{\"a\": 1}'")?;
            let manager = PluginManager::new();
            for (name, error) in store.load(&manager, &[])? {
                eprintln!("warning: plugin {} was not loaded: {}", safe_line(&name), safe_line(&error.to_string()));
            }
            if !manager.has_tool(&tool) {
                anyhow::bail!(
                    "no enabled plugin has a tool {:?} (`{} plugin list` shows them)",
                    tool.chars().take(80).collect::<String>(),
                    crate::program::name()
                );
            }
            let result = manager.execute(&tool, arguments).await;
            emit_json(&result);
            // The result is printed either way (it is what the model would read); a failure
            // also fails the command, so that scripts can tell.
            match result.get("error").and_then(serde_json::Value::as_str) {
                Some(error) => anyhow::bail!("the call failed: {}", safe_line(error)),
                None => Ok(()),
            }
        }
    }
}

/// `enable` and `disable`.
fn set_enabled(store: &PluginStore<'_>, name: &str, enabled: bool, format: Format) -> anyhow::Result<()> {
    store.set_enabled(name, enabled)?;
    let state = if enabled { "enabled" } else { "disabled" };
    print(format, &json!({"name": name, "enabled": enabled}), || format!("{state} {}", safe_line(name)));
    Ok(())
}

/// One plugin on one line: name, version, state, signer (or UNSIGNED), tools, grants.
fn describe(plugin: &Listed) -> String {
    if plugin.hash.is_empty() {
        // Its record could not be read; the description says so.
        return safe_line(&format!("{}: {}", plugin.name, plugin.description)).into_owned();
    }
    let state = if plugin.enabled { "enabled" } else { "disabled" };
    let signer = match (&plugin.signed_by, plugin.approved) {
        (Some(key), true) => format!("signed by {key}"),
        (Some(key), false) => format!("signed by {key}, came with the space (no permissions until you install it)"),
        (None, true) => "UNSIGNED (installed with --allow-unsigned)".to_string(),
        (None, false) => "UNSIGNED, came with the space (does not load until you install it)".to_string(),
    };
    let granted = if plugin.granted.is_empty() { "none".to_string() } else { plugin.granted.join(", ") };
    safe_line(&format!(
        "{} {}  {state}  {signer}  tools: {}  granted: {granted}",
        plugin.name,
        plugin.version,
        plugin.tools.join(", ")
    ))
    .into_owned()
}

/// A public key given as hex or as a file holding it.
fn read_key(text: &str) -> anyhow::Result<PublicKey> {
    let path = Path::new(text);
    // Anything by that name is read as a key file, which says so if it is none (a
    // directory, a pipe): not taken for a key itself.
    if path.exists() {
        return Ok(PublicKey::read(path)?);
    }
    Ok(PublicKey::parse(text)?)
}
