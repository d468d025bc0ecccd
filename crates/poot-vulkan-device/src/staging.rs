//! Host copies in and out. Writes go through upload arenas: the bytes are copied into a
//! host-visible arena and a copy into the destination is recorded into the open batch, so a
//! write lands after every earlier submission and before every later one (as the engine's slot
//! writes between replays need). Reads copy into a host-visible readback buffer and wait.

use std::sync::Arc;
use std::time::Duration;

use ash::vk;
use gpu_allocator::MemoryLocation;
use poot_executor::DeviceError;

use crate::buffer::RawBuffer;
use crate::context::Context;
use crate::queue::Queue;

/// Bytes of one upload arena.
const ARENA_BYTES: u64 = 16 << 20;
/// Arenas in the ring: one fills while the copies out of the others run.
const ARENAS: usize = 3;
/// The smallest readback buffer made; it grows to the next power of two as needed.
const MIN_READBACK_BYTES: u64 = 64 << 10;
/// The largest readback buffer: longer reads go in pieces.
pub(crate) const MAX_READBACK_BYTES: u64 = 64 << 20;

struct Arena {
    buffer: RawBuffer,
    used: u64,
    /// The timeline value of the last submission that copies out of it.
    last_use: u64,
}

#[derive(Default)]
pub(crate) struct Uploads {
    arenas: Vec<Arena>,
    current: usize,
}

impl Uploads {
    /// Queues a copy of `src` into `dst` at `offset` (checked by the caller).
    pub(crate) fn write(
        &mut self,
        ctx: &Arc<Context>,
        queue: &mut Queue,
        timeout: Duration,
        dst: vk::Buffer,
        offset: u64,
        src: &[u8],
    ) -> Result<(), DeviceError> {
        let mut done = 0usize;
        while done < src.len() {
            let arena = self.arena_with_room(ctx, queue, timeout)?;
            let room = ARENA_BYTES - arena.used;
            let n = (src.len() - done).min(usize::try_from(room).unwrap_or(usize::MAX));
            // SAFETY: the arena is host-visible and `[used, used + n)` lies inside it; no
            // submitted work reads that range (work reads only below `used`, and the arena was
            // waited for when `used` was last reset).
            unsafe { arena.buffer.write_host(arena.used, &src[done..done + n]) };
            let cb = queue.batch()?;
            let region = vk::BufferCopy {
                src_offset: arena.used,
                dst_offset: offset + done as u64,
                size: n as u64,
            };
            // SAFETY: `cb` is the open batch; both buffers are live and the ranges inside them.
            unsafe {
                ctx.device
                    .cmd_copy_buffer(cb, arena.buffer.raw, dst, &[region])
            };
            queue.after_command(cb);
            arena.used += n as u64;
            arena.last_use = queue.submitted() + 1;
            done += n;
        }
        Ok(())
    }

    /// The current arena if it has room, else the next one in the ring once the work copying
    /// out of it has finished (bounded wait), emptied.
    fn arena_with_room(
        &mut self,
        ctx: &Arc<Context>,
        queue: &mut Queue,
        timeout: Duration,
    ) -> Result<&mut Arena, DeviceError> {
        let has_room = self
            .arenas
            .get(self.current)
            .is_some_and(|a| a.used < ARENA_BYTES);
        if !has_room {
            if self.arenas.len() < ARENAS {
                self.arenas.push(Arena {
                    buffer: RawBuffer::new(
                        ctx,
                        "poot upload arena",
                        ARENA_BYTES,
                        vk::BufferUsageFlags::TRANSFER_SRC,
                        MemoryLocation::CpuToGpu,
                    )?,
                    used: 0,
                    last_use: 0,
                });
                self.current = self.arenas.len() - 1;
            } else {
                self.current = (self.current + 1) % self.arenas.len();
                let last_use = self.arenas[self.current].last_use;
                if last_use > queue.submitted() {
                    // Its copies are still in the open batch.
                    queue.submit(None)?;
                }
                queue.wait(last_use, timeout)?;
                self.arenas[self.current].used = 0;
            }
        }
        self.arenas.get_mut(self.current).ok_or(DeviceError::Lost {
            reason: "no upload arena".to_owned(),
        })
    }
}

/// The host-visible buffer reads copy into.
#[derive(Default)]
pub(crate) struct Readback {
    buffer: Option<RawBuffer>,
}

impl Readback {
    /// A readback buffer of at least `bytes` (at most [`MAX_READBACK_BYTES`] are asked for).
    pub(crate) fn get(
        &mut self,
        ctx: &Arc<Context>,
        bytes: u64,
    ) -> Result<&RawBuffer, DeviceError> {
        let fits = self.buffer.as_ref().is_some_and(|b| b.bytes >= bytes);
        if !fits {
            // The old buffer (if any) is retired until the work using it has finished.
            self.buffer = None;
            let size = bytes.max(MIN_READBACK_BYTES).next_power_of_two();
            self.buffer = Some(RawBuffer::new(
                ctx,
                "poot readback",
                size,
                vk::BufferUsageFlags::TRANSFER_DST,
                MemoryLocation::GpuToCpu,
            )?);
        }
        self.buffer.as_ref().ok_or(DeviceError::Lost {
            reason: "no readback buffer".to_owned(),
        })
    }
}
