//! One launch: checking it against the kernel and the device, writing its descriptor set, and
//! the descriptor pools eager launches take their sets from.

use std::sync::Arc;

use ash::vk;
use poot_executor::{DeviceError, Launch};

use crate::context::{Context, Retired};
use crate::device::VulkanDevice;
use crate::fault::{SLOT_BYTES, SlotBinding};

/// A launch refused before anything reached the device (an engine bug).
fn bad(kernel: &str, reason: String) -> DeviceError {
    DeviceError::BadLaunch {
        kernel: kernel.to_owned(),
        reason,
    }
}

/// Checks the argument count, the grid against the device's workgroup counts, and that every
/// buffer belongs to this device.
pub(crate) fn check(
    launch: &Launch<'_, VulkanDevice>,
    ctx: &Arc<Context>,
    max_group_counts: [u32; 3],
) -> Result<(), DeviceError> {
    let kernel = launch.kernel;
    let params = kernel.params();
    if launch.args.len() != params.len() {
        return Err(bad(
            kernel.name(),
            format!(
                "{} buffers for {} parameters",
                launch.args.len(),
                params.len()
            ),
        ));
    }
    if let Some(axis) = (0..3).find(|&a| launch.grid[a] > max_group_counts[a]) {
        return Err(bad(
            kernel.name(),
            format!(
                "grid {:?} has {} workgroups along axis {axis}, the device allows {}",
                launch.grid, launch.grid[axis], max_group_counts[axis]
            ),
        ));
    }
    if let Some(i) = launch.args.iter().position(|b| !b.inner.same_context(ctx)) {
        return Err(bad(
            kernel.name(),
            format!("buffer {i} belongs to another device"),
        ));
    }
    Ok(())
}

/// Points `set` at the launch's buffers (each bound whole at its parameter's index) and at its
/// fault words.
pub(crate) fn write_set(
    device: &ash::Device,
    set: vk::DescriptorSet,
    launch: &Launch<'_, VulkanDevice>,
    fault: Option<SlotBinding>,
) {
    let mut infos: Vec<[vk::DescriptorBufferInfo; 1]> = launch
        .args
        .iter()
        .map(|b| {
            [vk::DescriptorBufferInfo {
                buffer: b.raw(),
                offset: 0,
                range: vk::WHOLE_SIZE,
            }]
        })
        .collect();
    let mut bindings: Vec<u32> = (0..launch.args.len() as u32).collect();
    if let (Some(binding), Some(slot)) = (launch.kernel.pipeline.fault_binding, fault) {
        infos.push([vk::DescriptorBufferInfo {
            buffer: slot.buffer,
            offset: slot.offset,
            range: SLOT_BYTES,
        }]);
        bindings.push(binding);
    }
    let writes: Vec<vk::WriteDescriptorSet<'_>> = infos
        .iter()
        .zip(&bindings)
        .map(|(info, &binding)| {
            vk::WriteDescriptorSet::default()
                .dst_set(set)
                .dst_binding(binding)
                .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                .buffer_info(info)
        })
        .collect();
    // SAFETY: the set was allocated against the kernel's layout, which declares these bindings
    // as storage buffers; no submitted work uses the set yet.
    unsafe { device.update_descriptor_sets(&writes, &[]) };
}

/// Records one dispatch of `set` into `cb`.
pub(crate) fn record_dispatch(
    device: &ash::Device,
    cb: vk::CommandBuffer,
    launch: &Launch<'_, VulkanDevice>,
    set: vk::DescriptorSet,
) {
    let pipeline = &launch.kernel.pipeline;
    // SAFETY: `cb` is recording, and the pipeline, its layout and the set are live.
    unsafe {
        device.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, pipeline.pipeline);
        device.cmd_bind_descriptor_sets(
            cb,
            vk::PipelineBindPoint::COMPUTE,
            pipeline.layout,
            0,
            &[set],
            &[],
        );
        device.cmd_dispatch(cb, launch.grid[0], launch.grid[1], launch.grid[2]);
    }
}

/// A descriptor pool for `sets` sets of `descriptors` storage buffers in all.
pub(crate) fn create_pool(
    device: &ash::Device,
    sets: u32,
    descriptors: u32,
) -> Result<vk::DescriptorPool, DeviceError> {
    let sizes = [vk::DescriptorPoolSize {
        ty: vk::DescriptorType::STORAGE_BUFFER,
        descriptor_count: descriptors.max(1),
    }];
    let info = vk::DescriptorPoolCreateInfo::default()
        .max_sets(sets.max(1))
        .pool_sizes(&sizes);
    // SAFETY: the device is alive; the info is complete.
    unsafe { device.create_descriptor_pool(&info, None) }.map_err(|e| match e {
        vk::Result::ERROR_OUT_OF_HOST_MEMORY | vk::Result::ERROR_OUT_OF_DEVICE_MEMORY => {
            DeviceError::OutOfMemory { bytes: 0 }
        }
        e => crate::queue::lost("creating a descriptor pool", e),
    })
}

/// Allocates one set of `layout` from `pool`.
pub(crate) fn allocate_set(
    device: &ash::Device,
    pool: vk::DescriptorPool,
    layout: vk::DescriptorSetLayout,
) -> Result<vk::DescriptorSet, DeviceError> {
    let layouts = [layout];
    let info = vk::DescriptorSetAllocateInfo::default()
        .descriptor_pool(pool)
        .set_layouts(&layouts);
    // SAFETY: pool and layout are live; the callers size the pool for every set they take.
    let sets = unsafe { device.allocate_descriptor_sets(&info) }
        .map_err(|e| crate::queue::lost("allocating a descriptor set", e))?;
    sets.into_iter().next().ok_or(DeviceError::Lost {
        reason: "the driver allocated no descriptor set".to_owned(),
    })
}

const EAGER_SETS_PER_POOL: u32 = 256;
const EAGER_DESCRIPTORS_PER_POOL: u32 = 4096;

struct EagerPool {
    pool: vk::DescriptorPool,
    sets_left: u32,
    descriptors_left: u32,
    /// The timeline value of the last submission that may use one of its sets.
    last_use: u64,
}

/// The descriptor pools of eager launches: a pool is reset and reused once the work using its
/// sets has completed.
pub(crate) struct EagerSets {
    ctx: Arc<Context>,
    pools: Vec<EagerPool>,
    current: usize,
}

impl EagerSets {
    pub(crate) fn new(ctx: &Arc<Context>) -> EagerSets {
        EagerSets {
            ctx: Arc::clone(ctx),
            pools: Vec::new(),
            current: 0,
        }
    }

    /// A set of `layout` (with `bindings` descriptors) for a launch in the submission that
    /// signals `next_value`; `completed` is the timeline value known reached.
    pub(crate) fn allocate(
        &mut self,
        layout: vk::DescriptorSetLayout,
        bindings: u32,
        completed: u64,
        next_value: u64,
    ) -> Result<vk::DescriptorSet, DeviceError> {
        let fits = |p: &EagerPool| p.sets_left > 0 && p.descriptors_left >= bindings;
        if !self.pools.get(self.current).is_some_and(fits) {
            let device = &self.ctx.device;
            let reusable = self
                .pools
                .iter()
                .position(|p| p.last_use <= completed && EAGER_DESCRIPTORS_PER_POOL >= bindings);
            match reusable {
                Some(i) => {
                    let p = &mut self.pools[i];
                    // SAFETY: every submission that used the pool's sets has completed.
                    unsafe {
                        device.reset_descriptor_pool(p.pool, vk::DescriptorPoolResetFlags::empty())
                    }
                    .map_err(|e| crate::queue::lost("resetting a descriptor pool", e))?;
                    p.sets_left = EAGER_SETS_PER_POOL;
                    p.descriptors_left = EAGER_DESCRIPTORS_PER_POOL;
                    self.current = i;
                }
                None => {
                    let descriptors = EAGER_DESCRIPTORS_PER_POOL.max(bindings);
                    let pool = create_pool(device, EAGER_SETS_PER_POOL, descriptors)?;
                    self.pools.push(EagerPool {
                        pool,
                        sets_left: EAGER_SETS_PER_POOL,
                        descriptors_left: descriptors,
                        last_use: 0,
                    });
                    self.current = self.pools.len() - 1;
                }
            }
        }
        let p = &mut self.pools[self.current];
        let set = allocate_set(&self.ctx.device, p.pool, layout)?;
        p.sets_left -= 1;
        p.descriptors_left -= bindings;
        p.last_use = next_value;
        Ok(set)
    }
}

impl Drop for EagerSets {
    fn drop(&mut self) {
        for p in self.pools.drain(..) {
            self.ctx.retire(Retired::DescriptorPool(p.pool));
        }
    }
}
