//! From a kernel description to the WGSL shader this device translates to SPIR-V, through
//! `poot-kernel`'s WGSL renderer (the same WGSL wgpu runs).

use poot_executor::DeviceError;
use poot_kernel::render::{WgslKernel, render_wgsl};
use poot_kernel::{Access, Kernel};

use crate::kernel::WgslShader;

/// A rendered kernel with its parameter accesses in binding order.
pub(crate) struct Rendered {
    name: String,
    wgsl: WgslKernel,
    params: Vec<Access>,
}

impl Rendered {
    pub(crate) fn shader(&self) -> WgslShader<'_> {
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
pub(crate) fn render(kernel: &Kernel) -> Result<Rendered, DeviceError> {
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
    Ok(Rendered {
        name: kernel.name.clone(),
        wgsl,
        params,
    })
}
