//! Device memory and the host-visible blocks (kernel arguments, staging) the device keeps.

use std::ffi::c_void;
use std::sync::Arc;

use crate::context::Context;

/// One allocation from the GPU's global pool, freed when its last holder drops: the buffer
/// handle, and every recording whose packets use it (so a replay never writes freed memory).
pub(crate) struct Allocation {
    pub(crate) ptr: u64,
    pub(crate) bytes: u64,
    pub(crate) ctx: Arc<Context>,
}

impl Drop for Allocation {
    fn drop(&mut self) {
        // A poisoned context is never touched again; its memory goes with the process.
        if self.ptr == 0 || !self.ctx.ready_to_release() {
            return;
        }
        // SAFETY: `ptr` came from hsa_amd_memory_pool_allocate and is freed exactly once, with
        // no submitted work left that could use it (the queue is idle).
        unsafe {
            let _ = (self.ctx.hsa.pool_free)(self.ptr as *mut c_void);
        }
    }
}

/// Fine-grained system memory the GPU may read (kernel arguments, the staging of host copies),
/// freed when dropped once the queue is idle.
pub(crate) struct HostBlock {
    pub(crate) ptr: *mut c_void,
    pub(crate) bytes: usize,
    pub(crate) ctx: Arc<Context>,
}

// SAFETY: a plain host allocation; the host writes it only through `&mut` or before the work
// that reads it is submitted.
unsafe impl Send for HostBlock {}
// SAFETY: as above.
unsafe impl Sync for HostBlock {}

impl HostBlock {
    pub(crate) fn new(ctx: &Arc<Context>, bytes: usize) -> Result<HostBlock, String> {
        Ok(HostBlock {
            ptr: ctx.host_alloc(bytes)?,
            bytes,
            ctx: Arc::clone(ctx),
        })
    }

    /// Copies `data` in at byte `offset` (within the block: the callers size it).
    pub(crate) fn write(&mut self, offset: usize, data: &[u8]) {
        debug_assert!(
            offset + data.len() <= self.bytes,
            "the caller sizes the block"
        );
        let n = data.len().min(self.bytes.saturating_sub(offset));
        // SAFETY: `offset + n` is within the block's `bytes`.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.cast::<u8>().add(offset), n);
        }
    }

    /// Copies the first `out.len()` bytes out (within the block: the callers size it).
    pub(crate) fn read(&self, out: &mut [u8]) {
        let n = out.len().min(self.bytes);
        // SAFETY: `n` is within the block.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.cast::<u8>(), out.as_mut_ptr(), n) };
    }

    pub(crate) fn address(&self) -> u64 {
        self.ptr as u64
    }
}

impl Drop for HostBlock {
    fn drop(&mut self) {
        if !self.ctx.ready_to_release() {
            return;
        }
        // SAFETY: allocated by `Context::host_alloc`, freed once, no work left that reads it.
        unsafe {
            let _ = (self.ctx.hsa.pool_free)(self.ptr);
        }
    }
}

/// A device buffer of a [`RocmDevice`](crate::RocmDevice). Its device address never changes
/// while it lives.
pub struct RocmBuffer {
    pub(crate) alloc: Arc<Allocation>,
}

impl RocmBuffer {
    /// The buffer's size in bytes.
    pub fn bytes(&self) -> u64 {
        self.alloc.bytes
    }

    /// The buffer's device address (0 for an empty buffer).
    pub fn device_ptr(&self) -> u64 {
        self.alloc.ptr
    }
}

impl std::fmt::Debug for RocmBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocmBuffer")
            .field("ptr", &format_args!("{:#x}", self.alloc.ptr))
            .field("bytes", &self.alloc.bytes)
            .finish()
    }
}
