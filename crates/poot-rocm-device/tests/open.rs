//! Opening the ROCm device on any machine: without ROCm (or without an AMD GPU) it is a typed
//! `Unavailable` naming what is missing, never a panic; with one, its limits are those of a
//! real GPU.

use poot_executor::{Device, DeviceError};
use poot_rocm_device::RocmDevice;

#[test]
fn open_is_unavailable_without_rocm_or_reports_sane_limits() {
    match RocmDevice::open(0) {
        Err(DeviceError::Unavailable { backend, reason }) => {
            assert_eq!(backend, "ROCm");
            assert!(!reason.is_empty());
            println!("SKIP: no ROCm device ({reason})");
        }
        Err(e) => panic!("open failed with {e}"),
        Ok(dev) => {
            let l = dev.limits();
            assert!(!l.name.is_empty());
            assert!(l.max_buffer_bytes > 0 && l.memory_bytes >= Some(l.max_buffer_bytes));
            assert!(l.max_groups_x >= 65535 && l.max_groups_yz >= 1024);
            assert!(l.max_workgroup_threads >= 256);
            assert!(l.max_shared_bytes >= 32 * 1024);
            let lanes = dev.arch().wavefront_lanes();
            assert_eq!(l.subgroup_sizes, (lanes, lanes));
            assert!(!l.matrix_tf32 && !l.library_gemm);
            assert!(dev.poisoned().is_none());
            println!(
                "opened {} ({}), hipRTC {:?}, HSA from {}",
                l.name,
                dev.arch(),
                dev.hiprtc_version(),
                dev.hsa_library()
            );
        }
    }
}

#[test]
fn a_missing_ordinal_is_unavailable() {
    match RocmDevice::open(1 << 20) {
        Err(DeviceError::Unavailable { backend, .. }) => assert_eq!(backend, "ROCm"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
}
