//! Measuring what a driver does not report. llvmpipe (lavapipe) ends every loop of an
//! invocation once the invocation has run 65535 loop iterations in total, over all its loops,
//! and says nothing: later loops run once or not at all and the results are silently wrong.
//! The planner must keep each thread's total trip count under such a budget, so the device
//! measures it when it opens (as the wgpu device does, on the same SPIR-V path).

use poot_executor::{Device, DeviceError, Launch};
use poot_kernel::Access;

use crate::device::VulkanDevice;
use crate::kernel::WgslShader;

/// Iterations the probe asks for; a budget above this is reported as none.
pub(crate) const PROBE_ITERATIONS: u32 = 1 << 20;

/// Counts the iterations of one loop that runs until `out[0]`.
const COUNT_LOOP: &str = r#"
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@compute @workgroup_size(1)
fn main() {
    var n = 0u;
    loop {
        if (n >= out[0]) { break; }
        n += 1u;
    }
    out[1] = n;
}
"#;

/// The loop iterations one invocation completes when asked for [`PROBE_ITERATIONS`]: `Some`
/// when the driver stops it early.
pub(crate) fn loop_iteration_budget(device: &mut VulkanDevice) -> Result<Option<u32>, DeviceError> {
    let params = [Access::ReadWrite];
    let kernel = device.compile_wgsl(&WgslShader {
        name: "poot_probe_loop_budget",
        source: COUNT_LOOP,
        entry: "main",
        params: &params,
        fault_binding: None,
    })?;
    let buffer = device.alloc(8)?;
    device.write(&buffer, 0, &PROBE_ITERATIONS.to_le_bytes())?;
    device.launch(&Launch {
        kernel: &kernel,
        grid: [1, 1, 1],
        args: &[&buffer],
    })?;
    let mut count = [0u8; 4];
    device.read(&buffer, 4, &mut count)?;
    let count = u32::from_le_bytes(count);
    Ok((count < PROBE_ITERATIONS).then_some(count))
}
