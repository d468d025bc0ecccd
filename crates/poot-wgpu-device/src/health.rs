//! Whether the device is still usable: the first poisoning failure, wherever it was observed
//! (a call's own error, the device-lost callback, the uncaptured-error handler).

use std::sync::{Arc, Mutex, MutexGuard};

use poot_executor::DeviceError;

#[derive(Debug, Default)]
struct State {
    /// The first failure that poisoned the device.
    first: Option<String>,
    /// Whether a call already returned that failure to the caller. An asynchronous failure (a
    /// lost device, an uncaptured error) is returned once as `Lost`, then as `Poisoned`.
    reported: bool,
}

/// Shared between the device and the callbacks wgpu holds.
#[derive(Clone, Debug, Default)]
pub(crate) struct Health {
    state: Arc<Mutex<State>>,
}

impl Health {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock leaves plain data behind; keep using it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Refuses work once the device is poisoned: the first caller after an asynchronous
    /// failure gets `Lost`, every later one `Poisoned`.
    pub(crate) fn check(&self) -> Result<(), DeviceError> {
        let mut s = self.lock();
        match &s.first {
            None => Ok(()),
            Some(first) if s.reported => Err(DeviceError::Poisoned {
                first: first.clone(),
            }),
            Some(first) => {
                let reason = first.clone();
                s.reported = true;
                Err(DeviceError::Lost { reason })
            }
        }
    }

    /// Records an error a call is about to return (already reported to its caller).
    pub(crate) fn poison(&self, err: &DeviceError) {
        let mut s = self.lock();
        if s.first.is_none() {
            s.first = Some(err.to_string());
            s.reported = true;
        }
    }

    /// Records a failure seen outside any call (a callback); the next call reports it.
    pub(crate) fn fail_async(&self, reason: String) {
        let mut s = self.lock();
        if s.first.is_none() {
            s.first = Some(reason);
            s.reported = false;
        }
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.lock().first.is_some()
    }
}
