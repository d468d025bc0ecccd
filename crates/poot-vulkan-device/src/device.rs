//! `VulkanDevice`: poot's `Device` on raw Vulkan through ash.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ash::vk;
use gpu_allocator::MemoryLocation;
use poot_executor::wgsl::{loop_iteration_budget, render_shader};
use poot_executor::{Device, DeviceError, DeviceLimits, Launch};
use poot_kernel::Kernel;
use poot_kernel::render::WgslShader;

use crate::buffer::{RawBuffer, STORAGE_USAGE, VulkanBuffer};
use crate::context::Context;
use crate::fault::FaultLog;
use crate::health::Health;
use crate::kernel::{Pipeline, PipelineKey, VulkanKernel, build_pipeline};
use crate::launch::{self, EagerSets};
use crate::options::VulkanOptions;
use crate::physical::{
    self, CooperativeMatrix, DeviceKind, MIN_API, RESERVED_BINDINGS, unavailable,
};
use crate::queue::Queue;
use crate::recording::{self, VulkanRecording};
use crate::spirv::SpirvTarget;
use crate::staging::{MAX_READBACK_BYTES, Readback, Uploads};

/// What the device is, as the driver reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VulkanInfo {
    pub name: String,
    pub kind: DeviceKind,
    /// The Vulkan version poot uses on it (major, minor, patch): the lower of the device's and
    /// the loader's.
    pub api_version: (u32, u32, u32),
    /// The driver's name and version string (`llvmpipe (Mesa 22.3.6 ...)`).
    pub driver: String,
    /// `VK_KHR_cooperative_matrix` with its shapes, where the driver offers it (enabled on the
    /// device then); `None` where it does not (lavapipe).
    pub cooperative_matrix: Option<CooperativeMatrix>,
}

/// A raw Vulkan device.
///
/// Execution follows the spec's Vulkan row: `compile` translates a kernel's WGSL to SPIR-V and
/// builds its pipeline once; `record` writes every descriptor set once and records the launches
/// into one command buffer; `replay` resubmits that command buffer verbatim; the host rewrites
/// the bound slot buffers in place between replays; `read` and `synchronize` wait on the
/// timeline semaphore, bounded by the configured timeout.
///
/// Failures: every call first refuses work once the device is poisoned. A failed submission or
/// wait (device loss included), a wait past the timeout and every other error for which
/// `DeviceError::poisons` holds poison it, and what pending work may reference is leaked from
/// then on. A kernel fault does not: its words are reset, the faulting step's results are to be
/// discarded, and the device stays usable.
pub struct VulkanDevice {
    // Dropped in this order; each part hands its Vulkan objects to the context, which destroys
    // them (after a bounded wait for the queue) when its last holder is gone.
    pipelines: HashMap<PipelineKey, Arc<Pipeline>>,
    faults: FaultLog,
    eager_sets: EagerSets,
    uploads: Uploads,
    readback: Readback,
    queue: Queue,
    ctx: Arc<Context>,
    spirv: SpirvTarget,
    info: VulkanInfo,
    limits: DeviceLimits,
    max_group_counts: [u32; 3],
    wait_timeout: Duration,
    health: Health,
    loop_iteration_budget: Option<u32>,
}

impl std::fmt::Debug for VulkanDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VulkanDevice")
            .field("device", &self.info.name)
            .field("poisoned", &self.is_poisoned())
            .finish_non_exhaustive()
    }
}

/// Whether the device refuses further work after `e`: every error `DeviceError::poisons`
/// names except a kernel fault, which leaves the device intact.
fn poisons_here(e: &DeviceError) -> bool {
    e.poisons() && !matches!(e, DeviceError::KernelFault { .. })
}

/// The instance (Vulkan 1.2 or newer) and the chosen physical device; the instance is destroyed
/// again when no device suits.
fn instance_and_physical(
    entry: &ash::Entry,
    options: &VulkanOptions,
) -> Result<(ash::Instance, physical::Physical), DeviceError> {
    // SAFETY: the entry holds a loaded Vulkan library.
    let loader = unsafe { entry.try_enumerate_instance_version() }
        .map_err(|e| unavailable(format!("querying the Vulkan loader's version failed: {e}")))?
        .unwrap_or(vk::API_VERSION_1_0);
    if loader < MIN_API {
        return Err(unavailable(format!(
            "the Vulkan loader supports {}.{}; poot needs 1.2",
            vk::api_version_major(loader),
            vk::api_version_minor(loader)
        )));
    }
    let api = loader.min(vk::API_VERSION_1_3);
    let app = vk::ApplicationInfo::default()
        .application_name(c"poot")
        .engine_name(c"poot")
        .api_version(api);
    let info = vk::InstanceCreateInfo::default().application_info(&app);
    // SAFETY: the create info and what it points to outlive the call.
    let instance = unsafe { entry.create_instance(&info, None) }
        .map_err(|e| unavailable(format!("creating a Vulkan instance failed: {e}")))?;
    match physical::choose(entry, &instance, api, options.device_filter().as_deref()) {
        Ok(p) => Ok((instance, p)),
        Err(e) => {
            // SAFETY: nothing was created from the instance.
            unsafe { instance.destroy_instance(None) };
            Err(e)
        }
    }
}

/// Creates the logical device with one queue of the chosen family, the features poot needs
/// (robust buffer access, timeline semaphores), workgroup-memory zeroing and cooperative
/// matrices where offered, and its timeline semaphore. Destroys the instance on failure.
fn create_device(
    instance: &ash::Instance,
    p: &physical::Physical,
) -> Result<(ash::Device, vk::Semaphore), DeviceError> {
    let priorities = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(p.queue_family)
        .queue_priorities(&priorities)];
    let core = vk::PhysicalDeviceFeatures::default().robust_buffer_access(true);
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
    let mut v13 =
        vk::PhysicalDeviceVulkan13Features::default().shader_zero_initialize_workgroup_memory(true);
    let mut coop =
        vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
    let mut extensions = Vec::new();
    let mut info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .enabled_features(&core)
        .push_next(&mut v12);
    if p.zero_initializes_workgroup_memory {
        info = info.push_next(&mut v13);
    }
    if p.cooperative_matrix.is_some() {
        extensions.push(ash::khr::cooperative_matrix::NAME.as_ptr());
        info = info.push_next(&mut coop);
    }
    let info = info.enabled_extension_names(&extensions);
    // SAFETY: the physical device belongs to the instance; every enabled feature and extension
    // was checked to be offered; the info outlives the call.
    let device = match unsafe { instance.create_device(p.handle, &info, None) } {
        Ok(d) => d,
        Err(e) => {
            // SAFETY: nothing else was created from the instance.
            unsafe { instance.destroy_instance(None) };
            return Err(unavailable(format!(
                "creating a device on `{}` failed: {e}",
                p.name
            )));
        }
    };
    let mut kind = vk::SemaphoreTypeCreateInfo::default()
        .semaphore_type(vk::SemaphoreType::TIMELINE)
        .initial_value(0);
    let sem_info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
    // SAFETY: the device was just created with timeline semaphores enabled.
    match unsafe { device.create_semaphore(&sem_info, None) } {
        Ok(s) => Ok((device, s)),
        Err(e) => {
            // SAFETY: nothing else was created from the device or instance.
            unsafe {
                device.destroy_device(None);
                instance.destroy_instance(None);
            }
            Err(unavailable(format!(
                "creating a timeline semaphore failed: {e}"
            )))
        }
    }
}

impl VulkanDevice {
    /// Opens the chosen Vulkan device (Vulkan 1.2 or newer with robust buffer access), then
    /// measures its loop iteration budget with one tiny dispatch. Without a Vulkan loader or a
    /// suitable device (or one matching the filter) it returns `Unavailable`.
    pub fn open(options: VulkanOptions) -> Result<VulkanDevice, DeviceError> {
        // SAFETY: loading the system's Vulkan loader runs its initialisers, which make no
        // assumptions about this process.
        let entry = unsafe { ash::Entry::load() }
            .map_err(|e| unavailable(format!("no Vulkan loader (libvulkan.so.1): {e}")))?;
        let (instance, p) = instance_and_physical(&entry, &options)?;
        let (device, timeline) = create_device(&instance, &p)?;
        let ctx = Arc::new(Context::new(
            entry,
            instance,
            p.handle,
            device,
            timeline,
            options.wait_timeout,
        )?);
        let queue = Queue::new(&ctx, p.queue_family)?;
        let api = p.api_version;
        let info = VulkanInfo {
            name: p.name.clone(),
            kind: p.kind,
            api_version: (
                vk::api_version_major(api),
                vk::api_version_minor(api),
                vk::api_version_patch(api),
            ),
            driver: p.driver.clone(),
            cooperative_matrix: p.cooperative_matrix.clone(),
        };
        let mut opened = VulkanDevice {
            pipelines: HashMap::new(),
            faults: FaultLog::new(p.min_storage_offset_alignment),
            eager_sets: EagerSets::new(&ctx),
            uploads: Uploads::default(),
            readback: Readback::default(),
            queue,
            spirv: SpirvTarget::new(api, p.zero_initializes_workgroup_memory),
            ctx,
            info,
            limits: p.limits,
            max_group_counts: p.max_group_counts,
            wait_timeout: options.wait_timeout,
            health: Health::default(),
            loop_iteration_budget: None,
        };
        opened.loop_iteration_budget =
            loop_iteration_budget(&mut opened, VulkanDevice::compile_wgsl)?;
        opened.limits.max_loop_iterations = opened.loop_iteration_budget;
        Ok(opened)
    }

    /// What the device is, and whether it offers cooperative matrices.
    pub fn info(&self) -> &VulkanInfo {
        &self.info
    }

    /// The loop iterations one kernel invocation may run in total, over all its loops, when
    /// the driver caps it (measured at open; lavapipe: 65535). `None` when no cap showed up to
    /// 2^20 iterations.
    pub fn loop_iteration_budget(&self) -> Option<u32> {
        self.loop_iteration_budget
    }

    pub fn wait_timeout(&self) -> Duration {
        self.wait_timeout
    }

    pub fn set_wait_timeout(&mut self, timeout: Duration) {
        self.wait_timeout = timeout;
    }

    /// Whether the device refuses all work.
    pub fn is_poisoned(&self) -> bool {
        self.health.is_poisoned()
    }

    /// Compiles a WGSL shader (hand-written or rendered). Pipelines are cached by shader and
    /// bindings.
    pub fn compile_wgsl(&mut self, shader: &WgslShader<'_>) -> Result<VulkanKernel, DeviceError> {
        self.guarded(|d| d.compile_shader(shader))
    }

    fn compile_shader(&mut self, shader: &WgslShader<'_>) -> Result<VulkanKernel, DeviceError> {
        let key = PipelineKey::of(shader);
        let pipeline = match self.pipelines.get(&key) {
            Some(p) => Arc::clone(p),
            None => {
                let max_bindings = self.limits.max_bindings + RESERVED_BINDINGS;
                let p = Arc::new(build_pipeline(
                    &self.ctx,
                    &self.spirv,
                    max_bindings,
                    shader,
                )?);
                self.pipelines.insert(key, Arc::clone(&p));
                p
            }
        };
        Ok(VulkanKernel {
            name: Arc::from(shader.name),
            pipeline,
        })
    }

    /// Runs `op` on a healthy device; afterwards poisons it on a poisoning error.
    fn guarded<T>(
        &mut self,
        op: impl FnOnce(&mut VulkanDevice) -> Result<T, DeviceError>,
    ) -> Result<T, DeviceError> {
        self.health.check()?;
        let result = op(self);
        if let Err(e) = &result
            && poisons_here(e)
        {
            self.health.poison(e);
            self.ctx.poison();
        }
        result
    }

    /// Submits the open batch, waits (bounded) for everything submitted, and raises the first
    /// kernel fault of that work (resetting the fault words).
    fn finish(&mut self) -> Result<(), DeviceError> {
        self.queue.finish(self.wait_timeout)?;
        // SAFETY: every submission has completed (the wait above) and each ends with a barrier
        // making its writes visible to the host.
        match unsafe { self.faults.take_first_fault() } {
            Some((kernel, code)) => Err(DeviceError::KernelFault { kernel, code }),
            None => Ok(()),
        }
    }

    fn alloc_buffer(&mut self, bytes: u64) -> Result<VulkanBuffer, DeviceError> {
        if bytes > self.limits.max_buffer_bytes {
            return Err(DeviceError::OutOfMemory { bytes });
        }
        let raw = RawBuffer::new(
            &self.ctx,
            "poot buffer",
            bytes,
            STORAGE_USAGE,
            MemoryLocation::GpuOnly,
        )?;
        // Zero-filled before any later work, as wgpu's buffers are.
        let cb = self.queue.batch()?;
        // SAFETY: `cb` is the open batch; the buffer is live and a whole number of words.
        unsafe {
            self.ctx
                .device
                .cmd_fill_buffer(cb, raw.raw, 0, vk::WHOLE_SIZE, 0)
        };
        self.queue.after_command(cb);
        Ok(VulkanBuffer {
            inner: Arc::new(raw),
            size_bytes: bytes,
        })
    }

    fn own(&self, buffer: &VulkanBuffer, what: &str) -> Result<(), DeviceError> {
        if buffer.inner.same_context(&self.ctx) {
            Ok(())
        } else {
            Err(DeviceError::BadLaunch {
                kernel: what.to_owned(),
                reason: "the buffer belongs to another device".to_owned(),
            })
        }
    }

    fn write_bytes(
        &mut self,
        dst: &VulkanBuffer,
        offset: u64,
        src: &[u8],
    ) -> Result<(), DeviceError> {
        self.own(dst, "write")?;
        dst.check_range(offset, src.len() as u64)?;
        if src.is_empty() {
            return Ok(());
        }
        self.uploads.write(
            &self.ctx,
            &mut self.queue,
            self.wait_timeout,
            dst.raw(),
            offset,
            src,
        )
    }

    fn read_bytes(
        &mut self,
        src: &VulkanBuffer,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<(), DeviceError> {
        self.own(src, "read")?;
        src.check_range(offset, dst.len() as u64)?;
        if dst.is_empty() {
            return self.finish();
        }
        let mut first = true;
        for (i, piece) in dst.chunks_mut(MAX_READBACK_BYTES as usize).enumerate() {
            let at = offset + i as u64 * MAX_READBACK_BYTES;
            let len = piece.len() as u64;
            let staging = self.readback.get(&self.ctx, len)?;
            let staging_raw = staging.raw;
            let cb = self.queue.batch()?;
            let region = vk::BufferCopy {
                src_offset: at,
                dst_offset: 0,
                size: len,
            };
            // SAFETY: `cb` is the open batch; both buffers are live and the ranges inside them.
            unsafe {
                self.ctx
                    .device
                    .cmd_copy_buffer(cb, src.raw(), staging_raw, &[region])
            };
            self.queue.after_command(cb);
            if first {
                // Raises a fault of earlier work before anything is copied out.
                self.finish()?;
                first = false;
            } else {
                self.queue.finish(self.wait_timeout)?;
            }
            let staging = self.readback.get(&self.ctx, len)?;
            // SAFETY: the copy into the readback buffer completed (the wait above) and its
            // submission ended with a barrier to host reads; `len` fits the buffer.
            unsafe { staging.read_host(0, piece) };
        }
        Ok(())
    }

    fn launch_now(&mut self, l: &Launch<'_, VulkanDevice>) -> Result<(), DeviceError> {
        launch::check(l, &self.ctx, self.max_group_counts)?;
        let slot = if l.kernel.can_fault() {
            Some(
                self.faults
                    .eager_slot(&self.ctx, Arc::clone(&l.kernel.name))?,
            )
        } else {
            None
        };
        let pipeline = &l.kernel.pipeline;
        let set = self.eager_sets.allocate(
            pipeline.set_layout,
            pipeline.bindings(),
            self.queue.completed(),
            self.queue.submitted() + 1,
        )?;
        launch::write_set(&self.ctx.device, set, l, slot);
        let cb = self.queue.batch()?;
        launch::record_dispatch(&self.ctx.device, cb, l, set);
        self.queue.after_command(cb);
        Ok(())
    }

    fn record_launches(
        &mut self,
        launches: &[Launch<'_, VulkanDevice>],
    ) -> Result<VulkanRecording, DeviceError> {
        for l in launches {
            launch::check(l, &self.ctx, self.max_group_counts)?;
        }
        recording::record(&self.ctx, self.queue.family, &self.faults, launches)
    }

    fn replay_recording(&mut self, recording: &VulkanRecording) -> Result<(), DeviceError> {
        if recording.is_empty() && !self.queue.has_open_batch() {
            return Ok(());
        }
        self.queue.submit(Some(recording.command_buffer))?;
        if let Some(slots) = &recording.faults {
            self.faults.replayed(slots);
        }
        Ok(())
    }

    fn copy_buffer(
        &mut self,
        src: &VulkanBuffer,
        dst: &VulkanBuffer,
        bytes: u64,
    ) -> Result<(), DeviceError> {
        let refuse = |reason: String| DeviceError::BadLaunch {
            kernel: "copy".to_owned(),
            reason,
        };
        if !bytes.is_multiple_of(4) {
            return Err(refuse(format!(
                "{bytes} B is not a whole number of 4-byte words"
            )));
        }
        if Arc::ptr_eq(&src.inner, &dst.inner) {
            return Err(refuse("source and destination are one buffer".to_owned()));
        }
        self.own(src, "copy")?;
        self.own(dst, "copy")?;
        src.check_range(0, bytes)?;
        dst.check_range(0, bytes)?;
        if bytes == 0 {
            return Ok(());
        }
        let cb = self.queue.batch()?;
        let region = vk::BufferCopy {
            src_offset: 0,
            dst_offset: 0,
            size: bytes,
        };
        // SAFETY: `cb` is the open batch; both buffers are live, distinct, and hold `bytes`.
        unsafe {
            self.ctx
                .device
                .cmd_copy_buffer(cb, src.raw(), dst.raw(), &[region])
        };
        self.queue.after_command(cb);
        Ok(())
    }
}

impl Device for VulkanDevice {
    type Buffer = VulkanBuffer;
    type Kernel = VulkanKernel;
    type Recording = VulkanRecording;

    fn limits(&self) -> &DeviceLimits {
        &self.limits
    }

    /// A zero-filled device-local storage buffer.
    fn alloc(&mut self, bytes: u64) -> Result<VulkanBuffer, DeviceError> {
        self.guarded(|d| d.alloc_buffer(bytes))
    }

    /// Stages the bytes and queues the copy: it lands after all earlier work and before any
    /// later submission. Any byte range works.
    fn write(
        &mut self,
        dst: &VulkanBuffer,
        offset_bytes: u64,
        src: &[u8],
    ) -> Result<(), DeviceError> {
        self.guarded(|d| d.write_bytes(dst, offset_bytes, src))
    }

    /// Waits (bounded) for all submitted work and copies out. A kernel fault in that work is
    /// raised here, as at `synchronize`, and nothing is copied.
    fn read(
        &mut self,
        src: &VulkanBuffer,
        offset_bytes: u64,
        dst: &mut [u8],
    ) -> Result<(), DeviceError> {
        self.guarded(|d| d.read_bytes(src, offset_bytes, dst))
    }

    /// Renders the kernel to WGSL and compiles it; the same WGSL compiles once.
    fn compile(&mut self, kernel: &Kernel) -> Result<VulkanKernel, DeviceError> {
        self.guarded(|d| {
            let rendered = render_shader(kernel)?;
            d.compile_shader(&rendered.shader())
        })
    }

    /// Records the dispatch into the open batch, submitted with the next replay or wait.
    fn launch(&mut self, launch: &Launch<'_, VulkanDevice>) -> Result<(), DeviceError> {
        self.guarded(|d| d.launch_now(launch))
    }

    /// Writes every descriptor set once (each faulting dispatch gets its own fault words) and
    /// records the launches into one command buffer.
    fn record(
        &mut self,
        launches: &[Launch<'_, VulkanDevice>],
    ) -> Result<VulkanRecording, DeviceError> {
        self.guarded(|d| d.record_launches(launches))
    }

    /// Submits the recorded command buffer as it is (after the open batch, in one submission).
    fn replay(&mut self, recording: &VulkanRecording) -> Result<(), DeviceError> {
        self.guarded(|d| d.replay_recording(recording))
    }

    /// Waits (bounded) for all submitted work and reads the fault words: the first faulting
    /// dispatch in submission order comes back as `KernelFault { kernel, code }`.
    fn synchronize(&mut self) -> Result<(), DeviceError> {
        self.guarded(|d| d.finish())
    }

    /// One `vkCmdCopyBuffer` in the open batch.
    fn copy(
        &mut self,
        src: &VulkanBuffer,
        dst: &VulkanBuffer,
        bytes: u64,
    ) -> Result<(), DeviceError> {
        self.guarded(|d| d.copy_buffer(src, dst, bytes))
    }
}
