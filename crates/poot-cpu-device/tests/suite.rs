//! The shared device suite on the host CPU: every case planned for it, run through the generic
//! engine and compared with the CPU oracle.

use poot_cpu_device::{CpuDevice, CpuOptions};
use poot_executor::Backend;

poot_executor::device_suite!(Backend::Cpu, || CpuDevice::open(CpuOptions::default()));
