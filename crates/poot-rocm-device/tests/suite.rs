//! The shared device suite on ROCm: every case planned for the opened AMD GPU, run through the
//! generic engine and compared with the CPU oracle. Skipped (with a SKIP line) where no AMD GPU
//! opens, which is every machine CI has: the first run on an AMD GPU is this test.

use poot_executor::suite;
use poot_executor::{Backend, Device, Engine};
use poot_rocm_device::RocmDevice;

#[test]
fn device_suite_matches_the_oracle() {
    let device = match RocmDevice::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("SKIP: no ROCm device ({e})");
            return;
        }
    };
    let target = device.limits().target(Backend::Rocm);
    let mut engine = Engine::new(device, target);
    let mut outcomes = suite::run(&mut engine);
    outcomes.push(suite::check_copy(engine.device()));
    outcomes.push(suite::check_copy_bandwidth(&mut engine));
    suite::assert_all_passed(&outcomes);
}

/// Tables over a lowered single-buffer limit, split into row chunks, match the oracle.
#[test]
fn split_tables_match_the_oracle() {
    let device = match RocmDevice::open(0) {
        Ok(d) => d,
        Err(e) => {
            println!("SKIP: no ROCm device ({e})");
            return;
        }
    };
    let mut target = device.limits().target(Backend::Rocm);
    target.limits.max_buffer_bytes = suite::SPLIT_LIMIT_BYTES;
    let mut engine = Engine::new(device, target);
    suite::assert_all_passed(&suite::run_split(&mut engine));
}
