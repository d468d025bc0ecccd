//! The CUDA context one [`PtxDevice`](crate::PtxDevice) owns: a context of its own (not the
//! device's primary context, so a non-sticky failure in it is not shared with another user of
//! the GPU; a kernel trap, though, is sticky for the whole process and no context can be created
//! in it afterwards), one non-blocking stream all work goes to, the poison cell, and the fault
//! buffer kernels report a failed check through.
//!
//! A rank of a tensor-parallel group uses the device's primary context instead: NCCL makes the
//! primary context current for its own resources (through the CUDA runtime), and its kernels
//! run on our stream, so both must be the one context.
//!
//! The fault buffer (the renderer's layout, `poot_kernel::render::fault`) is
//! host-mapped pinned memory: a failing check writes its code there and traps, and the host
//! reads the code directly afterwards, without a copy the trapped context could no longer do.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use cudarc::driver::sys::{self, CUcontext, CUdeviceptr, CUresult, CUstream};
use poot_executor::DeviceError;
use poot_executor::poison::PoisonCell;
use poot_kernel::render::{FAULT_CODE_WORD, FAULT_FLAG_WORD, FAULT_WORDS};

use crate::fault::cuda_error_text;
use poot_executor::wait::{Poll, WaitError, bounded_wait, timeout_seconds};

/// Turns a CUDA status into a `Result`.
pub(crate) fn cu(r: CUresult) -> Result<(), CUresult> {
    if r == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(r)
    }
}

pub(crate) struct Context {
    pub(crate) ctx: CUcontext,
    /// The device whose primary context this is (retained, released on drop); `None` for a
    /// context of our own (destroyed on drop).
    primary: Option<sys::CUdevice>,
    pub(crate) stream: CUstream,
    pub(crate) poison: PoisonCell,
    /// Host-mapped, zero-initialized fault buffer of `FAULT_WORDS` u32 words.
    fault_host: *mut u32,
    /// The fault buffer's device address: the extra argument of kernels that can fault.
    pub(crate) fault_dev: CUdeviceptr,
    /// The bound on every wait, in nanoseconds (shared so releases wait as long as calls do).
    wait_timeout_ns: AtomicU64,
}

// SAFETY: the handles are plain driver handles, valid on any thread once the context is made
// current (every user calls `make_current` first); the driver API is thread-safe. The only
// mutable state is the poison cell (a `OnceLock`) and the fault buffer, which the host only reads
// (volatile) after the device has stopped.
unsafe impl Send for Context {}
// SAFETY: as above; shared references only read handles or use the synchronized poison cell.
unsafe impl Sync for Context {}

impl Context {
    /// Creates a context on `dev` (or retains its primary context) with its stream and fault
    /// buffer.
    pub(crate) fn create(
        dev: sys::CUdevice,
        wait_timeout: Duration,
        primary: bool,
    ) -> Result<Context, (&'static str, CUresult)> {
        let mut c = Context {
            ctx: std::ptr::null_mut(),
            primary: None,
            stream: std::ptr::null_mut(),
            poison: PoisonCell::default(),
            fault_host: std::ptr::null_mut(),
            fault_dev: 0,
            wait_timeout_ns: AtomicU64::new(0),
        };
        c.set_wait_timeout(wait_timeout);
        // SAFETY: out-pointers are valid; null creation parameters ask for a plain context.
        // On failure `c` drops and releases whatever was created so far.
        unsafe {
            if primary {
                cu(sys::cuDevicePrimaryCtxRetain(&mut c.ctx, dev))
                    .map_err(|e| ("cuDevicePrimaryCtxRetain", e))?;
                c.primary = Some(dev);
            } else {
                cu(sys::cuCtxCreate_v4(
                    &mut c.ctx,
                    std::ptr::null_mut(),
                    0,
                    dev,
                ))
                .map_err(|e| ("cuCtxCreate", e))?;
            }
            cu(sys::cuCtxSetCurrent(c.ctx)).map_err(|e| ("cuCtxSetCurrent", e))?;
            cu(sys::cuStreamCreate(
                &mut c.stream,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32,
            ))
            .map_err(|e| ("cuStreamCreate", e))?;
            let mut host: *mut std::ffi::c_void = std::ptr::null_mut();
            let words = FAULT_WORDS as usize;
            cu(sys::cuMemHostAlloc(
                &mut host,
                words * std::mem::size_of::<u32>(),
                sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE,
            ))
            .map_err(|e| ("cuMemHostAlloc", e))?;
            c.fault_host = host.cast::<u32>();
            for i in 0..words {
                std::ptr::write_volatile(c.fault_host.add(i), 0);
            }
            cu(sys::cuMemHostGetDevicePointer_v2(&mut c.fault_dev, host, 0))
                .map_err(|e| ("cuMemHostGetDevicePointer", e))?;
        }
        Ok(c)
    }

    /// Binds the context to the calling thread.
    pub(crate) fn make_current(&self) -> Result<(), CUresult> {
        // SAFETY: `ctx` is a live context (destroyed only in `drop`).
        cu(unsafe { sys::cuCtxSetCurrent(self.ctx) })
    }

    /// The code a failed check recorded (the largest, when several threads failed), or `None`
    /// when no check failed. Read straight from host memory: no CUDA call.
    pub(crate) fn fault_code(&self) -> Option<u32> {
        if self.fault_host.is_null() {
            return None;
        }
        // SAFETY: the buffer is a live pinned host allocation of FAULT_WORDS aligned u32 words
        // (both indices are below FAULT_WORDS); the device writes them with atomics.
        let (flag, code) = unsafe {
            (
                std::ptr::read_volatile(self.fault_host.add(FAULT_FLAG_WORD as usize)),
                std::ptr::read_volatile(self.fault_host.add(FAULT_CODE_WORD as usize)),
            )
        };
        (flag != 0).then_some(code)
    }

    pub(crate) fn wait_timeout(&self) -> Duration {
        Duration::from_nanos(self.wait_timeout_ns.load(Ordering::Relaxed))
    }

    pub(crate) fn set_wait_timeout(&self, timeout: Duration) {
        let ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        self.wait_timeout_ns.store(ns, Ordering::Relaxed);
    }

    /// Waits until the stream is idle, polling for at most the wait timeout.
    pub(crate) fn wait_idle(&self) -> Result<(), WaitError<CUresult>> {
        bounded_wait(self.wait_timeout(), || {
            // SAFETY: the stream is live; querying never blocks.
            match unsafe { sys::cuStreamQuery(self.stream) } {
                CUresult::CUDA_SUCCESS => Poll::Done,
                CUresult::CUDA_ERROR_NOT_READY => Poll::Pending,
                e => Poll::Failed(e),
            }
        })
    }

    /// Whether something of this context may be released now: the context is healthy, current
    /// on this thread, and its stream idle (so no submitted work still uses what is released).
    /// A wait that times out or fails poisons the context, and the thing is leaked instead.
    pub(crate) fn ready_to_release(&self) -> bool {
        if self.poison.is_poisoned() {
            return false;
        }
        if let Err(e) = self.make_current() {
            self.poison.record(
                DeviceError::Lost {
                    reason: format!("cuCtxSetCurrent: {}", cuda_error_text(e)),
                },
                None,
            );
            return false;
        }
        match self.wait_idle() {
            Ok(()) => true,
            Err(WaitError::Timeout) => {
                self.poison.record(
                    DeviceError::Timeout {
                        seconds: timeout_seconds(self.wait_timeout()),
                    },
                    Some("while releasing"),
                );
                false
            }
            Err(WaitError::Failed(e)) => {
                self.poison.record(
                    DeviceError::Lost {
                        reason: format!("cuStreamQuery: {}", cuda_error_text(e)),
                    },
                    Some("while releasing"),
                );
                false
            }
        }
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        if self.ctx.is_null() {
            return;
        }
        if self.poison.work_may_run() {
            // A kernel may still be running: destroying the context could block on it. Leak
            // the context and everything in it instead.
            return;
        }
        // SAFETY: every handle below was created in this context and is released exactly once;
        // the owning device has waited for its work (or the context is dead) before the last
        // reference dropped.
        unsafe {
            if sys::cuCtxSetCurrent(self.ctx) != CUresult::CUDA_SUCCESS {
                return;
            }
            if !self.stream.is_null() {
                let _ = sys::cuStreamDestroy_v2(self.stream);
            }
            if !self.fault_host.is_null() {
                let _ = sys::cuMemFreeHost(self.fault_host.cast());
            }
            match self.primary {
                Some(dev) => {
                    let _ = sys::cuDevicePrimaryCtxRelease_v2(dev);
                }
                None => {
                    let _ = sys::cuCtxDestroy_v2(self.ctx);
                }
            }
        }
    }
}
