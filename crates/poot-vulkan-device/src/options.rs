//! How a [`crate::VulkanDevice`] is opened.

use std::time::Duration;

/// The environment variable that picks a physical device: a case-insensitive substring of its
/// name (`llvmpipe`, `NVIDIA`). [`VulkanOptions::device`] wins over it.
pub const DEVICE_ENV: &str = "POOT_VULKAN_DEVICE";

/// The wait bound the spec sets by default: 600 seconds.
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(600);

/// Options for [`crate::VulkanDevice::open`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VulkanOptions {
    /// A case-insensitive substring of the physical device's name. `None` reads [`DEVICE_ENV`],
    /// and without it the best device is taken: a discrete GPU, then an integrated one, then a
    /// virtual one, then a CPU rasterizer (lavapipe).
    pub device: Option<String>,
    /// The bound on every wait for the device (reads, synchronize). A wait that outlasts it
    /// fails with `DeviceError::Timeout` and poisons the device.
    pub wait_timeout: Duration,
}

impl Default for VulkanOptions {
    fn default() -> VulkanOptions {
        VulkanOptions {
            device: None,
            wait_timeout: DEFAULT_WAIT_TIMEOUT,
        }
    }
}

impl VulkanOptions {
    /// The device filter in effect: the option, else a non-empty [`DEVICE_ENV`].
    pub(crate) fn device_filter(&self) -> Option<String> {
        self.device.clone().or_else(|| {
            std::env::var(DEVICE_ENV)
                .ok()
                .filter(|s| !s.trim().is_empty())
        })
    }
}
