//! How a [`crate::WgpuDevice`] is opened.

use std::time::Duration;

/// The environment variable that forces an adapter: a case-insensitive substring of its name
/// (`llvmpipe`, `NVIDIA`). [`WgpuOptions::adapter`] wins over it.
pub const ADAPTER_ENV: &str = "POOT_WGPU_ADAPTER";

/// The wait bound the spec sets by default: 600 seconds.
pub const DEFAULT_WAIT_TIMEOUT: Duration = Duration::from_secs(600);

/// Options for [`crate::WgpuDevice::open`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WgpuOptions {
    /// A case-insensitive substring of the adapter name to use. `None` reads [`ADAPTER_ENV`], and
    /// without it the best Vulkan adapter is taken: a discrete GPU, then an integrated one, then
    /// a virtual one, then a CPU rasterizer (lavapipe).
    pub adapter: Option<String>,
    /// The bound on every wait for the device (reads, synchronize). A wait that outlasts it
    /// fails with `DeviceError::Timeout` and poisons the device.
    pub wait_timeout: Duration,
}

impl Default for WgpuOptions {
    fn default() -> WgpuOptions {
        WgpuOptions {
            adapter: None,
            wait_timeout: DEFAULT_WAIT_TIMEOUT,
        }
    }
}

impl WgpuOptions {
    /// The adapter filter in effect: the option, else a non-empty [`ADAPTER_ENV`].
    pub(crate) fn adapter_filter(&self) -> Option<String> {
        self.adapter.clone().or_else(|| {
            std::env::var(ADAPTER_ENV)
                .ok()
                .filter(|s| !s.trim().is_empty())
        })
    }
}
