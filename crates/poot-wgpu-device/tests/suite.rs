//! The shared device suite on wgpu: every case planned for the attached adapter, run through the
//! generic engine, and compared with the CPU oracle (lavapipe in CI).

use poot_executor::suite;
use poot_executor::{Backend, Device, Engine, Executor};
use poot_wgpu_device::{WgpuDevice, WgpuOptions};

#[test]
fn device_suite_matches_the_oracle() {
    let device = match WgpuDevice::open(WgpuOptions::default()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("SKIP: no Vulkan adapter ({e})");
            return;
        }
    };
    let target = device.limits().target(Backend::Wgpu);
    let mut engine = Engine::new(device, target);
    let mut outcomes = suite::run(&mut engine);
    outcomes.push(suite::check_copy(engine.device()));
    outcomes.push(suite::check_copy_bandwidth(&mut engine));
    for o in &outcomes[outcomes.len() - 2..] {
        println!(
            "{} {}: {}",
            if o.passed { "PASS" } else { "FAIL" },
            o.name,
            o.detail
        );
    }
    suite::assert_all_passed(&outcomes);
}

/// Tables over a lowered single-buffer limit, split into row chunks by the planner and uploaded
/// by the engine from byte ranges of the stored bytes, match the oracle.
#[test]
fn split_tables_match_the_oracle() {
    let device = match WgpuDevice::open(WgpuOptions::default()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("SKIP: no Vulkan adapter ({e})");
            return;
        }
    };
    let mut target = device.limits().target(Backend::Wgpu);
    target.limits.max_buffer_bytes = suite::SPLIT_LIMIT_BYTES;
    let mut engine = Engine::new(device, target);
    suite::assert_all_passed(&suite::run_split(&mut engine));
}

/// A step whose last slot is written while the kernels before its first reader run matches the
/// oracle, and ran as two parts.
#[test]
fn a_late_slot_is_written_between_the_two_parts_of_a_step() {
    let device = match WgpuDevice::open(WgpuOptions::default()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("SKIP: no Vulkan adapter ({e})");
            return;
        }
    };
    let target = device.limits().target(Backend::Wgpu);
    let mut engine = Engine::new(device, target);
    suite::assert_all_passed(&[suite::run_overlapped(&mut engine)]);
    assert_eq!(engine.stats().overlapped_steps, 1);
}
