//! The raw Vulkan backend: [`VulkanDevice`], poot's `Device` on Vulkan through ash, with no
//! wgpu in between.
//!
//! Kernels are the ones wgpu runs: `poot-kernel` renders WGSL, and naga translates it to SPIR-V
//! with the runtime checks wgpu compiles with (indices clamped into their buffers, bounded
//! loops, defined integer division, zeroed workgroup memory). Execution follows the spec's
//! Vulkan row: a prepared step is recorded once into one command buffer (pipeline bind,
//! descriptor-set bind, dispatch, a barrier between dispatches) with every descriptor set
//! written once, and each replay resubmits that command buffer verbatim. Per-step inputs live in
//! slot buffers whose addresses never change; the host rewrites their contents through staged
//! copies ordered before the next submission. Every submission signals one timeline semaphore,
//! and every wait on it is bounded by the configured timeout (600 s by default): a hang comes
//! back as `DeviceError::Timeout` and poisons the device.
//!
//! Faults: SPIR-V has no trap, so a kernel that can fault records a code in its fault words;
//! each faulting dispatch binds its own slot in host-visible memory, and the wait that follows
//! (`synchronize`, or `read`) names the first faulting kernel in submission order with its code,
//! discarding the results. The device refuses to open without `robustBufferAccess`.
//!
//! The device reports its own limits (largest binding, workgroup counts and sizes, shared
//! memory, storage bindings, subgroup sizes, device-local memory, lavapipe's loop cap measured
//! at open) and whether the driver offers `VK_KHR_cooperative_matrix` ([`VulkanInfo`]), which
//! is enabled where offered. No kernel uses cooperative matrices yet.

mod buffer;
mod context;
mod device;
mod fault;
mod health;
mod kernel;
mod launch;
mod options;
mod physical;
mod queue;
mod recording;
mod spirv;
mod staging;

pub use buffer::VulkanBuffer;
pub use device::{VulkanDevice, VulkanInfo};
pub use kernel::VulkanKernel;
// Defined beside the WGSL renderer; re-exported for `VulkanDevice::compile_wgsl`.
pub use options::{DEFAULT_WAIT_TIMEOUT, DEVICE_ENV, VulkanOptions};
pub use physical::{CooperativeMatrix, DeviceKind, MatrixShape};
pub use poot_kernel::render::WgslShader;
pub use recording::VulkanRecording;

/// The backend's name in `DeviceError::Unavailable`.
pub(crate) const BACKEND: &str = "Vulkan";
