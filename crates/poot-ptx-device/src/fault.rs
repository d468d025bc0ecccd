//! Faults: how a CUDA error becomes a [`DeviceError`], told against the work in flight. The
//! poison that then makes every later call refuse is `poot_executor::poison`'s.

use std::ffi::CStr;

use cudarc::driver::sys::{self, CUresult};
use poot_executor::DeviceError;
use poot_executor::in_flight::InFlight;

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
}
