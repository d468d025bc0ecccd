//! Device buffers: storage buffers the kernels bind whole, copied to and from the host.

use poot_executor::DeviceError;

/// Copies and mappings move whole 4-byte words (`wgpu::COPY_BUFFER_ALIGNMENT`).
pub(crate) const WORD_BYTES: u64 = wgpu::COPY_BUFFER_ALIGNMENT;

/// The usages every device buffer has: bound by kernels, copied in and out.
pub(crate) const STORAGE_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

/// A device allocation, zero-filled when created. Its wgpu buffer is rounded up to whole words
/// (at least one); host copies are checked against the size that was asked for.
#[derive(Clone, Debug)]
pub struct WgpuBuffer {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) size_bytes: u64,
}

impl WgpuBuffer {
    /// The size that was allocated, in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// The underlying wgpu buffer (word-rounded).
    pub fn raw(&self) -> &wgpu::Buffer {
        &self.buffer
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

/// Rounds `n` up to a multiple of `to` (a power of two).
pub(crate) fn round_up(n: u64, to: u64) -> u64 {
    n.div_ceil(to) * to
}

/// The word-aligned range `[start, end)` that covers `len` bytes at `offset`.
pub(crate) fn word_span(offset: u64, len: u64) -> (u64, u64) {
    (
        offset / WORD_BYTES * WORD_BYTES,
        round_up(offset + len, WORD_BYTES),
    )
}

/// The bytes wgpu allocates for a request of `bytes`.
pub(crate) fn alloc_bytes(bytes: u64) -> u64 {
    round_up(bytes.max(1), WORD_BYTES)
}
