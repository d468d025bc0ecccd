//! [`PtxDevice`]: a poot [`Device`] on the CUDA driver API.
//!
//! All work goes to one non-blocking stream of a context the device owns. Kernels are rendered
//! to CUDA C, compiled to PTX by NVRTC (cached on disk and in memory by content hash) and loaded
//! as modules. A launch is one `cuLaunchKernel`; a recording is a stream capture of its launches
//! instantiated as a CUDA graph and replayed with one `cuGraphLaunch`. Every wait polls the
//! stream with a timeout. Any CUDA failure of a launch, replay, copy or wait poisons the device:
//! the first report is kept and every later call returns [`DeviceError::Poisoned`] without
//! calling CUDA. A launch refused on the host before it reaches CUDA (wrong buffer count, a grid
//! over the limits, a kernel, buffer or recording of another device) is a
//! [`DeviceError::BadLaunch`] and leaves the device usable.
//!
//! A kernel trap (a failed check, `CUDA_ERROR_LAUNCH_FAILED`) is sticky for the whole process,
//! not just the context: afterwards no context can be created in the process, so
//! [`PtxDevice::open`] reports [`DeviceError::Unavailable`] until the process is restarted. A new
//! process can use the GPU at once.

use std::collections::HashMap;
use std::ffi::{CString, c_int, c_void};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::sys::{self, CUdevice_attribute, CUdeviceptr, CUgraphExec, CUresult};
use poot_executor::LaunchOverlap;
use poot_executor::in_flight::{InFlight, recording_label};
use poot_executor::{Command, Device, DeviceError, DeviceLimits, Launch};
use poot_kernel::Kernel;

use crate::buffer::{Allocation, PtxBuffer};
use crate::cache::{self, CacheKey, DiskCache};
use crate::context::{Context, cu};
use crate::fault::{classify, cuda_error_text, is_sticky};
use crate::kernel::{LoadedModule, PtxKernel};
use crate::library::Library;
use crate::nccl::NcclComm;
use crate::nvrtc::{self, nvrtc_options, select_arch};
use crate::recording::PtxRecording;
use crate::source;
use poot_executor::wait::{WaitError, timeout_seconds};

const BACKEND: &str = "CUDA";

/// The oldest driver with every entry point this device calls (`cuCtxCreate_v4`: CUDA 12.5).
const MIN_DRIVER_VERSION: c_int = 12050;

/// The largest write issued without first draining the stream: small enough for the driver to
/// stage a pageable source at once.
const STAGED_WRITE_BYTES: usize = 64 * 1024;

/// The default bound on every wait for the device.
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(600);

/// How a [`PtxDevice`] is opened.
#[derive(Clone, Debug, PartialEq)]
pub struct PtxConfig {
    /// The bound on every wait for the device; a wait that outlasts it fails with
    /// [`DeviceError::Timeout`] and poisons the device.
    pub wait_timeout: Duration,
    /// The root of the on-disk PTX cache (files go to `<root>/ptx/`); `None` keeps compiled
    /// PTX in memory only.
    pub cache_root: Option<PathBuf>,
    /// How far a recorded launch may overlap the end of the kernel before it, on compute
    /// capability 9.0 and newer (older devices launch each kernel after the last).
    pub launch_overlap: LaunchOverlap,
}

impl Default for PtxConfig {
    /// 600 s waits; the disk cache under `$POOT_CACHE`, else `$HOME/.cache/poot`; the planner's
    /// default launch overlap.
    fn default() -> PtxConfig {
        PtxConfig {
            wait_timeout: DEFAULT_WAIT_TIMEOUT,
            cache_root: cache::default_root(),
            launch_overlap: poot_executor::Tuning::default().launch_overlap,
        }
    }
}

/// Where compiled kernels came from, since the device was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompileStats {
    /// Compiles answered by a module already loaded in this process.
    pub memory_hits: u64,
    /// Compiles answered by PTX from the disk cache.
    pub disk_hits: u64,
    /// Compiles that ran NVRTC.
    pub nvrtc_compiles: u64,
    /// Disk cache files that could not be written, or that the driver refused to load.
    pub disk_errors: u64,
}

/// Hand-written CUDA C for [`PtxDevice::compile_source`], with the facts a rendered kernel
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
    /// Whether the function takes one more pointer after them: the fault buffer
    /// (`unsigned int* poot_fault`, see `poot_kernel::render::fault`).
    pub takes_fault_buffer: bool,
    /// Whether the kernel's first statement waits for the kernels before it to finish
    /// (`poot_wait_predecessors`): only such a kernel may be launched before they have.
    pub waits_for_predecessors: bool,
}

/// A CUDA GPU as a poot [`Device`].
pub struct PtxDevice {
    /// The group's communicator when the device is a rank of one (declared before `ctx` so it
    /// is destroyed while the context lives).
    group: Option<Arc<NcclComm>>,
    /// cuBLASLt, where it loads (declared before `ctx`: its handle is destroyed while the
    /// context lives).
    pub(crate) library: Option<Library>,
    pub(crate) ctx: Arc<Context>,
    pub(crate) limits: DeviceLimits,
    compute_capability: (u32, u32),
    arch: u32,
    options: Vec<String>,
    /// Whether recorded launches of kernels that wait for their predecessors are marked to
    /// overlap them (programmatic stream serialization).
    overlap_launches: bool,
    nvrtc_version: (i32, i32),
    driver_version: i32,
    disk: Option<DiskCache>,
    modules: HashMap<CacheKey, Arc<LoadedModule>>,
    /// PTX compiled ahead by [`Device::compile_all`]'s threads, taken by the next load of its
    /// key.
    compiled_ahead: HashMap<CacheKey, String>,
    in_flight: InFlight,
    stats: CompileStats,
    n_recordings: u64,
}

/// Threads [`Device::compile_all`] compiles on: `POOT_PTX_COMPILE_THREADS` (`0` or unset: the
/// machine's parallelism, at most 16; `1` compiles in order on the calling thread). NVRTC
/// documents its calls thread-safe on separate programs; on an H100 (session 24) the shared
/// suite passed with every core compiling, and its cold start took 71 s against 112 s on one
/// thread (that run had a build beside it).
fn compile_threads() -> usize {
    let all = || {
        std::thread::available_parallelism()
            .map_or(1, usize::from)
            .min(16)
    };
    match std::env::var("POOT_PTX_COMPILE_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        Some(0) | None => all(),
        Some(n) => n.min(64),
    }
}

fn unavailable(reason: impl Into<String>) -> DeviceError {
    DeviceError::Unavailable {
        backend: BACKEND,
        reason: reason.into(),
    }
}

fn driver_unavailable(call: &str, e: CUresult) -> DeviceError {
    unavailable(format!("{call}: {}", cuda_error_text(e)))
}

/// A launch or replay refused on the host before it reached CUDA (an engine bug); it does not
/// poison the device.
/// A collective of the device's group, as [`PtxDevice::submit_collective`] queues it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GroupOp {
    AllReduceSum,
    Broadcast { root: usize },
}

impl GroupOp {
    /// How failures and recordings name it.
    fn name(self) -> &'static str {
        match self {
            GroupOp::AllReduceSum => "all-reduce",
            GroupOp::Broadcast { .. } => "broadcast",
        }
    }
}

fn bad_launch(kernel: &str, reason: String) -> DeviceError {
    DeviceError::BadLaunch {
        kernel: kernel.to_string(),
        reason,
    }
}

/// Whether the driver refused a module image (bad or unsupported PTX, no JIT): a compile
/// failure, not a device fault.
fn is_image_rejection(e: CUresult) -> bool {
    matches!(
        e,
        CUresult::CUDA_ERROR_INVALID_PTX
            | CUresult::CUDA_ERROR_UNSUPPORTED_PTX_VERSION
            | CUresult::CUDA_ERROR_INVALID_IMAGE
            | CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU
            | CUresult::CUDA_ERROR_JIT_COMPILER_NOT_FOUND
            | CUresult::CUDA_ERROR_JIT_COMPILATION_DISABLED
            | CUresult::CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND
            | CUresult::CUDA_ERROR_SHARED_OBJECT_INIT_FAILED
            | CUresult::CUDA_ERROR_OUT_OF_MEMORY
    )
}

/// The outcome of loading one PTX image.
enum Load {
    Loaded(Arc<LoadedModule>),
    /// The driver refused the image; the status and the JIT log.
    Rejected(CUresult, String),
}

impl PtxDevice {
    /// Opens CUDA device `ordinal` with the default configuration.
    ///
    /// Returns [`DeviceError::Unavailable`] (never panics) when the CUDA driver library or
    /// NVRTC is missing, when there is no such device, or when the driver or NVRTC is too old.
    pub fn open(ordinal: usize) -> Result<PtxDevice, DeviceError> {
        PtxDevice::open_with(ordinal, PtxConfig::default())
    }

    /// Opens CUDA device `ordinal` with `config`.
    pub fn open_with(ordinal: usize, config: PtxConfig) -> Result<PtxDevice, DeviceError> {
        PtxDevice::open_in(ordinal, config, false)
    }

    /// Opens CUDA device `ordinal` in its own context, or (`primary`, for a rank of a group) in
    /// the device's primary context.
    pub(crate) fn open_in(
        ordinal: usize,
        config: PtxConfig,
        primary: bool,
    ) -> Result<PtxDevice, DeviceError> {
        // cudarc panics on the first call into a library it cannot load: check both first.
        // SAFETY: these only try to load the libraries.
        if !unsafe { sys::is_culib_present() } {
            return Err(unavailable(
                "the CUDA driver library (libcuda.so) was not found",
            ));
        }
        // SAFETY: as above.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(unavailable(
                "NVRTC (libnvrtc.so) was not found; point LD_LIBRARY_PATH at the CUDA toolkit's libraries (/usr/local/cuda/lib64)",
            ));
        }
        let mut driver_version: c_int = 0;
        let mut count: c_int = 0;
        let mut dev: sys::CUdevice = 0;
        // SAFETY: plain driver queries with valid out-pointers.
        unsafe {
            cu(sys::cuInit(0)).map_err(|e| driver_unavailable("cuInit", e))?;
            cu(sys::cuDriverGetVersion(&mut driver_version))
                .map_err(|e| driver_unavailable("cuDriverGetVersion", e))?;
        }
        if driver_version < MIN_DRIVER_VERSION {
            return Err(unavailable(format!(
                "the CUDA driver supports CUDA {}.{}, this device needs {}.{} or newer",
                driver_version / 1000,
                driver_version % 1000 / 10,
                MIN_DRIVER_VERSION / 1000,
                MIN_DRIVER_VERSION % 1000 / 10
            )));
        }
        // SAFETY: as above.
        unsafe {
            cu(sys::cuDeviceGetCount(&mut count))
                .map_err(|e| driver_unavailable("cuDeviceGetCount", e))?
        };
        let ord = c_int::try_from(ordinal)
            .ok()
            .filter(|&o| o < count)
            .ok_or_else(|| unavailable(format!("device {ordinal} asked for, {count} present")))?;
        // SAFETY: as above; `ord` is in range.
        unsafe {
            cu(sys::cuDeviceGet(&mut dev, ord)).map_err(|e| driver_unavailable("cuDeviceGet", e))?
        };

        let attr = |a: CUdevice_attribute| -> Result<u32, DeviceError> {
            let mut v: c_int = 0;
            // SAFETY: valid out-pointer, valid device.
            unsafe { cu(sys::cuDeviceGetAttribute(&mut v, a, dev)) }
                .map_err(|e| driver_unavailable("cuDeviceGetAttribute", e))?;
            u32::try_from(v).map_err(|_| unavailable(format!("device attribute {a:?} is {v}")))
        };
        let cc = (
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        );
        let grid_x = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?;
        let grid_y = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?;
        let grid_z = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?;
        let threads = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?;
        // Static `__shared__` arrays are limited to this (the larger opt-in limit needs dynamic
        // shared memory, which rendered kernels do not use).
        let shared = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?;
        let warp = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?;
        let multiprocessors = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
        let mut total: usize = 0;
        let mut name_buf = [0u8; 256];
        // SAFETY: valid out-pointers; the name buffer's length is passed.
        unsafe {
            cu(sys::cuDeviceTotalMem_v2(&mut total, dev))
                .map_err(|e| driver_unavailable("cuDeviceTotalMem", e))?;
            cu(sys::cuDeviceGetName(
                name_buf.as_mut_ptr().cast(),
                name_buf.len() as c_int,
                dev,
            ))
            .map_err(|e| driver_unavailable("cuDeviceGetName", e))?;
        }
        let name_len = name_buf
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(name_buf.len());
        let name = String::from_utf8_lossy(&name_buf[..name_len]).into_owned();

        let nvrtc_failed = |f: nvrtc::NvrtcFailure| unavailable(format!("NVRTC: {}", f.log));
        let nvrtc_version = nvrtc::version().map_err(nvrtc_failed)?;
        if nvrtc_version.0 * 1000 + nvrtc_version.1 * 10 > driver_version {
            return Err(unavailable(format!(
                "NVRTC {}.{} emits PTX the CUDA {}.{} driver cannot load; use an NVRTC no newer than the driver",
                nvrtc_version.0,
                nvrtc_version.1,
                driver_version / 1000,
                driver_version % 1000 / 10
            )));
        }
        let supported = nvrtc::supported_archs().map_err(nvrtc_failed)?;
        let device_cc = cc.0 * 10 + cc.1;
        let arch = select_arch(device_cc, &supported).ok_or_else(|| {
            unavailable(format!(
                "NVRTC {}.{} supports none of the architectures up to {device_cc} ({supported:?})",
                nvrtc_version.0, nvrtc_version.1
            ))
        })?;

        let ctx = Context::create(dev, config.wait_timeout, primary).map_err(|(call, e)| {
            if is_sticky(e) {
                unavailable(format!(
                    "{call}: {}; a kernel fault earlier in this process left CUDA unusable here, a new process can use the GPU",
                    cuda_error_text(e)
                ))
            } else {
                driver_unavailable(call, e)
            }
        })?;
        let total = total as u64;
        // Programmatic dependent launch needs compute capability 9.0 (and PTX for it).
        let overlap_launches = arch >= 90 && config.launch_overlap != LaunchOverlap::Off;
        let mut options = nvrtc_options(arch);
        if overlap_launches && config.launch_overlap == LaunchOverlap::Early {
            options.push("-DPOOT_EARLY_LAUNCH".to_string());
        }
        // cuBLASLt's half-precision tensor-core products need compute capability 8.0 (bf16).
        let library = if arch >= 80 && ctx.make_current().is_ok() {
            Library::open()
        } else {
            None
        };
        let limits = DeviceLimits {
            name,
            max_buffer_bytes: total,
            memory_bytes: Some(total),
            max_groups_x: grid_x,
            max_groups_yz: grid_y.min(grid_z),
            max_workgroup_threads: threads,
            max_shared_bytes: shared,
            max_bindings: u32::MAX,
            subgroup_sizes: (warp, warp),
            multiprocessors: Some(multiprocessors),
            max_loop_iterations: None,
            group_ranks: 1,
            // `mma.sync` over tf32 needs compute capability 8.0 (and PTX for it).
            matrix_tf32: arch >= 80,
            library_gemm: library.is_some(),
            library_exact: false,
            library_integer_rows: None,
        };
        Ok(PtxDevice {
            group: None,
            library,
            ctx: Arc::new(ctx),
            limits,
            compute_capability: cc,
            arch,
            options,
            overlap_launches,
            nvrtc_version,
            driver_version,
            disk: config.cache_root.as_deref().map(DiskCache::under),
            modules: HashMap::new(),
            compiled_ahead: HashMap::new(),
            in_flight: InFlight::default(),
            stats: CompileStats::default(),
            n_recordings: 0,
        })
    }

    /// The device's compute capability, `(major, minor)`.
    pub fn compute_capability(&self) -> (u32, u32) {
        self.compute_capability
    }

    /// The architecture kernels are compiled for (`90` for `compute_90`).
    pub fn arch(&self) -> u32 {
        self.arch
    }

    /// The NVRTC options every kernel is compiled with.
    pub fn nvrtc_options(&self) -> &[String] {
        &self.options
    }

    /// NVRTC's version, `(major, minor)`.
    pub fn nvrtc_version(&self) -> (i32, i32) {
        self.nvrtc_version
    }

    /// The driver's CUDA version (`13000` for 13.0).
    pub fn driver_version(&self) -> i32 {
        self.driver_version
    }

    /// Where compiled kernels came from so far.
    pub fn compile_stats(&self) -> CompileStats {
        self.stats
    }

    /// The bound on every wait for the device.
    pub fn wait_timeout(&self) -> Duration {
        self.ctx.wait_timeout()
    }

    /// Changes the bound on every wait for the device.
    pub fn set_wait_timeout(&mut self, timeout: Duration) {
        self.ctx.set_wait_timeout(timeout);
    }

    /// Makes the device rank `comm.rank` of a group of `ranks` (it then runs collectives).
    pub(crate) fn join_group(&mut self, comm: Arc<NcclComm>, ranks: usize) {
        self.group = Some(comm);
        self.limits.group_ranks = ranks;
    }

    /// Binds the device's context to the calling thread (before a group's NCCL calls).
    pub(crate) fn make_current(&self) -> Result<(), DeviceError> {
        self.enter()
    }

    /// The device's rank in its group, when it is one.
    pub fn rank(&self) -> Option<usize> {
        self.group.as_ref().map(|g| g.rank)
    }

    /// A zeroed allocation of the device's own (cuBLASLt's staging and workspace).
    pub(crate) fn alloc_raw(&mut self, bytes: u64) -> Result<Arc<Allocation>, DeviceError> {
        Ok(self.alloc(bytes)?.alloc)
    }

    /// The first failure, when the device is poisoned.
    pub fn poisoned(&self) -> Option<DeviceError> {
        self.ctx.poison.check().err()
    }

    /// Compiles hand-written CUDA C. The engine compiles kernel descriptions through
    /// [`Device::compile`]; this is for device bring-up and self-tests.
    pub fn compile_source(&mut self, src: &SourceKernel<'_>) -> Result<PtxKernel, DeviceError> {
        self.enter()?;
        let SourceKernel {
            name,
            entry,
            source,
            workgroup,
            n_params,
            takes_fault_buffer,
            waits_for_predecessors,
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
        let entry_c = CString::new(entry)
            .map_err(|_| compile_error(format!("entry name {entry:?} contains a NUL byte")))?;
        let key = CacheKey::new(source, &self.options, self.arch, self.nvrtc_version);
        let module = match self.modules.get(&key) {
            Some(m) => {
                self.stats.memory_hits += 1;
                Arc::clone(m)
            }
            None => {
                let m = self.load_module(&key, name, entry, source)?;
                self.modules.insert(key, Arc::clone(&m));
                m
            }
        };

        let mut function: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: the module is loaded in our (current) context; the name is NUL-terminated.
        match unsafe { sys::cuModuleGetFunction(&mut function, module.module, entry_c.as_ptr()) } {
            CUresult::CUDA_SUCCESS => {}
            CUresult::CUDA_ERROR_NOT_FOUND => {
                return Err(compile_error(format!(
                    "the module has no entry point `{entry}`"
                )));
            }
            e => return Err(self.cuda_failure("cuModuleGetFunction", e)),
        }
        let mut max_threads: c_int = 0;
        // SAFETY: valid out-pointer and function handle.
        let r = unsafe {
            sys::cuFuncGetAttribute(
                &mut max_threads,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                function,
            )
        };
        cu(r).map_err(|e| self.cuda_failure("cuFuncGetAttribute", e))?;
        if i64::from(max_threads) < i64::from(workgroup) {
            return Err(compile_error(format!(
                "the compiled kernel can run at most {max_threads} threads per workgroup (registers), it asks for {workgroup}"
            )));
        }
        Ok(PtxKernel {
            name: Arc::from(name),
            entry: entry.to_string(),
            function,
            module,
            n_params,
            workgroup,
            takes_fault_buffer,
            waits_for_predecessors,
        })
    }

    /// Binds the context and refuses when poisoned.
    fn enter(&self) -> Result<(), DeviceError> {
        self.ctx.poison.check()?;
        self.ctx
            .make_current()
            .map_err(|e| self.cuda_failure("cuCtxSetCurrent", e))
    }

    /// A CUDA failure of `call`: classified against the work in flight, and poisoning.
    pub(crate) fn cuda_failure(&self, call: &str, e: CUresult) -> DeviceError {
        let (err, detail) = classify(call, e, &self.in_flight, self.ctx.fault_code());
        self.ctx.poison.record(err, Some(&detail))
    }

    /// A copy the device refused before anything reached CUDA (a buffer of another device): an
    /// engine bug that poisons, since the engine's idea of the buffer's contents no longer
    /// matches the device's.
    fn misuse(&self, reason: String) -> DeviceError {
        self.ctx.poison.record(
            DeviceError::Lost { reason },
            Some("refused before reaching the device"),
        )
    }

    /// Waits for the stream to drain; the work in flight is then known to have succeeded.
    fn wait(&mut self) -> Result<(), DeviceError> {
        match self.ctx.wait_idle() {
            Ok(()) => {
                self.in_flight.clear();
                Ok(())
            }
            Err(WaitError::Timeout) => {
                let waiting_for = self
                    .in_flight
                    .suspect()
                    .unwrap_or_else(|| "copies".to_string());
                let err = DeviceError::Timeout {
                    seconds: timeout_seconds(self.ctx.wait_timeout()),
                };
                Err(self
                    .ctx
                    .poison
                    .record(err, Some(&format!("waiting for {waiting_for}"))))
            }
            Err(WaitError::Failed(e)) => Err(self.cuda_failure("cuStreamQuery", e)),
        }
    }

    fn owns(&self, ctx: &Arc<Context>) -> bool {
        Arc::ptr_eq(ctx, &self.ctx)
    }

    /// The byte range `offset..offset + len` of `buf`, checked.
    fn range(
        &self,
        buf: &PtxBuffer,
        offset: u64,
        len: usize,
    ) -> Result<(CUdeviceptr, usize), DeviceError> {
        if !self.owns(&buf.alloc.ctx) {
            return Err(self.misuse("a copy with a buffer of another device".to_string()));
        }
        let len64 = len as u64;
        match offset.checked_add(len64) {
            Some(end) if end <= buf.alloc.bytes => Ok((buf.alloc.ptr + offset, len)),
            _ => Err(self.ctx.poison.record_host(DeviceError::OutOfBounds {
                offset,
                len: len64,
                size: buf.alloc.bytes,
            })),
        }
    }

    /// Checks a launch against the kernel and the device before anything is submitted. A launch
    /// that fails a check is refused with [`DeviceError::BadLaunch`]: nothing reached CUDA, so
    /// the device is unchanged and not poisoned.
    fn check_launch(&self, l: &Launch<'_, Self>) -> Result<(), DeviceError> {
        let k = l.kernel;
        if !self.owns(&k.module.ctx) {
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

    /// Submits the group's collective `op` over `n_elems` 32-bit words from `src` into `dst`
    /// (eagerly, or into a capture). A device alone refuses; buffers of another device or too
    /// small, and a broadcast root outside the group, are refused before NCCL sees them; an NCCL
    /// failure poisons the device.
    fn submit_collective(
        &self,
        op: GroupOp,
        src: &PtxBuffer,
        dst: &PtxBuffer,
        n_elems: u64,
    ) -> Result<(), DeviceError> {
        let name = op.name();
        let Some(comm) = &self.group else {
            return Err(DeviceError::NoCollectives {
                device: self.limits.name.clone(),
            });
        };
        let bytes = n_elems.saturating_mul(4);
        for b in [src, dst] {
            if !self.owns(&b.alloc.ctx) {
                return Err(bad_launch(
                    name,
                    "a buffer belongs to another device".to_string(),
                ));
            }
            if b.alloc.bytes < bytes {
                return Err(bad_launch(
                    name,
                    format!("{n_elems} words in a buffer of {} B", b.alloc.bytes),
                ));
            }
        }
        if Arc::ptr_eq(&src.alloc, &dst.alloc) {
            return Err(bad_launch(
                name,
                "source and destination are one buffer".to_string(),
            ));
        }
        let n = usize::try_from(n_elems)
            .map_err(|_| bad_launch(name, format!("{n_elems} elements")))?;
        let (src, dst, stream) = (src.alloc.ptr, dst.alloc.ptr, self.ctx.stream);
        let submitted = match op {
            GroupOp::AllReduceSum => comm.all_reduce(src, dst, n, stream),
            GroupOp::Broadcast { root } => {
                let ranks = self.limits.group_ranks;
                if root >= ranks {
                    return Err(bad_launch(
                        name,
                        format!("root rank {root} outside a group of {ranks}"),
                    ));
                }
                comm.broadcast(src, dst, n, root, stream)
            }
        };
        submitted.map_err(|reason| {
            self.ctx
                .poison
                .record(DeviceError::Collective { reason }, Some(name))
        })
    }

    /// Submits one checked launch to the stream (eagerly, or into a capture); `overlap` marks it
    /// to start before the kernel before it has finished (the caller has checked that this
    /// kernel waits for it, and that a kernel precedes it).
    fn submit(&self, l: &Launch<'_, Self>, overlap: bool) -> Result<(), CUresult> {
        let k = l.kernel;
        let mut ptrs: Vec<CUdeviceptr> = l.args.iter().map(|b| b.alloc.ptr).collect();
        if k.takes_fault_buffer {
            ptrs.push(self.ctx.fault_dev);
        }
        let mut params: Vec<*mut c_void> = ptrs
            .iter_mut()
            .map(|p| (p as *mut CUdeviceptr).cast::<c_void>())
            .collect();
        let params_ptr = if params.is_empty() {
            std::ptr::null_mut()
        } else {
            params.as_mut_ptr()
        };
        let [x, y, z] = l.grid;
        if overlap {
            // SAFETY: as below; the attribute array outlives the call.
            let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
            attr.id =
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attr.value.programmaticStreamSerializationAllowed = 1;
            let config = sys::CUlaunchConfig {
                gridDimX: x,
                gridDimY: y,
                gridDimZ: z,
                blockDimX: k.workgroup,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: 0,
                hStream: self.ctx.stream,
                attrs: &mut attr,
                numAttrs: 1,
            };
            // SAFETY: as for `cuLaunchKernel` below: a loaded function, one valid pointer per
            // parameter, a config and attribute that live until the call returns.
            return cu(unsafe {
                sys::cuLaunchKernelEx(&config, k.function, params_ptr, std::ptr::null_mut())
            });
        }
        // SAFETY: the function belongs to a module loaded in this context (kept alive by the
        // kernel); `params` holds one pointer per kernel parameter (checked), each pointing at a
        // device address that lives until the call returns (the driver copies the values); a
        // kernel that can fault gets the fault buffer's address last, as rendered.
        cu(unsafe {
            sys::cuLaunchKernel(
                k.function,
                x,
                y,
                z,
                k.workgroup,
                1,
                1,
                0,
                self.ctx.stream,
                params_ptr,
                std::ptr::null_mut(),
            )
        })
    }

    /// Loads a module for `source`: from the disk cache when it holds a loadable image, else
    /// compiled by NVRTC (and stored).
    fn load_module(
        &mut self,
        key: &CacheKey,
        name: &str,
        entry: &str,
        source: &str,
    ) -> Result<Arc<LoadedModule>, DeviceError> {
        if let Some(ptx) = self.disk.as_ref().and_then(|d| d.get(key, entry)) {
            match self.load_ptx(&ptx)? {
                Load::Loaded(m) => {
                    self.stats.disk_hits += 1;
                    return Ok(m);
                }
                // A stale or damaged file: compile again and overwrite it.
                Load::Rejected(..) => self.stats.disk_errors += 1,
            }
        }
        let ptx = match self.compiled_ahead.remove(key) {
            Some(ptx) => ptx,
            None => nvrtc::compile(source, &self.options).map_err(|f| DeviceError::Compile {
                kernel: name.to_string(),
                log: f.log,
            })?,
        };
        self.stats.nvrtc_compiles += 1;
        if let Some(d) = &self.disk
            && d.put(key, &ptx).is_err()
        {
            self.stats.disk_errors += 1;
        }
        match self.load_ptx(&ptx)? {
            Load::Loaded(m) => Ok(m),
            Load::Rejected(e, log) => Err(DeviceError::Compile {
                kernel: name.to_string(),
                log: format!("the driver refused the PTX: {}\n{log}", cuda_error_text(e)),
            }),
        }
    }

    /// Loads one PTX image (JIT-compiled by the driver).
    fn load_ptx(&self, ptx: &str) -> Result<Load, DeviceError> {
        let Ok(image) = CString::new(ptx) else {
            return Ok(Load::Rejected(
                CUresult::CUDA_ERROR_INVALID_PTX,
                "the PTX contains a NUL byte".to_string(),
            ));
        };
        let mut log = vec![0u8; 16 * 1024];
        let mut options = [
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        // The size option's value is the integer itself, passed in the pointer slot.
        let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), log.len() as *mut c_void];
        let mut module: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: the image is NUL-terminated PTX; the log buffer outlives the call and its size
        // is passed; two options with two values.
        let r = unsafe {
            sys::cuModuleLoadDataEx(
                &mut module,
                image.as_ptr().cast(),
                2,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        match r {
            CUresult::CUDA_SUCCESS => {}
            e if is_image_rejection(e) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                return Ok(Load::Rejected(
                    e,
                    String::from_utf8_lossy(&log[..end]).into_owned(),
                ));
            }
            e => return Err(self.cuda_failure("cuModuleLoadData", e)),
        }
        Ok(Load::Loaded(Arc::new(LoadedModule {
            module,
            ctx: Arc::clone(&self.ctx),
        })))
    }

    /// Captures `launches` into a graph and instantiates it.
    fn capture(&self, launches: &[Launch<'_, Self>]) -> Result<CUgraphExec, DeviceError> {
        let commands: Vec<Command<'_, Self>> = launches
            .iter()
            .map(|l| {
                Command::Launch(Launch {
                    kernel: l.kernel,
                    grid: l.grid,
                    args: l.args,
                })
            })
            .collect();
        self.capture_commands(&commands)
    }

    /// Captures `commands` (launches, and the group's all-reduces and broadcasts) into a graph and
    /// instantiates it.
    fn capture_commands(&self, commands: &[Command<'_, Self>]) -> Result<CUgraphExec, DeviceError> {
        let stream = self.ctx.stream;
        // SAFETY: the stream is ours and not capturing; thread-local mode keeps other threads'
        // CUDA calls out of the capture.
        let r = unsafe {
            sys::cuStreamBeginCapture_v2(
                stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        };
        cu(r).map_err(|e| self.cuda_failure("cuStreamBeginCapture", e))?;
        let mut launched = Ok(());
        // Whether the command before is a kernel of ours (a collective's kernels do not wait).
        let mut after_kernel = false;
        for c in commands {
            let submitted = match c {
                Command::Launch(l) => {
                    let overlap =
                        self.overlap_launches && after_kernel && l.kernel.waits_for_predecessors;
                    after_kernel = true;
                    self.submit(l, overlap).map_err(|e| {
                        self.cuda_failure(
                            &format!("cuLaunchKernel of `{}` during capture", l.kernel.name),
                            e,
                        )
                    })
                }
                Command::AllReduceSum { src, dst, n_elems } => {
                    after_kernel = false;
                    self.submit_collective(GroupOp::AllReduceSum, src, dst, *n_elems)
                }
                Command::Contract(c) => {
                    // The library's kernels do not wait for ours to signal: launch after them.
                    after_kernel = false;
                    self.submit_contraction(c)
                }
                Command::Broadcast {
                    src,
                    dst,
                    n_elems,
                    root,
                } => {
                    after_kernel = false;
                    self.submit_collective(GroupOp::Broadcast { root: *root }, src, dst, *n_elems)
                }
            };
            if let Err(e) = submitted {
                launched = Err(e);
                break;
            }
        }
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above (also after a failed launch, so the stream leaves
        // capture mode).
        let ended = cu(unsafe { sys::cuStreamEndCapture(stream, &mut graph) });
        launched?;
        ended.map_err(|e| self.cuda_failure("cuStreamEndCapture", e))?;
        let mut exec: CUgraphExec = std::ptr::null_mut();
        // SAFETY: `graph` is the captured graph; it is destroyed once instantiated (the exec is
        // independent of it).
        let instantiated = unsafe {
            let r = cu(sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0));
            let _ = sys::cuGraphDestroy(graph);
            r
        };
        instantiated.map_err(|e| self.cuda_failure("cuGraphInstantiate", e))?;
        // SAFETY: uploads the exec's resources now so the first replay costs what later ones do.
        cu(unsafe { sys::cuGraphUpload(exec, stream) })
            .map_err(|e| self.cuda_failure("cuGraphUpload", e))?;
        Ok(exec)
    }
}

impl Device for PtxDevice {
    type Buffer = PtxBuffer;
    type Kernel = PtxKernel;
    type Recording = PtxRecording;

    fn limits(&self) -> &DeviceLimits {
        &self.limits
    }

    /// Allocates zeroed device memory (the zeroing is ordered on the stream before any later
    /// work).
    fn alloc(&mut self, bytes: u64) -> Result<PtxBuffer, DeviceError> {
        self.enter()?;
        if bytes == 0 {
            return Ok(PtxBuffer {
                alloc: Arc::new(Allocation {
                    ptr: 0,
                    bytes: 0,
                    ctx: Arc::clone(&self.ctx),
                }),
            });
        }
        let size = usize::try_from(bytes).map_err(|_| DeviceError::OutOfMemory { bytes })?;
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: valid out-pointer; the context is current.
        match unsafe { sys::cuMemAlloc_v2(&mut ptr, size) } {
            CUresult::CUDA_SUCCESS => {}
            CUresult::CUDA_ERROR_OUT_OF_MEMORY => return Err(DeviceError::OutOfMemory { bytes }),
            e => return Err(self.cuda_failure("cuMemAlloc", e)),
        }
        let alloc = Arc::new(Allocation {
            ptr,
            bytes,
            ctx: Arc::clone(&self.ctx),
        });
        // SAFETY: `ptr` holds `size` bytes.
        cu(unsafe { sys::cuMemsetD8Async(ptr, 0, size, self.ctx.stream) })
            .map_err(|e| self.cuda_failure("cuMemsetD8Async", e))?;
        Ok(PtxBuffer { alloc })
    }

    /// Copies host bytes into the buffer, ordered on the stream after earlier work. A small
    /// write (a slot) returns without waiting: the driver stages pageable host memory before
    /// the call returns, so `src` is free to change afterwards. A larger one first waits
    /// (bounded) for earlier work, because the driver stages it in pieces and would otherwise
    /// block behind that work without bound.
    fn write(&mut self, dst: &PtxBuffer, offset_bytes: u64, src: &[u8]) -> Result<(), DeviceError> {
        self.enter()?;
        let (ptr, len) = self.range(dst, offset_bytes, src.len())?;
        if len == 0 {
            return Ok(());
        }
        if len > STAGED_WRITE_BYTES {
            self.wait()?;
        }
        // SAFETY: the range is inside the allocation (checked); `src` holds `len` bytes.
        cu(unsafe { sys::cuMemcpyHtoDAsync_v2(ptr, src.as_ptr().cast(), len, self.ctx.stream) })
            .map_err(|e| self.cuda_failure("cuMemcpyHtoDAsync", e))
    }

    /// Waits (bounded) for all earlier work, then copies the bytes out.
    fn read(
        &mut self,
        src: &PtxBuffer,
        offset_bytes: u64,
        dst: &mut [u8],
    ) -> Result<(), DeviceError> {
        self.enter()?;
        let (ptr, len) = self.range(src, offset_bytes, dst.len())?;
        // Drain first: a copy into pageable memory blocks until it is done, and it would wait
        // behind a hung kernel without bound.
        self.wait()?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: the range is inside the allocation (checked); `dst` holds `len` bytes and is
        // written before the call returns (pageable destination) or the wait below.
        cu(unsafe {
            sys::cuMemcpyDtoHAsync_v2(dst.as_mut_ptr().cast(), ptr, len, self.ctx.stream)
        })
        .map_err(|e| self.cuda_failure("cuMemcpyDtoHAsync", e))?;
        self.wait()
    }

    /// Renders the kernel as CUDA C and compiles it (see [`PtxDevice::compile_source`]); a
    /// kernel the renderer refuses is a [`DeviceError::Compile`] with the renderer's reason.
    fn compile(&mut self, kernel: &Kernel) -> Result<PtxKernel, DeviceError> {
        self.enter()?;
        let src = source::render(kernel).map_err(|log| DeviceError::Compile {
            kernel: kernel.name.clone(),
            log,
        })?;
        self.compile_source(&SourceKernel {
            name: &kernel.name,
            entry: &src.entry,
            source: &src.text,
            workgroup: kernel.workgroup,
            n_params: kernel.params.len(),
            takes_fault_buffer: src.takes_fault_buffer,
            waits_for_predecessors: src.waits_for_predecessors,
        })
    }

    /// Compiles the kernels neither the loaded modules nor the disk cache hold with NVRTC on
    /// several threads at once (a prepared step's hundred kernels took a minute one by one),
    /// then loads every kernel in order (`POOT_PTX_COMPILE_THREADS`, see [`compile_threads`]).
    fn compile_all(&mut self, kernels: &[Kernel]) -> Result<Vec<PtxKernel>, DeviceError> {
        self.enter()?;
        let mut missing: Vec<(CacheKey, String)> = Vec::new();
        for k in kernels {
            let Ok(src) = source::render(k) else {
                // The one-by-one compile reports it.
                continue;
            };
            let key = CacheKey::new(&src.text, &self.options, self.arch, self.nvrtc_version);
            let known = self.modules.contains_key(&key)
                || self.compiled_ahead.contains_key(&key)
                || missing.iter().any(|(m, _)| *m == key)
                || self
                    .disk
                    .as_ref()
                    .is_some_and(|d| d.get(&key, &src.entry).is_some());
            if !known {
                missing.push((key, src.text));
            }
        }
        let threads = compile_threads().min(missing.len());
        if threads > 1 {
            let options = &self.options;
            let missing = &missing;
            let compiled: Vec<(CacheKey, String)> = std::thread::scope(|scope| {
                let workers: Vec<_> = (0..threads)
                    .map(|t| {
                        scope.spawn(move || {
                            missing
                                .iter()
                                .skip(t)
                                .step_by(threads)
                                .filter_map(|(key, text)| {
                                    // A failure is left to the one-by-one compile, which
                                    // reports it with the kernel's name.
                                    nvrtc::compile(text, options).ok().map(|ptx| (*key, ptx))
                                })
                                .collect::<Vec<_>>()
                        })
                    })
                    .collect();
                workers
                    .into_iter()
                    .flat_map(|w| w.join().unwrap_or_default())
                    .collect()
            });
            self.compiled_ahead.extend(compiled);
        }
        let loaded = kernels.iter().map(|k| self.compile(k)).collect();
        // Nothing compiled ahead outlives the call (a kernel that failed to load keeps none).
        self.compiled_ahead.clear();
        loaded
    }

    fn launch(&mut self, launch: &Launch<'_, Self>) -> Result<(), DeviceError> {
        self.enter()?;
        self.check_launch(launch)?;
        self.submit(launch, false).map_err(|e| {
            self.cuda_failure(&format!("cuLaunchKernel of `{}`", launch.kernel.name), e)
        })?;
        self.in_flight.push(Arc::clone(&launch.kernel.name));
        Ok(())
    }

    fn record(&mut self, launches: &[Launch<'_, Self>]) -> Result<PtxRecording, DeviceError> {
        let commands: Vec<Command<'_, Self>> = launches
            .iter()
            .map(|l| {
                Command::Launch(Launch {
                    kernel: l.kernel,
                    grid: l.grid,
                    args: l.args,
                })
            })
            .collect();
        self.record_commands(&commands)
    }

    /// Captures the launches and the group's all-reduces (NCCL records into CUDA graphs) into
    /// one graph; every rank of the group must replay its recordings in the same order.
    fn record_commands(
        &mut self,
        commands: &[Command<'_, Self>],
    ) -> Result<PtxRecording, DeviceError> {
        self.enter()?;
        let mut names: Vec<&str> = Vec::with_capacity(commands.len());
        let mut group = None;
        let mut modules: Vec<Arc<LoadedModule>> = Vec::new();
        let mut buffers: Vec<Arc<Allocation>> = self.prepare_contractions(commands)?;
        let mut keep = |b: &PtxBuffer| {
            if !buffers.iter().any(|a| Arc::ptr_eq(a, &b.alloc)) {
                buffers.push(Arc::clone(&b.alloc));
            }
        };
        for c in commands {
            match c {
                Command::Launch(l) => {
                    self.check_launch(l)?;
                    names.push(&l.kernel.name);
                    if !modules.iter().any(|m| Arc::ptr_eq(m, &l.kernel.module)) {
                        modules.push(Arc::clone(&l.kernel.module));
                    }
                    l.args.iter().for_each(|b| keep(b));
                }
                Command::AllReduceSum { src, dst, .. } | Command::Broadcast { src, dst, .. } => {
                    let Some(comm) = &self.group else {
                        return Err(DeviceError::NoCollectives {
                            device: self.limits.name.clone(),
                        });
                    };
                    group = Some(Arc::clone(comm));
                    names.push(if matches!(c, Command::Broadcast { .. }) {
                        "broadcast"
                    } else {
                        "all-reduce"
                    });
                    keep(src);
                    keep(dst);
                }
                Command::Contract(c) => {
                    names.push("library contraction");
                    keep(c.lhs);
                    keep(c.weights);
                    keep(c.out);
                }
            }
        }
        self.n_recordings += 1;
        let label: Arc<str> = Arc::from(recording_label(self.n_recordings, &names));
        let exec = if commands.is_empty() {
            None
        } else {
            Some(self.capture_commands(commands)?)
        };
        Ok(PtxRecording {
            exec,
            group,
            ctx: Arc::clone(&self.ctx),
            label,
            n_launches: commands.len(),
            _modules: modules,
            _buffers: buffers,
        })
    }

    /// One eager NCCL all-reduce on the device's stream.
    fn all_reduce_sum(
        &mut self,
        src: &PtxBuffer,
        dst: &PtxBuffer,
        n_elems: u64,
    ) -> Result<(), DeviceError> {
        self.enter()?;
        self.submit_collective(GroupOp::AllReduceSum, src, dst, n_elems)?;
        self.in_flight.push(Arc::from("all-reduce"));
        Ok(())
    }

    /// One eager NCCL broadcast on the device's stream.
    fn broadcast(
        &mut self,
        src: &PtxBuffer,
        dst: &PtxBuffer,
        n_elems: u64,
        root: usize,
    ) -> Result<(), DeviceError> {
        self.enter()?;
        self.submit_collective(GroupOp::Broadcast { root }, src, dst, n_elems)?;
        self.in_flight.push(Arc::from("broadcast"));
        Ok(())
    }

    fn replay(&mut self, recording: &PtxRecording) -> Result<(), DeviceError> {
        self.enter()?;
        if !self.owns(&recording.ctx) {
            return Err(bad_launch(
                &recording.label,
                "the recording was made by another device".to_string(),
            ));
        }
        let Some(exec) = recording.exec else {
            return Ok(());
        };
        // SAFETY: the exec was instantiated in this context and lives as long as `recording`.
        cu(unsafe { sys::cuGraphLaunch(exec, self.ctx.stream) })
            .map_err(|e| self.cuda_failure("cuGraphLaunch", e))?;
        self.in_flight.push(Arc::clone(&recording.label));
        Ok(())
    }

    fn synchronize(&mut self) -> Result<(), DeviceError> {
        self.enter()?;
        self.wait()
    }

    /// Captures `reps` copies of the launch into one graph and times a replay between two
    /// events, so neither the host nor launch gaps are counted.
    fn time_launch(
        &mut self,
        launch: &Launch<'_, Self>,
        reps: u32,
    ) -> Result<Option<f64>, DeviceError> {
        self.enter()?;
        self.check_launch(launch)?;
        let mut version: c_int = 0;
        // SAFETY: writes one int.
        let known = cu(unsafe { sys::cuDriverGetVersion(&mut version) }).is_ok();
        if !known || version < 12080 {
            // cuEventElapsedTime_v2 (the binding this build links) came with CUDA 12.8.
            return Ok(None);
        }
        let copies: Vec<Launch<'_, Self>> = (0..reps.max(1))
            .map(|_| Launch {
                kernel: launch.kernel,
                grid: launch.grid,
                args: launch.args,
            })
            .collect();
        let exec = self.capture(&copies)?;
        let stream = self.ctx.stream;
        let mut events: [sys::CUevent; 2] = [std::ptr::null_mut(); 2];
        // SAFETY: events are created in this context and destroyed below; the exec was just
        // instantiated here and is destroyed once, after the wait.
        let submitted = unsafe {
            cu(sys::cuEventCreate(&mut events[0], 0))
                .and_then(|()| cu(sys::cuEventCreate(&mut events[1], 0)))
                .and_then(|()| cu(sys::cuGraphLaunch(exec, stream)))
                .and_then(|()| cu(sys::cuEventRecord(events[0], stream)))
                .and_then(|()| cu(sys::cuGraphLaunch(exec, stream)))
                .and_then(|()| cu(sys::cuEventRecord(events[1], stream)))
        };
        let waited = match submitted {
            Ok(()) => {
                self.in_flight.push(Arc::clone(&launch.kernel.name));
                self.wait()
            }
            Err(e) => Err(self.cuda_failure("timing a kernel", e)),
        };
        let mut ms = 0f32;
        // SAFETY: both events were recorded and the stream drained (or the call failed, and
        // then only the destroys run).
        let elapsed = unsafe {
            let r = match waited {
                Ok(()) => cu(sys::cuEventElapsedTime_v2(&mut ms, events[0], events[1]))
                    .map_err(|e| self.cuda_failure("cuEventElapsedTime", e)),
                Err(e) => Err(e),
            };
            for e in events {
                if !e.is_null() {
                    let _ = sys::cuEventDestroy_v2(e);
                }
            }
            let _ = sys::cuGraphExecDestroy(exec);
            r
        };
        elapsed.map(|()| Some(f64::from(ms) / 1000.0 / f64::from(reps.max(1))))
    }

    /// One `cuMemcpyDtoDAsync` on the device's stream.
    fn copy(&mut self, src: &PtxBuffer, dst: &PtxBuffer, bytes: u64) -> Result<(), DeviceError> {
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
        let (from, len) = self.range(src, 0, len)?;
        let (to, len) = self.range(dst, 0, len)?;
        if len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges are inside their allocations (checked), in this context.
        cu(unsafe { sys::cuMemcpyDtoDAsync_v2(to, from, len, self.ctx.stream) })
            .map_err(|e| self.cuda_failure("cuMemcpyDtoDAsync", e))?;
        self.in_flight.push(Arc::from("device-to-device copy"));
        Ok(())
    }
}

impl Drop for PtxDevice {
    fn drop(&mut self) {
        // Let submitted work finish (bounded) before the modules and, with the last reference,
        // the context are released; a hang poisons the context, which is then leaked.
        let released = self.ctx.ready_to_release();
        // A rank whose device cannot go on aborts its communicator rather than destroying it
        // (a destroy would wait for work that never ends).
        if !released && let Some(comm) = &self.group {
            comm.abort();
        }
    }
}

impl std::fmt::Debug for PtxDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtxDevice")
            .field("name", &self.limits.name)
            .field("compute_capability", &self.compute_capability)
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
        send_sync::<PtxDevice>();
        send_sync::<PtxBuffer>();
        send_sync::<PtxKernel>();
        send_sync::<PtxRecording>();
    }

    #[test]
    fn a_refused_launch_names_the_kernel() {
        // The device returns it without touching the poison cell.
        let e = bad_launch("k", "1 buffers given; the kernel takes 2".into());
        assert_eq!(
            e.to_string(),
            "launch of `k` refused: 1 buffers given; the kernel takes 2"
        );
    }

    #[test]
    fn default_config_waits_600_s() {
        assert_eq!(PtxConfig::default().wait_timeout, Duration::from_secs(600));
    }
}
