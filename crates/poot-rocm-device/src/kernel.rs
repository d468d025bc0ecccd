//! Compiled kernels: a frozen HSA executable holding one code object, and the kernel a
//! dispatch names in it.

use std::sync::Arc;

use crate::context::Context;
use crate::hsa::Executable;

/// A loaded executable, destroyed when the last kernel or recording using it drops.
pub(crate) struct LoadedExecutable {
    pub(crate) executable: Executable,
    pub(crate) ctx: Arc<Context>,
}

impl Drop for LoadedExecutable {
    fn drop(&mut self) {
        if !self.ctx.ready_to_release() {
            return;
        }
        // SAFETY: created and frozen in this context, destroyed once, after every kernel and
        // recording that referenced it (they hold this `Arc`) and with the queue idle.
        unsafe {
            let _ = (self.ctx.hsa.executable_destroy)(self.executable);
        }
    }
}

/// A compiled kernel of a [`RocmDevice`](crate::RocmDevice).
pub struct RocmKernel {
    pub(crate) name: Arc<str>,
    pub(crate) entry: String,
    pub(crate) executable: Arc<LoadedExecutable>,
    /// The code handle a dispatch packet names.
    pub(crate) kernel_object: u64,
    /// Kernel-argument bytes the kernel declares (its pointers, and any hidden arguments,
    /// which the rendered kernels never read and the device leaves zero).
    pub(crate) kernarg_bytes: u32,
    pub(crate) kernarg_align: u32,
    pub(crate) group_segment_bytes: u32,
    pub(crate) private_segment_bytes: u32,
    pub(crate) n_params: usize,
    pub(crate) workgroup: u32,
    /// Whether the entry takes the device's fault words after its parameters.
    pub(crate) takes_fault_buffer: bool,
}

impl RocmKernel {
    /// The kernel's name (from the description), used in fault reports.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The `extern "C"` entry point in the code object.
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

    /// Whether the kernel can fault (it takes the fault words after its parameters).
    pub fn can_fault(&self) -> bool {
        self.takes_fault_buffer
    }

    /// Workgroup (LDS) bytes the compiled kernel uses.
    pub fn group_segment_bytes(&self) -> u32 {
        self.group_segment_bytes
    }
}

impl std::fmt::Debug for RocmKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocmKernel")
            .field("name", &self.name)
            .field("entry", &self.entry)
            .field("n_params", &self.n_params)
            .field("workgroup", &self.workgroup)
            .field("can_fault", &self.takes_fault_buffer)
            .finish()
    }
}
