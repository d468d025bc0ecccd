//! One launch: checking it against the kernel and the device, and building its bind group.

use std::num::NonZeroU64;

use poot_executor::{DeviceError, Launch};

use crate::device::WgpuDevice;
use crate::fault::{SLOT_BYTES, SlotBinding};
use crate::kernel::WgpuKernel;

/// A launch the engine should never have made (a planner or engine bug). Nothing is
/// submitted; the device refuses further work, as for any error `DeviceError::poisons`.
fn invalid(kernel: &WgpuKernel, what: String) -> DeviceError {
    DeviceError::Lost {
        reason: format!("invalid launch of `{}`: {what}", kernel.name()),
    }
}

/// Checks the argument count, the grid against the per-dimension limit, and that no buffer is
/// bound both read-only and read-write (wgpu refuses that usage conflict).
pub(crate) fn check(
    launch: &Launch<'_, WgpuDevice>,
    max_groups_per_dim: u32,
) -> Result<(), DeviceError> {
    let kernel = launch.kernel;
    let params = kernel.params();
    if launch.args.len() != params.len() {
        return Err(invalid(
            kernel,
            format!(
                "{} buffers for {} parameters",
                launch.args.len(),
                params.len()
            ),
        ));
    }
    if let Some(axis) = launch.grid.iter().position(|&g| g > max_groups_per_dim) {
        return Err(invalid(
            kernel,
            format!(
                "grid {:?} has {} workgroups along axis {axis}, the device allows {max_groups_per_dim}",
                launch.grid, launch.grid[axis]
            ),
        ));
    }
    for (i, a) in launch.args.iter().enumerate() {
        for (j, b) in launch.args.iter().enumerate().skip(i + 1) {
            if a.buffer == b.buffer && params[i] != params[j] {
                return Err(invalid(
                    kernel,
                    format!(
                        "one buffer is parameter {i} ({:?}) and parameter {j} ({:?})",
                        params[i], params[j]
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The bind group of one launch: each argument bound whole at its parameter's index, and the
/// fault words (one slot at its offset) at the kernel's fault binding.
pub(crate) fn bind_group(
    device: &wgpu::Device,
    launch: &Launch<'_, WgpuDevice>,
    fault: Option<&SlotBinding>,
) -> wgpu::BindGroup {
    let kernel = launch.kernel;
    let mut entries: Vec<wgpu::BindGroupEntry<'_>> = launch
        .args
        .iter()
        .zip(0u32..)
        .map(|(arg, binding)| wgpu::BindGroupEntry {
            binding,
            resource: arg.buffer.as_entire_binding(),
        })
        .collect();
    if let (Some(binding), Some(slot)) = (kernel.pipeline.fault_binding, fault) {
        entries.push(wgpu::BindGroupEntry {
            binding,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &slot.buffer,
                offset: slot.offset,
                size: NonZeroU64::new(SLOT_BYTES),
            }),
        });
    }
    device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some(kernel.name()),
        layout: &kernel.pipeline.layout,
        entries: &entries,
    })
}
