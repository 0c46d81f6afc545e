//! An installable plugin's bundle: a directory holding `manifest.json`
//! (`crate::manifest`), `plugin.wasm` (the executors, `crate::sandbox`) and, once signed,
//! `signature.json` (`crate::signing`). The same bundle runs wherever WebAssembly does.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::Semaphore;

use crate::executor::{Executor, ToolError};
use crate::manifest::{Manifest, ManifestError, Permission, MAX_MANIFEST_BYTES};
use crate::plugin::Plugin;
use crate::sandbox::{Sandbox, SandboxError, MAX_MODULE_BYTES};
use crate::signing::{Signature, SigningError};

/// The manifest's file in a bundle.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The module's file in a bundle.
pub const MODULE_FILE: &str = "plugin.wasm";
/// The signature's file in a bundle.
pub const SIGNATURE_FILE: &str = "signature.json";
/// The most calls of one plugin that run at once; more wait their turn (each holds a
/// thread and up to its memory cap while it runs).
pub const MAX_CONCURRENT_CALLS: usize = 4;

/// Why a bundle was refused.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// A file cannot be read.
    #[error("cannot read {file} of the bundle {dir}: {source}")]
    Read {
        /// The bundle.
        dir: String,
        /// The file.
        file: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// The bundle is not a directory.
    #[error(
        "{0} is not a directory: a bundle is a directory holding manifest.json and plugin.wasm (and signature.json \
         once signed)"
    )]
    NotADirectory(String),
    /// A file of the bundle is not a regular file (a pipe, a device).
    #[error("{file} of the bundle {dir} is not a regular file")]
    NotAFile {
        /// The bundle.
        dir: String,
        /// The file.
        file: &'static str,
    },
    /// The module is not WebAssembly in its binary format.
    #[error(
        "{MODULE_FILE} of the bundle is not a WebAssembly binary (it starts with \\0asm); compile WebAssembly text \
         first, e.g. `wat2wasm plugin.wat -o plugin.wasm`"
    )]
    NotBinary,
    /// A file is larger than read.
    #[error("{file} of the bundle is larger than {max} bytes")]
    TooLarge {
        /// The file.
        file: &'static str,
        /// Its limit.
        max: usize,
    },
    /// The signature file is not one.
    #[error("{SIGNATURE_FILE} of the bundle is not valid: {0}")]
    BadSignatureFile(String),
    /// The manifest.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The module.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The signature.
    #[error(transparent)]
    Signing(#[from] SigningError),
}

/// A bundle's content, as read (nothing verified yet but the manifest's form).
#[derive(Debug, Clone)]
pub struct Bundle {
    /// The manifest's exact bytes (what is signed).
    pub manifest_bytes: Vec<u8>,
    /// The module's bytes.
    pub module: Vec<u8>,
    /// The signature, if signed.
    pub signature: Option<Signature>,
    /// The parsed manifest.
    pub manifest: Manifest,
}

impl Bundle {
    /// Reads the bundle in `dir`.
    /// The module must be a WebAssembly binary: the web page runs it in the browser, which
    /// takes no other form.
    pub fn read(dir: &Path) -> Result<Bundle, BundleError> {
        if dir.exists() && !dir.is_dir() {
            return Err(BundleError::NotADirectory(dir.display().to_string()));
        }
        let manifest_bytes = read_file(dir, MANIFEST_FILE, MAX_MANIFEST_BYTES)?;
        let module = read_file(dir, MODULE_FILE, MAX_MODULE_BYTES)?;
        if !module.starts_with(b"\0asm") {
            return Err(BundleError::NotBinary);
        }
        let signature = match std::fs::metadata(dir.join(SIGNATURE_FILE)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            _ => {
                let bytes = read_file(dir, SIGNATURE_FILE, 4096)?;
                Some(serde_json::from_slice(&bytes).map_err(|e| BundleError::BadSignatureFile(e.to_string()))?)
            }
        };
        Bundle::from_parts(manifest_bytes, module, signature)
    }

    /// A bundle from its parts (as the store keeps them).
    pub fn from_parts(
        manifest_bytes: Vec<u8>,
        module: Vec<u8>,
        signature: Option<Signature>,
    ) -> Result<Bundle, BundleError> {
        let manifest = Manifest::parse(&manifest_bytes)?;
        Ok(Bundle { manifest_bytes, module, signature, manifest })
    }

    /// The plugin this bundle makes with the permissions `granted`: its tools, each
    /// executed by the module in the sandbox. Refuses what [`Sandbox::new`] refuses.
    pub fn plugin(&self, granted: &[Permission]) -> Result<Plugin, BundleError> {
        let sandbox = Arc::new(Sandbox::new(&self.manifest, &self.module, granted)?);
        let slots = Arc::new(Semaphore::new(MAX_CONCURRENT_CALLS));
        let builder = Plugin::builder(&self.manifest.name, &self.manifest.version);
        let builder = self.manifest.tools.iter().fold(builder, |builder, tool| {
            let executor: Arc<dyn Executor> = Arc::new(WasmExecutor {
                sandbox: Arc::clone(&sandbox),
                export: tool.export().to_string(),
                slots: Arc::clone(&slots),
            });
            builder.tool(tool.definition(), executor)
        });
        Ok(builder.build())
    }
}

/// One tool's executor: a call of its export in the sandbox, on a blocking thread.
struct WasmExecutor {
    sandbox: Arc<Sandbox>,
    export: String,
    /// Shared by the plugin's tools: [`MAX_CONCURRENT_CALLS`] permits.
    slots: Arc<Semaphore>,
}

impl Executor for WasmExecutor {
    fn execute(&self, arguments: Value) -> futures::future::BoxFuture<'static, Result<Value, ToolError>> {
        let (sandbox, export, slots) = (Arc::clone(&self.sandbox), self.export.clone(), Arc::clone(&self.slots));
        Box::pin(async move {
            let slot = slots.acquire_owned().await.map_err(|e| ToolError::new(e.to_string()))?;
            // The sandbox's fuel ends a call that loops; the thread and the slot are then freed.
            let call = move || {
                let _slot = slot;
                sandbox.call(&export, &arguments)
            };
            match tokio::task::spawn_blocking(call).await {
                Ok(result) => result.map_err(|e| ToolError::new(e.to_string())),
                Err(e) => Err(ToolError::new(format!("the plugin's call was lost: {e}"))),
            }
        })
    }
}

fn read_file(dir: &Path, file: &'static str, max: usize) -> Result<Vec<u8>, BundleError> {
    use std::io::Read;
    let error = |source| BundleError::Read { dir: dir.display().to_string(), file, source };
    // Looked at before it is opened: opening a pipe waits for a writer, for ever.
    if !std::fs::metadata(dir.join(file)).map_err(error)?.is_file() {
        return Err(BundleError::NotAFile { dir: dir.display().to_string(), file });
    }
    let opened = std::fs::File::open(dir.join(file)).map_err(error)?;
    let mut bytes = Vec::new();
    // One byte past the limit tells a file at the limit from a larger one.
    opened.take(max as u64 + 1).read_to_end(&mut bytes).map_err(error)?;
    if bytes.len() > max {
        return Err(BundleError::TooLarge { file, max });
    }
    Ok(bytes)
}
