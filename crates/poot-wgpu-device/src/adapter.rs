//! Choosing a Vulkan adapter, opening a device on it with the adapter's own limits, and the
//! limits the planner reads.

use poot_executor::{DeviceError, DeviceLimits};

const BACKEND: &str = "wgpu/Vulkan";

/// Optional features a kernel may use, requested whenever the adapter has them.
pub(crate) const WANTED_FEATURES: wgpu::Features = wgpu::Features::SHADER_F16
    .union(wgpu::Features::SUBGROUP)
    .union(wgpu::Features::SUBGROUP_BARRIER);

/// Storage-buffer bindings kept back from [`DeviceLimits::max_bindings`] for the fault word.
pub(crate) const RESERVED_BINDINGS: u32 = 1;

fn unavailable(reason: impl Into<String>) -> DeviceError {
    DeviceError::Unavailable {
        backend: BACKEND,
        reason: reason.into(),
    }
}

/// Lower is better: real GPUs first, the CPU rasterizer (lavapipe) last.
fn rank(kind: wgpu::DeviceType) -> u8 {
    match kind {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    }
}

/// Picks the adapter: the first whose name contains `filter` (case-insensitive), or the best
/// ranked one.
pub(crate) fn choose(
    instance: &wgpu::Instance,
    filter: Option<&str>,
) -> Result<wgpu::Adapter, DeviceError> {
    let adapters: Vec<wgpu::Adapter> =
        pollster::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN))
            .into_iter()
            .filter(|a| a.get_info().backend == wgpu::Backend::Vulkan)
            .collect();
    if adapters.is_empty() {
        return Err(unavailable(
            "no Vulkan adapter (is a Vulkan driver such as mesa-vulkan-drivers installed?)",
        ));
    }
    match filter {
        Some(want) => {
            let want_lower = want.to_lowercase();
            let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
            adapters
                .into_iter()
                .find(|a| a.get_info().name.to_lowercase().contains(&want_lower))
                .ok_or_else(|| {
                    unavailable(format!(
                        "no Vulkan adapter matches `{want}`; found {names:?}"
                    ))
                })
        }
        None => adapters
            .into_iter()
            .min_by_key(|a| rank(a.get_info().device_type))
            .ok_or_else(|| unavailable("no Vulkan adapter")),
    }
}

/// Opens the device with the adapter's own limits (so large buffers work) and every wanted
/// feature the adapter has.
pub(crate) fn request_device(
    adapter: &wgpu::Adapter,
) -> Result<(wgpu::Device, wgpu::Queue), DeviceError> {
    let desc = wgpu::DeviceDescriptor {
        label: Some("poot"),
        required_features: adapter.features() & WANTED_FEATURES,
        required_limits: adapter.limits(),
        ..Default::default()
    };
    pollster::block_on(adapter.request_device(&desc)).map_err(|e| {
        unavailable(format!(
            "requesting a device on `{}` failed: {e}",
            adapter.get_info().name
        ))
    })
}

/// The device-local memory the Vulkan driver reports (the sum of its device-local heaps; host
/// memory on lavapipe), or `None` when the adapter is not a Vulkan one or reports none.
pub(crate) fn memory_bytes(adapter: &wgpu::Adapter) -> Option<u64> {
    // SAFETY: the hal adapter is only read, while `adapter` (which owns it) lives.
    let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }?;
    let instance = hal.shared_instance().raw_instance();
    // SAFETY: the physical device was enumerated from this instance, which is alive.
    let props =
        unsafe { instance.get_physical_device_memory_properties(hal.raw_physical_device()) };
    // VK_MEMORY_HEAP_DEVICE_LOCAL_BIT
    const DEVICE_LOCAL: u32 = 1;
    let local: u64 = props
        .memory_heaps
        .iter()
        .take(props.memory_heap_count as usize)
        .filter(|h| h.flags.as_raw() & DEVICE_LOCAL != 0)
        .map(|h| h.size)
        .sum();
    (local > 0).then_some(local)
}

/// The limits the planner plans against. A kernel binds whole buffers, so the largest buffer
/// is also capped by the largest storage binding; one storage binding per kernel is kept for
/// the fault word.
pub(crate) fn device_limits(info: &wgpu::AdapterInfo, limits: &wgpu::Limits) -> DeviceLimits {
    DeviceLimits {
        name: info.name.clone(),
        max_buffer_bytes: limits
            .max_buffer_size
            .min(limits.max_storage_buffer_binding_size),
        // Read apart from the wgpu limits (see `memory_bytes`).
        memory_bytes: None,
        max_groups_x: limits.max_compute_workgroups_per_dimension,
        max_groups_yz: limits.max_compute_workgroups_per_dimension,
        max_workgroup_threads: limits
            .max_compute_invocations_per_workgroup
            .min(limits.max_compute_workgroup_size_x),
        max_shared_bytes: limits.max_compute_workgroup_storage_size,
        max_bindings: limits
            .max_storage_buffers_per_shader_stage
            .saturating_sub(RESERVED_BINDINGS),
        subgroup_sizes: (info.subgroup_min_size, info.subgroup_max_size),
        // WebGPU does not say.
        multiprocessors: None,
        max_loop_iterations: None,
        group_ranks: 1,
        matrix_tf32: false,
        library_gemm: false,
        library_exact: false,
        library_integer_rows: None,
    }
}
