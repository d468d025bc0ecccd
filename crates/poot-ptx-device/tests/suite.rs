//! The shared device suite on the first CUDA device: every case planned for it, run through the
//! generic engine and compared with the CPU oracle. Without CUDA each test reports a skip.

use poot_executor::Backend;
use poot_ptx_device::PtxDevice;

poot_executor::device_suite!(Backend::Ptx, || PtxDevice::open(0));
