//! [`CpuDevice`]: host memory, kernels as compiled C functions, workgroups over a thread pool.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::collections::HashMap;
use std::ffi::c_void;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use poot_executor::{Command, Device, DeviceError, DeviceLimits, Launch};
use poot_kernel::Kernel;
use poot_kernel::render::{
    FAULT_CODE_WORD, FAULT_FLAG_WORD, FAULT_WORDS, entry_name, render_host_c,
};
use rayon::prelude::*;

use crate::compiler::{CompileFailure, Compiler, KERNEL_FLAGS};
use crate::library::{ContractLibrary, RecordedContraction, Rounding};
use crate::team;

pub(crate) const BACKEND: &str = "CPU";
/// Buffers start at a cache line, so the C compiler's wide loads never straddle one needlessly.
const ALIGN: usize = 64;
/// Stack of each pool thread: a workgroup's shared arrays and per-thread variables live there.
const STACK_BYTES: usize = 16 << 20;
/// Chunks of workgroups per pool thread in one launch: enough to balance uneven chunks.
const CHUNKS_PER_THREAD: u32 = 4;

/// The signature of every rendered entry (see `poot_kernel::render::host_c`).
type Entry = unsafe extern "C" fn(*const *mut c_void, u32, u32, u32, u32, u32, *mut u32);

/// How a [`CpuDevice`] is opened.
#[derive(Clone, Debug, Default)]
pub struct CpuOptions {
    /// Pool threads (`None`: one per core the process may use).
    pub threads: Option<usize>,
    /// The root of the on-disk cache (files go to `<root>/cpu/`); `None` for `$POOT_CACHE`,
    /// else `$HOME/.cache/poot`.
    pub cache_root: Option<PathBuf>,
}

/// One host allocation, freed when its last holder drops.
pub(crate) struct Memory {
    pub(crate) ptr: NonNull<u8>,
    bytes: usize,
}

// SAFETY: plain heap memory; kernels write it through raw pointers only while a launch runs,
// and the engine orders launches, copies and host reads (the device runs them in call order).
unsafe impl Send for Memory {}
// SAFETY: as above.
unsafe impl Sync for Memory {}

impl Memory {
    fn new(bytes: usize) -> Result<Memory, DeviceError> {
        if bytes == 0 {
            return Ok(Memory {
                ptr: NonNull::<u64>::dangling().cast(),
                bytes: 0,
            });
        }
        let layout =
            Layout::from_size_align(bytes, ALIGN).map_err(|_| DeviceError::OutOfMemory {
                bytes: bytes as u64,
            })?;
        // SAFETY: a non-zero size and a valid alignment.
        let ptr = unsafe { alloc_zeroed(layout) };
        NonNull::new(ptr)
            .map(|ptr| Memory { ptr, bytes })
            .ok_or(DeviceError::OutOfMemory {
                bytes: bytes as u64,
            })
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        // SAFETY: allocated by `alloc_zeroed` with this layout, freed once.
        unsafe {
            dealloc(
                self.ptr.as_ptr(),
                Layout::from_size_align_unchecked(self.bytes, ALIGN),
            )
        };
    }
}

/// A buffer of a [`CpuDevice`]: host memory at a fixed address.
pub struct CpuBuffer {
    pub(crate) mem: Arc<Memory>,
}

impl CpuBuffer {
    pub fn bytes(&self) -> u64 {
        self.mem.bytes as u64
    }

    fn range(&self, offset: u64, len: usize) -> Result<*mut u8, DeviceError> {
        let size = self.mem.bytes as u64;
        match offset.checked_add(len as u64) {
            Some(end) if end <= size => {
                // SAFETY: in bounds of the allocation (checked above).
                Ok(unsafe { self.mem.ptr.as_ptr().add(offset as usize) })
            }
            _ => Err(DeviceError::OutOfBounds {
                offset,
                len: len as u64,
                size,
            }),
        }
    }
}

/// A compiled kernel: its entry in a loaded shared object.
pub struct CpuKernel {
    name: Arc<str>,
    entry: Entry,
    _library: Arc<libloading::Library>,
    n_params: usize,
}

/// One recorded launch: the entry, its arguments' addresses (the buffers kept alive) and grid.
struct Recorded {
    name: Arc<str>,
    entry: Entry,
    _library: Arc<libloading::Library>,
    args: Vec<*mut c_void>,
    _buffers: Vec<Arc<Memory>>,
    grid: [u32; 3],
}

// SAFETY: the addresses point into allocations the recording keeps alive; the entry into a
// library it keeps loaded.
unsafe impl Send for Recorded {}
// SAFETY: as above.
unsafe impl Sync for Recorded {}

/// One step of a recording.
enum Step {
    Launch(Recorded),
    Contract(RecordedContraction),
}

/// A recorded step, replayed launch by launch.
pub struct CpuRecording {
    steps: Vec<Step>,
}

/// The host CPU as a poot [`Device`].
pub struct CpuDevice {
    limits: DeviceLimits,
    compiler: Compiler,
    pool: rayon::ThreadPool,
    threads: usize,
    libraries: HashMap<String, Arc<libloading::Library>>,
    /// The contraction library, once a recording has needed it.
    contract: Option<Arc<ContractLibrary>>,
    /// Its compilation, started when the device opens so that on a cold cache it overlaps
    /// the model's loading and the kernels' planning.
    contract_build: Option<std::thread::JoinHandle<Result<ContractLibrary, DeviceError>>>,
    /// The fault words every kernel reports a failed check through.
    fault: Box<[AtomicU32]>,
}

impl CpuDevice {
    /// Opens the host CPU: finds the C compiler (a typed error naming what to install when
    /// none runs) and starts the pool.
    pub fn open(options: CpuOptions) -> Result<CpuDevice, DeviceError> {
        let cache_root = options.cache_root.or_else(default_cache_root);
        let compiler = Compiler::find(cache_root.as_deref()).map_err(|f| match f {
            CompileFailure::Missing(reason) | CompileFailure::Refused(reason) => {
                DeviceError::Unavailable {
                    backend: BACKEND,
                    reason,
                }
            }
        })?;
        let threads = options
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .stack_size(STACK_BYTES)
            .thread_name(|i| format!("poot-cpu-{i}"))
            .build()
            .map_err(|e| DeviceError::Unavailable {
                backend: BACKEND,
                reason: format!("cannot start {threads} threads: {e}"),
            })?;
        let memory = total_memory();
        let limits = DeviceLimits {
            name: format!(
                "{} ({threads} threads, {})",
                cpu_name(),
                compiler.describe()
            ),
            max_buffer_bytes: memory.unwrap_or(1 << 40),
            memory_bytes: memory,
            max_groups_x: u32::MAX,
            max_groups_yz: 65535,
            max_workgroup_threads: 1024,
            max_shared_bytes: 48 << 10,
            max_bindings: u32::MAX,
            subgroup_sizes: (1, 1),
            // The planner sizes grids by multiprocessors (a few workgroups each): here each
            // pool thread is one, so a decode contraction stages its left side a few times,
            // not once per column tile, and a decode attention walks a few partitions.
            multiprocessors: Some(threads as u32),
            group_ranks: 1,
            max_loop_iterations: None,
            matrix_tf32: false,
            library_gemm: false,
            library_exact: true,
            library_integer_rows: integer_rows(),
        };
        let contract_build = {
            let compiler = compiler.clone();
            std::thread::Builder::new()
                .name("poot-cpu-contract".to_string())
                .spawn(move || ContractLibrary::load(&compiler))
                .ok()
        };
        Ok(CpuDevice {
            limits,
            compiler,
            pool,
            threads,
            libraries: HashMap::new(),
            contract: None,
            contract_build,
            fault: (0..FAULT_WORDS).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    /// Pool threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    fn contract_library(&mut self) -> Result<Arc<ContractLibrary>, DeviceError> {
        if let Some(l) = &self.contract {
            return Ok(Arc::clone(l));
        }
        let built = match self.contract_build.take().map(|h| h.join()) {
            Some(Ok(built)) => built,
            // Not started, or the thread died: build it here.
            _ => ContractLibrary::load(&self.compiler),
        };
        let l = Arc::new(built?);
        self.contract = Some(Arc::clone(&l));
        Ok(l)
    }

    /// Kernel `kernel` from its rendered `source` (keyed `key`): its shared object loaded once
    /// per process, compiled first where the disk cache lacks it.
    fn load(&mut self, kernel: &Kernel, key: &str, source: &str) -> Result<CpuKernel, DeviceError> {
        let compile_error = |log: String| DeviceError::Compile {
            kernel: kernel.name.clone(),
            log,
        };
        let library = match self.libraries.get(key) {
            Some(l) => Arc::clone(l),
            None => {
                let path = self
                    .compiler
                    .shared_object(key, source, KERNEL_FLAGS)
                    .map_err(|f| match f {
                        CompileFailure::Missing(reason) => DeviceError::Unavailable {
                            backend: BACKEND,
                            reason,
                        },
                        CompileFailure::Refused(log) => compile_error(log),
                    })?;
                // SAFETY: a shared object we compiled from our own C, with no initializers.
                let lib = unsafe { libloading::Library::new(&path) }
                    .map_err(|e| compile_error(format!("loading {}: {e}", path.display())))?;
                let lib = Arc::new(lib);
                self.libraries.insert(key.to_string(), Arc::clone(&lib));
                lib
            }
        };
        let name = entry_name(kernel);
        // SAFETY: the rendered entry has exactly the `Entry` signature.
        let entry: Entry = unsafe {
            *library
                .get::<Entry>(name.as_bytes())
                .map_err(|e| compile_error(format!("no entry `{name}`: {e}")))?
        };
        Ok(CpuKernel {
            name: Arc::from(kernel.name.as_str()),
            entry,
            _library: library,
            n_params: kernel.params.len(),
        })
    }

    fn check_launch(&self, l: &Launch<'_, Self>) -> Result<(), DeviceError> {
        if l.args.len() != l.kernel.n_params {
            return Err(DeviceError::BadLaunch {
                kernel: l.kernel.name.to_string(),
                reason: format!(
                    "{} buffers for {} parameters",
                    l.args.len(),
                    l.kernel.n_params
                ),
            });
        }
        let [_, y, z] = l.grid;
        if y > self.limits.max_groups_yz || z > self.limits.max_groups_yz {
            return Err(DeviceError::BadLaunch {
                kernel: l.kernel.name.to_string(),
                reason: format!("grid {:?} over the device's limits", l.grid),
            });
        }
        Ok(())
    }

    fn recorded(&self, l: &Launch<'_, Self>) -> Result<Recorded, DeviceError> {
        self.check_launch(l)?;
        Ok(Recorded {
            name: Arc::clone(&l.kernel.name),
            entry: l.kernel.entry,
            _library: Arc::clone(&l.kernel._library),
            args: l
                .args
                .iter()
                .map(|b| b.mem.ptr.as_ptr().cast::<c_void>())
                .collect(),
            _buffers: l.args.iter().map(|b| Arc::clone(&b.mem)).collect(),
            grid: l.grid,
        })
    }

    /// How a launch's grid is shared out: its workgroups along x in chunks, for each y and z.
    fn split(&self, r: &Recorded) -> LaunchSplit {
        let [gx, gy, gz] = r.grid;
        if gx == 0 || gy == 0 || gz == 0 {
            return LaunchSplit {
                chunk: 1,
                chunks: 0,
            };
        }
        let want = (self.threads as u32)
            .saturating_mul(CHUNKS_PER_THREAD)
            .max(1);
        let chunk = gx.div_ceil(want.min(gx));
        LaunchSplit {
            chunk,
            chunks: gx.div_ceil(chunk),
        }
    }

    /// Item `i` of launch `r` split as `s`: one chunk of workgroups of one (y, z).
    fn run_item(&self, r: &Recorded, s: LaunchSplit, i: u64) {
        let [gx, gy, _] = r.grid;
        let chunks = u64::from(s.chunks);
        let c = (i % chunks) as u32;
        let rest = i / chunks;
        let (y, z) = ((rest % u64::from(gy)) as u32, (rest / u64::from(gy)) as u32);
        let x0 = c * s.chunk;
        let x1 = (x0 + s.chunk).min(gx);
        // SAFETY: the entry was compiled from this kernel's description, which takes exactly
        // these buffers (checked at record); each address is a live allocation the recording
        // holds; the fault words outlive the launch.
        unsafe {
            (r.entry)(
                r.args.as_ptr(),
                x0,
                x1,
                y,
                z,
                gx,
                self.fault.as_ptr() as *mut u32,
            )
        };
    }

    /// Whether a kernel's check failed in the last launch.
    fn faulted(&self) -> bool {
        self.fault[FAULT_FLAG_WORD as usize].load(Ordering::Acquire) != 0
    }

    /// The failed check of `kernel` as an error, the fault words cleared.
    fn fault_of(&self, kernel: &str) -> DeviceError {
        let code = self.fault[FAULT_CODE_WORD as usize].swap(0, Ordering::AcqRel);
        self.fault[FAULT_FLAG_WORD as usize].store(0, Ordering::Release);
        DeviceError::KernelFault {
            kernel: kernel.to_string(),
            code,
        }
    }

    /// Runs one launch over the pool; a failed check is reported once every chunk has stopped.
    fn run(&self, r: &Recorded) -> Result<(), DeviceError> {
        let s = self.split(r);
        let [_, gy, gz] = r.grid;
        let total = u64::from(s.chunks) * u64::from(gy) * u64::from(gz);
        // One item (a norm's row, a small update) runs here: handing it to the pool costs more
        // than it does.
        if total == 1 {
            self.run_item(r, s, 0);
        } else {
            self.pool.install(|| {
                (0..total)
                    .into_par_iter()
                    .for_each(|i| self.run_item(r, s, i))
            });
        }
        if self.faulted() {
            return Err(self.fault_of(&r.name));
        }
        Ok(())
    }
}

/// How a launch's workgroups along x are chunked.
#[derive(Clone, Copy)]
struct LaunchSplit {
    chunk: u32,
    chunks: u32,
}

/// One phase of a replay ([`team`]).
enum Phase<'a> {
    Launch(&'a Recorded, LaunchSplit),
    /// A contraction's left side rounded to 8-bit blocks, in parts of its rows.
    Round(&'a RecordedContraction, u32),
    /// A contraction's columns, in chunks of this many.
    Columns(&'a RecordedContraction, u32, u32),
}

/// A recording as phases for the team.
struct Replay<'a> {
    device: &'a CpuDevice,
    phases: Vec<Phase<'a>>,
}

impl<'a> Replay<'a> {
    fn new(device: &'a CpuDevice, recording: &'a CpuRecording) -> Replay<'a> {
        let mut phases = Vec::with_capacity(recording.steps.len() + 8);
        for s in &recording.steps {
            match s {
                Step::Launch(r) => phases.push(Phase::Launch(r, device.split(r))),
                Step::Contract(c) => {
                    let parts = c.round_parts(device.threads);
                    if parts > 0 {
                        phases.push(Phase::Round(c, parts));
                    }
                    let (per_chunk, chunks) = c.column_chunks(device.threads, CHUNKS_PER_THREAD);
                    phases.push(Phase::Columns(c, per_chunk, chunks));
                }
            }
        }
        Replay { device, phases }
    }
}

impl team::Phases for Replay<'_> {
    fn phases(&self) -> usize {
        self.phases.len()
    }

    fn items(&self, phase: usize) -> u64 {
        match &self.phases[phase] {
            Phase::Launch(r, s) => {
                u64::from(s.chunks) * u64::from(r.grid[1]) * u64::from(r.grid[2])
            }
            Phase::Round(_, parts) => u64::from(*parts),
            Phase::Columns(_, _, chunks) => u64::from(*chunks),
        }
    }

    fn run(&self, phase: usize, item: u64) {
        match &self.phases[phase] {
            Phase::Launch(r, s) => self.device.run_item(r, *s, item),
            Phase::Round(c, parts) => c.round_part(item as u32, *parts),
            Phase::Columns(c, per_chunk, _) => c.run_columns(item as u32, *per_chunk),
        }
    }

    fn stop(&self, phase: usize) -> bool {
        matches!(self.phases[phase], Phase::Launch(..)) && self.device.faulted()
    }
}

/// Rows from which the contraction library multiplies block-quantized weights in 8-bit
/// integers (the CPU preset's): where the host has AVX-512's byte dot products (VNNI), which
/// its integer tile is written for; elsewhere its portable integer loop would be slower than
/// the f32 products.
fn integer_rows() -> Option<u32> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512vnni")
        && std::arch::is_x86_feature_detected!("avx512bw")
    {
        return poot_executor::Target::cpu_preset()
            .limits
            .library_integer_rows;
    }
    None
}

impl Device for CpuDevice {
    type Buffer = CpuBuffer;
    type Kernel = CpuKernel;
    type Recording = CpuRecording;

    fn limits(&self) -> &DeviceLimits {
        &self.limits
    }

    fn alloc(&mut self, bytes: u64) -> Result<CpuBuffer, DeviceError> {
        let size = usize::try_from(bytes).map_err(|_| DeviceError::OutOfMemory { bytes })?;
        Ok(CpuBuffer {
            mem: Arc::new(Memory::new(size)?),
        })
    }

    fn write(&mut self, dst: &CpuBuffer, offset_bytes: u64, src: &[u8]) -> Result<(), DeviceError> {
        let at = dst.range(offset_bytes, src.len())?;
        // SAFETY: `at..at + len` is inside the allocation; no launch runs during the call.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), at, src.len()) };
        Ok(())
    }

    fn read(
        &mut self,
        src: &CpuBuffer,
        offset_bytes: u64,
        dst: &mut [u8],
    ) -> Result<(), DeviceError> {
        let at = src.range(offset_bytes, dst.len())?;
        // SAFETY: as for `write`.
        unsafe { std::ptr::copy_nonoverlapping(at, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Renders every kernel, compiles those the disk cache lacks as concurrent compiler
    /// processes (one per pool thread), then loads them all.
    fn compile_all(&mut self, kernels: &[Kernel]) -> Result<Vec<CpuKernel>, DeviceError> {
        let rendered: Vec<(String, String)> = kernels
            .iter()
            .map(|k| {
                let source = render(k)?;
                Ok((self.compiler.key(&source, KERNEL_FLAGS), source))
            })
            .collect::<Result<_, DeviceError>>()?;
        let mut missing: Vec<(&str, &str, &str)> = Vec::new();
        for (k, (key, source)) in kernels.iter().zip(&rendered) {
            if !self.libraries.contains_key(key)
                && !self.compiler.cached(key)
                && !missing.iter().any(|(m, _, _)| m == key)
            {
                missing.push((key, source, &k.name));
            }
        }
        let next = std::sync::atomic::AtomicUsize::new(0);
        let failures = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..self.threads.min(missing.len()) {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some((key, source, name)) = missing.get(i) else {
                            break;
                        };
                        if let Err(f) = self.compiler.shared_object(key, source, KERNEL_FLAGS) {
                            failures
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .push((name.to_string(), f));
                        }
                    }
                });
            }
        });
        if let Some((name, f)) = failures
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .into_iter()
            .next()
        {
            return Err(match f {
                CompileFailure::Missing(reason) => DeviceError::Unavailable {
                    backend: BACKEND,
                    reason,
                },
                CompileFailure::Refused(log) => DeviceError::Compile { kernel: name, log },
            });
        }
        kernels
            .iter()
            .zip(&rendered)
            .map(|(k, (key, source))| self.load(k, key, source))
            .collect()
    }

    fn compile(&mut self, kernel: &Kernel) -> Result<CpuKernel, DeviceError> {
        let source = render(kernel)?;
        let key = self.compiler.key(&source, KERNEL_FLAGS);
        self.load(kernel, &key, &source)
    }

    fn launch(&mut self, launch: &Launch<'_, Self>) -> Result<(), DeviceError> {
        let r = self.recorded(launch)?;
        self.run(&r)
    }

    fn record(&mut self, launches: &[Launch<'_, Self>]) -> Result<CpuRecording, DeviceError> {
        let steps = launches
            .iter()
            .map(|l| self.recorded(l).map(Step::Launch))
            .collect::<Result<_, _>>()?;
        Ok(CpuRecording { steps })
    }

    /// Launches and library contractions; collectives are refused (a CPU device is alone).
    fn record_commands(
        &mut self,
        commands: &[Command<'_, Self>],
    ) -> Result<CpuRecording, DeviceError> {
        let mut steps = Vec::with_capacity(commands.len());
        let rounding = Rounding::for_commands(commands)?;
        for c in commands {
            steps.push(match c {
                Command::Launch(l) => Step::Launch(self.recorded(l)?),
                Command::Contract(c) => Step::Contract(RecordedContraction::new(
                    self.contract_library()?,
                    c,
                    rounding.as_ref(),
                )?),
                Command::AllReduceSum { .. } | Command::Broadcast { .. } => {
                    return Err(DeviceError::NoCollectives {
                        device: self.limits.name.clone(),
                    });
                }
            });
        }
        Ok(CpuRecording { steps })
    }

    /// Replays the recording with a team of the pool's threads ([`team`]): they wake once per
    /// replay and wait for each other between launches by spinning, not once per launch.
    fn replay(&mut self, recording: &CpuRecording) -> Result<(), DeviceError> {
        let work = Replay::new(self, recording);
        match team::replay(&self.pool, self.threads, &work) {
            Some(p) => match &work.phases[p] {
                Phase::Launch(r, _) => Err(self.fault_of(&r.name)),
                Phase::Round(..) | Phase::Columns(..) => Ok(()),
            },
            None => Ok(()),
        }
    }

    fn synchronize(&mut self) -> Result<(), DeviceError> {
        Ok(())
    }

    fn time_launch(
        &mut self,
        launch: &Launch<'_, Self>,
        reps: u32,
    ) -> Result<Option<f64>, DeviceError> {
        let r = self.recorded(launch)?;
        let reps = reps.max(1);
        let start = Instant::now();
        for _ in 0..reps {
            self.run(&r)?;
        }
        Ok(Some(start.elapsed().as_secs_f64() / f64::from(reps)))
    }

    fn copy(&mut self, src: &CpuBuffer, dst: &CpuBuffer, bytes: u64) -> Result<(), DeviceError> {
        if !bytes.is_multiple_of(4) {
            return Err(DeviceError::BadLaunch {
                kernel: "copy".to_string(),
                reason: format!("{bytes} B is not a whole number of words"),
            });
        }
        if Arc::ptr_eq(&src.mem, &dst.mem) {
            return Err(DeviceError::BadLaunch {
                kernel: "copy".to_string(),
                reason: "source and destination are one buffer".to_string(),
            });
        }
        let len = usize::try_from(bytes).map_err(|_| DeviceError::OutOfBounds {
            offset: 0,
            len: bytes,
            size: src.bytes(),
        })?;
        let from = src.range(0, len)?;
        let to = dst.range(0, len)?;
        // SAFETY: both ranges are inside their own (distinct) allocations.
        unsafe { std::ptr::copy_nonoverlapping(from, to, len) };
        Ok(())
    }
}

/// `k`'s C, or the renderer's refusal as a compile error.
fn render(k: &Kernel) -> Result<String, DeviceError> {
    render_host_c(k).map_err(|e| DeviceError::Compile {
        kernel: k.name.clone(),
        log: e.to_string(),
    })
}

fn default_cache_root() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("POOT_CACHE").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    std::env::var_os("HOME")
        .filter(|d| !d.is_empty())
        .map(|home| PathBuf::from(home).join(".cache").join("poot"))
}

/// The CPU's model name, where the system says.
fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| format!("{} CPU", std::env::consts::ARCH))
}

/// Physical memory, where the system says.
fn total_memory() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}
