//! The HSA runtime (`libhsa-runtime64.so`), loaded at run time: the types, constants and entry
//! points this crate uses, as `hsa.h` and `hsa_ext_amd.h` declare them (HSA 1.2 names, ROCm 5
//! and later). Nothing links against it, so the crate builds and its tests run on machines
//! without ROCm; [`hsa`] then reports why the library could not be opened.
//!
//! `POOT_HSA_LIBRARY` names a file to load instead of the usual names; `ROCM_PATH` (else
//! `/opt/rocm`) is searched after the loader's own path.

use std::ffi::{CStr, c_char, c_void};
use std::sync::OnceLock;

use libloading::Library;

/// The environment variable naming the HSA runtime library to load.
pub const HSA_LIBRARY_ENV: &str = "POOT_HSA_LIBRARY";

/// `hsa_status_t`.
pub(crate) type Status = u32;
pub(crate) const STATUS_SUCCESS: Status = 0x0;
pub(crate) const STATUS_ERROR_OUT_OF_RESOURCES: Status = 0x1008;
/// A queue error caused by a hardware exception (a kernel's trap, an illegal instruction).
pub(crate) const STATUS_ERROR_EXCEPTION: Status = 0x1016;

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
        pub(crate) struct $name {
            pub(crate) handle: u64,
        }
    };
}

handle!(
    /// `hsa_agent_t`.
    Agent
);
handle!(
    /// `hsa_signal_t`.
    Signal
);
handle!(
    /// `hsa_amd_memory_pool_t`.
    MemoryPool
);
handle!(
    /// `hsa_executable_t`.
    Executable
);
handle!(
    /// `hsa_code_object_reader_t`.
    CodeObjectReader
);
handle!(
    /// `hsa_loaded_code_object_t`.
    LoadedCodeObject
);
handle!(
    /// `hsa_executable_symbol_t`.
    ExecutableSymbol
);

/// `hsa_queue_t` (64-bit, little-endian): the ring of `size` 64-byte packets at `base_address`
/// and the doorbell signal the host writes a packet's index to.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Queue {
    pub(crate) queue_type: u32,
    pub(crate) features: u32,
    pub(crate) base_address: *mut c_void,
    pub(crate) doorbell_signal: Signal,
    pub(crate) size: u32,
    pub(crate) reserved1: u32,
    pub(crate) id: u64,
}

/// `hsa_amd_event_t` for its one event type, a GPU memory fault.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) event_type: u32,
    pub(crate) fault_agent: Agent,
    pub(crate) virtual_address: u64,
    pub(crate) fault_reason_mask: u32,
}

/// `HSA_AMD_GPU_MEMORY_FAULT_EVENT`.
pub(crate) const EVENT_GPU_MEMORY_FAULT: u32 = 0;

// `hsa_agent_info_t` and `hsa_amd_agent_info_t`.
pub(crate) const AGENT_INFO_NAME: u32 = 0;
pub(crate) const AGENT_INFO_WORKGROUP_MAX_SIZE: u32 = 8;
pub(crate) const AGENT_INFO_GRID_MAX_DIM: u32 = 9;
pub(crate) const AGENT_INFO_QUEUE_MAX_SIZE: u32 = 14;
pub(crate) const AGENT_INFO_DEVICE: u32 = 17;
pub(crate) const AMD_AGENT_INFO_COMPUTE_UNIT_COUNT: u32 = 0xA002;
pub(crate) const AMD_AGENT_INFO_PRODUCT_NAME: u32 = 0xA009;
/// `hsa_device_type_t`.
pub(crate) const DEVICE_TYPE_CPU: u32 = 0;
pub(crate) const DEVICE_TYPE_GPU: u32 = 1;

/// `HSA_QUEUE_TYPE_SINGLE`: one host thread writes the queue (the device's, behind `&mut`).
pub(crate) const QUEUE_TYPE_SINGLE: u32 = 1;

// `hsa_amd_memory_pool_info_t`, `hsa_amd_segment_t` and the global pool flags.
pub(crate) const POOL_INFO_SEGMENT: u32 = 0;
pub(crate) const POOL_INFO_GLOBAL_FLAGS: u32 = 1;
pub(crate) const POOL_INFO_SIZE: u32 = 2;
pub(crate) const POOL_INFO_RUNTIME_ALLOC_ALLOWED: u32 = 5;
pub(crate) const POOL_INFO_ALLOC_MAX_SIZE: u32 = 16;
pub(crate) const SEGMENT_GLOBAL: u32 = 0;
pub(crate) const SEGMENT_GROUP: u32 = 3;
pub(crate) const POOL_FLAG_KERNARG_INIT: u32 = 1;
pub(crate) const POOL_FLAG_FINE_GRAINED: u32 = 2;
pub(crate) const POOL_FLAG_COARSE_GRAINED: u32 = 4;

// `hsa_executable_symbol_info_t`.
pub(crate) const SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE: u32 = 11;
pub(crate) const SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT: u32 = 12;
pub(crate) const SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE: u32 = 13;
pub(crate) const SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE: u32 = 14;
pub(crate) const SYMBOL_INFO_KERNEL_OBJECT: u32 = 22;

/// `HSA_PROFILE_FULL` and `HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT`, for executables.
pub(crate) const PROFILE_FULL: u32 = 1;
pub(crate) const ROUNDING_DEFAULT: u32 = 0;

pub(crate) type AgentCallback = unsafe extern "C" fn(Agent, *mut c_void) -> Status;
pub(crate) type PoolCallback = unsafe extern "C" fn(MemoryPool, *mut c_void) -> Status;
pub(crate) type QueueCallback = unsafe extern "C" fn(Status, *mut Queue, *mut c_void);
pub(crate) type EventCallback = unsafe extern "C" fn(*const Event, *mut c_void) -> Status;

/// The HSA entry points poot calls.
pub(crate) struct Hsa {
    pub(crate) init: unsafe extern "C" fn() -> Status,
    pub(crate) status_string: unsafe extern "C" fn(Status, *mut *const c_char) -> Status,
    pub(crate) iterate_agents: unsafe extern "C" fn(AgentCallback, *mut c_void) -> Status,
    pub(crate) agent_get_info: unsafe extern "C" fn(Agent, u32, *mut c_void) -> Status,
    pub(crate) queue_create: unsafe extern "C" fn(
        Agent,
        u32,
        u32,
        Option<QueueCallback>,
        *mut c_void,
        u32,
        u32,
        *mut *mut Queue,
    ) -> Status,
    pub(crate) queue_destroy: unsafe extern "C" fn(*mut Queue) -> Status,
    pub(crate) queue_load_read_index: unsafe extern "C" fn(*const Queue) -> u64,
    pub(crate) queue_add_write_index: unsafe extern "C" fn(*const Queue, u64) -> u64,
    pub(crate) signal_create: unsafe extern "C" fn(i64, u32, *const Agent, *mut Signal) -> Status,
    pub(crate) signal_destroy: unsafe extern "C" fn(Signal) -> Status,
    pub(crate) signal_load: unsafe extern "C" fn(Signal) -> i64,
    pub(crate) signal_store: unsafe extern "C" fn(Signal, i64),
    pub(crate) signal_add: unsafe extern "C" fn(Signal, i64),
    pub(crate) executable_create:
        unsafe extern "C" fn(u32, u32, *const c_char, *mut Executable) -> Status,
    pub(crate) reader_create:
        unsafe extern "C" fn(*const c_void, usize, *mut CodeObjectReader) -> Status,
    pub(crate) reader_destroy: unsafe extern "C" fn(CodeObjectReader) -> Status,
    pub(crate) executable_load: unsafe extern "C" fn(
        Executable,
        Agent,
        CodeObjectReader,
        *const c_char,
        *mut LoadedCodeObject,
    ) -> Status,
    pub(crate) executable_freeze: unsafe extern "C" fn(Executable, *const c_char) -> Status,
    pub(crate) executable_destroy: unsafe extern "C" fn(Executable) -> Status,
    pub(crate) executable_symbol: unsafe extern "C" fn(
        Executable,
        *const c_char,
        *const Agent,
        *mut ExecutableSymbol,
    ) -> Status,
    pub(crate) symbol_get_info: unsafe extern "C" fn(ExecutableSymbol, u32, *mut c_void) -> Status,
    pub(crate) iterate_pools: unsafe extern "C" fn(Agent, PoolCallback, *mut c_void) -> Status,
    pub(crate) pool_get_info: unsafe extern "C" fn(MemoryPool, u32, *mut c_void) -> Status,
    pub(crate) pool_allocate:
        unsafe extern "C" fn(MemoryPool, usize, u32, *mut *mut c_void) -> Status,
    pub(crate) pool_free: unsafe extern "C" fn(*mut c_void) -> Status,
    pub(crate) allow_access:
        unsafe extern "C" fn(u32, *const Agent, *const u32, *const c_void) -> Status,
    pub(crate) async_copy: unsafe extern "C" fn(
        *mut c_void,
        Agent,
        *const c_void,
        Agent,
        usize,
        u32,
        *const Signal,
        Signal,
    ) -> Status,
    pub(crate) register_event_handler: unsafe extern "C" fn(EventCallback, *mut c_void) -> Status,
    /// Where the library was found.
    pub(crate) path: String,
    // Keeps the symbols above valid.
    _lib: Library,
}

/// The library names tried after `POOT_HSA_LIBRARY`: the loader's path, then the ROCm tree.
fn candidates() -> Vec<String> {
    let mut names: Vec<String> = std::env::var(HSA_LIBRARY_ENV).ok().into_iter().collect();
    names.extend(["libhsa-runtime64.so.1", "libhsa-runtime64.so"].map(String::from));
    let root = std::env::var("ROCM_PATH").unwrap_or_else(|_| "/opt/rocm".to_string());
    names.push(format!("{root}/lib/libhsa-runtime64.so.1"));
    names
}

/// Loads the HSA runtime once per process and initializes it (`hsa_init`); the reason it is not
/// usable otherwise.
pub(crate) fn hsa() -> Result<&'static Hsa, String> {
    static HSA: OnceLock<Result<Hsa, String>> = OnceLock::new();
    HSA.get_or_init(|| {
        let hsa = load()?;
        // SAFETY: initializes the runtime (reference-counted; never shut down, as the runtime's
        // threads may still report to callbacks this process registered).
        let status = unsafe { (hsa.init)() };
        if status != STATUS_SUCCESS {
            return Err(format!(
                "hsa_init: {} (is the amdgpu kernel driver loaded, and /dev/kfd readable?)",
                hsa.status_text(status)
            ));
        }
        Ok(hsa)
    })
    .as_ref()
    .map_err(Clone::clone)
}

fn load() -> Result<Hsa, String> {
    let mut tried = Vec::new();
    let mut found = None;
    for name in candidates() {
        // SAFETY: loading the HSA runtime runs its (trusted) initializers; nothing else.
        match unsafe { Library::new(&name) } {
            Ok(lib) => {
                found = Some((lib, name));
                break;
            }
            Err(e) => tried.push(format!("{name}: {e}")),
        }
    }
    let Some((lib, path)) = found else {
        return Err(format!(
            "the HSA runtime (libhsa-runtime64.so.1) was not found ({}); install ROCm or set {HSA_LIBRARY_ENV} to its path",
            tried.join("; ")
        ));
    };
    /// One symbol as a function pointer of type `T`.
    fn sym<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
        // SAFETY: every `T` here is the C signature `hsa.h`/`hsa_ext_amd.h` declare for `name`.
        unsafe { lib.get::<T>(name.as_bytes()) }
            .map(|s| *s)
            .map_err(|e| format!("the HSA runtime has no `{name}`: {e}"))
    }
    Ok(Hsa {
        init: sym(&lib, "hsa_init")?,
        status_string: sym(&lib, "hsa_status_string")?,
        iterate_agents: sym(&lib, "hsa_iterate_agents")?,
        agent_get_info: sym(&lib, "hsa_agent_get_info")?,
        queue_create: sym(&lib, "hsa_queue_create")?,
        queue_destroy: sym(&lib, "hsa_queue_destroy")?,
        queue_load_read_index: sym(&lib, "hsa_queue_load_read_index_scacquire")?,
        queue_add_write_index: sym(&lib, "hsa_queue_add_write_index_scacq_screl")?,
        signal_create: sym(&lib, "hsa_signal_create")?,
        signal_destroy: sym(&lib, "hsa_signal_destroy")?,
        signal_load: sym(&lib, "hsa_signal_load_scacquire")?,
        signal_store: sym(&lib, "hsa_signal_store_screlease")?,
        signal_add: sym(&lib, "hsa_signal_add_scacq_screl")?,
        executable_create: sym(&lib, "hsa_executable_create_alt")?,
        reader_create: sym(&lib, "hsa_code_object_reader_create_from_memory")?,
        reader_destroy: sym(&lib, "hsa_code_object_reader_destroy")?,
        executable_load: sym(&lib, "hsa_executable_load_agent_code_object")?,
        executable_freeze: sym(&lib, "hsa_executable_freeze")?,
        executable_destroy: sym(&lib, "hsa_executable_destroy")?,
        executable_symbol: sym(&lib, "hsa_executable_get_symbol_by_name")?,
        symbol_get_info: sym(&lib, "hsa_executable_symbol_get_info")?,
        iterate_pools: sym(&lib, "hsa_amd_agent_iterate_memory_pools")?,
        pool_get_info: sym(&lib, "hsa_amd_memory_pool_get_info")?,
        pool_allocate: sym(&lib, "hsa_amd_memory_pool_allocate")?,
        pool_free: sym(&lib, "hsa_amd_memory_pool_free")?,
        allow_access: sym(&lib, "hsa_amd_agents_allow_access")?,
        async_copy: sym(&lib, "hsa_amd_memory_async_copy")?,
        register_event_handler: sym(&lib, "hsa_amd_register_system_event_handler")?,
        path,
        _lib: lib,
    })
}

impl Hsa {
    /// The runtime's text for `status`, e.g. `HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation
    /// resulted in a hardware exception.`, with the code.
    pub(crate) fn status_text(&self, status: Status) -> String {
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: valid out-pointer; the runtime returns a static string or an error.
        let r = unsafe { (self.status_string)(status, &mut text) };
        if r == STATUS_SUCCESS && !text.is_null() {
            // SAFETY: a NUL-terminated static string from the runtime.
            let s = unsafe { CStr::from_ptr(text) }.to_string_lossy();
            format!("{s} ({status:#x})")
        } else {
            format!("HSA status {status:#x}")
        }
    }

    /// Agent attribute `attr` as a `T` (the type `hsa.h` gives it).
    pub(crate) fn agent_info<T: Copy + Default>(
        &self,
        agent: Agent,
        attr: u32,
    ) -> Result<T, String> {
        let mut v = T::default();
        // SAFETY: `T` is the attribute's declared type, so the runtime writes within `v`.
        let r = unsafe { (self.agent_get_info)(agent, attr, (&mut v as *mut T).cast()) };
        if r == STATUS_SUCCESS {
            Ok(v)
        } else {
            Err(format!(
                "hsa_agent_get_info({attr:#x}): {}",
                self.status_text(r)
            ))
        }
    }

    /// A string attribute of `agent` stored in a fixed 64-byte field (names).
    pub(crate) fn agent_name(&self, agent: Agent, attr: u32) -> Result<String, String> {
        let mut bytes = [0u8; 64];
        // SAFETY: both name attributes are `char[64]`.
        let r = unsafe { (self.agent_get_info)(agent, attr, bytes.as_mut_ptr().cast()) };
        if r != STATUS_SUCCESS {
            return Err(format!(
                "hsa_agent_get_info({attr:#x}): {}",
                self.status_text(r)
            ));
        }
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        Ok(String::from_utf8_lossy(&bytes[..end]).trim().to_string())
    }

    /// Memory pool attribute `attr` as a `T`.
    pub(crate) fn pool_info<T: Copy + Default>(
        &self,
        pool: MemoryPool,
        attr: u32,
    ) -> Result<T, String> {
        let mut v = T::default();
        // SAFETY: `T` is the attribute's declared type.
        let r = unsafe { (self.pool_get_info)(pool, attr, (&mut v as *mut T).cast()) };
        if r == STATUS_SUCCESS {
            Ok(v)
        } else {
            Err(format!(
                "hsa_amd_memory_pool_get_info({attr}): {}",
                self.status_text(r)
            ))
        }
    }

    /// Every agent, in the runtime's order.
    pub(crate) fn agents(&self) -> Result<Vec<Agent>, String> {
        unsafe extern "C" fn push(agent: Agent, data: *mut c_void) -> Status {
            // SAFETY: `data` is the `Vec<Agent>` passed below, alive for the iteration.
            unsafe { (*data.cast::<Vec<Agent>>()).push(agent) };
            STATUS_SUCCESS
        }
        let mut agents: Vec<Agent> = Vec::new();
        // SAFETY: the callback only pushes into `agents`, which outlives the call.
        let r = unsafe { (self.iterate_agents)(push, (&mut agents as *mut Vec<Agent>).cast()) };
        if r != STATUS_SUCCESS {
            return Err(format!("hsa_iterate_agents: {}", self.status_text(r)));
        }
        Ok(agents)
    }

    /// Every memory pool of `agent`.
    pub(crate) fn pools(&self, agent: Agent) -> Result<Vec<MemoryPool>, String> {
        unsafe extern "C" fn push(pool: MemoryPool, data: *mut c_void) -> Status {
            // SAFETY: `data` is the `Vec<MemoryPool>` passed below.
            unsafe { (*data.cast::<Vec<MemoryPool>>()).push(pool) };
            STATUS_SUCCESS
        }
        let mut pools: Vec<MemoryPool> = Vec::new();
        // SAFETY: the callback only pushes into `pools`, which outlives the call.
        let r = unsafe {
            (self.iterate_pools)(agent, push, (&mut pools as *mut Vec<MemoryPool>).cast())
        };
        if r != STATUS_SUCCESS {
            return Err(format!(
                "hsa_amd_agent_iterate_memory_pools: {}",
                self.status_text(r)
            ));
        }
        Ok(pools)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_those_of_the_c_headers() {
        // hsa_queue_t on a 64-bit little-endian host.
        assert_eq!(std::mem::size_of::<Queue>(), 40);
        assert_eq!(std::mem::offset_of!(Queue, base_address), 8);
        assert_eq!(std::mem::offset_of!(Queue, doorbell_signal), 16);
        assert_eq!(std::mem::offset_of!(Queue, size), 24);
        assert_eq!(std::mem::offset_of!(Queue, id), 32);
        // hsa_amd_event_t's memory-fault member.
        assert_eq!(std::mem::offset_of!(Event, fault_agent), 8);
        assert_eq!(std::mem::offset_of!(Event, virtual_address), 16);
        assert_eq!(std::mem::offset_of!(Event, fault_reason_mask), 24);
    }

    /// The constants and layouts here, and the dispatch packet's fields as `crate::packet`
    /// writes them, checked by the C compiler against ROCm's own headers where they are
    /// installed (Debian's `libhsa-runtime-dev`; CI installs it); a SKIP line elsewhere.
    #[test]
    fn the_hsa_headers_agree() {
        let header = std::path::Path::new("/usr/include/hsa/hsa.h");
        if !header.exists() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI installs libhsa-runtime-dev for this check"
            );
            println!("SKIP: no /usr/include/hsa/hsa.h (apt-get install libhsa-runtime-dev)");
            return;
        }
        let checks = [
            ("HSA_STATUS_SUCCESS", STATUS_SUCCESS),
            (
                "HSA_STATUS_ERROR_OUT_OF_RESOURCES",
                STATUS_ERROR_OUT_OF_RESOURCES,
            ),
            ("HSA_STATUS_ERROR_EXCEPTION", STATUS_ERROR_EXCEPTION),
            ("HSA_AMD_GPU_MEMORY_FAULT_EVENT", EVENT_GPU_MEMORY_FAULT),
            ("HSA_AGENT_INFO_NAME", AGENT_INFO_NAME),
            (
                "HSA_AGENT_INFO_WORKGROUP_MAX_SIZE",
                AGENT_INFO_WORKGROUP_MAX_SIZE,
            ),
            ("HSA_AGENT_INFO_GRID_MAX_DIM", AGENT_INFO_GRID_MAX_DIM),
            ("HSA_AGENT_INFO_QUEUE_MAX_SIZE", AGENT_INFO_QUEUE_MAX_SIZE),
            ("HSA_AGENT_INFO_DEVICE", AGENT_INFO_DEVICE),
            (
                "HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT",
                AMD_AGENT_INFO_COMPUTE_UNIT_COUNT,
            ),
            (
                "HSA_AMD_AGENT_INFO_PRODUCT_NAME",
                AMD_AGENT_INFO_PRODUCT_NAME,
            ),
            ("HSA_DEVICE_TYPE_CPU", DEVICE_TYPE_CPU),
            ("HSA_DEVICE_TYPE_GPU", DEVICE_TYPE_GPU),
            ("HSA_QUEUE_TYPE_SINGLE", QUEUE_TYPE_SINGLE),
            ("HSA_AMD_MEMORY_POOL_INFO_SEGMENT", POOL_INFO_SEGMENT),
            (
                "HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS",
                POOL_INFO_GLOBAL_FLAGS,
            ),
            ("HSA_AMD_MEMORY_POOL_INFO_SIZE", POOL_INFO_SIZE),
            (
                "HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED",
                POOL_INFO_RUNTIME_ALLOC_ALLOWED,
            ),
            (
                "HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE",
                POOL_INFO_ALLOC_MAX_SIZE,
            ),
            ("HSA_AMD_SEGMENT_GLOBAL", SEGMENT_GLOBAL),
            ("HSA_AMD_SEGMENT_GROUP", SEGMENT_GROUP),
            (
                "HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT",
                POOL_FLAG_KERNARG_INIT,
            ),
            (
                "HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED",
                POOL_FLAG_FINE_GRAINED,
            ),
            (
                "HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED",
                POOL_FLAG_COARSE_GRAINED,
            ),
            (
                "HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE",
                SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
            ),
            (
                "HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT",
                SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT,
            ),
            (
                "HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE",
                SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE,
            ),
            (
                "HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE",
                SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE,
            ),
            (
                "HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT",
                SYMBOL_INFO_KERNEL_OBJECT,
            ),
            ("HSA_PROFILE_FULL", PROFILE_FULL),
            ("HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT", ROUNDING_DEFAULT),
            // What `crate::packet` writes.
            ("HSA_PACKET_TYPE_KERNEL_DISPATCH", 2),
            ("HSA_PACKET_HEADER_BARRIER", 8),
            ("HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE", 9),
            ("HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE", 11),
            ("HSA_FENCE_SCOPE_AGENT", 1),
            ("HSA_FENCE_SCOPE_SYSTEM", 2),
            ("HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS", 0),
            ("sizeof(hsa_kernel_dispatch_packet_t)", 64),
            (
                "offsetof(hsa_kernel_dispatch_packet_t, workgroup_size_x)",
                4,
            ),
            ("offsetof(hsa_kernel_dispatch_packet_t, grid_size_x)", 12),
            (
                "offsetof(hsa_kernel_dispatch_packet_t, private_segment_size)",
                24,
            ),
            (
                "offsetof(hsa_kernel_dispatch_packet_t, group_segment_size)",
                28,
            ),
            ("offsetof(hsa_kernel_dispatch_packet_t, kernel_object)", 32),
            (
                "offsetof(hsa_kernel_dispatch_packet_t, kernarg_address)",
                40,
            ),
            (
                "offsetof(hsa_kernel_dispatch_packet_t, completion_signal)",
                56,
            ),
            ("sizeof(hsa_queue_t)", std::mem::size_of::<Queue>() as u32),
            (
                "offsetof(hsa_queue_t, base_address)",
                std::mem::offset_of!(Queue, base_address) as u32,
            ),
            (
                "offsetof(hsa_queue_t, doorbell_signal)",
                std::mem::offset_of!(Queue, doorbell_signal) as u32,
            ),
            (
                "offsetof(hsa_queue_t, size)",
                std::mem::offset_of!(Queue, size) as u32,
            ),
            (
                "offsetof(hsa_amd_event_t, memory_fault.agent)",
                std::mem::offset_of!(Event, fault_agent) as u32,
            ),
            (
                "offsetof(hsa_amd_event_t, memory_fault.virtual_address)",
                std::mem::offset_of!(Event, virtual_address) as u32,
            ),
            (
                "offsetof(hsa_amd_event_t, memory_fault.fault_reason_mask)",
                std::mem::offset_of!(Event, fault_reason_mask) as u32,
            ),
        ];
        let mut c = String::from(
            "#include <stddef.h>\n#include <hsa/hsa.h>\n#include <hsa/hsa_ext_amd.h>\n",
        );
        for (what, value) in checks {
            c.push_str(&format!(
                "_Static_assert(({what}) == {value}u, \"{what}\");\n"
            ));
        }
        let dir = std::env::temp_dir().join(format!("poot-hsa-header-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let file = dir.join("check.c");
        std::fs::write(&file, &c).unwrap_or_else(|e| panic!("{e}"));
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
        let out = std::process::Command::new(&cc)
            .arg("-fsyntax-only")
            .arg(&file)
            .output();
        let _ = std::fs::remove_dir_all(&dir);
        let out = out.unwrap_or_else(|e| panic!("`{cc}` does not run: {e}"));
        assert!(
            out.status.success(),
            "the HSA headers disagree:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn a_named_library_is_tried_first() {
        // Only reads the environment; loading is tested in tests/open.rs.
        let names = candidates();
        assert!(names.iter().any(|n| n == "libhsa-runtime64.so.1"));
        assert!(
            names
                .iter()
                .any(|n| n.ends_with("/lib/libhsa-runtime64.so.1"))
        );
    }
}
