//! The poison of a device whose failures surface asynchronously (PTX, ROCm): the first failure,
//! kept so that every later call refuses without touching the device.

use std::sync::OnceLock;

use crate::error::DeviceError;

/// The first failure of a device; set once, never cleared.
#[derive(Debug)]
struct Poison {
    /// The report every later call returns as [`DeviceError::Poisoned`].
    first: String,
    /// Whether work may still be running on the device (a wait timed out), so nothing may be
    /// freed or destroyed.
    work_may_run: bool,
}

/// The poison cell shared by a context and everything allocated in it.
#[derive(Debug, Default)]
pub struct PoisonCell(OnceLock<Poison>);

impl PoisonCell {
    /// Refuses when poisoned.
    pub fn check(&self) -> Result<(), DeviceError> {
        match self.0.get() {
            Some(p) => Err(DeviceError::Poisoned {
                first: p.first.clone(),
            }),
            None => Ok(()),
        }
    }

    pub fn is_poisoned(&self) -> bool {
        self.0.get().is_some()
    }

    /// Whether a timed-out wait left work running: nothing of this context may be freed.
    pub fn work_may_run(&self) -> bool {
        self.0.get().is_some_and(|p| p.work_may_run)
    }

    /// Records `err` as the first failure (a later one does not replace it) and returns it;
    /// `detail` (the driver's text, who reported it) is added to the report. Whatever reaches
    /// here poisons: the driver's failure of a launch, copy or wait leaves the context or queue
    /// unusable, and after a timeout work may still run.
    pub fn record(&self, err: DeviceError, detail: Option<&str>) -> DeviceError {
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

    /// Records a failure caught on the host before anything reached the driver (a copy out of
    /// bounds): it poisons only where [`DeviceError::poisons`] says so.
    pub fn record_host(&self, err: DeviceError) -> DeviceError {
        if err.poisons() {
            self.record(err, Some("refused before reaching the device"))
        } else {
            err
        }
    }
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
        p.record(DeviceError::Timeout { seconds: 1 }, None);
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
    fn a_host_failure_that_poisons_says_so() {
        let p = PoisonCell::default();
        p.record_host(DeviceError::OutOfBounds {
            offset: 8,
            len: 8,
            size: 12,
        });
        match p.check() {
            Err(DeviceError::Poisoned { first }) => {
                assert!(
                    first.contains("refused before reaching the device"),
                    "{first}"
                )
            }
            other => panic!("expected Poisoned, got {other:?}"),
        }
    }

    #[test]
    fn timeout_marks_work_as_running() {
        let p = PoisonCell::default();
        p.record(DeviceError::Timeout { seconds: 1 }, None);
        assert!(p.is_poisoned());
        assert!(p.work_may_run());
    }
}
