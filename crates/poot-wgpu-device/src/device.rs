//! `WgpuDevice`: poot's `Device` on wgpu over Vulkan.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use poot_executor::wgsl::{loop_iteration_budget, render_shader};
use poot_executor::{Device, DeviceError, DeviceLimits, Launch};
use poot_kernel::Kernel;
use poot_kernel::render::WgslShader;

use crate::adapter;
use crate::buffer::{STORAGE_USAGE, WORD_BYTES, WgpuBuffer, alloc_bytes, word_span};
use crate::fault::FaultLog;
use crate::health::Health;
use crate::kernel::{Pipeline, PipelineKey, WgpuKernel, build_pipeline};
use crate::launch;
use crate::options::WgpuOptions;
use crate::readback::{Staging, submit_and_wait};
use crate::recording::{Dispatch, WgpuRecording};

/// A wgpu device on a Vulkan adapter.
///
/// Failures: every call first refuses work once the device is poisoned. Device loss (the
/// device-lost callback), an uncaptured wgpu error, a wait past the timeout and every other
/// error for which `DeviceError::poisons` holds poison it. A kernel fault does not: the fault
/// words are reset, the faulting step's results are to be discarded, and the device stays
/// usable.
pub struct WgpuDevice {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    wgpu_limits: wgpu::Limits,
    limits: DeviceLimits,
    wait_timeout: Duration,
    health: Health,
    staging: Staging,
    faults: FaultLog,
    pipelines: HashMap<PipelineKey, Arc<Pipeline>>,
    /// Whether work was submitted since the last completed wait.
    busy: bool,
    loop_iteration_budget: Option<u32>,
}

impl std::fmt::Debug for WgpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuDevice")
            .field("adapter", &self.info.name)
            .field("poisoned", &self.is_poisoned())
            .finish_non_exhaustive()
    }
}

/// Whether the device refuses further work after `e`: every error `DeviceError::poisons`
/// names except a kernel fault, which leaves a wgpu device intact.
fn poisons_here(e: &DeviceError) -> bool {
    e.poisons() && !matches!(e, DeviceError::KernelFault { .. })
}

impl WgpuDevice {
    /// Opens a device on the chosen Vulkan adapter with the adapter's own limits and
    /// `SHADER_F16`, `SUBGROUP` and `SUBGROUP_BARRIER` where the adapter has them, then
    /// measures its loop iteration budget with one tiny dispatch. Without a Vulkan adapter (or
    /// without one matching the filter) it returns `Unavailable`.
    pub fn open(options: WgpuOptions) -> Result<WgpuDevice, DeviceError> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        desc.backends = wgpu::Backends::VULKAN;
        let instance = wgpu::Instance::new(desc);
        let adapter = adapter::choose(&instance, options.adapter_filter().as_deref())?;
        let (device, queue) = adapter::request_device(&adapter)?;
        let info = adapter.get_info();
        let wgpu_limits = device.limits();
        let mut limits = adapter::device_limits(&info, &wgpu_limits);
        limits.memory_bytes = adapter::memory_bytes(&adapter);

        let health = Health::default();
        let lost = health.clone();
        device.set_device_lost_callback(move |reason, message| {
            lost.fail_async(format!("wgpu device lost ({reason:?}): {message}"))
        });
        let uncaptured = health.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            uncaptured.fail_async(format!("wgpu error: {e}"))
        }));

        let faults = FaultLog::new(wgpu_limits.min_storage_buffer_offset_alignment);
        let mut opened = WgpuDevice {
            device,
            queue,
            info,
            wgpu_limits,
            limits,
            wait_timeout: options.wait_timeout,
            health,
            staging: Staging::default(),
            faults,
            pipelines: HashMap::new(),
            busy: false,
            loop_iteration_budget: None,
        };
        opened.loop_iteration_budget =
            loop_iteration_budget(&mut opened, WgpuDevice::compile_wgsl)?;
        opened.limits.max_loop_iterations = opened.loop_iteration_budget;
        Ok(opened)
    }

    /// The loop iterations one kernel invocation may run in total, over all its loops, when
    /// the driver caps it (measured at open; lavapipe: 65535). Past it every loop exits early
    /// and silently, so the planner must keep each thread's total trip count below it. `None`
    /// when no cap showed up to 2^20 iterations.
    pub fn loop_iteration_budget(&self) -> Option<u32> {
        self.loop_iteration_budget
    }

    /// The adapter the device runs on.
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }

    /// The features the device was opened with.
    pub fn features(&self) -> wgpu::Features {
        self.device.features()
    }

    /// The wgpu limits the device was opened with (the adapter's own).
    pub fn wgpu_limits(&self) -> &wgpu::Limits {
        &self.wgpu_limits
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

    /// Destroys the device now, as a deliberate loss: every later call is refused (the first
    /// with `Lost`). For shutting down under a hang, and for testing the loss path.
    pub fn destroy(&mut self) {
        self.health
            .fail_async("the device was destroyed by its owner".to_owned());
        self.device.destroy();
    }

    /// Compiles a WGSL shader (hand-written or rendered). Pipelines are cached by shader and
    /// bindings.
    pub fn compile_wgsl(&mut self, shader: &WgslShader<'_>) -> Result<WgpuKernel, DeviceError> {
        self.guarded(|d| d.compile_shader(shader))
    }

    fn compile_shader(&mut self, shader: &WgslShader<'_>) -> Result<WgpuKernel, DeviceError> {
        let key = PipelineKey::of(shader);
        let pipeline = match self.pipelines.get(&key) {
            Some(p) => Arc::clone(p),
            None => {
                let p = Arc::new(build_pipeline(&self.device, &self.wgpu_limits, shader)?);
                self.pipelines.insert(key, Arc::clone(&p));
                p
            }
        };
        Ok(WgpuKernel {
            name: Arc::from(shader.name),
            pipeline,
        })
    }

    /// Runs `op` on a healthy device; afterwards poisons on a poisoning error, and reports an
    /// asynchronous failure (loss, uncaptured error) that happened during the call.
    fn guarded<T>(
        &mut self,
        op: impl FnOnce(&mut WgpuDevice) -> Result<T, DeviceError>,
    ) -> Result<T, DeviceError> {
        self.health.check()?;
        match op(self) {
            Ok(v) => {
                self.health.check()?;
                Ok(v)
            }
            Err(e) => {
                // A loss reported by a callback explains a failed wait better than the wait.
                if let Err(lost @ DeviceError::Lost { .. }) = self.health.check() {
                    return Err(lost);
                }
                if poisons_here(&e) {
                    self.health.poison(&e);
                }
                Err(e)
            }
        }
    }

    /// Copies word ranges `(buffer, offset, bytes)` to the host and waits (bounded), then hands
    /// their concatenated bytes to `consume`. With `collect_faults`, also reads back every
    /// fault word submitted since the last wait: a fault is returned as `KernelFault` (and
    /// `consume` is not called: the results are discarded), and the words are reset.
    fn fetch<R>(
        &mut self,
        ranges: &[(&wgpu::Buffer, u64, u64)],
        collect_faults: bool,
        consume: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, DeviceError> {
        let data_bytes: u64 = ranges.iter().map(|r| r.2).sum();
        let faults = collect_faults.then(|| self.faults.readback(data_bytes));
        let total = faults.as_ref().map_or(data_bytes, |f| f.end());
        if self.busy && total > 0 {
            // Wait for the earlier work before submitting the copies: on lavapipe a submit
            // blocks behind running work, outside the timeout's reach.
            submit_and_wait(&self.device, &self.queue, None, None, 0, self.wait_timeout)?;
        }
        let staging = (total > 0).then(|| self.staging.get(&self.device, total));
        let encoder = staging.as_ref().map(|staging| {
            let mut encoder = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("poot readback"),
                });
            let mut at = 0;
            for (buffer, offset, bytes) in ranges {
                encoder.copy_buffer_to_buffer(buffer, *offset, staging, at, *bytes);
                at += bytes;
            }
            if let Some(f) = &faults {
                f.encode_copies(&mut encoder, staging);
            }
            encoder
        });
        submit_and_wait(
            &self.device,
            &self.queue,
            encoder,
            staging.as_ref(),
            total,
            self.wait_timeout,
        )?;
        self.busy = false;
        let mut fault = None;
        let mut result = None;
        if let Some(staging) = &staging {
            {
                let view = staging
                    .get_mapped_range(0..total)
                    .map_err(|e| DeviceError::Lost {
                        reason: format!("reading the staging buffer failed: {e}"),
                    })?;
                let bytes: &[u8] = &view;
                fault = faults.as_ref().and_then(|f| f.first_fault(bytes));
                if fault.is_none() {
                    result = Some(consume(&bytes[..data_bytes as usize]));
                }
            }
            staging.unmap();
        } else {
            result = Some(consume(&[]));
        }
        if let Some(f) = &faults {
            if fault.is_some() {
                let mut encoder =
                    self.device
                        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                            label: Some("poot fault reset"),
                        });
                f.encode_reset(&mut encoder);
                self.submit(encoder);
            }
            self.faults.clear_pending();
        }
        match (fault, result) {
            (Some((kernel, code)), _) => Err(DeviceError::KernelFault { kernel, code }),
            (None, Some(r)) => Ok(r),
            (None, None) => Err(DeviceError::Lost {
                reason: "readback produced no result".to_owned(),
            }),
        }
    }

    fn write_bytes(
        &mut self,
        dst: &WgpuBuffer,
        offset: u64,
        src: &[u8],
    ) -> Result<(), DeviceError> {
        let len = src.len() as u64;
        dst.check_range(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let (start, end) = word_span(offset, len);
        if start == offset && end == offset + len {
            self.queue.write_buffer(&dst.buffer, offset, src);
            return Ok(());
        }
        // A partial word at either edge: read the edge words, merge, write whole words.
        let mut words = vec![0u8; (end - start) as usize];
        let head = (&dst.buffer, start, WORD_BYTES);
        let tail = (&dst.buffer, end - WORD_BYTES, WORD_BYTES);
        let edges = if end - start > WORD_BYTES {
            vec![head, tail]
        } else {
            vec![head]
        };
        let n = words.len();
        self.fetch(&edges, false, |bytes| {
            words[..4].copy_from_slice(&bytes[..4]);
            if bytes.len() > 4 {
                words[n - 4..].copy_from_slice(&bytes[4..8]);
            }
        })?;
        let at = (offset - start) as usize;
        words[at..at + src.len()].copy_from_slice(src);
        self.queue.write_buffer(&dst.buffer, start, &words);
        Ok(())
    }

    fn read_bytes(
        &mut self,
        src: &WgpuBuffer,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<(), DeviceError> {
        let len = dst.len() as u64;
        src.check_range(offset, len)?;
        let (start, end) = word_span(offset, len);
        let ranges: &[(&wgpu::Buffer, u64, u64)] = if len == 0 {
            &[]
        } else {
            &[(&src.buffer, start, end - start)]
        };
        let at = (offset - start) as usize;
        self.fetch(ranges, true, |bytes| {
            if len > 0 {
                dst.copy_from_slice(&bytes[at..at + dst.len()]);
            }
        })
    }

    fn launch_now(&mut self, l: &Launch<'_, WgpuDevice>) -> Result<(), DeviceError> {
        launch::check(l, self.wgpu_limits.max_compute_workgroups_per_dimension)?;
        let slot = l.kernel.can_fault().then(|| {
            self.faults
                .eager_slot(&self.device, Arc::clone(&l.kernel.name))
        });
        let bind_group = launch::bind_group(&self.device, l, slot.as_ref());
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("poot launch"),
            });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(l.kernel.name()),
                timestamp_writes: None,
            });
            pass.set_pipeline(&l.kernel.pipeline.pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(l.grid[0], l.grid[1], l.grid[2]);
        }
        self.submit(encoder);
        Ok(())
    }

    fn submit(&mut self, encoder: wgpu::CommandEncoder) {
        self.queue.submit([encoder.finish()]);
        self.busy = true;
    }

    fn record_launches(
        &mut self,
        launches: &[Launch<'_, WgpuDevice>],
    ) -> Result<WgpuRecording, DeviceError> {
        for l in launches {
            launch::check(l, self.wgpu_limits.max_compute_workgroups_per_dimension)?;
        }
        let faulting: Vec<Arc<str>> = launches
            .iter()
            .filter(|l| l.kernel.can_fault())
            .map(|l| Arc::clone(&l.kernel.name))
            .collect();
        let faults = (!faulting.is_empty()).then(|| self.faults.new_slots(&self.device, faulting));
        let mut next_slot = 0;
        let dispatches = launches
            .iter()
            .map(|l| {
                let slot = match &faults {
                    Some(slots) if l.kernel.can_fault() => {
                        next_slot += 1;
                        Some(self.faults.slot_binding(slots, next_slot - 1))
                    }
                    _ => None,
                };
                Dispatch {
                    pipeline: l.kernel.pipeline.pipeline.clone(),
                    bind_group: launch::bind_group(&self.device, l, slot.as_ref()),
                    grid: l.grid,
                }
            })
            .collect();
        Ok(WgpuRecording { dispatches, faults })
    }

    fn replay_recording(&mut self, recording: &WgpuRecording) -> Result<(), DeviceError> {
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("poot replay"),
            });
        recording.encode(&mut encoder);
        self.submit(encoder);
        if let Some(slots) = &recording.faults {
            self.faults.replayed(slots);
        }
        Ok(())
    }

    fn alloc_buffer(&mut self, bytes: u64) -> Result<WgpuBuffer, DeviceError> {
        if bytes > self.limits.max_buffer_bytes {
            return Err(DeviceError::OutOfMemory { bytes });
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: alloc_bytes(bytes),
            usage: STORAGE_USAGE,
            mapped_at_creation: false,
        });
        if pollster::block_on(scope.pop()).is_some() {
            return Err(DeviceError::OutOfMemory { bytes });
        }
        Ok(WgpuBuffer {
            buffer,
            size_bytes: bytes,
        })
    }
}

impl Device for WgpuDevice {
    type Buffer = WgpuBuffer;
    type Kernel = WgpuKernel;
    type Recording = WgpuRecording;

    fn limits(&self) -> &DeviceLimits {
        &self.limits
    }

    /// A zero-filled storage buffer (wgpu clears every buffer before its first use).
    fn alloc(&mut self, bytes: u64) -> Result<WgpuBuffer, DeviceError> {
        self.guarded(|d| d.alloc_buffer(bytes))
    }

    /// Queues the copy; it lands before any later submission. A range that does not start and
    /// end on a word boundary reads its edge words back first (a bounded wait).
    fn write(
        &mut self,
        dst: &WgpuBuffer,
        offset_bytes: u64,
        src: &[u8],
    ) -> Result<(), DeviceError> {
        self.guarded(|d| d.write_bytes(dst, offset_bytes, src))
    }

    /// Waits (bounded) for all submitted work and copies out. A kernel fault in that work is
    /// raised here, as at `synchronize`, and nothing is copied.
    fn read(
        &mut self,
        src: &WgpuBuffer,
        offset_bytes: u64,
        dst: &mut [u8],
    ) -> Result<(), DeviceError> {
        self.guarded(|d| d.read_bytes(src, offset_bytes, dst))
    }

    /// Renders the kernel to WGSL and compiles it; the same WGSL compiles once.
    fn compile(&mut self, kernel: &Kernel) -> Result<WgpuKernel, DeviceError> {
        self.guarded(|d| {
            let rendered = render_shader(kernel)?;
            d.compile_shader(&rendered.shader())
        })
    }

    fn launch(&mut self, launch: &Launch<'_, WgpuDevice>) -> Result<(), DeviceError> {
        self.guarded(|d| d.launch_now(launch))
    }

    /// Builds every bind group once (each faulting dispatch gets its own fault word) and caches
    /// the dispatch list.
    fn record(
        &mut self,
        launches: &[Launch<'_, WgpuDevice>],
    ) -> Result<WgpuRecording, DeviceError> {
        self.guarded(|d| d.record_launches(launches))
    }

    /// Encodes the cached dispatches in order into one command buffer and submits it.
    fn replay(&mut self, recording: &WgpuRecording) -> Result<(), DeviceError> {
        self.guarded(|d| d.replay_recording(recording))
    }

    /// Waits (bounded) for all submitted work and reads the fault words: the first faulting
    /// dispatch in submission order comes back as `KernelFault { kernel, code }`.
    fn synchronize(&mut self) -> Result<(), DeviceError> {
        self.guarded(|d| d.fetch(&[], true, |_| ()))
    }

    /// One `copy_buffer_to_buffer` in its own submission.
    fn copy(&mut self, src: &WgpuBuffer, dst: &WgpuBuffer, bytes: u64) -> Result<(), DeviceError> {
        self.guarded(|d| {
            if !bytes.is_multiple_of(WORD_BYTES) {
                return Err(DeviceError::BadLaunch {
                    kernel: "copy".to_owned(),
                    reason: format!("{bytes} B is not a whole number of 4-byte words"),
                });
            }
            if src.buffer == dst.buffer {
                return Err(DeviceError::BadLaunch {
                    kernel: "copy".to_owned(),
                    reason: "source and destination are one buffer".to_owned(),
                });
            }
            src.check_range(0, bytes)?;
            dst.check_range(0, bytes)?;
            if bytes == 0 {
                return Ok(());
            }
            let mut encoder = d
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("poot copy"),
                });
            encoder.copy_buffer_to_buffer(&src.buffer, 0, &dst.buffer, 0, bytes);
            d.submit(encoder);
            Ok(())
        })
    }
}
