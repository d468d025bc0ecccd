//! Whether the device is still usable: the first poisoning failure.

use poot_executor::DeviceError;

#[derive(Debug, Default)]
pub(crate) struct Health {
    /// The first failure that poisoned the device.
    first: Option<String>,
}

impl Health {
    /// Refuses work once the device is poisoned.
    pub(crate) fn check(&self) -> Result<(), DeviceError> {
        match &self.first {
            None => Ok(()),
            Some(first) => Err(DeviceError::Poisoned {
                first: first.clone(),
            }),
        }
    }

    /// Records the error a call is about to return.
    pub(crate) fn poison(&mut self, err: &DeviceError) {
        if self.first.is_none() {
            self.first = Some(err.to_string());
        }
    }

    pub(crate) fn is_poisoned(&self) -> bool {
        self.first.is_some()
    }
}
