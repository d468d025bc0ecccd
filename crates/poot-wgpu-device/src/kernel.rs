//! Compiled kernels: a WGSL compute shader, its explicit bind-group layout (the buffer
//! parameters at `@group(0) @binding(i)` in parameter order, then the fault word when the kernel
//! can fault) and its compute pipeline.

use std::borrow::Cow;
use std::sync::Arc;

use poot_executor::DeviceError;
use poot_kernel::Access;
use poot_kernel::render::WgslShader;

/// A compiled kernel. Cheap to clone; kernels with the same shader share one pipeline.
#[derive(Clone, Debug)]
pub struct WgpuKernel {
    pub(crate) name: Arc<str>,
    pub(crate) pipeline: Arc<Pipeline>,
}

impl WgpuKernel {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the kernel can fault, that is, binds a fault word.
    pub fn can_fault(&self) -> bool {
        self.pipeline.fault_binding.is_some()
    }

    pub(crate) fn params(&self) -> &[Access] {
        &self.pipeline.params
    }
}

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

/// A compute pipeline with the layout its bind groups are made against.
#[derive(Debug)]
pub(crate) struct Pipeline {
    pub(crate) pipeline: wgpu::ComputePipeline,
    pub(crate) layout: wgpu::BindGroupLayout,
    pub(crate) params: Vec<Access>,
    pub(crate) fault_binding: Option<u32>,
}

fn storage_entry(binding: u32, read_only: bool) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only },
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

/// Creates the shader module (with wgpu's runtime bounds checks on: an out-of-range index
/// reads or writes inside the binding, it never touches other memory), the explicit layout and
/// the pipeline. Any validation or backend error comes back as `Compile` with wgpu's log.
pub(crate) fn build_pipeline(
    device: &wgpu::Device,
    limits: &wgpu::Limits,
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
    if n_bindings > limits.max_storage_buffers_per_shader_stage {
        return Err(compile_error(format!(
            "{n_bindings} storage buffers, the device allows {} per kernel",
            limits.max_storage_buffers_per_shader_stage
        )));
    }
    let mut entries: Vec<wgpu::BindGroupLayoutEntry> = (0..n_params)
        .zip(shader.params)
        .map(|(i, access)| storage_entry(i, *access == Access::Read))
        .collect();
    if let Some(fault) = shader.fault_binding {
        entries.push(storage_entry(fault, false));
    }

    let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
    let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some(shader.name),
        entries: &entries,
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some(shader.name),
        bind_group_layouts: &[Some(&layout)],
        immediate_size: 0,
    });
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some(shader.name),
        source: wgpu::ShaderSource::Wgsl(Cow::Borrowed(shader.source)),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(shader.name),
        layout: Some(&pipeline_layout),
        module: &module,
        entry_point: Some(shader.entry),
        compilation_options: wgpu::PipelineCompilationOptions::default(),
        cache: None,
    });
    let validation_error = pollster::block_on(validation.pop());
    let internal_error = pollster::block_on(internal.pop());
    if let Some(e) = validation_error.or(internal_error) {
        return Err(compile_error(format!(
            "{e}\n---- WGSL ----\n{}",
            shader.source
        )));
    }
    Ok(Pipeline {
        pipeline,
        layout,
        params: shader.params.to_vec(),
        fault_binding: shader.fault_binding,
    })
}
