//! What the two WGSL devices (wgpu, and raw Vulkan through naga) share: a kernel rendered into
//! the shader they compile, and the measurement of a loop cap their drivers do not report.

use poot_kernel::render::{WgslKernel, WgslShader, render_wgsl};
use poot_kernel::{Access, Kernel};

use crate::device::{Device, Launch};
use crate::error::DeviceError;

/// A rendered kernel with its parameter accesses in binding order.
pub struct RenderedWgsl {
    name: String,
    wgsl: WgslKernel,
    params: Vec<Access>,
}

impl RenderedWgsl {
    pub fn shader(&self) -> WgslShader<'_> {
        WgslShader {
            name: &self.name,
            source: &self.wgsl.source,
            entry: &self.wgsl.entry,
            params: &self.params,
            fault_binding: self.wgsl.fault_binding,
        }
    }
}

/// Renders `kernel` (the renderer validates it first). A kernel the renderer rejects, or a
/// rendering whose bindings are not the parameters in order, is a `Compile` error (a planner
/// or renderer bug).
pub fn render_shader(kernel: &Kernel) -> Result<RenderedWgsl, DeviceError> {
    let compile_error = |log: String| DeviceError::Compile {
        kernel: kernel.name.clone(),
        log,
    };
    let wgsl = render_wgsl(kernel).map_err(|e| compile_error(e.to_string()))?;
    let in_order = wgsl.bindings.len() == kernel.params.len()
        && wgsl
            .bindings
            .iter()
            .enumerate()
            .all(|(i, b)| b.binding as usize == i && b.param.0 as usize == i);
    if !in_order {
        return Err(compile_error(format!(
            "the renderer bound the parameters out of order: {:?}",
            wgsl.bindings
        )));
    }
    let params = wgsl.bindings.iter().map(|b| b.access).collect();
    Ok(RenderedWgsl {
        name: kernel.name.clone(),
        wgsl,
        params,
    })
}

/// Iterations the loop probe asks for; a budget above this is reported as none.
pub const PROBE_ITERATIONS: u32 = 1 << 20;

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
/// when the driver stops it early. llvmpipe (lavapipe) ends every loop of an invocation once it
/// has run 65535 iterations in total, over all its loops, and says nothing: later loops run
/// once or not at all and the results are silently wrong. The planner must keep each thread's
/// total trip count under such a budget, so a WGSL device measures it when it opens, compiling
/// the probe with `compile_wgsl`.
pub fn loop_iteration_budget<D: Device>(
    device: &mut D,
    compile_wgsl: impl FnOnce(&mut D, &WgslShader<'_>) -> Result<D::Kernel, DeviceError>,
) -> Result<Option<u32>, DeviceError> {
    let params = [Access::ReadWrite];
    let kernel = compile_wgsl(
        device,
        &WgslShader {
            name: "poot_probe_loop_budget",
            source: COUNT_LOOP,
            entry: "main",
            params: &params,
            fault_binding: None,
        },
    )?;
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
