//! Kernel faults on raw Vulkan. SPIR-V has no trap: a failed check in a kernel records its code
//! in the kernel's fault words (the renderer's layout: `FAULT_WORDS` words, the largest code at
//! `FAULT_CODE_WORD`, a nonzero flag at `FAULT_FLAG_WORD`) and the dispatch runs on, its
//! indices clamped into its buffers.
//!
//! Every dispatch of a kernel that can fault binds its own fault words: `FAULT_WORDS` words at
//! an aligned offset of a host-visible buffer. A recording owns one such buffer with a slot per
//! faulting dispatch, in dispatch order; eager launches take slots from the device's eager pages
//! in launch order. The device remembers what was submitted since the last completed wait, in
//! order; after the wait the host reads the words straight from the mapping and reports the
//! first faulting dispatch by name, whatever code the kernel wrote, then zeroes them.

use std::sync::Arc;

use ash::vk;
use gpu_allocator::MemoryLocation;
use poot_executor::DeviceError;
use poot_kernel::render::{FAULT_CODE_WORD, FAULT_FLAG_WORD, FAULT_WORDS};

use crate::buffer::RawBuffer;
use crate::context::Context;

/// Eager-launch fault slots per page.
const EAGER_PAGE_SLOTS: u64 = 256;

/// Bytes of one dispatch's fault words.
pub(crate) const SLOT_BYTES: u64 = FAULT_WORDS as u64 * 4;

/// The fault code in one slot's bytes, `None` when its dispatch did not fault.
fn fault_code(slot: &[u8]) -> Option<u32> {
    let word = |i: u32| {
        let at = i as usize * 4;
        slot.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    if word(FAULT_FLAG_WORD)? != 0 {
        word(FAULT_CODE_WORD)
    } else {
        None
    }
}

/// A fault buffer: one slot per faulting dispatch of a recording, at `stride`-byte steps.
#[derive(Debug)]
pub(crate) struct FaultSlots {
    buffer: RawBuffer,
    /// The kernel dispatched with slot `i`.
    kernels: Vec<Arc<str>>,
    stride: u64,
}

/// Where a dispatch's fault words sit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SlotBinding {
    pub(crate) buffer: vk::Buffer,
    pub(crate) offset: u64,
}

/// Work submitted since the last completed wait that may have faulted, in submission order.
#[derive(Debug)]
enum Pending {
    Replay(Arc<FaultSlots>),
    Eager { slot: u64, kernel: Arc<str> },
}

/// The device's fault bookkeeping.
#[derive(Debug)]
pub(crate) struct FaultLog {
    /// Bytes between two slots: the storage-binding offset alignment, at least one slot.
    stride: u64,
    eager_pages: Vec<RawBuffer>,
    eager_used: u64,
    pending: Vec<Pending>,
}

/// A zero-filled host-visible buffer of `slots` fault slots.
fn fault_buffer(ctx: &Arc<Context>, slots: u64, stride: u64) -> Result<RawBuffer, DeviceError> {
    let bytes = slots.max(1) * stride;
    let buffer = RawBuffer::new(
        ctx,
        "poot fault words",
        bytes,
        vk::BufferUsageFlags::STORAGE_BUFFER,
        MemoryLocation::CpuToGpu,
    )?;
    // SAFETY: host-visible (CpuToGpu is mapped), the range is the whole new buffer, and no
    // work has been recorded against it yet.
    unsafe { buffer.write_host(0, &vec![0u8; bytes as usize]) };
    Ok(buffer)
}

impl FaultLog {
    pub(crate) fn new(min_storage_offset_alignment: u64) -> FaultLog {
        let stride = min_storage_offset_alignment
            .max(SLOT_BYTES)
            .next_multiple_of(SLOT_BYTES);
        FaultLog {
            stride,
            eager_pages: Vec::new(),
            eager_used: 0,
            pending: Vec::new(),
        }
    }

    /// A fault buffer for a recording whose faulting dispatches run `kernels`, in order.
    pub(crate) fn new_slots(
        &self,
        ctx: &Arc<Context>,
        kernels: Vec<Arc<str>>,
    ) -> Result<Arc<FaultSlots>, DeviceError> {
        let buffer = fault_buffer(ctx, kernels.len() as u64, self.stride)?;
        Ok(Arc::new(FaultSlots {
            buffer,
            kernels,
            stride: self.stride,
        }))
    }

    /// Where slot `i` of `slots` binds.
    pub(crate) fn slot_binding(slots: &FaultSlots, i: usize) -> SlotBinding {
        SlotBinding {
            buffer: slots.buffer.raw,
            offset: i as u64 * slots.stride,
        }
    }

    /// Takes the next eager slot for a launch of `kernel`.
    pub(crate) fn eager_slot(
        &mut self,
        ctx: &Arc<Context>,
        kernel: Arc<str>,
    ) -> Result<SlotBinding, DeviceError> {
        let slot = self.eager_used;
        let page = usize::try_from(slot / EAGER_PAGE_SLOTS).unwrap_or(usize::MAX);
        while self.eager_pages.len() <= page {
            self.eager_pages
                .push(fault_buffer(ctx, EAGER_PAGE_SLOTS, self.stride)?);
        }
        self.eager_used += 1;
        self.pending.push(Pending::Eager { slot, kernel });
        Ok(SlotBinding {
            buffer: self.eager_pages[page].raw,
            offset: (slot % EAGER_PAGE_SLOTS) * self.stride,
        })
    }

    /// Notes that a recording with fault words was submitted.
    pub(crate) fn replayed(&mut self, slots: &Arc<FaultSlots>) {
        let seen = self
            .pending
            .iter()
            .any(|p| matches!(p, Pending::Replay(s) if Arc::ptr_eq(s, slots)));
        if !seen {
            self.pending.push(Pending::Replay(Arc::clone(slots)));
        }
    }

    /// Reads the fault words of everything submitted since the last completed wait and returns
    /// the first faulting dispatch in submission order (its kernel and code), zeroing the words
    /// of a reported fault; then forgets the submitted work (eager slots are reused).
    ///
    /// # Safety
    /// Every submission that may write these words has completed, and its writes were made
    /// available to the host.
    pub(crate) unsafe fn take_first_fault(&mut self) -> Option<(String, u32)> {
        let mut slot_bytes = [0u8; SLOT_BYTES as usize];
        let mut first = None;
        for p in &self.pending {
            let hit = match p {
                Pending::Replay(slots) => slots.kernels.iter().enumerate().find_map(|(i, k)| {
                    // SAFETY: inside the buffer (one slot per kernel); the caller guarantees
                    // the work completed.
                    unsafe {
                        slots
                            .buffer
                            .read_host(i as u64 * slots.stride, &mut slot_bytes)
                    };
                    fault_code(&slot_bytes).map(|code| (k, code))
                }),
                Pending::Eager { slot, kernel } => {
                    self.eager_pages
                        .get((slot / EAGER_PAGE_SLOTS) as usize)
                        .and_then(|page| {
                            let at = (slot % EAGER_PAGE_SLOTS) * self.stride;
                            // SAFETY: as above, inside the page.
                            unsafe { page.read_host(at, &mut slot_bytes) };
                            fault_code(&slot_bytes).map(|code| (kernel, code))
                        })
                }
            };
            if let Some((kernel, code)) = hit {
                first = Some((kernel.to_string(), code));
                break;
            }
        }
        if first.is_some() {
            self.zero_pending();
        }
        self.pending.clear();
        self.eager_used = 0;
        first
    }

    /// Zeroes every fault slot of the pending work (after a reported fault: later dispatches
    /// of the same work may have faulted too).
    fn zero_pending(&self) {
        let zeros = vec![0u8; SLOT_BYTES as usize];
        for p in &self.pending {
            match p {
                Pending::Replay(slots) => {
                    for i in 0..slots.kernels.len() as u64 {
                        // SAFETY: inside the buffer; the work completed (see the caller).
                        unsafe { slots.buffer.write_host(i * slots.stride, &zeros) };
                    }
                }
                Pending::Eager { slot, .. } => {
                    if let Some(page) = self.eager_pages.get((slot / EAGER_PAGE_SLOTS) as usize) {
                        // SAFETY: as above.
                        unsafe { page.write_host((slot % EAGER_PAGE_SLOTS) * self.stride, &zeros) };
                    }
                }
            }
        }
    }
}
