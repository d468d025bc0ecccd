//! Compiled kernels: a WGSL compute shader translated to SPIR-V, its descriptor-set layout (the
//! buffer parameters at set 0, binding `i` in parameter order, then the fault words when the
//! kernel can fault) and its compute pipeline.

use std::sync::Arc;

use ash::vk;
use poot_executor::DeviceError;
use poot_kernel::Access;
use poot_kernel::render::WgslShader;

use crate::context::{Context, Retired};
use crate::spirv::SpirvTarget;

/// What identifies a pipeline: its shader and bindings. Kernel names do not take part, so
/// identical shaders under different names compile once.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PipelineKey {
    source: String,
    entry: String,
    params: Vec<Access>,
    fault_binding: Option<u32>,
}

impl PipelineKey {
    pub(crate) fn of(shader: &WgslShader<'_>) -> PipelineKey {
        PipelineKey {
            source: shader.source.to_owned(),
            entry: shader.entry.to_owned(),
            params: shader.params.to_vec(),
            fault_binding: shader.fault_binding,
        }
    }
}

/// A compute pipeline with the layout its descriptor sets are made against.
pub(crate) struct Pipeline {
    ctx: Arc<Context>,
    pub(crate) pipeline: vk::Pipeline,
    pub(crate) layout: vk::PipelineLayout,
    pub(crate) set_layout: vk::DescriptorSetLayout,
    module: vk::ShaderModule,
    pub(crate) params: Vec<Access>,
    pub(crate) fault_binding: Option<u32>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("pipeline", &self.pipeline)
            .field("params", &self.params)
            .field("fault_binding", &self.fault_binding)
            .finish()
    }
}

impl Pipeline {
    /// Descriptors one set of this layout holds.
    pub(crate) fn bindings(&self) -> u32 {
        self.params.len() as u32 + u32::from(self.fault_binding.is_some())
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        self.ctx.retire(Retired::Pipeline {
            pipeline: self.pipeline,
            layout: self.layout,
            set_layout: self.set_layout,
            module: self.module,
        });
    }
}

/// A compiled kernel. Cheap to clone; kernels with the same shader share one pipeline.
#[derive(Clone, Debug)]
pub struct VulkanKernel {
    pub(crate) name: Arc<str>,
    pub(crate) pipeline: Arc<Pipeline>,
}

impl VulkanKernel {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the kernel can fault, that is, binds fault words.
    pub fn can_fault(&self) -> bool {
        self.pipeline.fault_binding.is_some()
    }

    pub(crate) fn params(&self) -> &[Access] {
        &self.pipeline.params
    }
}

/// Translates the shader and builds its pipeline. A shader naga rejects, bindings that do not
/// fit the device, or a driver that fails to build the pipeline is `Compile` with the log; a
/// failure leaves nothing behind.
pub(crate) fn build_pipeline(
    ctx: &Arc<Context>,
    spirv: &SpirvTarget,
    max_bindings: u32,
    shader: &WgslShader<'_>,
) -> Result<Pipeline, DeviceError> {
    let compile_error = |log: String| DeviceError::Compile {
        kernel: shader.name.to_owned(),
        log,
    };
    let n_params = u32::try_from(shader.params.len())
        .map_err(|_| compile_error("too many parameters".to_owned()))?;
    if let Some(fault) = shader.fault_binding
        && fault < n_params
    {
        return Err(compile_error(format!(
            "fault binding {fault} collides with parameter {fault}"
        )));
    }
    let n_bindings = n_params + u32::from(shader.fault_binding.is_some());
    if n_bindings > max_bindings {
        return Err(compile_error(format!(
            "{n_bindings} storage buffers, the device allows {max_bindings} per kernel"
        )));
    }
    let words = spirv
        .translate(shader.source, shader.entry)
        .map_err(compile_error)?;
    let entry = std::ffi::CString::new(shader.entry)
        .map_err(|_| compile_error("the entry point's name holds a NUL".to_owned()))?;

    let binding = |i: u32| {
        vk::DescriptorSetLayoutBinding::default()
            .binding(i)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .descriptor_count(1)
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
    };
    let mut bindings: Vec<_> = (0..n_params).map(binding).collect();
    if let Some(fault) = shader.fault_binding {
        bindings.push(binding(fault));
    }
    let device = &ctx.device;
    let driver_error = |what: &str, e: vk::Result| compile_error(format!("{what}: {e}"));

    // Each object below is destroyed again if a later one fails; on success the pipeline owns
    // them (retired together when it drops).
    // SAFETY: the device is alive and each create info is complete and outlives its call.
    let module = unsafe {
        device.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None)
    }
    .map_err(|e| driver_error("creating the shader module", e))?;
    let set_layout = match unsafe {
        device.create_descriptor_set_layout(
            &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
            None,
        )
    } {
        Ok(l) => l,
        Err(e) => {
            // SAFETY: the module was created above and nothing uses it.
            unsafe { device.destroy_shader_module(module, None) };
            return Err(driver_error("creating the descriptor set layout", e));
        }
    };
    let set_layouts = [set_layout];
    let layout = match unsafe {
        device.create_pipeline_layout(
            &vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts),
            None,
        )
    } {
        Ok(l) => l,
        Err(e) => {
            // SAFETY: created above, unused.
            unsafe {
                device.destroy_descriptor_set_layout(set_layout, None);
                device.destroy_shader_module(module, None);
            }
            return Err(driver_error("creating the pipeline layout", e));
        }
    };
    let stage = vk::PipelineShaderStageCreateInfo::default()
        .stage(vk::ShaderStageFlags::COMPUTE)
        .module(module)
        .name(&entry);
    let info = vk::ComputePipelineCreateInfo::default()
        .stage(stage)
        .layout(layout);
    // SAFETY: the module, layout and entry name are valid for the call.
    let created =
        unsafe { device.create_compute_pipelines(vk::PipelineCache::null(), &[info], None) };
    let pipeline = match created {
        Ok(p) if p.len() == 1 => p[0],
        result => {
            // SAFETY: created above, unused; a partially returned pipeline is null or ours.
            unsafe {
                let (Ok(made) | Err((made, _))) = &result;
                for &pipe in made {
                    if pipe != vk::Pipeline::null() {
                        device.destroy_pipeline(pipe, None);
                    }
                }
                device.destroy_pipeline_layout(layout, None);
                device.destroy_descriptor_set_layout(set_layout, None);
                device.destroy_shader_module(module, None);
            }
            let why = match result {
                Err((_, e)) => e,
                Ok(_) => vk::Result::ERROR_UNKNOWN,
            };
            return Err(driver_error("creating the compute pipeline", why));
        }
    };
    Ok(Pipeline {
        ctx: Arc::clone(ctx),
        pipeline,
        layout,
        set_layout,
        module,
        params: shader.params.to_vec(),
        fault_binding: shader.fault_binding,
    })
}
