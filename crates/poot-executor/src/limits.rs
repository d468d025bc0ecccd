//! What a device reports about itself.

/// The limits a device reports; the planner's target is built from them.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceLimits {
    /// A human-readable device name (`NVIDIA H200`, `llvmpipe`).
    pub name: String,
    /// The largest single allocation.
    pub max_buffer_bytes: u64,
    /// Total device memory, when known.
    pub memory_bytes: Option<u64>,
    /// Workgroups along x, and along y and z.
    pub max_groups_x: u32,
    pub max_groups_yz: u32,
    pub max_workgroup_threads: u32,
    pub max_shared_bytes: u32,
    /// Buffers one kernel may bind (a WebGPU limit; effectively unbounded on CUDA).
    pub max_bindings: u32,
    pub subgroup_sizes: (u32, u32),
}
