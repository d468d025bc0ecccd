//! What a device reports about itself.

use poot_graph_plan::{Backend, Target, TargetLimits, Tuning};

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
    /// Multiprocessors (compute units), where the device says.
    pub multiprocessors: Option<u32>,
    /// Ranks of the tensor-parallel group the device is one rank of (1 for a device alone).
    pub group_ranks: usize,
    /// The most loop iterations one thread may run in total, where the driver caps it
    /// (lavapipe stops every loop of a thread after 65535 iterations).
    pub max_loop_iterations: Option<u32>,
    /// Whether the device multiplies tf32 tiles on matrix units (CUDA compute capability 8.0
    /// and newer).
    pub matrix_tf32: bool,
    /// Whether the device multiplies half-precision contractions in a vendor library
    /// ([`Command::Contract`](crate::Command::Contract)).
    pub library_gemm: bool,
    /// Whether the device multiplies contractions against stored weights exactly in a library
    /// of its own ([`TargetLimits::library_exact`]).
    pub library_exact: bool,
    /// Left-side rows from which that library multiplies block-quantized weights in 8-bit
    /// integers ([`TargetLimits::library_integer_rows`]).
    pub library_integer_rows: Option<u32>,
}

impl DeviceLimits {
    /// The planner's target for this device on `backend`, with the default tuning.
    pub fn target(&self, backend: Backend) -> Target {
        Target {
            backend,
            limits: TargetLimits {
                max_buffer_bytes: self.max_buffer_bytes,
                max_groups_x: self.max_groups_x,
                max_groups_yz: self.max_groups_yz,
                max_workgroup_threads: self.max_workgroup_threads,
                max_shared_bytes: self.max_shared_bytes,
                max_bindings: self.max_bindings,
                subgroup_size: self.subgroup_sizes.1,
                multiprocessors: self.multiprocessors,
                memory_bytes: self.memory_bytes,
                group_ranks: self.group_ranks,
                matrix_tf32: self.matrix_tf32,
                library_gemm: self.library_gemm,
                library_exact: self.library_exact,
                library_integer_rows: self.library_integer_rows,
            },
            tuning: Tuning::default(),
        }
    }

    /// Refuses a grid of `grid` workgroups outside the device's counts, with the reason.
    pub fn check_grid(&self, grid: [u32; 3]) -> Result<(), String> {
        let [x, y, z] = grid;
        if (1..=self.max_groups_x).contains(&x)
            && (1..=self.max_groups_yz).contains(&y)
            && (1..=self.max_groups_yz).contains(&z)
        {
            return Ok(());
        }
        Err(format!(
            "a grid of {grid:?} workgroups; the device allows 1..={} along x and 1..={} along y and z",
            self.max_groups_x, self.max_groups_yz
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_outside_the_counts_are_refused() {
        let limits = DeviceLimits {
            name: "test".into(),
            max_buffer_bytes: 1 << 30,
            memory_bytes: None,
            max_groups_x: 100,
            max_groups_yz: 10,
            max_workgroup_threads: 256,
            max_shared_bytes: 1 << 14,
            max_bindings: 8,
            subgroup_sizes: (32, 32),
            multiprocessors: None,
            group_ranks: 1,
            max_loop_iterations: None,
            matrix_tf32: false,
            library_gemm: false,
            library_exact: false,
            library_integer_rows: None,
        };
        assert_eq!(limits.check_grid([100, 10, 10]), Ok(()));
        for grid in [[0, 1, 1], [101, 1, 1], [1, 11, 1], [1, 1, 0]] {
            assert!(limits.check_grid(grid).is_err(), "{grid:?}");
        }
        assert_eq!(
            limits.check_grid([1, 1, 11]),
            Err(
                "a grid of [1, 1, 11] workgroups; the device allows 1..=100 along x and 1..=10 \
                 along y and z"
                    .to_string()
            )
        );
    }
}
