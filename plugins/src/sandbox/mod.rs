//! The sandbox an installable plugin's executors run in: a WebAssembly module in wasmi,
//! with a fuel budget, a memory cap, and only the imports its permissions allow
//! ([`host`]).
//!
//! # The ABI
//!
//! A plugin module exports:
//!
//! - `memory`: its linear memory;
//! - `alloc(len: i32) -> i32`: reserves `len` bytes and returns where they start;
//! - for each tool, the function the manifest names as its `export` (default: the tool's
//!   name), `(ptr: i32, len: i32) -> i64`: the tool's arguments are `len` bytes of UTF-8
//!   JSON at `ptr` (placed there through `alloc`); it returns where its result is, packed
//!   as `(result_ptr << 32) | result_len`, the result being UTF-8 JSON (at most 1 MiB).
//!   That JSON is what the model reads; to report a failure, return `{"error": "..."}`.
//!
//! Every call runs in a fresh instance: nothing survives from one call to the next, so a
//! module may allocate without ever freeing. A call that runs out of fuel (it loops), traps,
//! grows its memory past the cap, or breaks the ABI ends in an error the model reads.

pub mod host;

use std::collections::BTreeSet;
use std::ops::Range;

use serde_json::Value;
use wasmi::{Config, EnforcedLimits, Engine, ExternType, Linker, Module, ResourceLimiter, Store, TrapCode, ValType};

use crate::manifest::{Manifest, Permission};

/// Fuel for one call unless the manifest asks for less (about one unit per instruction,
/// and per 64 bytes a bulk memory instruction moves: a fraction of a second of work). A
/// manifest may not ask for more: a bundle would raise its own budget without the user
/// ever deciding so.
pub const DEFAULT_FUEL: u64 = 50_000_000;
/// The least fuel a manifest may ask for: less, and a call could not even place its
/// arguments (every call would fail).
pub const MIN_FUEL: u64 = 10_000;
/// Linear memory for one call unless the manifest asks for less, in MiB; nor more (as
/// with [`DEFAULT_FUEL`]).
pub const DEFAULT_MEMORY_MIB: u32 = 32;
/// The largest module accepted.
pub const MAX_MODULE_BYTES: usize = 8 * 1024 * 1024;
/// The largest arguments or result passed through the ABI.
pub const MAX_JSON_BYTES: usize = 1024 * 1024;
/// The most table elements a call may have.
const MAX_TABLE_ELEMENTS: usize = 10_000;

/// Why a module was refused or a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// The manifest asks for a permission the user did not grant.
    #[error(
        "plugin `{plugin}` asks for the permission `{permission}`, which you did not grant (install it with --grant \
         {permission} if you trust it)"
    )]
    NotGranted {
        /// The plugin.
        plugin: String,
        /// The permission.
        permission: Permission,
    },
    /// The module imports something not allowed.
    #[error("{0}")]
    Import(String),
    /// The module is not valid WebAssembly, too large, or lacks an ABI export.
    #[error("the plugin's module cannot be used: {0}")]
    Module(String),
    /// A call ran out of fuel.
    #[error("the plugin used up its budget of {0} fuel units and was stopped (does it loop forever?)")]
    OutOfFuel(u64),
    /// A call grew its memory past the cap.
    #[error("the plugin went past its memory cap of {0} MiB and was stopped")]
    OutOfMemory(u32),
    /// A call trapped or broke the ABI.
    #[error("the plugin failed: {0}")]
    Failed(String),
}

/// What a running call's store holds: the memory cap and the environment variables granted.
pub(crate) struct HostState {
    cap: MemoryCap,
    env: Vec<String>,
}

/// The memory cap, remembering whether it was hit (so the error can say so).
struct MemoryCap {
    max_bytes: usize,
    hit: bool,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> Result<bool, wasmi_core::LimiterError> {
        if desired > self.max_bytes {
            self.hit = true;
            return Err(wasmi_core::LimiterError::ResourceLimiterDeniedAllocation);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> Result<bool, wasmi_core::LimiterError> {
        Ok(desired <= MAX_TABLE_ELEMENTS)
    }

    fn instances(&self) -> usize {
        1
    }
    fn tables(&self) -> usize {
        1
    }
    fn memories(&self) -> usize {
        1
    }
}

/// A checked, compiled plugin module, ready to run calls.
pub struct Sandbox {
    engine: Engine,
    module: Module,
    linker: Linker<HostState>,
    env: Vec<String>,
    fuel: u64,
    memory_mib: u32,
}

impl Sandbox {
    /// Checks and compiles `wasm` for `manifest`, with the permissions the user `granted`:
    /// refuses a manifest asking for a permission not granted, a module importing anything
    /// its manifest's permissions do not cover, and a module without the ABI's exports.
    pub fn new(manifest: &Manifest, wasm: &[u8], granted: &[Permission]) -> Result<Sandbox, SandboxError> {
        if let Some(permission) = manifest.permissions.iter().find(|p| !granted.contains(p)) {
            return Err(SandboxError::NotGranted { plugin: manifest.name.clone(), permission: permission.clone() });
        }
        if wasm.len() > MAX_MODULE_BYTES {
            return Err(SandboxError::Module(format!("it has {} bytes; at most {MAX_MODULE_BYTES}", wasm.len())));
        }
        let mut config = Config::default();
        // Strict structure limits guard compilation itself against hostile modules.
        config.consume_fuel(true).enforced_limits(EnforcedLimits::strict());
        let engine = Engine::new(&config);
        let module = Module::new(&engine, wasm).map_err(|e| SandboxError::Module(e.to_string()))?;
        let permissions: BTreeSet<Permission> = manifest.permissions.iter().cloned().collect();
        host::check_imports(&module, &permissions)?;
        check_exports(&module, manifest)?;
        let mut linker = Linker::new(&engine);
        host::link(&mut linker, &permissions).map_err(|e| SandboxError::Module(e.to_string()))?;
        let env = permissions
            .iter()
            .filter_map(|p| match p {
                Permission::Env(name) => Some(name.clone()),
                _ => None,
            })
            .collect();
        Ok(Sandbox {
            engine,
            module,
            linker,
            env,
            fuel: manifest.limits.fuel.unwrap_or(DEFAULT_FUEL),
            memory_mib: manifest.limits.memory_mib.unwrap_or(DEFAULT_MEMORY_MIB),
        })
    }

    /// Runs the exported function `export` with `arguments` in a fresh instance (see the
    /// ABI above). Blocks until it returns or its fuel runs out.
    pub fn call(&self, export: &str, arguments: &Value) -> Result<Value, SandboxError> {
        let input = serde_json::to_vec(arguments).map_err(|e| SandboxError::Failed(e.to_string()))?;
        if input.len() > MAX_JSON_BYTES {
            return Err(SandboxError::Failed(format!("the arguments are larger than {MAX_JSON_BYTES} bytes")));
        }
        let max_bytes = usize::try_from(self.memory_mib).unwrap_or(usize::MAX).saturating_mul(1024 * 1024);
        let state = HostState { cap: MemoryCap { max_bytes, hit: false }, env: self.env.clone() };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.cap);
        store.set_fuel(self.fuel).map_err(|e| SandboxError::Failed(e.to_string()))?;
        let outcome = self.run(&mut store, export, &input);
        outcome.map_err(|e| self.explain(&store, e))
    }

    fn run(&self, store: &mut Store<HostState>, export: &str, input: &[u8]) -> Result<Value, wasmi::Error> {
        let instance = self.linker.instantiate_and_start(&mut *store, &self.module)?;
        let memory = instance
            .get_memory(&*store, "memory")
            .ok_or_else(|| wasmi::Error::new("the module exports no `memory`"))?;
        let alloc = instance.get_typed_func::<i32, i32>(&*store, "alloc")?;
        let tool = instance.get_typed_func::<(i32, i32), i64>(&*store, export)?;
        let len = u32::try_from(input.len()).map_err(|_| wasmi::Error::new("the arguments are too large"))?;
        let ptr = alloc.call(&mut *store, len as i32)?;
        let at = range(ptr as u32, len, memory.data_size(&*store))
            .ok_or_else(|| wasmi::Error::new("`alloc` returned space outside the module's memory"))?;
        memory.data_mut(&mut *store)[at].copy_from_slice(input);
        let packed = tool.call(&mut *store, (ptr, len as i32))? as u64;
        let (result_ptr, result_len) = ((packed >> 32) as u32, packed as u32);
        if result_len as usize > MAX_JSON_BYTES {
            return Err(wasmi::Error::new(format!("its result is larger than {MAX_JSON_BYTES} bytes")));
        }
        let at = range(result_ptr, result_len, memory.data_size(&*store))
            .ok_or_else(|| wasmi::Error::new("it returned a result outside its memory"))?;
        serde_json::from_slice(&memory.data(&*store)[at])
            .map_err(|e| wasmi::Error::new(format!("its result is not JSON: {e}")))
    }

    /// The error a failed call reports: fuel and memory first, since wasmi reports those as
    /// plain traps.
    fn explain(&self, store: &Store<HostState>, error: wasmi::Error) -> SandboxError {
        if store.data().cap.hit {
            SandboxError::OutOfMemory(self.memory_mib)
        } else if error.as_trap_code() == Some(TrapCode::OutOfFuel) {
            SandboxError::OutOfFuel(self.fuel)
        } else {
            SandboxError::Failed(error.to_string())
        }
    }
}

/// `ptr..ptr + len` if it lies within `size` bytes.
fn range(ptr: u32, len: u32, size: usize) -> Option<Range<usize>> {
    let start = usize::try_from(ptr).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    (end <= size).then_some(start..end)
}

/// Refuses a module without the ABI's exports: `memory`, `alloc`, and each tool's function.
fn check_exports(module: &Module, manifest: &Manifest) -> Result<(), SandboxError> {
    let find = |name: &str| module.exports().find(|e| e.name() == name).map(|e| e.ty().clone());
    let function = |name: &str, params: &[ValType], results: &[ValType]| match find(name) {
        Some(ExternType::Func(ty)) if ty.params() == params && ty.results() == results => Ok(()),
        Some(_) => Err(SandboxError::Module(format!("its export `{name}` does not have the ABI's signature"))),
        None => Err(SandboxError::Module(format!("it does not export `{name}`"))),
    };
    if !matches!(find("memory"), Some(ExternType::Memory(_))) {
        return Err(SandboxError::Module("it does not export its `memory`".to_string()));
    }
    function("alloc", &[ValType::I32], &[ValType::I32])?;
    for tool in &manifest.tools {
        function(tool.export(), &[ValType::I32, ValType::I32], &[ValType::I64])?;
    }
    Ok(())
}
