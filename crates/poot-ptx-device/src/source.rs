//! The CUDA source of a kernel description, from `poot-kernel`'s CUDA renderer.

use poot_kernel::Kernel;
use poot_kernel::render::{can_fault, entry_name, render_cuda};

/// A kernel's CUDA C source and what a launch of it needs to know.
pub(crate) struct CudaSource {
    /// The `extern "C" __global__` entry point.
    pub(crate) entry: String,
    pub(crate) text: String,
    /// Whether the entry takes the fault buffer after the kernel's own parameters.
    pub(crate) takes_fault_buffer: bool,
    /// Whether the entry first waits for the kernels before it (every rendered kernel does).
    pub(crate) waits_for_predecessors: bool,
}

/// Renders `k`, or says why the renderer refused.
pub(crate) fn render(k: &Kernel) -> Result<CudaSource, String> {
    let text = render_cuda(k).map_err(|e| e.to_string())?;
    Ok(CudaSource {
        entry: entry_name(k),
        text,
        takes_fault_buffer: can_fault(k),
        waits_for_predecessors: true,
    })
}
