//! Kernel faults on wgpu. WGSL has no trap: a failed check in a kernel records its code in the
//! kernel's fault words (the renderer's layout: `FAULT_WORDS` words, the largest code at
//! `FAULT_CODE_WORD`, a nonzero flag at `FAULT_FLAG_WORD`) and the dispatch runs on (under
//! wgpu's bounds checks).
//!
//! Every dispatch of a kernel that can fault gets its own fault words: a binding of
//! `FAULT_WORDS` words at its own aligned offset of a fault buffer. A recording owns one fault buffer with a slot per
//! faulting dispatch, in dispatch order; eager launches take slots from the device's eager
//! pages in launch order. The device remembers what was submitted since the last wait, in
//! order, so the wait that reads the words back reports the first faulting dispatch by name,
//! whatever code the kernel wrote. Words are reset to zero after a fault is reported.

use std::sync::Arc;

use poot_kernel::render::{FAULT_CODE_WORD, FAULT_FLAG_WORD, FAULT_WORDS};

use crate::buffer::{STORAGE_USAGE, WORD_BYTES};

/// Eager-launch fault slots per page.
const EAGER_PAGE_SLOTS: u64 = 256;

/// Bytes of one dispatch's fault words.
pub(crate) const SLOT_BYTES: u64 = FAULT_WORDS as u64 * WORD_BYTES;

/// The fault code one slot holds, `None` when its dispatch did not fault.
fn fault_code(slot: &[u8]) -> Option<u32> {
    let word = |i: u32| {
        let at = i as usize * WORD_BYTES as usize;
        slot.get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    if word(FAULT_FLAG_WORD)? != 0 {
        word(FAULT_CODE_WORD)
    } else {
        None
    }
}

/// A fault buffer: one slot per faulting dispatch, at `stride`-byte steps.
#[derive(Debug)]
pub(crate) struct FaultSlots {
    pub(crate) buffer: wgpu::Buffer,
    /// The kernel dispatched with slot `i`.
    pub(crate) kernels: Vec<Arc<str>>,
}

/// Where a dispatch's fault words sit: their buffer and byte offset.
pub(crate) struct SlotBinding {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) offset: u64,
}

/// Work submitted since the last wait that may have faulted, in submission order.
#[derive(Debug)]
enum Pending {
    Replay(Arc<FaultSlots>),
    Eager { slot: u64, kernel: Arc<str> },
}

/// One slot to scan after a wait: its position in the readback and the kernel it belongs to.
struct Word {
    at: u64,
    kernel: Arc<str>,
}

/// The fault words to read back after a wait, laid out after `base` bytes of other data.
pub(crate) struct FaultReadback {
    /// (buffer, bytes from its start, offset in the readback).
    regions: Vec<(wgpu::Buffer, u64, u64)>,
    words: Vec<Word>,
    end: u64,
}

impl FaultReadback {
    /// The readback's size in bytes, other data included.
    pub(crate) fn end(&self) -> u64 {
        self.end
    }

    /// Encodes the copies of every fault region into `staging`.
    pub(crate) fn encode_copies(&self, encoder: &mut wgpu::CommandEncoder, staging: &wgpu::Buffer) {
        for (buffer, len, at) in &self.regions {
            encoder.copy_buffer_to_buffer(buffer, 0, staging, *at, *len);
        }
    }

    /// The first faulting dispatch in submission order: its kernel and code.
    pub(crate) fn first_fault(&self, bytes: &[u8]) -> Option<(String, u32)> {
        self.words.iter().find_map(|w| {
            let at = usize::try_from(w.at).ok()?;
            fault_code(bytes.get(at..at + SLOT_BYTES as usize)?)
                .map(|code| (w.kernel.to_string(), code))
        })
    }

    /// Encodes zeroing every fault region that was read (after a reported fault).
    pub(crate) fn encode_reset(&self, encoder: &mut wgpu::CommandEncoder) {
        for (buffer, len, _) in &self.regions {
            encoder.clear_buffer(buffer, 0, Some(*len));
        }
    }
}

/// The device's fault bookkeeping.
#[derive(Debug)]
pub(crate) struct FaultLog {
    /// Bytes between two slots: the storage-binding offset alignment, at least one slot.
    stride: u64,
    eager_pages: Vec<wgpu::Buffer>,
    eager_used: u64,
    pending: Vec<Pending>,
}

impl FaultLog {
    pub(crate) fn new(min_storage_offset_alignment: u32) -> FaultLog {
        let stride = u64::from(min_storage_offset_alignment)
            .max(SLOT_BYTES)
            .next_multiple_of(SLOT_BYTES);
        FaultLog {
            stride,
            eager_pages: Vec::new(),
            eager_used: 0,
            pending: Vec::new(),
        }
    }

    fn create_buffer(&self, device: &wgpu::Device, label: &str, slots: u64) -> wgpu::Buffer {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: slots.max(1) * self.stride,
            usage: STORAGE_USAGE,
            mapped_at_creation: false,
        })
    }

    /// A fault buffer for a recording whose faulting dispatches run `kernels`, in order.
    pub(crate) fn new_slots(
        &self,
        device: &wgpu::Device,
        kernels: Vec<Arc<str>>,
    ) -> Arc<FaultSlots> {
        let buffer =
            self.create_buffer(device, "poot fault words (recording)", kernels.len() as u64);
        Arc::new(FaultSlots { buffer, kernels })
    }

    /// Where slot `i` of `slots` binds.
    pub(crate) fn slot_binding(&self, slots: &FaultSlots, i: usize) -> SlotBinding {
        SlotBinding {
            buffer: slots.buffer.clone(),
            offset: i as u64 * self.stride,
        }
    }

    /// Takes the next eager slot for a launch of `kernel`.
    pub(crate) fn eager_slot(&mut self, device: &wgpu::Device, kernel: Arc<str>) -> SlotBinding {
        let slot = self.eager_used;
        let page = usize::try_from(slot / EAGER_PAGE_SLOTS).unwrap_or(usize::MAX);
        while self.eager_pages.len() <= page {
            let buffer = self.create_buffer(device, "poot fault words (eager)", EAGER_PAGE_SLOTS);
            self.eager_pages.push(buffer);
        }
        self.eager_used += 1;
        self.pending.push(Pending::Eager { slot, kernel });
        SlotBinding {
            buffer: self.eager_pages[page].clone(),
            offset: (slot % EAGER_PAGE_SLOTS) * self.stride,
        }
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

    /// Lays out the readback of every fault word submitted since the last wait, after `base`
    /// bytes (a multiple of 4) of other data.
    pub(crate) fn readback(&self, base: u64) -> FaultReadback {
        let mut rb = FaultReadback {
            regions: Vec::new(),
            words: Vec::new(),
            end: base,
        };
        let mut page_at: Vec<Option<u64>> = vec![None; self.eager_pages.len()];
        let eager_pages_used = self.eager_used.div_ceil(EAGER_PAGE_SLOTS);
        for p in &self.pending {
            match p {
                Pending::Replay(slots) => {
                    let at = rb.end;
                    let len = slots.kernels.len().max(1) as u64 * self.stride;
                    rb.regions.push((slots.buffer.clone(), len, at));
                    rb.end += len;
                    for (i, kernel) in slots.kernels.iter().enumerate() {
                        rb.words.push(Word {
                            at: at + i as u64 * self.stride,
                            kernel: Arc::clone(kernel),
                        });
                    }
                }
                Pending::Eager { slot, kernel } => {
                    let page = (slot / EAGER_PAGE_SLOTS) as usize;
                    let Some(entry) = page_at.get_mut(page) else {
                        continue;
                    };
                    let at = *entry.get_or_insert_with(|| {
                        let at = rb.end;
                        // Pages before the last are full; the last holds the slots used so far.
                        let slots = if (page as u64) + 1 < eager_pages_used {
                            EAGER_PAGE_SLOTS
                        } else {
                            self.eager_used - page as u64 * EAGER_PAGE_SLOTS
                        };
                        let len = slots * self.stride;
                        rb.regions.push((self.eager_pages[page].clone(), len, at));
                        rb.end += len;
                        at
                    });
                    rb.words.push(Word {
                        at: at + (slot % EAGER_PAGE_SLOTS) * self.stride,
                        kernel: Arc::clone(kernel),
                    });
                }
            }
        }
        rb
    }

    /// Forgets the submitted work after a completed wait: eager slots are reused from the start.
    pub(crate) fn clear_pending(&mut self) {
        self.pending.clear();
        self.eager_used = 0;
    }
}
