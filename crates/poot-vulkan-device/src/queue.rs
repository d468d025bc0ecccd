//! Submissions and bounded waits. Every submission signals the context's timeline semaphore
//! with the next value; a wait is `vkWaitSemaphores` on a value, bounded by the device's
//! timeout. Small work the host asks for between replays (copies in, eager launches, copies
//! out) is recorded into one open batch command buffer, which goes out ahead of the next
//! replay in the same submission, or alone when the host waits.
//!
//! Ordering: every command buffer starts with a full memory barrier (its first scope is all
//! earlier work on the queue, so each submission sees the one before), every command in it is
//! followed by one, and it ends with a barrier that makes its writes visible to the host.

use std::sync::Arc;
use std::time::Duration;

use ash::vk;
use poot_executor::DeviceError;

use crate::context::Context;

/// A failed Vulkan call on the queue: the device is unusable.
pub(crate) fn lost(what: &str, e: vk::Result) -> DeviceError {
    DeviceError::Lost {
        reason: format!("{what} failed: {e}"),
    }
}

/// Records a barrier after which every earlier write on the queue is visible to every later
/// command.
pub(crate) fn full_barrier(device: &ash::Device, cb: vk::CommandBuffer) {
    let barrier = vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
        .dst_access_mask(vk::AccessFlags::MEMORY_READ | vk::AccessFlags::MEMORY_WRITE);
    // SAFETY: `cb` is in the recording state (the callers' invariant).
    unsafe {
        device.cmd_pipeline_barrier(
            cb,
            vk::PipelineStageFlags::ALL_COMMANDS,
            vk::PipelineStageFlags::ALL_COMMANDS,
            vk::DependencyFlags::empty(),
            &[barrier],
            &[],
            &[],
        )
    };
}

/// Records a barrier from one dispatch's shader writes to the next dispatch's accesses.
pub(crate) fn dispatch_barrier(device: &ash::Device, cb: vk::CommandBuffer) {
    let barrier = vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE)
        .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE);
    // SAFETY: `cb` is in the recording state (the callers' invariant).
    unsafe {
        device.cmd_pipeline_barrier(
            cb,
            vk::PipelineStageFlags::COMPUTE_SHADER,
            vk::PipelineStageFlags::COMPUTE_SHADER,
            vk::DependencyFlags::empty(),
            &[barrier],
            &[],
            &[],
        )
    };
}

/// Records the barrier that ends a command buffer: its writes become visible to the host once
/// the submission's timeline value is reached.
pub(crate) fn host_barrier(device: &ash::Device, cb: vk::CommandBuffer) {
    let barrier = vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
        .dst_access_mask(vk::AccessFlags::HOST_READ | vk::AccessFlags::HOST_WRITE);
    // SAFETY: `cb` is in the recording state (the callers' invariant).
    unsafe {
        device.cmd_pipeline_barrier(
            cb,
            vk::PipelineStageFlags::ALL_COMMANDS,
            vk::PipelineStageFlags::HOST,
            vk::DependencyFlags::empty(),
            &[barrier],
            &[],
            &[],
        )
    };
}

pub(crate) struct Queue {
    ctx: Arc<Context>,
    raw: vk::Queue,
    pub(crate) family: u32,
    /// The pool of batch command buffers (each reset on its own before reuse).
    pool: vk::CommandPool,
    open: Option<vk::CommandBuffer>,
    spare: Vec<vk::CommandBuffer>,
    in_flight: Vec<(u64, vk::CommandBuffer)>,
    /// The highest timeline value a wait has seen reached.
    completed: u64,
}

impl Queue {
    pub(crate) fn new(ctx: &Arc<Context>, family: u32) -> Result<Queue, DeviceError> {
        // SAFETY: the family was chosen from this device's queue families with one queue.
        let raw = unsafe { ctx.device.get_device_queue(family, 0) };
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(family)
            .flags(
                vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER
                    | vk::CommandPoolCreateFlags::TRANSIENT,
            );
        // SAFETY: the device is alive; the info is complete.
        let pool = unsafe { ctx.device.create_command_pool(&info, None) }
            .map_err(|e| lost("creating a command pool", e))?;
        Ok(Queue {
            ctx: Arc::clone(ctx),
            raw,
            family,
            pool,
            open: None,
            spare: Vec::new(),
            in_flight: Vec::new(),
            completed: 0,
        })
    }

    /// The timeline value of the latest submission.
    pub(crate) fn submitted(&self) -> u64 {
        self.ctx.submitted()
    }

    /// The highest timeline value seen reached.
    pub(crate) fn completed(&self) -> u64 {
        self.completed
    }

    /// Whether the open batch holds commands not yet submitted.
    pub(crate) fn has_open_batch(&self) -> bool {
        self.open.is_some()
    }

    /// The open batch command buffer, begun (with its leading barrier) if none is open.
    /// Record one command into it, then call [`Queue::after_command`].
    pub(crate) fn batch(&mut self) -> Result<vk::CommandBuffer, DeviceError> {
        if let Some(cb) = self.open {
            return Ok(cb);
        }
        let device = &self.ctx.device;
        let cb = match self.spare.pop() {
            Some(cb) => cb,
            None => {
                let info = vk::CommandBufferAllocateInfo::default()
                    .command_pool(self.pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1);
                // SAFETY: the pool belongs to this device and only this queue uses it.
                let cbs = unsafe { device.allocate_command_buffers(&info) }
                    .map_err(|e| lost("allocating a command buffer", e))?;
                cbs.into_iter().next().ok_or_else(|| DeviceError::Lost {
                    reason: "the driver allocated no command buffer".to_owned(),
                })?
            }
        };
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: `cb` is spare: never used, or reset after its submission completed.
        unsafe { device.begin_command_buffer(cb, &begin) }
            .map_err(|e| lost("beginning a command buffer", e))?;
        full_barrier(device, cb);
        self.open = Some(cb);
        Ok(cb)
    }

    /// Orders the command just recorded into the batch before the next one.
    pub(crate) fn after_command(&self, cb: vk::CommandBuffer) {
        full_barrier(&self.ctx.device, cb);
    }

    /// Submits the open batch, then `recorded` (a recording's command buffer), as one
    /// submission signalling the next timeline value, which it returns. With neither, submits
    /// nothing and returns the latest value.
    pub(crate) fn submit(
        &mut self,
        recorded: Option<vk::CommandBuffer>,
    ) -> Result<u64, DeviceError> {
        let device = &self.ctx.device;
        let mut cbs = Vec::with_capacity(2);
        if let Some(cb) = self.open.take() {
            host_barrier(device, cb);
            // SAFETY: `cb` is the open batch, in the recording state.
            let ended = unsafe { device.end_command_buffer(cb) };
            // Whatever happens next, the buffer is reset before reuse.
            self.in_flight.push((self.submitted() + 1, cb));
            ended.map_err(|e| lost("ending a command buffer", e))?;
            cbs.push(cb);
        }
        cbs.extend(recorded);
        if cbs.is_empty() {
            return Ok(self.submitted());
        }
        let value = self.submitted() + 1;
        let values = [value];
        let semaphores = [self.ctx.timeline];
        let mut timeline =
            vk::TimelineSemaphoreSubmitInfo::default().signal_semaphore_values(&values);
        let submit = vk::SubmitInfo::default()
            .command_buffers(&cbs)
            .signal_semaphores(&semaphores)
            .push_next(&mut timeline);
        // SAFETY: the queue is used only through `&mut self`; every command buffer is
        // executable (ended batch, ended recording with simultaneous use) and references live
        // objects (retired objects wait for this value).
        unsafe { device.queue_submit(self.raw, &[submit], vk::Fence::null()) }
            .map_err(|e| lost("vkQueueSubmit", e))?;
        self.ctx.set_submitted(value);
        Ok(value)
    }

    /// Waits until the timeline reaches `value`, at most `timeout`: past it `Timeout`, a
    /// device loss or other failure `Lost`. Then recycles the batch command buffers and
    /// destroys the retired objects that work no longer uses.
    pub(crate) fn wait(&mut self, value: u64, timeout: Duration) -> Result<(), DeviceError> {
        if value > self.completed {
            let values = [value];
            let semaphores = [self.ctx.timeline];
            let info = vk::SemaphoreWaitInfo::default()
                .semaphores(&semaphores)
                .values(&values);
            let timeout_ns = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
            // SAFETY: the semaphore belongs to this live device.
            match unsafe { self.ctx.device.wait_semaphores(&info, timeout_ns) } {
                Ok(()) => {}
                Err(vk::Result::TIMEOUT) => {
                    return Err(DeviceError::Timeout {
                        seconds: timeout.as_secs(),
                    });
                }
                Err(e) => return Err(lost("waiting for the timeline semaphore", e)),
            }
            self.completed = value;
        }
        let completed = self.completed;
        let device = &self.ctx.device;
        let mut still = Vec::with_capacity(self.in_flight.len());
        for (at, cb) in self.in_flight.drain(..) {
            if at <= completed {
                // SAFETY: its submission completed; the pool allows resetting one buffer.
                if unsafe { device.reset_command_buffer(cb, vk::CommandBufferResetFlags::empty()) }
                    .is_ok()
                {
                    self.spare.push(cb);
                }
            } else {
                still.push((at, cb));
            }
        }
        self.in_flight = still;
        self.ctx.collect(completed);
        Ok(())
    }

    /// Submits the open batch and waits (bounded) for everything submitted.
    pub(crate) fn finish(&mut self, timeout: Duration) -> Result<(), DeviceError> {
        let value = self.submit(None)?;
        self.wait(value, timeout)
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        self.ctx
            .retire(crate::context::Retired::CommandPool(self.pool));
    }
}
