//! Faults: how a failed wait is told against the work in flight, and the two ways HSA reports a
//! failure asynchronously, each poisoning the context (`poot_executor::poison`).
//!
//! - **The queue's error callback** (`hsa_queue_create`'s): a kernel that traps (a failed
//!   check), executes an illegal instruction or otherwise raises an exception puts its queue in
//!   an error state, and the runtime calls back from one of its threads. The callback poisons
//!   the context; the waiting call then returns the fault (with the check's code, read from
//!   host memory).
//! - **The system event handler** (`hsa_amd_register_system_event_handler`, one per process):
//!   a GPU memory fault (a page the kernel may not touch) is reported for the agent; every
//!   context on that agent is poisoned.
//!
//! A check's fault words are also polled by every wait, so a failed check is reported at once
//! even where a runtime does not call back after a trap.

use std::sync::{Arc, Mutex, OnceLock, Weak};

use poot_executor::DeviceError;
use poot_executor::in_flight::InFlight;
use poot_executor::poison::PoisonCell;

use crate::hsa::{self, Agent, Event, Hsa, Status};

/// The poison cells of the live contexts, by agent, for the system event handler.
type Registry = Mutex<Vec<(Agent, Weak<PoisonCell>)>>;

fn registry() -> &'static Registry {
    static LIVE: OnceLock<Registry> = OnceLock::new();
    LIVE.get_or_init(|| Mutex::new(Vec::new()))
}

/// Registers `poison` to be poisoned by a memory fault on `agent`; installs the process's event
/// handler the first time. The reason when the runtime refuses the handler.
pub(crate) fn watch_memory_faults(
    hsa: &'static Hsa,
    agent: Agent,
    poison: &Arc<PoisonCell>,
) -> Result<(), String> {
    static HANDLER: OnceLock<Result<(), String>> = OnceLock::new();
    HANDLER
        .get_or_init(|| {
            // SAFETY: the handler only reads the event and the registry (a static); no data.
            let r = unsafe { (hsa.register_event_handler)(on_system_event, std::ptr::null_mut()) };
            if r == hsa::STATUS_SUCCESS {
                Ok(())
            } else {
                Err(format!(
                    "hsa_amd_register_system_event_handler: {}",
                    hsa.status_text(r)
                ))
            }
        })
        .clone()?;
    let mut live = registry().lock().unwrap_or_else(|p| p.into_inner());
    live.retain(|(_, p)| p.strong_count() > 0);
    live.push((agent, Arc::downgrade(poison)));
    Ok(())
}

/// The text of a memory fault's reason bits (`hsa_amd_memory_fault_reason_t`).
pub(crate) fn fault_reasons(mask: u32) -> String {
    const REASONS: [(u32, &str); 8] = [
        (1 << 0, "page not present"),
        (1 << 1, "write to a read-only page"),
        (1 << 2, "execute of a no-execute page"),
        (1 << 3, "host-only page"),
        (1 << 4, "DRAM ECC error"),
        (1 << 5, "imprecise address"),
        (1 << 6, "SRAM ECC error"),
        (1 << 31, "GPU reset after a hang"),
    ];
    let named: Vec<&str> = REASONS
        .iter()
        .filter(|(bit, _)| mask & bit != 0)
        .map(|&(_, text)| text)
        .collect();
    if named.is_empty() {
        format!("reason bits {mask:#x}")
    } else {
        named.join(", ")
    }
}

/// The system event handler: a memory fault poisons every live context on its agent.
unsafe extern "C" fn on_system_event(event: *const Event, _data: *mut std::ffi::c_void) -> Status {
    // SAFETY: the runtime passes a valid event for the duration of the call.
    let Some(event) = (unsafe { event.as_ref() }) else {
        return hsa::STATUS_SUCCESS;
    };
    if event.event_type != hsa::EVENT_GPU_MEMORY_FAULT {
        return hsa::STATUS_SUCCESS;
    }
    let reason = format!(
        "GPU memory fault at {:#x} ({})",
        event.virtual_address,
        fault_reasons(event.fault_reason_mask)
    );
    let live = registry().lock().unwrap_or_else(|p| p.into_inner());
    for (agent, poison) in live.iter() {
        if *agent == event.fault_agent
            && let Some(p) = poison.upgrade()
        {
            p.record(
                DeviceError::Lost {
                    reason: reason.clone(),
                },
                Some("reported by the HSA system event handler"),
            );
        }
    }
    hsa::STATUS_SUCCESS
}

/// The queue's error callback; `data` is the context's poison cell.
pub(crate) unsafe extern "C" fn on_queue_error(
    status: Status,
    _queue: *mut hsa::Queue,
    data: *mut std::ffi::c_void,
) {
    // SAFETY: `data` is `Arc::as_ptr` of the poison cell the context holds until the queue is
    // destroyed (or leaks with it).
    let Some(poison) = (unsafe { data.cast::<PoisonCell>().as_ref() }) else {
        return;
    };
    let text = match hsa::hsa() {
        Ok(h) => h.status_text(status),
        Err(_) => format!("HSA status {status:#x}"),
    };
    poison.record(
        DeviceError::Lost {
            reason: format!("the HSA queue reported an error: {text}"),
        },
        Some("reported by the queue's error callback"),
    );
}

/// The typed error for a failed wait: a kernel fault when a check recorded its code (or the
/// queue reported an exception) and the work in flight names a suspect, else `lost` as it is.
pub(crate) fn classify(lost: DeviceError, in_flight: &InFlight, check: Option<u32>) -> DeviceError {
    // The status text ends in its code (`hsa::Hsa::status_text`).
    let code = format!("{:#x}", hsa::STATUS_ERROR_EXCEPTION);
    let exception = matches!(&lost, DeviceError::Lost { reason } if reason.contains(&code));
    match in_flight.suspect() {
        Some(kernel) if check.is_some() || exception => DeviceError::KernelFault {
            kernel,
            code: check.unwrap_or(0),
        },
        Some(kernel) => match lost {
            DeviceError::Lost { reason } => DeviceError::Lost {
                reason: format!("{reason} (in flight: {kernel})"),
            },
            other => other,
        },
        None => lost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_check_or_an_exception_is_a_kernel_fault() {
        let mut f = InFlight::default();
        let lost = || DeviceError::Lost {
            reason: "the HSA queue reported an error: HSA_STATUS_ERROR_EXCEPTION (0x1016)".into(),
        };
        assert!(matches!(
            classify(lost(), &f, Some(3)),
            DeviceError::Lost { .. }
        ));
        f.push("rms_norm".into());
        assert_eq!(
            classify(lost(), &f, Some(3)),
            DeviceError::KernelFault {
                kernel: "rms_norm".into(),
                code: 3
            }
        );
        assert_eq!(
            classify(lost(), &f, None),
            DeviceError::KernelFault {
                kernel: "rms_norm".into(),
                code: 0
            }
        );
        let other = classify(
            DeviceError::Lost {
                reason: "GPU memory fault at 0x10".into(),
            },
            &f,
            None,
        );
        match other {
            DeviceError::Lost { reason } => {
                assert!(reason.contains("in flight: rms_norm"), "{reason}")
            }
            e => panic!("expected Lost, got {e:?}"),
        }
    }

    #[test]
    fn memory_fault_reasons_are_named() {
        assert_eq!(fault_reasons(1), "page not present");
        assert_eq!(
            fault_reasons(0b11),
            "page not present, write to a read-only page"
        );
        assert_eq!(fault_reasons(1 << 20), "reason bits 0x100000");
    }

    #[test]
    fn the_queue_callback_poisons_its_cell() {
        let p = Arc::new(PoisonCell::default());
        // SAFETY: the pointer is a live cell; the queue argument is not read.
        unsafe {
            on_queue_error(
                hsa::STATUS_ERROR_EXCEPTION,
                std::ptr::null_mut(),
                Arc::as_ptr(&p).cast_mut().cast(),
            )
        };
        assert!(p.is_poisoned());
        assert!(matches!(p.check(), Err(DeviceError::Poisoned { .. })));
    }
}
