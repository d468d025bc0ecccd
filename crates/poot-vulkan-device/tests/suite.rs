//! The shared device suite on raw Vulkan: every case planned for the chosen device, run through
//! the generic engine, and compared with the CPU oracle (lavapipe in CI).

use poot_executor::Backend;
use poot_vulkan_device::{VulkanDevice, VulkanOptions};

poot_executor::device_suite!(Backend::Vulkan, || VulkanDevice::open(
    VulkanOptions::default()
));
