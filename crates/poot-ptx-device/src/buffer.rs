//! Device memory.

use std::sync::Arc;

use cudarc::driver::sys::{self, CUdeviceptr};

use crate::context::Context;

/// One `cuMemAlloc` allocation, freed when its last holder drops: the buffer handle, and every
/// recording whose launches use it (so a recording can never replay into freed memory).
pub(crate) struct Allocation {
    pub(crate) ptr: CUdeviceptr,
    pub(crate) bytes: u64,
    pub(crate) ctx: Arc<Context>,
}

impl Drop for Allocation {
    fn drop(&mut self) {
        // A poisoned context is never touched again; its memory goes with the context.
        if self.ptr == 0 || !self.ctx.ready_to_release() {
            return;
        }
        // SAFETY: `ptr` came from cuMemAlloc in this context and is freed exactly once.
        unsafe {
            let _ = sys::cuMemFree_v2(self.ptr);
        }
    }
}

/// A device buffer of a [`PtxDevice`](crate::PtxDevice). Its device address never changes
/// while it lives.
pub struct PtxBuffer {
    pub(crate) alloc: Arc<Allocation>,
}

impl PtxBuffer {
    /// The buffer's size in bytes.
    pub fn bytes(&self) -> u64 {
        self.alloc.bytes
    }

    /// The buffer's device address (0 for an empty buffer).
    pub fn device_ptr(&self) -> u64 {
        self.alloc.ptr
    }
}

impl std::fmt::Debug for PtxBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtxBuffer")
            .field("ptr", &format_args!("{:#x}", self.alloc.ptr))
            .field("bytes", &self.alloc.bytes)
            .finish()
    }
}
