//! [`RocmDevice`]: a poot [`Device`] on the HSA runtime.
//!
//! All work goes to one AQL queue of the device's GPU agent. Kernels are rendered to HIP,
//! compiled by hipRTC for the agent's architecture (kept in memory by content hash), checked
//! ([`crate::code_object`]: machine, architecture, wavefront width, workgroup memory) and loaded
//! into a frozen HSA executable. A launch is one dispatch packet; a recording builds its
//! packets and their kernel arguments once, and a replay copies the packets into the queue and
//! rings the doorbell once. Every wait polls with a timeout. Any failure of a dispatch, a copy
//! or a wait poisons the device: the first report is kept and every later call returns
//! [`DeviceError::Poisoned`] without calling HSA. A launch refused on the host before it
//! reaches the queue (wrong buffer count, a grid over the limits, a kernel, buffer or recording
//! of another device) is a [`DeviceError::BadLaunch`] and leaves the device usable.

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::Arc;
use std::time::Duration;

use poot_executor::in_flight::{InFlight, recording_label};
use poot_executor::{Device, DeviceError, DeviceLimits, Launch};
use poot_kernel::Kernel;
use poot_kernel::render::{can_fault, entry_name, render_hip};
use sha2::{Digest, Sha256};

use crate::arch::GpuArch;
use crate::buffer::{Allocation, HostBlock, RocmBuffer};
use crate::builtin;
use crate::code_object::{CodeObject, unbundle};
use crate::context::{Context, CopyFailure, WaitFailure};
use crate::fault::{classify, watch_memory_faults};
use crate::hiprtc::{Hiprtc, hiprtc};
use crate::hsa::{self, Agent, Executable, ExecutableSymbol, Hsa, MemoryPool, hsa};
use crate::kernel::{LoadedExecutable, RocmKernel};
use crate::packet::{Dispatch, FenceScope, PACKET_WORDS, dispatch_packet};
use crate::recording::RocmRecording;
use poot_executor::wait::timeout_seconds;

const BACKEND: &str = "ROCm";

/// The default bound on every wait for the device.
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(600);

/// The largest staging buffer of host copies; a larger copy goes in pieces.
const STAGING_BYTES: usize = 64 << 20;

/// Kernel arguments of one dispatch start at a multiple of this (HSA's minimum alignment).
const KERNARG_ALIGN: usize = 16;

/// How a [`RocmDevice`] is opened.
#[derive(Clone, Debug, PartialEq)]
pub struct RocmConfig {
    /// The bound on every wait for the device; a wait that outlasts it fails with
    /// [`DeviceError::Timeout`] and poisons the device.
    pub wait_timeout: Duration,
}

impl Default for RocmConfig {
    /// 600 s waits.
    fn default() -> RocmConfig {
        RocmConfig {
            wait_timeout: DEFAULT_WAIT_TIMEOUT,
        }
    }
}

/// Hand-written HIP for [`RocmDevice::compile_source`], with the facts a rendered kernel
/// carries.
#[derive(Clone, Copy, Debug)]
pub struct SourceKernel<'a> {
    /// How reports name the kernel.
    pub name: &'a str,
    /// The `extern "C" __global__` function to launch.
    pub entry: &'a str,
    pub source: &'a str,
    /// Threads per workgroup.
    pub workgroup: u32,
    /// Pointer parameters a launch passes (the kernel's buffers).
    pub n_params: usize,
    /// Whether the function takes one more pointer after them: the fault words
    /// (`unsigned int* poot_fault`, see `poot_kernel::render::fault`).
    pub takes_fault_buffer: bool,
}

/// An AMD GPU as a poot [`Device`].
pub struct RocmDevice {
    pub(crate) ctx: Arc<Context>,
    limits: DeviceLimits,
    arch: GpuArch,
    options: Vec<String>,
    hiprtc: &'static Hiprtc,
    hiprtc_version: (i32, i32),
    executables: HashMap<[u8; 32], Arc<LoadedExecutable>>,
    fill: Option<RocmKernel>,
    copy: Option<RocmKernel>,
    staging: Option<HostBlock>,
    /// Kernel arguments of eager launches, freed once the queue is next seen idle.
    transient: Vec<HostBlock>,
    in_flight: InFlight,
    n_recordings: u64,
    compiles: u64,
}

fn unavailable(reason: impl Into<String>) -> DeviceError {
    DeviceError::Unavailable {
        backend: BACKEND,
        reason: reason.into(),
    }
}

/// A launch or replay refused on the host before it reached the queue (an engine bug); it does
/// not poison the device.
fn bad_launch(kernel: &str, reason: String) -> DeviceError {
    DeviceError::BadLaunch {
        kernel: kernel.to_string(),
        reason,
    }
}

/// Host-visible memory of `bytes`; the runtime's refusal is out-of-memory (nothing was
/// submitted, so the device is unchanged).
fn host_block(ctx: &Arc<Context>, bytes: usize) -> Result<HostBlock, DeviceError> {
    HostBlock::new(ctx, bytes.max(8)).map_err(|_| DeviceError::OutOfMemory {
        bytes: bytes as u64,
    })
}

/// The options every kernel is compiled with: the architecture and its wavefront width, full
/// optimization, and no contraction of products into fused multiply-adds (results then match
/// the CPU oracle op by op, as on PTX).
pub fn hiprtc_options(arch: &GpuArch) -> Vec<String> {
    let mut options = arch.compile_options();
    options.extend(["-O3", "-ffp-contract=off"].map(String::from));
    options
}

/// The memory pools of an agent that fit: a global pool the runtime allocates from, with all
/// of `flags`.
fn pool_with(hsa: &Hsa, agent: Agent, flags: u32) -> Result<Option<MemoryPool>, String> {
    for pool in hsa.pools(agent)? {
        let segment: u32 = hsa.pool_info(pool, hsa::POOL_INFO_SEGMENT)?;
        let pool_flags: u32 = hsa.pool_info(pool, hsa::POOL_INFO_GLOBAL_FLAGS)?;
        let allowed: u8 = hsa.pool_info(pool, hsa::POOL_INFO_RUNTIME_ALLOC_ALLOWED)?;
        if segment == hsa::SEGMENT_GLOBAL && pool_flags & flags == flags && allowed != 0 {
            return Ok(Some(pool));
        }
    }
    Ok(None)
}

impl RocmDevice {
    /// Opens AMD GPU `ordinal` (in the runtime's agent order) with the default configuration.
    ///
    /// Returns [`DeviceError::Unavailable`] (never panics) when the HSA runtime or hipRTC is
    /// missing, when the runtime finds no such GPU, or when the GPU's architecture is not one
    /// poot compiles for.
    pub fn open(ordinal: usize) -> Result<RocmDevice, DeviceError> {
        RocmDevice::open_with(ordinal, RocmConfig::default())
    }

    /// Opens AMD GPU `ordinal` with `config`.
    pub fn open_with(ordinal: usize, config: RocmConfig) -> Result<RocmDevice, DeviceError> {
        let hsa = hsa().map_err(|e| unavailable(format!("no ROCm runtime: {e}")))?;
        let rtc = hiprtc().map_err(|e| unavailable(format!("no ROCm compiler: {e}")))?;
        let hiprtc_version = rtc.version().map_err(unavailable)?;
        let agents = hsa.agents().map_err(unavailable)?;
        let mut gpus = Vec::new();
        let mut cpus = Vec::new();
        for a in agents {
            match hsa.agent_info::<u32>(a, hsa::AGENT_INFO_DEVICE) {
                Ok(hsa::DEVICE_TYPE_GPU) => gpus.push(a),
                Ok(hsa::DEVICE_TYPE_CPU) => cpus.push(a),
                Ok(_) => {}
                Err(e) => return Err(unavailable(e)),
            }
        }
        let gpu = *gpus.get(ordinal).ok_or_else(|| {
            unavailable(format!(
                "AMD GPU {ordinal} asked for, the HSA runtime reports {}",
                gpus.len()
            ))
        })?;
        let isa = hsa
            .agent_name(gpu, hsa::AGENT_INFO_NAME)
            .map_err(unavailable)?;
        let arch = GpuArch::parse(&isa).map_err(|e| unavailable(e.to_string()))?;
        let device_pool = pool_with(hsa, gpu, hsa::POOL_FLAG_COARSE_GRAINED)
            .map_err(unavailable)?
            .ok_or_else(|| unavailable(format!("{arch} has no coarse-grained memory pool")))?;
        let mut host = None;
        for &cpu in &cpus {
            let flags = hsa::POOL_FLAG_KERNARG_INIT | hsa::POOL_FLAG_FINE_GRAINED;
            if let Some(pool) = pool_with(hsa, cpu, flags).map_err(unavailable)? {
                host = Some((cpu, pool));
                break;
            }
        }
        let (cpu, host_pool) = host.ok_or_else(|| {
            unavailable("no CPU agent has a fine-grained kernel-argument memory pool")
        })?;
        let info = |attr| hsa.agent_info::<u32>(gpu, attr).map_err(unavailable);
        let workgroup_max = info(hsa::AGENT_INFO_WORKGROUP_MAX_SIZE)?.max(1);
        let compute_units = info(hsa::AMD_AGENT_INFO_COMPUTE_UNIT_COUNT)?;
        let queue_max = info(hsa::AGENT_INFO_QUEUE_MAX_SIZE)?;
        let grid: [u32; 3] = hsa
            .agent_info(gpu, hsa::AGENT_INFO_GRID_MAX_DIM)
            .map_err(unavailable)?;
        let product = hsa
            .agent_name(gpu, hsa::AMD_AGENT_INFO_PRODUCT_NAME)
            .unwrap_or_default();
        let memory: usize = hsa
            .pool_info(device_pool, hsa::POOL_INFO_SIZE)
            .map_err(unavailable)?;
        let alloc_max: usize = hsa
            .pool_info(device_pool, hsa::POOL_INFO_ALLOC_MAX_SIZE)
            .unwrap_or(memory);
        let mut shared_bytes = 0u32;
        for pool in hsa.pools(gpu).map_err(unavailable)? {
            let segment: u32 = hsa
                .pool_info(pool, hsa::POOL_INFO_SEGMENT)
                .map_err(unavailable)?;
            if segment == hsa::SEGMENT_GROUP {
                let size: usize = hsa
                    .pool_info(pool, hsa::POOL_INFO_SIZE)
                    .map_err(unavailable)?;
                shared_bytes = u32::try_from(size).unwrap_or(u32::MAX);
            }
        }
        if shared_bytes == 0 {
            return Err(unavailable(format!("{arch} reports no workgroup memory")));
        }
        let ctx = Context::create(
            hsa,
            gpu,
            cpu,
            device_pool,
            host_pool,
            queue_max,
            config.wait_timeout,
        )
        .map_err(unavailable)?;
        let ctx = Arc::new(ctx);
        watch_memory_faults(hsa, gpu, &ctx.poison).map_err(unavailable)?;
        let lanes = arch.wavefront_lanes();
        let name = if product.is_empty() {
            arch.to_string()
        } else {
            format!("{product} ({arch})")
        };
        let limits = DeviceLimits {
            name,
            max_buffer_bytes: alloc_max.min(memory) as u64,
            memory_bytes: Some(memory as u64),
            // A packet's grid counts work-items in 32 bits along each axis.
            max_groups_x: grid[0] / workgroup_max,
            max_groups_yz: grid[1].min(grid[2]).min(65535),
            max_workgroup_threads: workgroup_max,
            max_shared_bytes: shared_bytes,
            max_bindings: u32::MAX,
            subgroup_sizes: (lanes, lanes),
            multiprocessors: Some(compute_units),
            max_loop_iterations: None,
            group_ranks: 1,
            // The renderer's matrix tiles are PTX's, and no vendor library is wired.
            matrix_tf32: false,
            library_gemm: false,
            library_exact: false,
            library_integer_rows: None,
        };
        let options = hiprtc_options(&arch);
        let mut device = RocmDevice {
            ctx,
            limits,
            arch,
            options,
            hiprtc: rtc,
            hiprtc_version,
            executables: HashMap::new(),
            fill: None,
            copy: None,
            staging: None,
            transient: Vec::new(),
            in_flight: InFlight::default(),
            n_recordings: 0,
            compiles: 0,
        };
        let builtin = |entry, n_params| SourceKernel {
            name: entry,
            entry,
            source: builtin::SOURCE,
            workgroup: builtin::THREADS,
            n_params,
            takes_fault_buffer: false,
        };
        device.fill = Some(device.compile_source(&builtin(builtin::FILL_ENTRY, 1))?);
        device.copy = Some(device.compile_source(&builtin(builtin::COPY_ENTRY, 2))?);
        Ok(device)
    }

    /// The architecture kernels are compiled for.
    pub fn arch(&self) -> &GpuArch {
        &self.arch
    }

    /// The hipRTC options every kernel is compiled with.
    pub fn hiprtc_options(&self) -> &[String] {
        &self.options
    }

    /// hipRTC's version, `(major, minor)`, and where the library was found.
    pub fn hiprtc_version(&self) -> ((i32, i32), &str) {
        (self.hiprtc_version, &self.hiprtc.path)
    }

    /// Where the HSA runtime was found.
    pub fn hsa_library(&self) -> &str {
        &self.ctx.hsa.path
    }

    /// Code objects compiled by hipRTC since the device was opened.
    pub fn compiles(&self) -> u64 {
        self.compiles
    }

    /// The bound on every wait for the device.
    pub fn wait_timeout(&self) -> Duration {
        self.ctx.wait_timeout()
    }

    /// Changes the bound on every wait for the device.
    pub fn set_wait_timeout(&mut self, timeout: Duration) {
        self.ctx.set_wait_timeout(timeout);
    }

    /// The first failure, when the device is poisoned.
    pub fn poisoned(&self) -> Option<DeviceError> {
        self.ctx.poison.check().err()
    }

    /// Compiles hand-written HIP. The engine compiles kernel descriptions through
    /// [`Device::compile`]; this is for the device's own kernels and self-tests.
    pub fn compile_source(&mut self, src: &SourceKernel<'_>) -> Result<RocmKernel, DeviceError> {
        self.enter()?;
        let SourceKernel {
            name,
            entry,
            source,
            workgroup,
            n_params,
            takes_fault_buffer,
        } = *src;
        let compile_error = |log: String| DeviceError::Compile {
            kernel: name.to_string(),
            log,
        };
        if workgroup == 0 || workgroup > self.limits.max_workgroup_threads {
            return Err(compile_error(format!(
                "a workgroup of {workgroup} threads; the device allows 1 to {}",
                self.limits.max_workgroup_threads
            )));
        }
        let key = self.cache_key(source);
        let (executable, code) = match self.executables.get(&key) {
            Some(e) => (Arc::clone(e), None),
            None => {
                let code = self
                    .hiprtc
                    .compile(name, source, &self.options)
                    .map_err(|f| compile_error(f.log))?;
                self.compiles += 1;
                let code = unbundle(&code, self.arch.name())
                    .map_err(|e| compile_error(e.to_string()))?
                    .to_vec();
                let e = self.load_executable(name, &code)?;
                self.executables.insert(key, Arc::clone(&e));
                (e, Some(code))
            }
        };
        if let Some(code) = &code {
            self.check_code(name, entry, code)?;
        }
        let symbol = self.symbol(name, executable.executable, entry)?;
        let sym_info = |attr| -> Result<u32, DeviceError> {
            let mut v = 0u32;
            // SAFETY: each attribute asked for is a u32.
            let r = unsafe {
                (self.ctx.hsa.symbol_get_info)(symbol, attr, (&mut v as *mut u32).cast())
            };
            if r == hsa::STATUS_SUCCESS {
                Ok(v)
            } else {
                Err(compile_error(format!(
                    "hsa_executable_symbol_get_info: {}",
                    self.ctx.hsa.status_text(r)
                )))
            }
        };
        let mut kernel_object = 0u64;
        // SAFETY: the kernel object attribute is a u64.
        let r = unsafe {
            (self.ctx.hsa.symbol_get_info)(
                symbol,
                hsa::SYMBOL_INFO_KERNEL_OBJECT,
                (&mut kernel_object as *mut u64).cast(),
            )
        };
        if r != hsa::STATUS_SUCCESS {
            return Err(compile_error(format!(
                "hsa_executable_symbol_get_info: {}",
                self.ctx.hsa.status_text(r)
            )));
        }
        let kernel = RocmKernel {
            name: Arc::from(name),
            entry: entry.to_string(),
            executable,
            kernel_object,
            kernarg_bytes: sym_info(hsa::SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE)?,
            kernarg_align: sym_info(hsa::SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT)?,
            group_segment_bytes: sym_info(hsa::SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE)?,
            private_segment_bytes: sym_info(hsa::SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE)?,
            n_params,
            workgroup,
            takes_fault_buffer,
        };
        if kernel.group_segment_bytes > self.limits.max_shared_bytes {
            return Err(compile_error(format!(
                "the compiled kernel uses {} B of workgroup memory, the device has {} B",
                kernel.group_segment_bytes, self.limits.max_shared_bytes
            )));
        }
        Ok(kernel)
    }

    /// The in-memory key of one compile: the source, options and compiler version.
    fn cache_key(&self, source: &str) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(b"poot-rocm v1\0");
        for field in std::iter::once(source).chain(self.options.iter().map(String::as_str)) {
            h.update((field.len() as u64).to_le_bytes());
            h.update(field.as_bytes());
        }
        h.update(self.hiprtc_version.0.to_le_bytes());
        h.update(self.hiprtc_version.1.to_le_bytes());
        h.finalize().into()
    }

    /// Checks a fresh code object: built for this architecture, with `entry`'s wavefront width
    /// the one the planner was told.
    fn check_code(&self, name: &str, entry: &str, code: &[u8]) -> Result<(), DeviceError> {
        let compile_error = |log: String| DeviceError::Compile {
            kernel: name.to_string(),
            log,
        };
        let co = CodeObject::parse(code).map_err(|e| compile_error(e.to_string()))?;
        let mach = co.elf_mach().map_err(|e| compile_error(e.to_string()))?;
        if let Some(want) = self.arch.elf_mach()
            && mach != want
        {
            return Err(compile_error(format!(
                "the code object is for EF_AMDGPU_MACH {mach:#x}, the device is {} ({want:#x})",
                self.arch
            )));
        }
        let kd = co.kernel(entry).map_err(|e| compile_error(e.to_string()))?;
        let lanes = self.arch.wavefront_lanes();
        if kd.wavefront_lanes != lanes {
            return Err(compile_error(format!(
                "compiled for {}-lane wavefronts, planned for {lanes}",
                kd.wavefront_lanes
            )));
        }
        Ok(())
    }

    /// Loads `code` into a new frozen executable for the device's agent.
    fn load_executable(
        &self,
        name: &str,
        code: &[u8],
    ) -> Result<Arc<LoadedExecutable>, DeviceError> {
        let hsa = self.ctx.hsa;
        let compile_error = |call: &str, r| DeviceError::Compile {
            kernel: name.to_string(),
            log: format!("{call}: {}", hsa.status_text(r)),
        };
        let mut reader = hsa::CodeObjectReader::default();
        // SAFETY: `code` outlives the reader, which is destroyed below.
        let r = unsafe { (hsa.reader_create)(code.as_ptr().cast(), code.len(), &mut reader) };
        if r != hsa::STATUS_SUCCESS {
            return Err(compile_error(
                "hsa_code_object_reader_create_from_memory",
                r,
            ));
        }
        let mut executable = Executable::default();
        // SAFETY: valid out-pointers and handles; the reader is destroyed on every path, the
        // executable on failure (else it is owned by the `LoadedExecutable`).
        let loaded = unsafe {
            let mut r = (hsa.executable_create)(
                hsa::PROFILE_FULL,
                hsa::ROUNDING_DEFAULT,
                std::ptr::null(),
                &mut executable,
            );
            let mut call = "hsa_executable_create_alt";
            if r == hsa::STATUS_SUCCESS {
                let mut loaded = hsa::LoadedCodeObject::default();
                r = (hsa.executable_load)(
                    executable,
                    self.ctx.gpu,
                    reader,
                    std::ptr::null(),
                    &mut loaded,
                );
                call = "hsa_executable_load_agent_code_object";
                if r == hsa::STATUS_SUCCESS {
                    r = (hsa.executable_freeze)(executable, std::ptr::null());
                    call = "hsa_executable_freeze";
                }
                if r != hsa::STATUS_SUCCESS {
                    let _ = (hsa.executable_destroy)(executable);
                }
            }
            let _ = (hsa.reader_destroy)(reader);
            if r == hsa::STATUS_SUCCESS {
                Ok(())
            } else {
                Err(compile_error(call, r))
            }
        };
        loaded?;
        Ok(Arc::new(LoadedExecutable {
            executable,
            ctx: Arc::clone(&self.ctx),
        }))
    }

    /// The kernel symbol `entry` (its descriptor, `entry.kd`) of `executable`.
    fn symbol(
        &self,
        name: &str,
        executable: Executable,
        entry: &str,
    ) -> Result<ExecutableSymbol, DeviceError> {
        let compile_error = |log: String| DeviceError::Compile {
            kernel: name.to_string(),
            log,
        };
        let symbol_name = CString::new(format!("{entry}.kd"))
            .map_err(|_| compile_error(format!("entry name {entry:?} contains a NUL byte")))?;
        let mut symbol = ExecutableSymbol::default();
        // SAFETY: a frozen executable, a NUL-terminated name, this context's agent.
        let r = unsafe {
            (self.ctx.hsa.executable_symbol)(
                executable,
                symbol_name.as_ptr(),
                &self.ctx.gpu,
                &mut symbol,
            )
        };
        if r != hsa::STATUS_SUCCESS {
            return Err(compile_error(format!(
                "the code object has no kernel `{entry}`: {}",
                self.ctx.hsa.status_text(r)
            )));
        }
        Ok(symbol)
    }

    /// Refuses when poisoned.
    fn enter(&self) -> Result<(), DeviceError> {
        self.ctx.poison.check()
    }

    /// The typed error of a failed wait, recorded as the poison (when it is the first).
    fn wait_failure(&self, f: WaitFailure, waiting_for: &str) -> DeviceError {
        match f {
            WaitFailure::Timeout => {
                let suspect = self
                    .in_flight
                    .suspect()
                    .unwrap_or_else(|| waiting_for.to_string());
                self.ctx.poison.record(
                    DeviceError::Timeout {
                        seconds: timeout_seconds(self.ctx.wait_timeout()),
                    },
                    Some(&format!("waiting for {suspect}")),
                )
            }
            WaitFailure::Check(code) => {
                let lost = DeviceError::Lost {
                    reason: format!("a kernel check failed with code {code}"),
                };
                let err = classify(lost, &self.in_flight, Some(code));
                self.ctx
                    .poison
                    .record(err, Some("read from the fault words"))
            }
            WaitFailure::Poisoned(first) => {
                let reason = match first {
                    DeviceError::Poisoned { first } => first,
                    other => other.to_string(),
                };
                classify(
                    DeviceError::Lost { reason },
                    &self.in_flight,
                    self.ctx.fault_code(),
                )
            }
        }
    }

    /// Waits for the queue to drain; the work in flight is then known to have succeeded, and
    /// the eager launches' kernel arguments are freed.
    fn wait(&mut self) -> Result<(), DeviceError> {
        match self.ctx.wait_idle() {
            Ok(()) => {
                self.in_flight.clear();
                self.transient.clear();
                Ok(())
            }
            Err(f) => Err(self.wait_failure(f, "copies")),
        }
    }

    fn owns(&self, ctx: &Arc<Context>) -> bool {
        Arc::ptr_eq(ctx, &self.ctx)
    }

    /// A copy the device refused before anything reached HSA (a buffer of another device): an
    /// engine bug that poisons, since the engine's idea of the buffer's contents no longer
    /// matches the device's.
    fn misuse(&self, reason: String) -> DeviceError {
        self.ctx.poison.record(
            DeviceError::Lost { reason },
            Some("refused before reaching the device"),
        )
    }

    /// The device address of `offset..offset + len` of `buf`, checked.
    fn range(&self, buf: &RocmBuffer, offset: u64, len: usize) -> Result<u64, DeviceError> {
        if !self.owns(&buf.alloc.ctx) {
            return Err(self.misuse("a copy with a buffer of another device".to_string()));
        }
        let len64 = len as u64;
        match offset.checked_add(len64) {
            Some(end) if end <= buf.alloc.bytes => Ok(buf.alloc.ptr + offset),
            _ => Err(self.ctx.poison.record_host(DeviceError::OutOfBounds {
                offset,
                len: len64,
                size: buf.alloc.bytes,
            })),
        }
    }

    /// Checks a launch against the kernel and the device before anything is submitted.
    fn check_launch(&self, l: &Launch<'_, Self>) -> Result<(), DeviceError> {
        let k = l.kernel;
        if !self.owns(&k.executable.ctx) {
            return Err(bad_launch(
                &k.name,
                "the kernel was compiled by another device".to_string(),
            ));
        }
        if l.args.len() != k.n_params {
            return Err(bad_launch(
                &k.name,
                format!(
                    "{} buffers given; the kernel takes {}",
                    l.args.len(),
                    k.n_params
                ),
            ));
        }
        if let Some(i) = l.args.iter().position(|b| !self.owns(&b.alloc.ctx)) {
            return Err(bad_launch(
                &k.name,
                format!("buffer {i} belongs to another device"),
            ));
        }
        self.limits
            .check_grid(l.grid)
            .map_err(|reason| bad_launch(&k.name, reason))
    }

    /// The kernel arguments of `kernel` over buffer addresses `args`: each pointer in order,
    /// the fault words' after them when the kernel can fault, zeros up to the size the kernel
    /// declares.
    fn kernargs(&self, kernel: &RocmKernel, args: &[u64]) -> Vec<u8> {
        let mut bytes: Vec<u8> = args.iter().flat_map(|a| a.to_le_bytes()).collect();
        if kernel.takes_fault_buffer {
            bytes.extend(self.ctx.fault_address().to_le_bytes());
        }
        let declared = kernel.kernarg_bytes as usize;
        if bytes.len() < declared {
            bytes.resize(declared, 0);
        }
        bytes
    }

    /// The packet of `kernel` over `grid` reading its arguments at `kernarg_address`.
    fn packet(
        &self,
        kernel: &RocmKernel,
        grid: [u32; 3],
        kernarg_address: u64,
        completion: bool,
        fences: (FenceScope, FenceScope),
    ) -> Result<[u32; PACKET_WORDS], DeviceError> {
        dispatch_packet(&Dispatch {
            workgroup: kernel.workgroup,
            groups: grid,
            group_segment_bytes: kernel.group_segment_bytes,
            private_segment_bytes: kernel.private_segment_bytes,
            kernel_object: kernel.kernel_object,
            kernarg_address,
            completion: if completion {
                self.ctx.completion_signal()
            } else {
                hsa::Signal::default()
            },
            acquire: fences.0,
            release: fences.1,
        })
        .map_err(|e| bad_launch(&kernel.name, format!("no dispatch packet holds it: {e:?}")))
    }

    /// One dispatch of `kernel` now, over argument bytes `args`.
    fn dispatch_now(
        &mut self,
        kernel: &RocmKernel,
        grid: [u32; 3],
        args: &[u8],
    ) -> Result<(), DeviceError> {
        let mut block = host_block(&self.ctx, args.len())?;
        block.write(0, args);
        let packet = self.packet(
            kernel,
            grid,
            block.address(),
            true,
            (FenceScope::System, FenceScope::System),
        )?;
        self.transient.push(block);
        self.ctx
            .submit(&[packet])
            .map_err(|f| self.wait_failure(f, "room in the queue"))?;
        self.in_flight.push(Arc::clone(&kernel.name));
        Ok(())
    }

    /// A staging block of at least `bytes` (at most [`STAGING_BYTES`]), reused across copies.
    fn staging(&mut self, bytes: usize) -> Result<&mut HostBlock, DeviceError> {
        let want = bytes.clamp(1, STAGING_BYTES);
        if self.staging.as_ref().is_none_or(|s| s.bytes < want) {
            self.staging = None;
            let block = host_block(&self.ctx, want)?;
            self.staging = Some(block);
        }
        self.staging.as_mut().ok_or_else(|| DeviceError::Lost {
            reason: "the staging block vanished".to_string(),
        })
    }

    /// The typed error of a failed host copy.
    fn copy_failure(&self, f: CopyFailure) -> DeviceError {
        match f {
            CopyFailure::Refused(reason) => self
                .ctx
                .poison
                .record(DeviceError::Lost { reason }, Some("a host copy")),
            CopyFailure::Wait(w) => self.wait_failure(w, "a host copy"),
        }
    }
}

impl Device for RocmDevice {
    type Buffer = RocmBuffer;
    type Kernel = RocmKernel;
    type Recording = RocmRecording;

    fn limits(&self) -> &DeviceLimits {
        &self.limits
    }

    /// Allocates device memory, zeroed by a fill queued before any later work.
    fn alloc(&mut self, bytes: u64) -> Result<RocmBuffer, DeviceError> {
        self.enter()?;
        if bytes == 0 {
            return Ok(RocmBuffer {
                alloc: Arc::new(Allocation {
                    ptr: 0,
                    bytes: 0,
                    ctx: Arc::clone(&self.ctx),
                }),
            });
        }
        let words = bytes.div_ceil(4);
        let size = usize::try_from(words * 4).map_err(|_| DeviceError::OutOfMemory { bytes })?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        let hsa = self.ctx.hsa;
        // SAFETY: valid out-pointer; the pool allows runtime allocation (checked at open).
        let r = unsafe { (hsa.pool_allocate)(self.ctx.device_pool, size, 0, &mut ptr) };
        match r {
            hsa::STATUS_SUCCESS if !ptr.is_null() => {}
            hsa::STATUS_ERROR_OUT_OF_RESOURCES => return Err(DeviceError::OutOfMemory { bytes }),
            r => {
                return Err(self.ctx.poison.record(
                    DeviceError::Lost {
                        reason: format!("hsa_amd_memory_pool_allocate: {}", hsa.status_text(r)),
                    },
                    None,
                ));
            }
        }
        let alloc = Arc::new(Allocation {
            ptr: ptr as u64,
            bytes,
            ctx: Arc::clone(&self.ctx),
        });
        let fill = self.fill.take().ok_or_else(|| DeviceError::Lost {
            reason: "the fill kernel is missing".to_string(),
        })?;
        let done = self.dispatch_now(
            &fill,
            [builtin::groups_for(words), 1, 1],
            &builtin::fill_args(alloc.ptr, words, 0),
        );
        self.fill = Some(fill);
        done?;
        Ok(RocmBuffer { alloc })
    }

    /// Waits (bounded) for earlier work, then copies the bytes in through the staging block.
    fn write(
        &mut self,
        dst: &RocmBuffer,
        offset_bytes: u64,
        src: &[u8],
    ) -> Result<(), DeviceError> {
        self.enter()?;
        let address = self.range(dst, offset_bytes, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.wait()?;
        let (gpu, cpu) = (self.ctx.gpu, self.ctx.cpu);
        let mut done = 0usize;
        for chunk in src.chunks(STAGING_BYTES) {
            let staging = self.staging(chunk.len())?;
            staging.write(0, chunk);
            let from = staging.ptr;
            let to = (address + done as u64) as *mut c_void;
            self.ctx
                .copy_and_wait(to, gpu, from, cpu, chunk.len())
                .map_err(|f| self.copy_failure(f))?;
            done += chunk.len();
        }
        Ok(())
    }

    /// Waits (bounded) for earlier work, then copies the bytes out through the staging block.
    fn read(
        &mut self,
        src: &RocmBuffer,
        offset_bytes: u64,
        dst: &mut [u8],
    ) -> Result<(), DeviceError> {
        self.enter()?;
        let address = self.range(src, offset_bytes, dst.len())?;
        self.wait()?;
        let (gpu, cpu) = (self.ctx.gpu, self.ctx.cpu);
        let mut done = 0usize;
        for chunk in dst.chunks_mut(STAGING_BYTES) {
            let from = (address + done as u64) as *const c_void;
            let staging_ptr = self.staging(chunk.len())?.ptr;
            self.ctx
                .copy_and_wait(staging_ptr, cpu, from, gpu, chunk.len())
                .map_err(|f| self.copy_failure(f))?;
            self.staging(chunk.len())?.read(chunk);
            done += chunk.len();
        }
        Ok(())
    }

    /// Renders the kernel as HIP and compiles it (see [`RocmDevice::compile_source`]); a kernel
    /// the renderer refuses is a [`DeviceError::Compile`] with the renderer's reason.
    fn compile(&mut self, kernel: &Kernel) -> Result<RocmKernel, DeviceError> {
        self.enter()?;
        let source = render_hip(kernel).map_err(|e| DeviceError::Compile {
            kernel: kernel.name.clone(),
            log: e.to_string(),
        })?;
        let entry = entry_name(kernel);
        self.compile_source(&SourceKernel {
            name: &kernel.name,
            entry: &entry,
            source: &source,
            workgroup: kernel.workgroup,
            n_params: kernel.params.len(),
            takes_fault_buffer: can_fault(kernel),
        })
    }

    fn launch(&mut self, launch: &Launch<'_, Self>) -> Result<(), DeviceError> {
        self.enter()?;
        self.check_launch(launch)?;
        let addresses: Vec<u64> = launch.args.iter().map(|b| b.alloc.ptr).collect();
        let args = self.kernargs(launch.kernel, &addresses);
        self.dispatch_now(launch.kernel, launch.grid, &args)
    }

    /// Builds every launch's packet and kernel arguments once: the arguments in one block of
    /// host-visible memory, the packets in order, the first acquiring and the last releasing at
    /// system scope, the last carrying the completion signal.
    fn record(&mut self, launches: &[Launch<'_, Self>]) -> Result<RocmRecording, DeviceError> {
        self.enter()?;
        let mut names: Vec<&str> = Vec::with_capacity(launches.len());
        let mut executables: Vec<Arc<LoadedExecutable>> = Vec::new();
        let mut buffers: Vec<Arc<Allocation>> = Vec::new();
        let mut segments: Vec<(usize, Vec<u8>)> = Vec::with_capacity(launches.len());
        let mut total = 0usize;
        for l in launches {
            self.check_launch(l)?;
            names.push(&l.kernel.name);
            if !executables
                .iter()
                .any(|e| Arc::ptr_eq(e, &l.kernel.executable))
            {
                executables.push(Arc::clone(&l.kernel.executable));
            }
            for b in l.args {
                if !buffers.iter().any(|a| Arc::ptr_eq(a, &b.alloc)) {
                    buffers.push(Arc::clone(&b.alloc));
                }
            }
            let addresses: Vec<u64> = l.args.iter().map(|b| b.alloc.ptr).collect();
            let args = self.kernargs(l.kernel, &addresses);
            let align = (l.kernel.kernarg_align as usize).max(KERNARG_ALIGN);
            let at = total.div_ceil(align) * align;
            total = at + args.len();
            segments.push((at, args));
        }
        self.n_recordings += 1;
        let label: Arc<str> = Arc::from(recording_label(self.n_recordings, &names));
        let mut kernargs = None;
        let mut packets = Vec::with_capacity(launches.len());
        if !launches.is_empty() {
            let mut block = host_block(&self.ctx, total)?;
            let last = launches.len() - 1;
            for (i, (l, (at, args))) in launches.iter().zip(&segments).enumerate() {
                block.write(*at, args);
                let acquire = if i == 0 {
                    FenceScope::System
                } else {
                    FenceScope::Agent
                };
                let release = if i == last {
                    FenceScope::System
                } else {
                    FenceScope::Agent
                };
                packets.push(self.packet(
                    l.kernel,
                    l.grid,
                    block.address() + *at as u64,
                    i == last,
                    (acquire, release),
                )?);
            }
            kernargs = Some(block);
        }
        Ok(RocmRecording {
            packets,
            _kernargs: kernargs,
            ctx: Arc::clone(&self.ctx),
            label,
            _executables: executables,
            _buffers: buffers,
        })
    }

    fn replay(&mut self, recording: &RocmRecording) -> Result<(), DeviceError> {
        self.enter()?;
        if !self.owns(&recording.ctx) {
            return Err(bad_launch(
                &recording.label,
                "the recording was made by another device".to_string(),
            ));
        }
        if recording.packets.is_empty() {
            return Ok(());
        }
        self.ctx
            .submit(&recording.packets)
            .map_err(|f| self.wait_failure(f, "room in the queue"))?;
        self.in_flight.push(Arc::clone(&recording.label));
        Ok(())
    }

    fn synchronize(&mut self) -> Result<(), DeviceError> {
        self.enter()?;
        self.wait()
    }

    /// A word copy by the device's copy kernel, queued after earlier work.
    fn copy(&mut self, src: &RocmBuffer, dst: &RocmBuffer, bytes: u64) -> Result<(), DeviceError> {
        self.enter()?;
        if !bytes.is_multiple_of(4) {
            return Err(bad_launch(
                "copy",
                format!("{bytes} B is not a whole number of 4-byte words"),
            ));
        }
        if Arc::ptr_eq(&src.alloc, &dst.alloc) {
            return Err(bad_launch(
                "copy",
                "source and destination are one buffer".to_string(),
            ));
        }
        let len = usize::try_from(bytes).map_err(|_| DeviceError::OutOfBounds {
            offset: 0,
            len: bytes,
            size: src.alloc.bytes,
        })?;
        let from = self.range(src, 0, len)?;
        let to = self.range(dst, 0, len)?;
        if len == 0 {
            return Ok(());
        }
        let words = bytes / 4;
        let copy = self.copy.take().ok_or_else(|| DeviceError::Lost {
            reason: "the copy kernel is missing".to_string(),
        })?;
        let done = self.dispatch_now(
            &copy,
            [builtin::groups_for(words), 1, 1],
            &builtin::copy_args(from, to, words),
        );
        self.copy = Some(copy);
        done
    }
}

impl Drop for RocmDevice {
    fn drop(&mut self) {
        // Let submitted work finish (bounded) before executables, buffers and, with the last
        // reference, the queue are released; a hang poisons the context, which is then leaked.
        let _ = self.ctx.ready_to_release();
    }
}

impl std::fmt::Debug for RocmDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocmDevice")
            .field("name", &self.limits.name)
            .field("arch", &self.arch)
            .field("poisoned", &self.ctx.poison.is_poisoned())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_can_move_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<RocmDevice>();
        send_sync::<RocmBuffer>();
        send_sync::<RocmKernel>();
        send_sync::<RocmRecording>();
    }

    #[test]
    fn kernels_compile_without_fma_contraction_for_their_wavefront() {
        let rdna = GpuArch::parse("gfx1100").unwrap_or_else(|e| panic!("{e}"));
        let o = hiprtc_options(&rdna);
        assert!(o.contains(&"-ffp-contract=off".to_string()), "{o:?}");
        assert!(o.contains(&"-mno-wavefrontsize64".to_string()), "{o:?}");
        assert!(o.contains(&"--offload-arch=gfx1100".to_string()), "{o:?}");
    }

    #[test]
    fn default_config_waits_600_s() {
        assert_eq!(RocmConfig::default().wait_timeout, Duration::from_secs(600));
    }
}
