//! Faults: how a CUDA error becomes a [`DeviceError`], and the poison that makes every later call
//! refuse without touching the device.

use std::ffi::CStr;
use std::sync::{Arc, OnceLock};

use cudarc::driver::sys::{self, CUresult};
use poot_executor::DeviceError;

/// The first failure of a device; set once, never cleared.
#[derive(Debug)]
pub(crate) struct Poison {
    /// The report every later call returns as [`DeviceError::Poisoned`].
    pub(crate) first: String,
    /// Whether work may still be running on the device (a wait timed out), so nothing may be
    /// freed or destroyed.
    pub(crate) work_may_run: bool,
}

/// The poison cell shared by a context and everything allocated in it.
#[derive(Debug, Default)]
pub(crate) struct PoisonCell(OnceLock<Poison>);

impl PoisonCell {
    /// Refuses when poisoned.
    pub(crate) fn check(&self) -> Result<(), DeviceError> {
        match self.0.get() {
            Some(p) => Err(DeviceError::Poisoned {
                first: p.first.clone(),
            }),
            None => Ok(()),
        }
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.0.get().is_some()
    }

    /// Whether a timed-out wait left work running: nothing of this context may be freed.
    pub(crate) fn work_may_run(&self) -> bool {
        self.0.get().is_some_and(|p| p.work_may_run)
    }

    /// Records `err` as the first failure (a later one does not replace it) and returns it.
    /// For a CUDA failure or a timeout this poisons whatever `err.poisons()` says: a CUDA error
    /// of a launch, copy or wait is sticky for the context (a trap for the whole process), and
    /// after a timeout work may still run.
    pub(crate) fn record(&self, err: DeviceError, detail: Option<&str>) -> DeviceError {
        let work_may_run = matches!(err, DeviceError::Timeout { .. });
        let first = match detail {
            Some(d) => format!("{err} ({d})"),
            None => err.to_string(),
        };
        let _ = self.0.set(Poison {
            first,
            work_may_run,
        });
        err
    }

    /// Records a failure caught on the host before anything reached CUDA (a copy out of bounds):
    /// it poisons only where [`DeviceError::poisons`] says so.
    pub(crate) fn record_host(&self, err: DeviceError) -> DeviceError {
        if err.poisons() {
            self.record(err, Some("refused before reaching the device"))
        } else {
            err
        }
    }
}

/// A CUDA error's name and description, e.g. `CUDA_ERROR_LAUNCH_FAILED (719): unspecified launch
/// failure`. Asks the driver library, which never touches the device for this.
pub(crate) fn cuda_error_text(e: CUresult) -> String {
    let code = e as u32;
    let mut name: *const std::ffi::c_char = std::ptr::null();
    let mut desc: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: out-pointers are valid; the driver returns pointers to static strings or an error.
    let (rn, rd) = unsafe {
        (
            sys::cuGetErrorName(e, &mut name),
            sys::cuGetErrorString(e, &mut desc),
        )
    };
    let text = |r: CUresult, p: *const std::ffi::c_char| {
        if r == CUresult::CUDA_SUCCESS && !p.is_null() {
            // SAFETY: the driver returned a NUL-terminated static string.
            Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        } else {
            None
        }
    };
    match (text(rn, name), text(rd, desc)) {
        (Some(n), Some(d)) => format!("{n} ({code}): {d}"),
        (Some(n), None) => format!("{n} ({code})"),
        _ => format!("{e:?} ({code})"),
    }
}

/// How the device reports a failed kernel check: `__trap()` (and `assert`) end the kernel with
/// one of these.
pub(crate) fn is_trap(e: CUresult) -> bool {
    matches!(
        e,
        CUresult::CUDA_ERROR_LAUNCH_FAILED
            | CUresult::CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUresult::CUDA_ERROR_ASSERT
    )
}

/// The errors CUDA keeps for the rest of the process: after one, every call in every context of
/// the process fails with it, and no context can be created. Only a new process can use the GPU.
pub(crate) fn is_sticky(e: CUresult) -> bool {
    is_trap(e)
        || matches!(
            e,
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS
                | CUresult::CUDA_ERROR_HARDWARE_STACK_ERROR
                | CUresult::CUDA_ERROR_MISALIGNED_ADDRESS
                | CUresult::CUDA_ERROR_INVALID_ADDRESS_SPACE
                | CUresult::CUDA_ERROR_INVALID_PC
        )
}

/// Which work could have raised an asynchronous error: the launches and replays submitted since
/// the stream was last seen idle.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    /// The most recent submissions, oldest first (at most [`InFlight::KEEP`]).
    recent: Vec<Arc<str>>,
    /// All submissions since the last idle stream, including those no longer in `recent`.
    count: u64,
}

impl InFlight {
    const KEEP: usize = 8;

    pub(crate) fn push(&mut self, what: Arc<str>) {
        if self.recent.len() == Self::KEEP {
            self.recent.remove(0);
        }
        self.recent.push(what);
        self.count += 1;
    }

    /// The stream was seen idle: nothing is in flight.
    pub(crate) fn clear(&mut self) {
        self.recent.clear();
        self.count = 0;
    }

    /// The culprit when exactly one submission is in flight; otherwise a description of the
    /// candidates, newest first; `None` when nothing was submitted.
    pub(crate) fn suspect(&self) -> Option<String> {
        let last = self.recent.last()?;
        if self.count == 1 {
            return Some(last.to_string());
        }
        let mut names: Vec<&str> = self.recent.iter().rev().map(|s| &**s).collect();
        names.dedup();
        let more = self.count.saturating_sub(self.recent.len() as u64);
        let tail = if more > 0 {
            format!(" and {more} earlier")
        } else {
            String::new()
        };
        Some(format!(
            "one of {} submissions since the last sync: {}{tail}",
            self.count,
            names.join(", ")
        ))
    }
}

/// The typed error for a CUDA failure of `call`, with `in_flight` the work that may have caused
/// it and `check` the code a failed kernel check recorded (if any). A trap, or any failure after
/// a check recorded a code, with a known suspect is a [`DeviceError::KernelFault`] (code 0 when
/// the trap recorded none); anything else is [`DeviceError::Lost`]. Returns the error and the
/// CUDA text for the poison report.
pub(crate) fn classify(
    call: &str,
    e: CUresult,
    in_flight: &InFlight,
    check: Option<u32>,
) -> (DeviceError, String) {
    let text = cuda_error_text(e);
    let checked = match check {
        Some(code) => format!(" (a kernel check recorded code {code})"),
        None => String::new(),
    };
    let err = match in_flight.suspect() {
        Some(kernel) if check.is_some() || is_trap(e) => DeviceError::KernelFault {
            kernel,
            code: check.unwrap_or(0),
        },
        Some(kernel) => DeviceError::Lost {
            reason: format!("{call}: {text} (in flight: {kernel})"),
        },
        None => DeviceError::Lost {
            reason: format!("{call}: {text}{checked}"),
        },
    };
    (err, format!("{call}: {text}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poison_keeps_the_first_failure() {
        let p = PoisonCell::default();
        assert!(p.check().is_ok());
        // A host-side failure that does not poison leaves the cell empty.
        let e = p.record_host(DeviceError::Compile {
            kernel: "k".into(),
            log: "bad".into(),
        });
        assert!(matches!(e, DeviceError::Compile { .. }));
        assert!(p.check().is_ok());
        p.record(
            DeviceError::KernelFault {
                kernel: "k".into(),
                code: 7,
            },
            Some("CUDA_ERROR_LAUNCH_FAILED"),
        );
        p.record(
            DeviceError::Lost {
                reason: "later".into(),
            },
            None,
        );
        match p.check() {
            Err(DeviceError::Poisoned { first }) => {
                assert!(first.contains("kernel `k` faulted with code 7"), "{first}");
                assert!(first.contains("CUDA_ERROR_LAUNCH_FAILED"), "{first}");
            }
            other => panic!("expected Poisoned, got {other:?}"),
        }
        assert!(!p.work_may_run());
    }

    #[test]
    fn traps_are_sticky() {
        for e in [
            CUresult::CUDA_ERROR_LAUNCH_FAILED,
            CUresult::CUDA_ERROR_ASSERT,
            CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
        ] {
            assert!(is_sticky(e), "{e:?}");
        }
        for e in [
            CUresult::CUDA_ERROR_OUT_OF_MEMORY,
            CUresult::CUDA_ERROR_INVALID_VALUE,
        ] {
            assert!(!is_sticky(e), "{e:?}");
        }
    }

    #[test]
    fn timeout_marks_work_as_running() {
        let p = PoisonCell::default();
        p.record(DeviceError::Timeout { seconds: 1 }, None);
        assert!(p.is_poisoned());
        assert!(p.work_may_run());
    }

    #[test]
    fn suspects() {
        let mut f = InFlight::default();
        assert_eq!(f.suspect(), None);
        f.push("a".into());
        assert_eq!(f.suspect().as_deref(), Some("a"));
        f.push("b".into());
        let s = f.suspect().unwrap_or_default();
        assert!(s.contains("one of 2") && s.contains("b, a"), "{s}");
        for i in 0..20 {
            f.push(format!("k{i}").into());
        }
        let s = f.suspect().unwrap_or_default();
        assert!(
            s.contains("one of 22") && s.contains("k19") && s.contains("14 earlier"),
            "{s}"
        );
        f.clear();
        assert_eq!(f.suspect(), None);
    }
}
