//! Recordings: a prepared step's launches recorded once into one command buffer (pipeline bind,
//! descriptor-set bind, dispatch, a barrier between dispatches), with every descriptor set
//! written once, and resubmitted verbatim on every replay. The host rewrites the contents of
//! the bound buffers (slots) between replays; their addresses never change.

use std::sync::Arc;

use ash::vk;
use poot_executor::{DeviceError, Launch};

use crate::buffer::RawBuffer;
use crate::context::{Context, Retired};
use crate::device::VulkanDevice;
use crate::fault::{FaultLog, FaultSlots};
use crate::kernel::Pipeline;
use crate::launch;
use crate::queue::{dispatch_barrier, full_barrier, host_barrier, lost};

/// A recorded sequence of launches: one command buffer, submitted as it is on every replay.
pub struct VulkanRecording {
    ctx: Arc<Context>,
    command_pool: vk::CommandPool,
    pub(crate) command_buffer: vk::CommandBuffer,
    descriptor_pool: vk::DescriptorPool,
    /// The fault words of the faulting dispatches, `None` when no kernel can fault.
    pub(crate) faults: Option<Arc<FaultSlots>>,
    dispatches: usize,
    /// What the command buffer references, kept alive with it.
    _pipelines: Vec<Arc<Pipeline>>,
    _buffers: Vec<Arc<RawBuffer>>,
}

impl std::fmt::Debug for VulkanRecording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanRecording")
            .field("dispatches", &self.dispatches)
            .field("faults", &self.faults.is_some())
            .finish()
    }
}

impl VulkanRecording {
    /// Dispatches per replay.
    pub fn len(&self) -> usize {
        self.dispatches
    }

    pub fn is_empty(&self) -> bool {
        self.dispatches == 0
    }
}

impl Drop for VulkanRecording {
    fn drop(&mut self) {
        // Null handles (a recording that failed half-way) are valid to destroy.
        self.ctx.retire(Retired::CommandPool(self.command_pool));
        self.ctx
            .retire(Retired::DescriptorPool(self.descriptor_pool));
    }
}

/// Records `launches` (already checked) into a new command buffer of the queue family. A
/// failure destroys what was made so far.
pub(crate) fn record(
    ctx: &Arc<Context>,
    queue_family: u32,
    faults: &FaultLog,
    launches: &[Launch<'_, VulkanDevice>],
) -> Result<VulkanRecording, DeviceError> {
    let device = &ctx.device;
    let faulting: Vec<Arc<str>> = launches
        .iter()
        .filter(|l| l.kernel.can_fault())
        .map(|l| Arc::clone(&l.kernel.name))
        .collect();
    let mut rec = VulkanRecording {
        ctx: Arc::clone(ctx),
        command_pool: vk::CommandPool::null(),
        command_buffer: vk::CommandBuffer::null(),
        descriptor_pool: vk::DescriptorPool::null(),
        faults: None,
        dispatches: launches.len(),
        _pipelines: launches
            .iter()
            .map(|l| Arc::clone(&l.kernel.pipeline))
            .collect(),
        _buffers: launches
            .iter()
            .flat_map(|l| l.args.iter().map(|b| Arc::clone(&b.inner)))
            .collect(),
    };
    if !faulting.is_empty() {
        rec.faults = Some(faults.new_slots(ctx, faulting)?);
    }
    let descriptors: u32 = launches.iter().map(|l| l.kernel.pipeline.bindings()).sum();
    let sets = u32::try_from(launches.len()).map_err(|_| DeviceError::BadLaunch {
        kernel: "record".to_owned(),
        reason: format!("{} launches in one recording", launches.len()),
    })?;
    rec.descriptor_pool = launch::create_pool(device, sets, descriptors)?;

    let pool_info = vk::CommandPoolCreateInfo::default().queue_family_index(queue_family);
    // SAFETY: the device is alive; the info is complete.
    rec.command_pool = unsafe { device.create_command_pool(&pool_info, None) }
        .map_err(|e| lost("creating a command pool", e))?;
    let alloc = vk::CommandBufferAllocateInfo::default()
        .command_pool(rec.command_pool)
        .level(vk::CommandBufferLevel::PRIMARY)
        .command_buffer_count(1);
    // SAFETY: the pool was just made and only this recording uses it.
    let cb = unsafe { device.allocate_command_buffers(&alloc) }
        .map_err(|e| lost("allocating a command buffer", e))?
        .into_iter()
        .next()
        .ok_or_else(|| DeviceError::Lost {
            reason: "the driver allocated no command buffer".to_owned(),
        })?;
    rec.command_buffer = cb;

    // Replays may be submitted while an earlier replay is still pending.
    let begin =
        vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE);
    // SAFETY: a new command buffer in the initial state.
    unsafe { device.begin_command_buffer(cb, &begin) }
        .map_err(|e| lost("beginning a command buffer", e))?;
    full_barrier(device, cb);
    let mut next_slot = 0;
    for (i, l) in launches.iter().enumerate() {
        let set = launch::allocate_set(device, rec.descriptor_pool, l.kernel.pipeline.set_layout)?;
        let slot = match &rec.faults {
            Some(slots) if l.kernel.can_fault() => {
                next_slot += 1;
                Some(FaultLog::slot_binding(slots, next_slot - 1))
            }
            _ => None,
        };
        launch::write_set(device, set, l, slot);
        if i > 0 {
            dispatch_barrier(device, cb);
        }
        launch::record_dispatch(device, cb, l, set);
    }
    host_barrier(device, cb);
    // SAFETY: `cb` is recording.
    unsafe { device.end_command_buffer(cb) }.map_err(|e| lost("ending a command buffer", e))?;
    Ok(rec)
}
