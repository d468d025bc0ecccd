//! The wgpu backend: [`WgpuDevice`], poot's `Device` on wgpu over Vulkan.
//!
//! Execution follows the spec's wgpu row: `compile` builds a pipeline with an explicit
//! bind-group layout once; `record` builds every bind group once and caches the dispatch list;
//! `replay` re-encodes the cached dispatches into one command buffer and submits it; the host
//! rewrites slot buffers in place between replays; `read` and `synchronize` map a staging
//! buffer behind a wait bounded by the configured timeout.
//!
//! Faults: WGSL cannot trap, so a kernel that can fault records a code in its fault words (the
//! renderer's two-word layout). Each faulting dispatch binds its own slot of a fault buffer (see
//! `fault.rs`), so the wait that reads the slots back (`synchronize`, and `read` too) names the
//! first faulting kernel in submission order and its code, discards the results and zeroes the
//! slots. A kernel fault leaves the device usable; loss, an uncaptured wgpu error, a timeout and
//! every other error `DeviceError::poisons` names poison it.
//!
//! Shaders are compiled with wgpu's runtime bounds checks on (the renderer adds none), so an
//! out-of-range index stays inside its binding instead of being undefined behaviour.
//!
//! lavapipe (Mesa llvmpipe) ends every loop of an invocation after 65535 loop iterations in
//! total, silently; [`WgpuDevice::loop_iteration_budget`] reports the cap it measured at open.

mod adapter;
mod buffer;
mod device;
mod fault;
mod health;
mod kernel;
mod launch;
mod options;
mod readback;
mod recording;

pub use buffer::WgpuBuffer;
pub use device::WgpuDevice;
pub use kernel::WgpuKernel;
// Defined beside the WGSL renderer; re-exported for `WgpuDevice::compile_wgsl`.
pub use options::{ADAPTER_ENV, DEFAULT_WAIT_TIMEOUT, WgpuOptions};
pub use poot_kernel::render::WgslShader;
pub use recording::WgpuRecording;
