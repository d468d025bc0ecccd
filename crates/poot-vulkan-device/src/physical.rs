//! What a physical device is and offers: choosing one, the features poot needs of it, the
//! limits the planner reads, and the matrix hardware it reports (`VK_KHR_cooperative_matrix`).

use std::ffi::CStr;

use ash::vk;
use poot_executor::{DeviceError, DeviceLimits};

use crate::BACKEND;

/// Storage-buffer bindings kept back from [`DeviceLimits::max_bindings`] for the fault words.
pub(crate) const RESERVED_BINDINGS: u32 = 1;

/// The oldest Vulkan poot runs on: timeline semaphores are core from 1.2.
pub(crate) const MIN_API: u32 = vk::API_VERSION_1_2;

pub(crate) fn unavailable(reason: impl Into<String>) -> DeviceError {
    DeviceError::Unavailable {
        backend: BACKEND,
        reason: reason.into(),
    }
}

/// What kind of device a physical device is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    Discrete,
    Integrated,
    Virtual,
    /// A CPU rasterizer (lavapipe).
    Cpu,
    Other,
}

impl DeviceKind {
    fn of(t: vk::PhysicalDeviceType) -> DeviceKind {
        match t {
            vk::PhysicalDeviceType::DISCRETE_GPU => DeviceKind::Discrete,
            vk::PhysicalDeviceType::INTEGRATED_GPU => DeviceKind::Integrated,
            vk::PhysicalDeviceType::VIRTUAL_GPU => DeviceKind::Virtual,
            vk::PhysicalDeviceType::CPU => DeviceKind::Cpu,
            _ => DeviceKind::Other,
        }
    }

    /// Lower is better: real GPUs first, the CPU rasterizer last.
    fn rank(self) -> u8 {
        match self {
            DeviceKind::Discrete => 0,
            DeviceKind::Integrated => 1,
            DeviceKind::Virtual => 2,
            DeviceKind::Cpu => 3,
            DeviceKind::Other => 4,
        }
    }
}

/// One matrix shape the device multiplies on its matrix units, as
/// `vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR` lists it: `A (m x k) * B (k x n) + C`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatrixShape {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    /// Component types of A, B, C and the result (`f16`, `f32`, `bf16`, `i8`, ...).
    pub a: String,
    pub b: String,
    pub c: String,
    pub result: String,
    pub saturating: bool,
    /// The scope the matrices are shared over (`subgroup`, `workgroup`, ...).
    pub scope: String,
}

/// The device's cooperative-matrix support: `VK_KHR_cooperative_matrix` offered with its
/// `cooperativeMatrix` feature (enabled on the device), and the shapes it lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CooperativeMatrix {
    pub shapes: Vec<MatrixShape>,
}

impl CooperativeMatrix {
    /// Whether some shape multiplies f16 operands into f32 sums (what a half-precision
    /// contraction needs).
    pub fn has_f16_f32(&self) -> bool {
        self.shapes
            .iter()
            .any(|s| s.a == "f16" && s.b == "f16" && s.result == "f32")
    }
}

fn component_name(t: vk::ComponentTypeKHR) -> String {
    match t {
        vk::ComponentTypeKHR::FLOAT16 => "f16".into(),
        vk::ComponentTypeKHR::FLOAT32 => "f32".into(),
        vk::ComponentTypeKHR::FLOAT64 => "f64".into(),
        vk::ComponentTypeKHR::SINT8 => "i8".into(),
        vk::ComponentTypeKHR::SINT16 => "i16".into(),
        vk::ComponentTypeKHR::SINT32 => "i32".into(),
        vk::ComponentTypeKHR::SINT64 => "i64".into(),
        vk::ComponentTypeKHR::UINT8 => "u8".into(),
        vk::ComponentTypeKHR::UINT16 => "u16".into(),
        vk::ComponentTypeKHR::UINT32 => "u32".into(),
        vk::ComponentTypeKHR::UINT64 => "u64".into(),
        // VK_COMPONENT_TYPE_BFLOAT16_KHR (VK_KHR_shader_bfloat16), newer than ash's headers.
        other if other.as_raw() == 1_000_141_000 => "bf16".into(),
        other => format!("component type {}", other.as_raw()),
    }
}

fn scope_name(s: vk::ScopeKHR) -> String {
    match s {
        vk::ScopeKHR::DEVICE => "device".into(),
        vk::ScopeKHR::WORKGROUP => "workgroup".into(),
        vk::ScopeKHR::SUBGROUP => "subgroup".into(),
        vk::ScopeKHR::QUEUE_FAMILY => "queue family".into(),
        other => format!("scope {}", other.as_raw()),
    }
}

/// What poot reads of a physical device, and what it enables on it.
pub(crate) struct Physical {
    pub(crate) handle: vk::PhysicalDevice,
    pub(crate) name: String,
    pub(crate) kind: DeviceKind,
    pub(crate) api_version: u32,
    pub(crate) driver: String,
    pub(crate) queue_family: u32,
    /// Whether the device zero-fills workgroup memory itself (Vulkan 1.3's
    /// `shaderZeroInitializeWorkgroupMemory`); otherwise the shaders do.
    pub(crate) zero_initializes_workgroup_memory: bool,
    pub(crate) cooperative_matrix: Option<CooperativeMatrix>,
    pub(crate) limits: DeviceLimits,
    pub(crate) max_group_counts: [u32; 3],
    pub(crate) min_storage_offset_alignment: u64,
}

fn c_name(chars: &[std::ffi::c_char]) -> String {
    // SAFETY: Vulkan's fixed-size name arrays are NUL-terminated within their length.
    let bytes: &[u8] = unsafe { std::slice::from_raw_parts(chars.as_ptr().cast(), chars.len()) };
    CStr::from_bytes_until_nul(bytes)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn has_extension(
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
    name: &CStr,
) -> Result<bool, DeviceError> {
    // SAFETY: `physical` was enumerated from this live instance.
    let exts = unsafe { instance.enumerate_device_extension_properties(physical) }
        .map_err(|e| unavailable(format!("listing device extensions failed: {e}")))?;
    Ok(exts
        .iter()
        .any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == name)))
}

/// Reads a physical device, or says why poot cannot run on it.
/// `api` caps the version used (the instance's).
fn read(
    entry: &ash::Entry,
    instance: &ash::Instance,
    api: u32,
    handle: vk::PhysicalDevice,
) -> Result<Physical, String> {
    // SAFETY: `handle` was enumerated from this live instance (for every query below).
    let props = unsafe { instance.get_physical_device_properties(handle) };
    let name = c_name(&props.device_name);
    let api = props.api_version.min(api);
    if api < MIN_API {
        return Err(format!(
            "{name} supports Vulkan {}.{}; poot needs 1.2 (timeline semaphores)",
            vk::api_version_major(props.api_version),
            vk::api_version_minor(props.api_version)
        ));
    }
    // SAFETY: as above.
    let families = unsafe { instance.get_physical_device_queue_family_properties(handle) };
    let queue_family = families
        .iter()
        .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
        .and_then(|i| u32::try_from(i).ok())
        .ok_or_else(|| format!("{name} has no compute queue"))?;

    let api13 = api >= vk::API_VERSION_1_3;
    let coop_ext = has_extension(instance, handle, ash::khr::cooperative_matrix::NAME)
        .map_err(|e| e.to_string())?;
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut v13 = vk::PhysicalDeviceVulkan13Features::default();
    let mut coop = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
    let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut v12);
    if api13 {
        features = features.push_next(&mut v13);
    }
    if coop_ext {
        features = features.push_next(&mut coop);
    }
    // SAFETY: as above; the chain holds only structs the device's version or extensions know.
    unsafe { instance.get_physical_device_features2(handle, &mut features) };
    let robust = features.features.robust_buffer_access == vk::TRUE;
    if !robust {
        return Err(format!(
            "{name} lacks robustBufferAccess (faulting kernels run on after a failed check)"
        ));
    }
    if v12.timeline_semaphore != vk::TRUE {
        return Err(format!("{name} lacks timeline semaphores"));
    }
    let zero_init = api13 && v13.shader_zero_initialize_workgroup_memory == vk::TRUE;

    let mut p11 = vk::PhysicalDeviceVulkan11Properties::default();
    let mut p12 = vk::PhysicalDeviceVulkan12Properties::default();
    let mut p13 = vk::PhysicalDeviceVulkan13Properties::default();
    let mut props2 = vk::PhysicalDeviceProperties2::default()
        .push_next(&mut p11)
        .push_next(&mut p12);
    if api13 {
        props2 = props2.push_next(&mut p13);
    }
    // SAFETY: as for the features.
    unsafe { instance.get_physical_device_properties2(handle, &mut props2) };
    let driver = format!(
        "{} ({})",
        c_name(&p12.driver_name),
        c_name(&p12.driver_info)
    );

    let cooperative_matrix = if coop_ext && coop.cooperative_matrix == vk::TRUE {
        let coop_instance = ash::khr::cooperative_matrix::Instance::new(entry, instance);
        // SAFETY: the extension is offered by this device of this instance.
        // SAFETY: the extension is offered by this device of this instance.
        let listed =
            unsafe { coop_instance.get_physical_device_cooperative_matrix_properties(handle) }
                .map_err(|e| format!("{name}: listing cooperative matrix shapes failed: {e}"))?;
        Some(CooperativeMatrix {
            shapes: listed
                .iter()
                .map(|p| MatrixShape {
                    m: p.m_size,
                    n: p.n_size,
                    k: p.k_size,
                    a: component_name(p.a_type),
                    b: component_name(p.b_type),
                    c: component_name(p.c_type),
                    result: component_name(p.result_type),
                    saturating: p.saturating_accumulation == vk::TRUE,
                    scope: scope_name(p.scope),
                })
                .collect(),
        })
    } else {
        None
    };

    let l = &props.limits;
    // SAFETY: as above.
    let memory = unsafe { instance.get_physical_device_memory_properties(handle) };
    let local: u64 = memory
        .memory_heaps
        .iter()
        .take(memory.memory_heap_count as usize)
        .filter(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
        .map(|h| h.size)
        .sum();
    // A kernel binds whole buffers: the largest is capped by the largest storage binding, one
    // allocation, and (from 1.3) one buffer.
    let mut max_buffer_bytes =
        u64::from(l.max_storage_buffer_range).min(p11.max_memory_allocation_size);
    if api13 {
        max_buffer_bytes = max_buffer_bytes.min(p13.max_buffer_size);
    }
    let subgroup_sizes = if api13 && p13.min_subgroup_size > 0 {
        (p13.min_subgroup_size, p13.max_subgroup_size)
    } else {
        (p11.subgroup_size, p11.subgroup_size)
    };
    let max_bindings = l
        .max_per_stage_descriptor_storage_buffers
        .min(l.max_descriptor_set_storage_buffers)
        .min(l.max_per_stage_resources)
        .saturating_sub(RESERVED_BINDINGS);
    let limits = DeviceLimits {
        name: name.clone(),
        max_buffer_bytes,
        memory_bytes: (local > 0).then_some(local),
        max_groups_x: l.max_compute_work_group_count[0],
        max_groups_yz: l.max_compute_work_group_count[1].min(l.max_compute_work_group_count[2]),
        max_workgroup_threads: l
            .max_compute_work_group_invocations
            .min(l.max_compute_work_group_size[0]),
        max_shared_bytes: l.max_compute_shared_memory_size,
        max_bindings,
        subgroup_sizes,
        // Core Vulkan does not say; the kernels plan as on wgpu.
        multiprocessors: None,
        group_ranks: 1,
        // Measured when the device opens.
        max_loop_iterations: None,
        matrix_tf32: false,
        library_gemm: false,
        library_exact: false,
        library_integer_rows: None,
    };
    Ok(Physical {
        handle,
        name,
        kind: DeviceKind::of(props.device_type),
        api_version: api,
        driver,
        queue_family,
        zero_initializes_workgroup_memory: zero_init,
        cooperative_matrix,
        limits,
        max_group_counts: l.max_compute_work_group_count,
        min_storage_offset_alignment: l.min_storage_buffer_offset_alignment,
    })
}

/// Picks the physical device: the first usable one whose name contains `filter`
/// (case-insensitive), or the best ranked usable one.
pub(crate) fn choose(
    entry: &ash::Entry,
    instance: &ash::Instance,
    api: u32,
    filter: Option<&str>,
) -> Result<Physical, DeviceError> {
    // SAFETY: the instance is alive.
    let handles = unsafe { instance.enumerate_physical_devices() }
        .map_err(|e| unavailable(format!("enumerating physical devices failed: {e}")))?;
    if handles.is_empty() {
        return Err(unavailable(
            "no Vulkan device (is a Vulkan driver such as mesa-vulkan-drivers installed?)",
        ));
    }
    let mut refused = Vec::new();
    let mut usable = Vec::new();
    for h in handles {
        match read(entry, instance, api, h) {
            Ok(p) => usable.push(p),
            Err(why) => refused.push(why),
        }
    }
    let chosen = match filter {
        Some(want) => {
            let want_lower = want.to_lowercase();
            let names: Vec<String> = usable.iter().map(|p| p.name.clone()).collect();
            let found = usable
                .into_iter()
                .find(|p| p.name.to_lowercase().contains(&want_lower));
            found.ok_or_else(|| {
                unavailable(format!(
                    "no usable Vulkan device matches `{want}`; usable: {names:?}, refused: {refused:?}"
                ))
            })?
        }
        None => usable
            .into_iter()
            .min_by_key(|p| p.kind.rank())
            .ok_or_else(|| unavailable(format!("no usable Vulkan device: {refused:?}")))?,
    };
    Ok(chosen)
}
