//! Buffers: device storage buffers the kernels bind whole, and host-visible buffers (staging,
//! fault words) the host reads and writes through a persistent mapping.

use std::sync::Arc;

use ash::vk;
use gpu_allocator::MemoryLocation;
use gpu_allocator::vulkan::Allocation;
use poot_executor::DeviceError;

use crate::context::{Context, Retired};

/// The usages every device buffer has: bound by kernels, copied in and out.
pub(crate) const STORAGE_USAGE: vk::BufferUsageFlags = vk::BufferUsageFlags::from_raw(
    vk::BufferUsageFlags::STORAGE_BUFFER.as_raw()
        | vk::BufferUsageFlags::TRANSFER_SRC.as_raw()
        | vk::BufferUsageFlags::TRANSFER_DST.as_raw(),
);

/// One `VkBuffer` with its memory, destroyed through the context once no work may use it.
pub(crate) struct RawBuffer {
    ctx: Arc<Context>,
    pub(crate) raw: vk::Buffer,
    allocation: Option<Allocation>,
    /// The host address of the memory, for host-visible buffers.
    mapped: Option<std::ptr::NonNull<u8>>,
    /// The buffer's size in bytes (what was asked for, rounded up to whole words).
    pub(crate) bytes: u64,
}

// SAFETY: the mapping is plain memory owned by this buffer; every access through it goes
// through `&self`/`&mut self` methods whose callers keep device work from racing the host.
unsafe impl Send for RawBuffer {}
// SAFETY: as for `Send`; the host never writes through a shared reference without the device's
// `&mut` (see `write_host`).
unsafe impl Sync for RawBuffer {}

impl std::fmt::Debug for RawBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawBuffer")
            .field("raw", &self.raw)
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl RawBuffer {
    pub(crate) fn new(
        ctx: &Arc<Context>,
        name: &str,
        bytes: u64,
        usage: vk::BufferUsageFlags,
        location: MemoryLocation,
    ) -> Result<RawBuffer, DeviceError> {
        let (raw, allocation) = ctx.create_buffer(name, bytes, usage, location)?;
        let mapped = allocation.mapped_ptr().map(|p| p.cast::<u8>());
        let host = location != MemoryLocation::GpuOnly;
        let buffer = RawBuffer {
            ctx: Arc::clone(ctx),
            raw,
            allocation: Some(allocation),
            mapped,
            bytes: bytes.max(4).next_multiple_of(4),
        };
        if host && buffer.mapped.is_none() {
            return Err(DeviceError::OutOfMemory { bytes });
        }
        Ok(buffer)
    }

    pub(crate) fn same_context(&self, ctx: &Arc<Context>) -> bool {
        Arc::ptr_eq(&self.ctx, ctx)
    }

    /// Copies `src` into the mapped memory at `offset`.
    ///
    /// # Safety
    /// The buffer is host-visible, the range lies inside it, and no device work that may
    /// access the range is pending.
    pub(crate) unsafe fn write_host(&self, offset: u64, src: &[u8]) {
        if let Some(base) = self.mapped {
            // SAFETY: the caller guarantees the range is inside the mapping and unused by the
            // device; host-coherent memory needs no flush.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.as_ptr(),
                    base.as_ptr().add(offset as usize),
                    src.len(),
                )
            };
        }
    }

    /// Copies mapped memory at `offset` into `dst`.
    ///
    /// # Safety
    /// The buffer is host-visible, the range lies inside it, and the device work that wrote it
    /// has completed (and made its writes available to the host).
    pub(crate) unsafe fn read_host(&self, offset: u64, dst: &mut [u8]) {
        if let Some(base) = self.mapped {
            // SAFETY: the caller guarantees the range is inside the mapping and complete.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    base.as_ptr().add(offset as usize),
                    dst.as_mut_ptr(),
                    dst.len(),
                )
            };
        }
    }
}

impl Drop for RawBuffer {
    fn drop(&mut self) {
        if let Some(allocation) = self.allocation.take() {
            self.ctx.retire(Retired::Buffer {
                buffer: self.raw,
                allocation,
            });
        }
    }
}

/// A device allocation, zero-filled when created. Host copies are checked against the size that
/// was asked for. Recordings that bind it keep its memory alive until they are dropped.
#[derive(Clone, Debug)]
pub struct VulkanBuffer {
    pub(crate) inner: Arc<RawBuffer>,
    pub(crate) size_bytes: u64,
}

impl VulkanBuffer {
    /// The size that was allocated, in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    pub(crate) fn raw(&self) -> vk::Buffer {
        self.inner.raw
    }

    /// Checks that `len` bytes at `offset` lie inside the buffer.
    pub(crate) fn check_range(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size_bytes => Ok(()),
            _ => Err(DeviceError::OutOfBounds {
                offset,
                len,
                size: self.size_bytes,
            }),
        }
    }
}
