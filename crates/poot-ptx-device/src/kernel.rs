//! Compiled kernels: a loaded PTX module and the function a launch calls.

use std::sync::Arc;

use cudarc::driver::sys::{self, CUfunction, CUmodule};

use crate::context::Context;

/// A loaded module, unloaded when the last kernel or recording using it drops.
pub(crate) struct LoadedModule {
    pub(crate) module: CUmodule,
    pub(crate) ctx: Arc<Context>,
}

// SAFETY: a module handle is a plain driver handle, usable from any thread with its context
// current (every use makes it current first).
unsafe impl Send for LoadedModule {}
// SAFETY: as above; shared references only read the handle.
unsafe impl Sync for LoadedModule {}

impl Drop for LoadedModule {
    fn drop(&mut self) {
        if !self.ctx.ready_to_release() {
            return;
        }
        // SAFETY: the module was loaded in this context and is unloaded exactly once, after
        // every kernel and graph that referenced it (they hold this `Arc`).
        unsafe {
            let _ = sys::cuModuleUnload(self.module);
        }
    }
}

/// A compiled kernel of a [`PtxDevice`](crate::PtxDevice).
pub struct PtxKernel {
    pub(crate) name: Arc<str>,
    pub(crate) entry: String,
    pub(crate) function: CUfunction,
    pub(crate) module: Arc<LoadedModule>,
    pub(crate) n_params: usize,
    pub(crate) workgroup: u32,
    /// Whether the entry takes the device's fault buffer after its parameters.
    pub(crate) takes_fault_buffer: bool,
    /// Whether the entry first waits for the kernels before it, so a launch may overlap them.
    pub(crate) waits_for_predecessors: bool,
}

// SAFETY: a function handle is a plain driver handle into `module`, which this value keeps
// alive; it is only used with the module's context current.
unsafe impl Send for PtxKernel {}
// SAFETY: as above; shared references only read the handle.
unsafe impl Sync for PtxKernel {}

impl PtxKernel {
    /// The kernel's name (from the description), used in fault reports.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The `extern "C"` entry point in the module.
    pub fn entry(&self) -> &str {
        &self.entry
    }

    /// Threads per workgroup.
    pub fn workgroup(&self) -> u32 {
        self.workgroup
    }

    /// Buffer parameters the kernel takes.
    pub fn n_params(&self) -> usize {
        self.n_params
    }

    /// Whether the kernel can fault (it takes the fault buffer after its parameters).
    pub fn can_fault(&self) -> bool {
        self.takes_fault_buffer
    }
}

impl std::fmt::Debug for PtxKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtxKernel")
            .field("name", &self.name)
            .field("entry", &self.entry)
            .field("n_params", &self.n_params)
            .field("workgroup", &self.workgroup)
            .field("can_fault", &self.takes_fault_buffer)
            .finish()
    }
}
