//! The shared device suite on wgpu: every case planned for the attached adapter, run through the
//! generic engine, and compared with the CPU oracle (lavapipe in CI).

use poot_executor::Backend;
use poot_wgpu_device::{WgpuDevice, WgpuOptions};

poot_executor::device_suite!(Backend::Wgpu, || WgpuDevice::open(WgpuOptions::default()));
