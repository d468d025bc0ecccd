//! The CUDA backend: [`PtxDevice`], a poot [`Device`](poot_executor::Device) on the CUDA driver
//! API.
//!
//! Kernel descriptions are rendered to CUDA C, compiled to PTX by NVRTC with IEEE float
//! options (no FMA contraction, so results match the CPU oracle op by op), cached by content
//! hash on disk and in memory, and loaded as modules. A step is recorded once by stream capture
//! into a CUDA graph and replayed per token with one `cuGraphLaunch`. Every wait is bounded; a
//! CUDA fault is a typed error that poisons the device, and every later call is refused without
//! touching it. A kernel trap leaves CUDA unusable for the rest of the process (the driver's
//! rule, not this crate's): recovering means a new process, which can use the GPU at once.
//!
//! CUDA is loaded at run time: a binary built without CUDA runs anywhere, and
//! [`PtxDevice::open`] returns [`DeviceError::Unavailable`](poot_executor::DeviceError) where
//! the driver library or NVRTC is missing.
//!
//! A failed kernel check (`Stmt::Fault`) records its code in the fault buffer (the renderer's
//! layout, `poot_kernel::render::fault`) and traps. The device keeps that buffer in
//! host-mapped pinned memory and passes it to every kernel that can fault, so the code of the
//! check is read after the trap without touching the dead context and reported in
//! [`DeviceError::KernelFault`](poot_executor::DeviceError).

mod buffer;
mod cache;
mod context;
mod device;
mod fault;
mod group;
mod kernel;
mod library;
mod nccl;
mod nvrtc;
mod recording;
mod source;

pub use buffer::PtxBuffer;
pub use device::{CompileStats, DEFAULT_WAIT_TIMEOUT, PtxConfig, PtxDevice, SourceKernel};
pub use group::{GROUP_ENV_DEFAULTS, open_group, open_group_devices};
pub use kernel::PtxKernel;
pub use nccl::NCCL_LIBRARY_ENV;
pub use nvrtc::{nvrtc_options, select_arch};
pub use recording::PtxRecording;
