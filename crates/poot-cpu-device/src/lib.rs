//! The host CPU backend: [`CpuDevice`], a poot [`Device`](poot_executor::Device) that runs the
//! planner's kernels on the machine's own cores.
//!
//! Each kernel description is rendered to C
//! ([`render_host_c`](poot_kernel::render::render_host_c): a workgroup's threads
//! as loops, split at barriers), compiled by the system's C compiler into a shared object for
//! this CPU, cached on disk by content hash and loaded. A launch runs its workgroups in chunks
//! over a thread pool; a recording is the list of launches, replayed in order by a team of the
//! pool's threads that wait for each other between launches by spinning. Contractions
//! against stored weights are the plan's library steps, run by `contract.c` (compiled and
//! cached the same way): register tiles over the host's vector width, weights decoded with ggml's
//! operations. A failed kernel check stops the step with [`DeviceError::KernelFault`](poot_executor::DeviceError). Where no
//! C compiler runs, [`CpuDevice::open`] is
//! [`DeviceError::Unavailable`](poot_executor::DeviceError) and says what to install.

mod compiler;
mod device;
mod library;
mod team;

pub use device::{CpuBuffer, CpuDevice, CpuKernel, CpuOptions, CpuRecording};
