//! What a plugin's module may import: the functions of module `trellis`, each behind a
//! [`Permission`], and the check that refuses a module importing anything else.
//!
//! | import | signature | permission | does |
//! |---|---|---|---|
//! | `trellis.now_ms` | `() -> i64` | `clock` | milliseconds since the Unix epoch |
//! | `trellis.random` | `(ptr: i32, len: i32)` | `random` | fills `len` (≤ 65536) bytes at `ptr` with random bytes |
//! | `trellis.env` | `(name_ptr: i32, name_len: i32, buf_ptr: i32, buf_cap: i32) -> i32` | `env:NAME` | writes the value of NAME (if granted and set) into the buffer, up to `buf_cap` bytes; returns its full length, or -1 |
//!
//! Nothing else is linked: no WASI, no file system, no network, no other environment.
//!
//! Each call costs fuel like the instructions it stands for: 500 units, and a unit per
//! random byte or per 8 bytes copied, so the budget bounds a module that
//! loops on them as it bounds one that loops on its own.

use std::collections::BTreeSet;

use wasmi::{Caller, Extern, ExternType, Linker, Module, TrapCode, ValType};

use super::{HostState, SandboxError};
use crate::manifest::Permission;

/// The module name every import must have.
pub const IMPORT_MODULE: &str = "trellis";

/// The most bytes one `random` call fills.
const MAX_RANDOM_BYTES: usize = 64 * 1024;

/// The longest environment variable name `env` looks up.
const MAX_ENV_NAME: usize = 256;

/// The fuel each call into Trellis costs, beside the bytes it moves: a call does the work
/// of some hundreds of instructions, and without a price a module could loop on it for
/// minutes on a budget meant for milliseconds.
const CALL_FUEL: u64 = 500;

/// How many bytes a host function may copy for one unit of fuel (a made random byte
/// costs a unit of its own).
const BYTES_PER_FUEL: u64 = 8;

/// An import Trellis provides, its signature, and whether `permissions` cover it.
struct HostFn {
    name: &'static str,
    params: &'static [ValType],
    results: &'static [ValType],
    needs: &'static str,
    allowed: fn(&BTreeSet<Permission>) -> bool,
}

const HOST_FNS: [HostFn; 3] = [
    HostFn {
        name: "now_ms",
        params: &[],
        results: &[ValType::I64],
        needs: "clock",
        allowed: |p| p.contains(&Permission::Clock),
    },
    HostFn {
        name: "random",
        params: &[ValType::I32, ValType::I32],
        results: &[],
        needs: "random",
        allowed: |p| p.contains(&Permission::Random),
    },
    HostFn {
        name: "env",
        params: &[ValType::I32, ValType::I32, ValType::I32, ValType::I32],
        results: &[ValType::I32],
        needs: "env:NAME",
        allowed: |p| p.iter().any(|p| matches!(p, Permission::Env(_))),
    },
];

/// Refuses a module that imports anything but the `trellis` functions `permissions`
/// cover, with their exact signatures.
pub(super) fn check_imports(module: &Module, permissions: &BTreeSet<Permission>) -> Result<(), SandboxError> {
    for import in module.imports() {
        let shown = format!("{}.{}", import.module(), import.name());
        let known = (import.module() == IMPORT_MODULE).then(|| HOST_FNS.iter().find(|f| f.name == import.name()));
        let Some(Some(host)) = known else {
            return Err(SandboxError::Import(format!(
                "the module imports `{shown}`, which Trellis does not provide: plugins get only the `trellis` \
                 functions their permissions allow (no file system, network or environment otherwise)"
            )));
        };
        let ExternType::Func(ty) = import.ty() else {
            return Err(SandboxError::Import(format!(
                "the module imports `{shown}` as something other than a function"
            )));
        };
        if ty.params() != host.params || ty.results() != host.results {
            return Err(SandboxError::Import(format!("the module imports `{shown}` with the wrong signature")));
        }
        if !(host.allowed)(permissions) {
            return Err(SandboxError::Import(format!(
                "the module imports `{shown}`, which needs the permission `{}` that the manifest does not ask for",
                host.needs
            )));
        }
    }
    Ok(())
}

/// Links the functions `permissions` allow, and nothing else.
pub(super) fn link(linker: &mut Linker<HostState>, permissions: &BTreeSet<Permission>) -> Result<(), wasmi::Error> {
    if permissions.contains(&Permission::Clock) {
        linker.func_wrap(
            IMPORT_MODULE,
            "now_ms",
            |mut caller: Caller<'_, HostState>| -> Result<i64, wasmi::Error> {
                charge(&mut caller, CALL_FUEL)?;
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                Ok(i64::try_from(now.as_millis()).unwrap_or(i64::MAX))
            },
        )?;
    }
    if permissions.contains(&Permission::Random) {
        linker.func_wrap(
            IMPORT_MODULE,
            "random",
            |mut caller: Caller<'_, HostState>, ptr: i32, len: i32| -> Result<(), wasmi::Error> {
                let len = usize::try_from(len).ok().filter(|&l| l <= MAX_RANDOM_BYTES).ok_or_else(|| {
                    wasmi::Error::new(format!("trellis.random fills at most {MAX_RANDOM_BYTES} bytes"))
                })?;
                charge(&mut caller, CALL_FUEL + len as u64)?;
                let mut bytes = vec![0; len];
                getrandom::fill(&mut bytes).map_err(|e| wasmi::Error::new(format!("no random bytes: {e}")))?;
                write(&mut caller, ptr, &bytes)
            },
        )?;
    }
    if permissions.iter().any(|p| matches!(p, Permission::Env(_))) {
        linker.func_wrap(
            IMPORT_MODULE,
            "env",
            |mut caller: Caller<'_, HostState>, name_ptr: i32, name_len: i32, buf: i32, cap: i32| {
                if usize::try_from(name_len).map_or(true, |len| len > MAX_ENV_NAME) {
                    return Err(wasmi::Error::new(format!("trellis.env takes names of at most {MAX_ENV_NAME} bytes")));
                }
                charge(&mut caller, CALL_FUEL + name_len as u64 / BYTES_PER_FUEL)?;
                let name = read(&mut caller, name_ptr, name_len)?;
                let granted = caller.data().env.iter().any(|allowed| allowed.as_bytes() == name.as_slice());
                let value = std::str::from_utf8(&name).ok().filter(|_| granted).and_then(|n| std::env::var(n).ok());
                let Some(value) = value else { return Ok(-1) };
                let cap = usize::try_from(cap).unwrap_or(0);
                charge(&mut caller, value.len().min(cap) as u64 / BYTES_PER_FUEL)?;
                write(&mut caller, buf, &value.as_bytes()[..value.len().min(cap)])?;
                Ok::<i32, wasmi::Error>(i32::try_from(value.len()).unwrap_or(i32::MAX))
            },
        )?;
    }
    Ok(())
}

/// Takes `fuel` from the call's budget, or ends the call as running out of fuel does.
fn charge(caller: &mut Caller<'_, HostState>, fuel: u64) -> Result<(), wasmi::Error> {
    let left = caller.get_fuel()?;
    caller.set_fuel(left.saturating_sub(fuel))?;
    if left < fuel {
        return Err(wasmi::Error::from(TrapCode::OutOfFuel));
    }
    Ok(())
}

fn memory(caller: &Caller<'_, HostState>) -> Result<wasmi::Memory, wasmi::Error> {
    caller
        .get_export("memory")
        .and_then(Extern::into_memory)
        .ok_or_else(|| wasmi::Error::new("the module exports no `memory`"))
}

fn read(caller: &mut Caller<'_, HostState>, ptr: i32, len: i32) -> Result<Vec<u8>, wasmi::Error> {
    let memory = memory(caller)?;
    let range = super::range(ptr as u32, len as u32, memory.data_size(&*caller))
        .ok_or_else(|| wasmi::Error::new("a pointer passed to a trellis function is outside the module's memory"))?;
    Ok(memory.data(&*caller)[range].to_vec())
}

fn write(caller: &mut Caller<'_, HostState>, ptr: i32, bytes: &[u8]) -> Result<(), wasmi::Error> {
    let memory = memory(caller)?;
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    let range = super::range(ptr as u32, len, memory.data_size(&*caller))
        .ok_or_else(|| wasmi::Error::new("a pointer passed to a trellis function is outside the module's memory"))?;
    memory.data_mut(&mut *caller)[range].copy_from_slice(bytes);
    Ok(())
}
