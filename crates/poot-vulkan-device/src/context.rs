//! The Vulkan objects every part of the device shares: the loaded library, the instance, the
//! logical device, the timeline semaphore every submission signals, the memory allocator, and
//! the objects waiting to be destroyed until the work that may use them has finished.
//!
//! Buffers, kernels and recordings hold the context and hand their objects back to it when
//! dropped ([`Context::retire`]); the device destroys them once the timeline shows the next
//! submission (the latest that may reference them) complete. Once the device is poisoned
//! nothing is destroyed any more: pending work may still reference it, so it is leaked.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use ash::vk;
use gpu_allocator::MemoryLocation;
use gpu_allocator::vulkan::{
    Allocation, AllocationCreateDesc, AllocationScheme, Allocator, AllocatorCreateDesc,
};
use poot_executor::DeviceError;

/// An object whose destruction waits for the work that may use it.
pub(crate) enum Retired {
    Buffer {
        buffer: vk::Buffer,
        allocation: Allocation,
    },
    DescriptorPool(vk::DescriptorPool),
    /// Frees its command buffers with it.
    CommandPool(vk::CommandPool),
    Pipeline {
        pipeline: vk::Pipeline,
        layout: vk::PipelineLayout,
        set_layout: vk::DescriptorSetLayout,
        module: vk::ShaderModule,
    },
}

/// Locks `m`, keeping the data of a lock a panicking thread held (plain bookkeeping).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub(crate) struct Context {
    /// Keeps the Vulkan library loaded while the instance lives.
    _entry: ash::Entry,
    pub(crate) instance: ash::Instance,
    pub(crate) device: ash::Device,
    /// Signalled with an increasing value by every submission.
    pub(crate) timeline: vk::Semaphore,
    allocator: Mutex<Option<Allocator>>,
    retired: Mutex<Vec<(u64, Retired)>>,
    /// The timeline value of the latest submission.
    submitted: AtomicU64,
    poisoned: AtomicBool,
    /// The bound on the wait for outstanding work when the context is dropped.
    wait_timeout: Duration,
}

impl Context {
    /// Takes ownership of a created device and its timeline semaphore and makes the allocator.
    /// On failure the objects are destroyed again.
    pub(crate) fn new(
        entry: ash::Entry,
        instance: ash::Instance,
        physical: vk::PhysicalDevice,
        device: ash::Device,
        timeline: vk::Semaphore,
        wait_timeout: Duration,
    ) -> Result<Context, DeviceError> {
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: instance.clone(),
            device: device.clone(),
            physical_device: physical,
            debug_settings: Default::default(),
            buffer_device_address: false,
            allocation_sizes: Default::default(),
        });
        let ctx = Context {
            _entry: entry,
            instance,
            device,
            timeline,
            allocator: Mutex::new(None),
            retired: Mutex::new(Vec::new()),
            submitted: AtomicU64::new(0),
            poisoned: AtomicBool::new(false),
            wait_timeout,
        };
        match allocator {
            Ok(a) => {
                *lock(&ctx.allocator) = Some(a);
                Ok(ctx)
            }
            // Dropping `ctx` destroys the device and instance.
            Err(e) => Err(DeviceError::Unavailable {
                backend: crate::BACKEND,
                reason: format!("creating the memory allocator failed: {e}"),
            }),
        }
    }

    /// The timeline value of the latest submission.
    pub(crate) fn submitted(&self) -> u64 {
        self.submitted.load(Ordering::Acquire)
    }

    /// Records that the submission signalling `value` was made.
    pub(crate) fn set_submitted(&self, value: u64) {
        self.submitted.store(value, Ordering::Release);
    }

    pub(crate) fn poison(&self) {
        self.poisoned.store(true, Ordering::Release);
    }

    fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// A buffer of `bytes` (at least one word) with `usage`, bound to memory at `location`
    /// (mapped for the host ones). Out of memory is `OutOfMemory`; nothing leaks on failure.
    pub(crate) fn create_buffer(
        &self,
        name: &str,
        bytes: u64,
        usage: vk::BufferUsageFlags,
        location: MemoryLocation,
    ) -> Result<(vk::Buffer, Allocation), DeviceError> {
        let oom = || DeviceError::OutOfMemory { bytes };
        let info = vk::BufferCreateInfo::default()
            .size(bytes.max(4).next_multiple_of(4))
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        // SAFETY: the device is alive (we hold it) and the create info is complete.
        let buffer = unsafe { self.device.create_buffer(&info, None) }.map_err(|_| oom())?;
        // SAFETY: `buffer` was just created on this device.
        let requirements = unsafe { self.device.get_buffer_memory_requirements(buffer) };
        let allocated = lock(&self.allocator)
            .as_mut()
            .ok_or_else(oom)
            .and_then(|a| {
                a.allocate(&AllocationCreateDesc {
                    name,
                    requirements,
                    location,
                    linear: true,
                    allocation_scheme: AllocationScheme::GpuAllocatorManaged,
                })
                .map_err(|_| oom())
            });
        let allocation = match allocated {
            Ok(a) => a,
            Err(e) => {
                // SAFETY: the buffer is unused and unbound.
                unsafe { self.device.destroy_buffer(buffer, None) };
                return Err(e);
            }
        };
        // SAFETY: the allocation fits the buffer's requirements and is not bound elsewhere.
        let bound = unsafe {
            self.device
                .bind_buffer_memory(buffer, allocation.memory(), allocation.offset())
        };
        if bound.is_err() {
            self.destroy(Retired::Buffer { buffer, allocation });
            return Err(oom());
        }
        Ok((buffer, allocation))
    }

    /// Hands an object back for destruction after the next submission completes (the latest
    /// one that may reference it: the device's open batch goes out with it).
    pub(crate) fn retire(&self, object: Retired) {
        lock(&self.retired).push((self.submitted() + 1, object));
    }

    /// Destroys the retired objects whose work has finished (`completed` is the timeline
    /// value the device last saw reached). Nothing is destroyed once the device is poisoned.
    pub(crate) fn collect(&self, completed: u64) {
        if self.is_poisoned() {
            return;
        }
        let done: Vec<Retired> = {
            let mut retired = lock(&self.retired);
            let (done, kept) = std::mem::take(&mut *retired)
                .into_iter()
                .partition(|(at, _)| *at <= completed);
            *retired = kept;
            done.into_iter().map(|(_, r)| r).collect()
        };
        for r in done {
            self.destroy(r);
        }
    }

    fn destroy(&self, object: Retired) {
        // SAFETY (every arm): the object belongs to this device and no pending work uses it
        // (the caller waited for the submissions that could).
        match object {
            Retired::Buffer { buffer, allocation } => {
                unsafe { self.device.destroy_buffer(buffer, None) };
                if let Some(a) = lock(&self.allocator).as_mut() {
                    // An allocation this allocator made; a failure leaves it leaked.
                    let _ = a.free(allocation);
                }
            }
            Retired::DescriptorPool(pool) => unsafe {
                self.device.destroy_descriptor_pool(pool, None)
            },
            Retired::CommandPool(pool) => unsafe { self.device.destroy_command_pool(pool, None) },
            Retired::Pipeline {
                pipeline,
                layout,
                set_layout,
                module,
            } => unsafe {
                self.device.destroy_pipeline(pipeline, None);
                self.device.destroy_pipeline_layout(layout, None);
                self.device.destroy_descriptor_set_layout(set_layout, None);
                self.device.destroy_shader_module(module, None);
            },
        }
    }
}

/// How long dropping a poisoned context waits for the work it submitted before leaking it (a
/// timed-out kernel may still finish; a lost device fails the wait at once).
const POISONED_DROP_WAIT: Duration = Duration::from_secs(10);

impl Drop for Context {
    /// Waits (bounded: the device's timeout, or a short grace once poisoned) for every
    /// submission, then destroys everything. Work that does not finish in time is leaked with
    /// all it may reference, the device included.
    fn drop(&mut self) {
        let bound = if self.is_poisoned() {
            POISONED_DROP_WAIT
        } else {
            self.wait_timeout
        };
        let values = [self.submitted()];
        let semaphores = [self.timeline];
        let wait = vk::SemaphoreWaitInfo::default()
            .semaphores(&semaphores)
            .values(&values);
        let timeout_ns = u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX);
        // SAFETY: the semaphore belongs to this device, which is alive.
        if unsafe { self.device.wait_semaphores(&wait, timeout_ns) }.is_err() {
            return;
        }
        let retired = std::mem::take(&mut *lock(&self.retired));
        for (_, r) in retired {
            self.destroy(r);
        }
        // Frees the allocator's memory blocks before the device goes.
        lock(&self.allocator).take();
        // SAFETY: every submission has completed and every object made on the device has been
        // destroyed (all holders of the context are gone); the device outlives nothing.
        unsafe {
            self.device.destroy_semaphore(self.timeline, None);
            self.device.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}
