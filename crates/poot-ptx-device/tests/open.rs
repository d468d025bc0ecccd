//! Opening the CUDA device on any machine: without CUDA it is a typed `Unavailable`, never a
//! panic; with CUDA its limits are those of a real GPU.

use poot_executor::{Device, DeviceError};
use poot_ptx_device::PtxDevice;

#[test]
fn open_is_unavailable_without_cuda_or_reports_sane_limits() {
    match PtxDevice::open(0) {
        Err(DeviceError::Unavailable { backend, reason }) => {
            assert_eq!(backend, "CUDA");
            println!("SKIP: no CUDA ({reason})");
        }
        Err(e) => panic!("open failed with {e}"),
        Ok(dev) => {
            let l = dev.limits();
            assert!(!l.name.is_empty());
            assert!(l.max_buffer_bytes > 0 && l.memory_bytes == Some(l.max_buffer_bytes));
            assert!(l.max_groups_x >= 65535 && l.max_groups_yz >= 65535);
            assert!(l.max_workgroup_threads >= 256);
            assert!(l.max_shared_bytes >= 16 * 1024);
            assert_eq!(l.max_bindings, u32::MAX);
            assert_eq!(l.subgroup_sizes, (32, 32));
            assert!(dev.poisoned().is_none());
        }
    }
}

#[test]
fn a_missing_ordinal_is_unavailable() {
    match PtxDevice::open(1 << 20) {
        Err(DeviceError::Unavailable { backend, .. }) => assert_eq!(backend, "CUDA"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[test]
fn unavailable_does_not_poison() {
    let e = DeviceError::Unavailable {
        backend: "CUDA",
        reason: String::new(),
    };
    assert!(!e.poisons());
}
