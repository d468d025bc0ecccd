//! The shared device suite on the host CPU: every case planned for it, run through the generic
//! engine and compared with the CPU oracle.

use poot_cpu_device::{CpuDevice, CpuOptions};
use poot_executor::suite;
use poot_executor::{Backend, Device, Engine, Executor};

fn engine() -> Option<Engine<CpuDevice>> {
    match CpuDevice::open(CpuOptions::default()) {
        Ok(d) => {
            let target = d.limits().target(Backend::Cpu);
            Some(Engine::new(d, target))
        }
        Err(e) => {
            eprintln!("SKIP: no C compiler ({e})");
            None
        }
    }
}

#[test]
fn device_suite_matches_the_oracle() {
    let Some(mut engine) = engine() else { return };
    let mut outcomes = suite::run(&mut engine);
    outcomes.push(suite::check_copy(engine.device()));
    outcomes.push(suite::check_copy_bandwidth(&mut engine));
    suite::assert_all_passed(&outcomes);
}

/// Tables over a lowered single-buffer limit, split into row chunks by the planner, match the
/// oracle.
#[test]
fn split_tables_match_the_oracle() {
    let Ok(device) = CpuDevice::open(CpuOptions::default()) else {
        eprintln!("SKIP: no C compiler");
        return;
    };
    let mut target = device.limits().target(Backend::Cpu);
    target.limits.max_buffer_bytes = suite::SPLIT_LIMIT_BYTES;
    let mut engine = Engine::new(device, target);
    suite::assert_all_passed(&suite::run_split(&mut engine));
}

/// A step whose last slot is written while the kernels before its first reader run matches the
/// oracle, and ran as two parts.
#[test]
fn a_late_slot_is_written_between_the_two_parts_of_a_step() {
    let Some(mut engine) = engine() else { return };
    suite::assert_all_passed(&[suite::run_overlapped(&mut engine)]);
    assert_eq!(engine.stats().overlapped_steps, 1);
}
