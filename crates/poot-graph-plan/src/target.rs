//! A target: the backend a plan is for and the device limits it must respect. Presets describe
//! typical devices so plans can be made (and refusals reported) with no device attached; a device
//! that is attached reports its own limits.

use std::fmt;

/// The backends kernels are rendered for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// NVIDIA, CUDA C compiled to PTX at run time.
    Ptx,
    /// wgpu over Vulkan, WGSL.
    Wgpu,
    /// Raw Vulkan, SPIR-V from the same WGSL.
    Vulkan,
    /// AMD over HSA.
    Rocm,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Ptx => "ptx",
            Backend::Wgpu => "wgpu",
            Backend::Vulkan => "vulkan",
            Backend::Rocm => "rocm",
        })
    }
}

/// Everything the planner reads about a device, in one place.
#[derive(Clone, Debug, PartialEq)]
pub struct TargetLimits {
    /// The largest buffer one kernel may bind (one allocation, or one binding range).
    pub max_buffer_bytes: u64,
    /// Workgroups along x, and along y and z.
    pub max_groups_x: u32,
    pub max_groups_yz: u32,
    pub max_workgroup_threads: u32,
    pub max_shared_bytes: u32,
    /// Storage buffers one kernel may bind.
    pub max_bindings: u32,
    pub subgroup_size: u32,
    /// Device memory a plan's buffers may take in all, when known.
    pub memory_bytes: Option<u64>,
    /// Ranks of the tensor-parallel group the device is one rank of (1 for a device alone).
    /// A collective over any other number of ranks is refused.
    pub group_ranks: usize,
}

/// A backend and its device's limits.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    pub backend: Backend,
    pub limits: TargetLimits,
}

impl Target {
    /// An NVIDIA data-center GPU (H200 class).
    pub fn ptx_preset() -> Target {
        Target {
            backend: Backend::Ptx,
            limits: TargetLimits {
                max_buffer_bytes: 80 << 30,
                max_groups_x: i32::MAX as u32,
                max_groups_yz: 65535,
                max_workgroup_threads: 1024,
                max_shared_bytes: 48 << 10,
                max_bindings: u32::MAX,
                subgroup_size: 32,
                // What an H200 reports as usable (of its 141 GB).
                memory_bytes: Some(139 << 30),
                group_ranks: 1,
            },
        }
    }

    /// A desktop Vulkan driver through wgpu (RADV's largest binding).
    pub fn wgpu_preset() -> Target {
        Target {
            backend: Backend::Wgpu,
            limits: TargetLimits {
                max_buffer_bytes: 1_342_177_280,
                max_groups_x: 65535,
                max_groups_yz: 65535,
                max_workgroup_threads: 1024,
                max_shared_bytes: 32 << 10,
                max_bindings: 16,
                subgroup_size: 32,
                // A 16 GiB desktop card.
                memory_bytes: Some(16 << 30),
                group_ranks: 1,
            },
        }
    }

    /// Mesa's software Vulkan (lavapipe), as CI runs it.
    pub fn lavapipe_preset() -> Target {
        let mut t = Target::wgpu_preset();
        t.limits.max_buffer_bytes = 128 << 20;
        t.limits.subgroup_size = 8;
        // The one heap Mesa 22's lavapipe reports (it allocates from host memory).
        t.limits.memory_bytes = Some(2 << 30);
        t
    }

    /// This target as rank of a tensor-parallel group of `ranks` (each rank plans against its
    /// own device's limits).
    pub fn in_group(mut self, ranks: usize) -> Target {
        self.limits.group_ranks = ranks;
        self
    }
}
