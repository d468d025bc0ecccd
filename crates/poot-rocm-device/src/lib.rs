//! The ROCm backend: [`RocmDevice`], a poot [`Device`](poot_executor::Device) on AMD GPUs
//! through the HSA runtime, with no HIP runtime in between.
//!
//! - **Kernels.** Kernel descriptions are rendered to HIP (`poot_kernel::render::render_hip`:
//!   CUDA's dialect with wavefront shuffles, the workgroup count read from the dispatch packet
//!   and AMD's trap), compiled by hipRTC for the GPU's architecture ([`GpuArch`]: 64-lane
//!   wavefronts on gfx9, MI200 and MI300; 32 on RDNA, gfx10 to gfx12) without FMA contraction,
//!   checked ([`code_object`]: machine, architecture, wavefront width) and loaded into frozen
//!   HSA executables. The planner plans them against the limits the agent reports
//!   (`DeviceLimits::target(Backend::Rocm)`, or `Target::rocm_preset` without a device): no
//!   matrix-unit tiles (those are PTX's `mma.sync`), subgroup shuffles within 32 lanes.
//! - **Steps.** A recording writes each launch's AQL kernel-dispatch packet and its kernel
//!   arguments once, buffer addresses included (they never move); a replay copies the packets
//!   into the queue and rings the doorbell once, so a token costs the host a packet copy per
//!   kernel. Every packet carries the barrier bit (kernels run in order); the last carries the
//!   completion signal, which counts the submissions still running.
//! - **Waits.** Every wait polls with a timeout ([`RocmConfig::wait_timeout`], 600 s by default):
//!   a hung kernel is [`DeviceError::Timeout`](poot_executor::DeviceError), never a hang.
//! - **Faults.** A failed kernel check records its code in fine-grained host memory and traps;
//!   the queue's error callback (the trap, any hardware exception) and the process's system
//!   event handler (GPU memory faults) poison the device, and every later call is refused
//!   without touching HSA. The call that observes the failure returns
//!   `DeviceError::KernelFault` with the check's code, or `DeviceError::Lost`.
//! - **Memory.** Buffers come from the GPU's coarse-grained pool and are zeroed by a fill
//!   kernel queued before any later work; host copies go through a staging block of
//!   fine-grained system memory and an SDMA copy, after the queue drains.
//!
//! The HSA runtime and hipRTC are loaded at run time ([`HSA_LIBRARY_ENV`], [`HIPRTC_LIBRARY_ENV`]
//! name other files): a binary built anywhere runs anywhere, and [`RocmDevice::open`] returns
//! `DeviceError::Unavailable` naming what is missing (the runtime, the compiler, a GPU, a
//! supported architecture).
//!
//! **Status.** No AMD GPU has run this crate yet. CI renders every kernel of the shared device
//! suite to HIP and compiles it with clang to code objects for gfx90a, gfx942, gfx1100 and
//! gfx1151 (`tests/hip_compile.rs`), and checks the packet and structure layouts against
//! `hsa.h`; the shared suite (`tests/suite.rs`) runs where a GPU opens and skips elsewhere.
//! Not wired yet: kernel timing (`Device::time_launch` reports none), a disk cache of code
//! objects, tensor-parallel groups and vendor libraries (rocBLAS, hipBLASLt).

mod arch;
mod buffer;
mod builtin;
pub mod code_object;
mod context;
mod device;
mod fault;
mod hiprtc;
mod hsa;
mod kernel;
mod packet;
mod recording;

pub use arch::{CI_ARCHS, GpuArch, UnknownArch};
pub use buffer::RocmBuffer;
pub use builtin::{COPY_ENTRY, FILL_ENTRY, SOURCE as BUILTIN_SOURCE};
pub use device::{DEFAULT_WAIT_TIMEOUT, RocmConfig, RocmDevice, SourceKernel, hiprtc_options};
pub use hiprtc::HIPRTC_LIBRARY_ENV;
pub use hsa::HSA_LIBRARY_ENV;
pub use kernel::RocmKernel;
pub use recording::RocmRecording;
