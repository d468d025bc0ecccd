//! The thin per-backend device: memory, kernels, one eager launch, and record/replay.
//! Everything else (planning, buffer binding, slot writes, state, faults bookkeeping) lives once
//! in the generic engine.

use poot_graph_plan::LibraryOperands;
use poot_kernel::Kernel;

use crate::error::DeviceError;
use crate::limits::DeviceLimits;

/// One kernel launch: a compiled kernel, its grid of workgroups and its buffer arguments in the
/// kernel's parameter order.
pub struct Launch<'a, D: Device + ?Sized> {
    pub kernel: &'a D::Kernel,
    /// Workgroups along x, y, z.
    pub grid: [u32; 3],
    pub args: &'a [&'a D::Buffer],
}

/// A contraction for the device's library: `out[m, n] = sum_k lhs[m, k] * w[n, k]` (`w[k, n]`
/// when not `transpose_weights`) with f32 sums, where `lhs` holds `rows x depth` f32 words and
/// the weights are as [`LibraryOperands`] says (half-precision operands for cuBLASLt, weights
/// as stored for an exact library).
pub struct Contraction<'a, D: Device + ?Sized> {
    pub operands: LibraryOperands,
    pub lhs: &'a D::Buffer,
    pub weights: &'a D::Buffer,
    pub transpose_weights: bool,
    pub out: &'a D::Buffer,
    pub rows: u32,
    pub cols: u32,
    pub depth: u32,
}

/// One step of a recording: a kernel launch, a collective over the device's group, or a
/// contraction in the device's library.
pub enum Command<'a, D: Device + ?Sized> {
    Launch(Launch<'a, D>),
    /// The f32 sum of `n_elems` elements of `src` over the group, written to `dst` on every rank.
    AllReduceSum {
        src: &'a D::Buffer,
        dst: &'a D::Buffer,
        n_elems: u64,
    },
    /// Rank `root`'s first `n_elems` 32-bit words of `src`, written to `dst` on every rank (the
    /// other ranks' `src` is not read).
    Broadcast {
        src: &'a D::Buffer,
        dst: &'a D::Buffer,
        n_elems: u64,
        root: usize,
    },
    /// A contraction in the device's library (where [`DeviceLimits::library_gemm`] says it has
    /// one).
    Contract(Contraction<'a, D>),
}

/// A backend. Implementations hold the context; every method that touches the device returns a
/// typed error, and after a fault every later call is refused as poisoned without touching it.
pub trait Device {
    /// A device allocation. Its address never changes while it lives.
    type Buffer;
    /// A compiled kernel.
    type Kernel;
    /// A recorded sequence of launches, replayed as one unit (a CUDA graph, command buffers).
    type Recording;

    /// What the device can run: the planner plans against these.
    fn limits(&self) -> &DeviceLimits;

    fn alloc(&mut self, bytes: u64) -> Result<Self::Buffer, DeviceError>;

    /// Copies host bytes into a buffer at a byte offset.
    fn write(
        &mut self,
        dst: &Self::Buffer,
        offset_bytes: u64,
        src: &[u8],
    ) -> Result<(), DeviceError>;

    /// Copies buffer bytes to the host, waiting for prior work (bounded by the device's timeout).
    fn read(
        &mut self,
        src: &Self::Buffer,
        offset_bytes: u64,
        dst: &mut [u8],
    ) -> Result<(), DeviceError>;

    /// Compiles a kernel description (rendering it for this backend; the device may cache).
    fn compile(&mut self, kernel: &Kernel) -> Result<Self::Kernel, DeviceError>;

    /// Compiles a plan's kernels, in order. The default compiles them one by one; a device
    /// whose compiler runs as separate processes may run several at once.
    fn compile_all(&mut self, kernels: &[Kernel]) -> Result<Vec<Self::Kernel>, DeviceError> {
        kernels.iter().map(|k| self.compile(k)).collect()
    }

    /// Launches one kernel now.
    fn launch(&mut self, launch: &Launch<'_, Self>) -> Result<(), DeviceError>;

    /// Records `launches` once, for replay.
    fn record(&mut self, launches: &[Launch<'_, Self>]) -> Result<Self::Recording, DeviceError>;

    /// Records `commands` once, for replay: launches, collectives and library contractions in
    /// order. The default records the launches and refuses any collective with
    /// [`DeviceError::NoCollectives`] and any contraction with [`DeviceError::NoLibrary`].
    fn record_commands(
        &mut self,
        commands: &[Command<'_, Self>],
    ) -> Result<Self::Recording, DeviceError> {
        let mut launches = Vec::with_capacity(commands.len());
        for c in commands {
            match c {
                Command::Launch(l) => launches.push(Launch {
                    kernel: l.kernel,
                    grid: l.grid,
                    args: l.args,
                }),
                Command::AllReduceSum { .. } | Command::Broadcast { .. } => {
                    return Err(DeviceError::NoCollectives {
                        device: self.limits().name.clone(),
                    });
                }
                Command::Contract(_) => {
                    return Err(DeviceError::NoLibrary {
                        device: self.limits().name.clone(),
                    });
                }
            }
        }
        self.record(&launches)
    }

    /// Queues an all-reduce of `n_elems` f32 from `src` into `dst` over the device's group,
    /// ordered after earlier work. A device alone (the default) refuses with
    /// [`DeviceError::NoCollectives`].
    fn all_reduce_sum(
        &mut self,
        _src: &Self::Buffer,
        _dst: &Self::Buffer,
        _n_elems: u64,
    ) -> Result<(), DeviceError> {
        Err(DeviceError::NoCollectives {
            device: self.limits().name.clone(),
        })
    }

    /// Queues a broadcast of rank `root`'s first `n_elems` 32-bit words of `src` into `dst` on
    /// every rank of the device's group, ordered after earlier work. A device alone (the
    /// default) refuses with [`DeviceError::NoCollectives`].
    fn broadcast(
        &mut self,
        _src: &Self::Buffer,
        _dst: &Self::Buffer,
        _n_elems: u64,
        _root: usize,
    ) -> Result<(), DeviceError> {
        Err(DeviceError::NoCollectives {
            device: self.limits().name.clone(),
        })
    }

    /// Replays a recording.
    fn replay(&mut self, recording: &Self::Recording) -> Result<(), DeviceError>;

    /// Waits for all submitted work, raising any fault it produced.
    fn synchronize(&mut self) -> Result<(), DeviceError>;

    /// The device time of one launch, averaged over `reps` back-to-back runs without the host in
    /// between; `None` when the backend cannot time kernels. For profiles, not for steps: the
    /// launch's outputs are overwritten `reps` times.
    fn time_launch(
        &mut self,
        _launch: &Launch<'_, Self>,
        _reps: u32,
    ) -> Result<Option<f64>, DeviceError> {
        Ok(None)
    }

    /// Queues a device-to-device copy of the first `bytes` of `src` over the start of `dst`,
    /// ordered after earlier work (the bandwidth probe times these). `bytes` is a whole number
    /// of 4-byte words; another count is refused as [`DeviceError::BadLaunch`].
    fn copy(
        &mut self,
        src: &Self::Buffer,
        dst: &Self::Buffer,
        bytes: u64,
    ) -> Result<(), DeviceError>;
}
