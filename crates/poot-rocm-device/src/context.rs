//! The HSA state one [`RocmDevice`](crate::RocmDevice) owns: its GPU agent and the CPU agent
//! whose memory the host reads and writes, one AQL queue all kernels go to, the memory pools,
//! the completion signal, the poison cell and the fault words.
//!
//! **Submission.** A submission is a run of prebuilt packets ([`crate::packet`]): for each, the
//! host reserves the next queue slot (waiting, bounded, while the ring is full), copies the
//! packet's body in and then stores its header word with release ordering, which hands the
//! slot to the packet processor; the doorbell is rung once with the last index. The last packet
//! carries the completion signal, which the host raised by one first: the signal's value is
//! the number of submissions still running, and the queue is idle when it reads 0.
//!
//! **Memory.** Buffers are coarse-grained device memory (the GPU's global pool). Kernel
//! arguments, the fault words and the staging buffer of host copies are fine-grained system
//! memory (the CPU's kernarg pool), which the GPU is allowed to access and the host reads and
//! writes directly. Host copies go through the staging buffer and an SDMA copy
//! (`hsa_amd_memory_async_copy`) once the queue is idle, bounded like every wait.

use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use poot_executor::DeviceError;
use poot_executor::poison::PoisonCell;
use poot_kernel::render::{FAULT_CODE_WORD, FAULT_FLAG_WORD, FAULT_WORDS};

use crate::fault::on_queue_error;
use crate::hsa::{self, Agent, Hsa, MemoryPool, Queue, Signal};
use crate::packet::PACKET_WORDS;
use poot_executor::wait::{Poll, WaitError, bounded_wait, timeout_seconds};

/// Packets the queue holds (a power of two; the agent's maximum when smaller).
const QUEUE_PACKETS: u32 = 4096;

/// What a failed wait saw.
#[derive(Debug)]
pub(crate) enum WaitFailure {
    /// The poison cell was set (by the queue's callback or the event handler): its report.
    Poisoned(DeviceError),
    /// A kernel check recorded its code in the fault words.
    Check(u32),
    Timeout,
}

pub(crate) struct Context {
    pub(crate) hsa: &'static Hsa,
    pub(crate) gpu: Agent,
    pub(crate) cpu: Agent,
    pub(crate) device_pool: MemoryPool,
    /// Fine-grained system memory the GPU may access (kernel arguments, staging, fault words).
    pub(crate) host_pool: MemoryPool,
    queue: *mut Queue,
    /// Submissions still running (see the module docs).
    completion: Signal,
    /// Host copies' completion.
    copy_done: Signal,
    pub(crate) poison: Arc<PoisonCell>,
    /// `FAULT_WORDS` u32 words of fine-grained system memory, zero until a check fails.
    fault_words: *mut u32,
    wait_timeout_ns: AtomicU64,
}

// SAFETY: the handles are plain HSA handles, usable from any thread (the runtime is
// thread-safe); the queue ring is only written by the device that owns the context (behind
// `&mut`), and the fault words are only read (volatile) by the host.
unsafe impl Send for Context {}
// SAFETY: as above; shared references only read handles or use the synchronized poison cell.
unsafe impl Sync for Context {}

fn failed(hsa: &Hsa, call: &str, r: hsa::Status) -> String {
    format!("{call}: {}", hsa.status_text(r))
}

impl Context {
    /// Creates the queue, signals and fault words on `gpu`, with `cpu`'s fine-grained pool for
    /// host-visible memory. The reason on failure (nothing created is leaked).
    pub(crate) fn create(
        hsa: &'static Hsa,
        gpu: Agent,
        cpu: Agent,
        device_pool: MemoryPool,
        host_pool: MemoryPool,
        max_queue_packets: u32,
        wait_timeout: Duration,
    ) -> Result<Context, String> {
        let mut c = Context {
            hsa,
            gpu,
            cpu,
            device_pool,
            host_pool,
            queue: std::ptr::null_mut(),
            completion: Signal::default(),
            copy_done: Signal::default(),
            poison: Arc::new(PoisonCell::default()),
            fault_words: std::ptr::null_mut(),
            wait_timeout_ns: AtomicU64::new(0),
        };
        c.set_wait_timeout(wait_timeout);
        // SAFETY: valid out-pointers; on failure `c` drops and releases what exists so far.
        unsafe {
            let r = (hsa.signal_create)(0, 0, std::ptr::null(), &mut c.completion);
            if r != hsa::STATUS_SUCCESS {
                return Err(failed(hsa, "hsa_signal_create", r));
            }
            let r = (hsa.signal_create)(0, 0, std::ptr::null(), &mut c.copy_done);
            if r != hsa::STATUS_SUCCESS {
                return Err(failed(hsa, "hsa_signal_create", r));
            }
            let packets = QUEUE_PACKETS
                .min(max_queue_packets.max(1))
                .next_power_of_two();
            let r = (hsa.queue_create)(
                gpu,
                packets,
                hsa::QUEUE_TYPE_SINGLE,
                Some(on_queue_error),
                Arc::as_ptr(&c.poison).cast_mut().cast(),
                u32::MAX,
                u32::MAX,
                &mut c.queue,
            );
            if r != hsa::STATUS_SUCCESS {
                c.queue = std::ptr::null_mut();
                return Err(failed(hsa, "hsa_queue_create", r));
            }
        }
        let words = FAULT_WORDS as usize * std::mem::size_of::<u32>();
        c.fault_words = c.host_alloc(words)?.cast();
        for i in 0..FAULT_WORDS as usize {
            // SAFETY: a fresh allocation of FAULT_WORDS aligned words.
            unsafe { std::ptr::write_volatile(c.fault_words.add(i), 0) };
        }
        Ok(c)
    }

    /// Fine-grained system memory of `bytes` the GPU may access.
    pub(crate) fn host_alloc(&self, bytes: usize) -> Result<*mut c_void, String> {
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the pool allows runtime allocation (checked at open).
        let r = unsafe { (self.hsa.pool_allocate)(self.host_pool, bytes.max(4), 0, &mut ptr) };
        if r != hsa::STATUS_SUCCESS || ptr.is_null() {
            return Err(failed(self.hsa, "hsa_amd_memory_pool_allocate (host)", r));
        }
        // SAFETY: `ptr` is the allocation just made; one agent, no flags.
        let r = unsafe { (self.hsa.allow_access)(1, &self.gpu, std::ptr::null(), ptr) };
        if r != hsa::STATUS_SUCCESS {
            // SAFETY: freed once, never used.
            unsafe {
                let _ = (self.hsa.pool_free)(ptr);
            }
            return Err(failed(self.hsa, "hsa_amd_agents_allow_access", r));
        }
        Ok(ptr)
    }

    /// The code a failed check recorded (the largest, when several threads failed), or `None`.
    /// Read straight from host memory.
    pub(crate) fn fault_code(&self) -> Option<u32> {
        if self.fault_words.is_null() {
            return None;
        }
        // SAFETY: a live allocation of FAULT_WORDS aligned words the GPU writes atomically.
        let (flag, code) = unsafe {
            (
                std::ptr::read_volatile(self.fault_words.add(FAULT_FLAG_WORD as usize)),
                std::ptr::read_volatile(self.fault_words.add(FAULT_CODE_WORD as usize)),
            )
        };
        (flag != 0).then_some(code)
    }

    /// The signal the last packet of a submission carries.
    pub(crate) fn completion_signal(&self) -> Signal {
        self.completion
    }

    /// The fault words' address, the last argument of kernels that can fault.
    pub(crate) fn fault_address(&self) -> u64 {
        self.fault_words as u64
    }

    pub(crate) fn wait_timeout(&self) -> Duration {
        Duration::from_nanos(self.wait_timeout_ns.load(Ordering::Relaxed))
    }

    pub(crate) fn set_wait_timeout(&self, timeout: Duration) {
        let ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        self.wait_timeout_ns.store(ns, Ordering::Relaxed);
    }

    /// Polls until `signal` reads 0, the context is poisoned, a check recorded a fault, or the
    /// wait timeout passes.
    fn wait_zero(&self, signal: Signal) -> Result<(), WaitError<WaitFailure>> {
        bounded_wait(self.wait_timeout(), || {
            if let Err(e) = self.poison.check() {
                return Poll::Failed(WaitFailure::Poisoned(e));
            }
            if let Some(code) = self.fault_code() {
                return Poll::Failed(WaitFailure::Check(code));
            }
            // SAFETY: a live signal; loading never blocks.
            if unsafe { (self.hsa.signal_load)(signal) } == 0 {
                Poll::Done
            } else {
                Poll::Pending
            }
        })
    }

    /// Waits until every submission has completed.
    pub(crate) fn wait_idle(&self) -> Result<(), WaitFailure> {
        self.wait_zero(self.completion).map_err(|e| match e {
            WaitError::Failed(f) => f,
            WaitError::Timeout => WaitFailure::Timeout,
        })
    }

    /// Submits `packets` (16 words each, the header word first) in order, the last one's
    /// completion signal being the context's; the caller built them so. Waits (bounded) for
    /// room while the ring is full.
    pub(crate) fn submit(&self, packets: &[[u32; PACKET_WORDS]]) -> Result<(), WaitFailure> {
        if packets.is_empty() {
            return Ok(());
        }
        let hsa = self.hsa;
        // SAFETY: the queue lives as long as the context; its fields are set by the runtime.
        let q = unsafe { &*self.queue };
        let size = u64::from(q.size);
        // SAFETY: a live signal.
        unsafe { (hsa.signal_add)(self.completion, 1) };
        let mut last = None;
        for p in packets {
            // SAFETY: reserves one slot index on our single-producer queue.
            let index = unsafe { (hsa.queue_add_write_index)(self.queue, 1) };
            // Room: the packet processor must have read past the slot's previous use.
            let full = || {
                // SAFETY: reading the read index never blocks.
                index.wrapping_sub(unsafe { (hsa.queue_load_read_index)(self.queue) }) >= size
            };
            if full() {
                if let Some(l) = last {
                    // SAFETY: announces the packets written so far.
                    unsafe { (hsa.signal_store)(q.doorbell_signal, l as i64) };
                }
                bounded_wait(self.wait_timeout(), || {
                    if let Err(e) = self.poison.check() {
                        return Poll::Failed(WaitFailure::Poisoned(e));
                    }
                    if full() { Poll::Pending } else { Poll::Done }
                })
                .map_err(|e| match e {
                    WaitError::Failed(f) => f,
                    WaitError::Timeout => WaitFailure::Timeout,
                })?;
            }
            let slot = (index % size) as usize * PACKET_WORDS;
            // SAFETY: `slot` is inside the ring of `size` packets at `base_address`, which the
            // packet processor has released (checked above); the body is written before the
            // header, whose release store hands the slot over.
            unsafe {
                let base = q.base_address.cast::<u32>().add(slot);
                for (i, &w) in p.iter().enumerate().skip(1) {
                    std::ptr::write_volatile(base.add(i), w);
                }
                AtomicU32::from_ptr(base).store(p[0], Ordering::Release);
            }
            last = Some(index);
        }
        if let Some(l) = last {
            // SAFETY: rings the doorbell with the last packet's index.
            unsafe { (hsa.signal_store)(q.doorbell_signal, l as i64) };
        }
        Ok(())
    }

    /// Copies `bytes` from `src` (on `src_agent`) to `dst` (on `dst_agent`) by SDMA and waits
    /// (bounded) for it; the queue must be idle.
    pub(crate) fn copy_and_wait(
        &self,
        dst: *mut c_void,
        dst_agent: Agent,
        src: *const c_void,
        src_agent: Agent,
        bytes: usize,
    ) -> Result<(), CopyFailure> {
        let hsa = self.hsa;
        // SAFETY: a live signal, idle (the previous copy was waited for).
        unsafe { (hsa.signal_store)(self.copy_done, 1) };
        // SAFETY: both ranges are inside live allocations the agents may access (the callers
        // check); no dependencies; the signal is decremented when the copy is done.
        let r = unsafe {
            (hsa.async_copy)(
                dst,
                dst_agent,
                src,
                src_agent,
                bytes,
                0,
                std::ptr::null(),
                self.copy_done,
            )
        };
        if r != hsa::STATUS_SUCCESS {
            return Err(CopyFailure::Refused(failed(
                hsa,
                "hsa_amd_memory_async_copy",
                r,
            )));
        }
        self.wait_zero(self.copy_done).map_err(|e| match e {
            WaitError::Failed(f) => CopyFailure::Wait(f),
            WaitError::Timeout => CopyFailure::Wait(WaitFailure::Timeout),
        })
    }

    /// Whether something of this context may be released now: the context is healthy and its
    /// queue idle. A wait that fails poisons the context, and the thing is leaked instead.
    pub(crate) fn ready_to_release(&self) -> bool {
        if self.poison.is_poisoned() {
            return false;
        }
        match self.wait_idle() {
            Ok(()) => true,
            Err(WaitFailure::Timeout) => {
                self.poison.record(
                    DeviceError::Timeout {
                        seconds: timeout_seconds(self.wait_timeout()),
                    },
                    Some("while releasing"),
                );
                false
            }
            Err(WaitFailure::Check(code)) => {
                self.poison.record(
                    DeviceError::KernelFault {
                        kernel: "a kernel still running at release".to_string(),
                        code,
                    },
                    Some("while releasing"),
                );
                false
            }
            Err(WaitFailure::Poisoned(_)) => false,
        }
    }
}

/// Why a host copy failed.
#[derive(Debug)]
pub(crate) enum CopyFailure {
    /// The runtime refused to start it.
    Refused(String),
    Wait(WaitFailure),
}

impl Drop for Context {
    fn drop(&mut self) {
        if self.poison.work_may_run() {
            // A kernel may still run: destroying the queue could wait for it. Leak it all.
            return;
        }
        let hsa = self.hsa;
        // SAFETY: each handle was created here and is released exactly once; the owning device
        // waited for its work (or the queue is dead) before the last reference dropped.
        unsafe {
            if !self.queue.is_null() {
                let _ = (hsa.queue_destroy)(self.queue);
            }
            for s in [self.completion, self.copy_done] {
                if s.handle != 0 {
                    let _ = (hsa.signal_destroy)(s);
                }
            }
            if !self.fault_words.is_null() {
                let _ = (hsa.pool_free)(self.fault_words.cast());
            }
        }
    }
}
