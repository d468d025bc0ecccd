//! Waiting for the device and copying results to the host: a reused staging buffer, one
//! submission, a map, and a poll bounded by the device's timeout.

use std::sync::mpsc;
use std::time::Duration;

use poot_executor::DeviceError;

/// The smallest staging buffer made; it grows to the next power of two as needed.
const MIN_STAGING_BYTES: u64 = 64 * 1024;

/// A host-readable buffer kept between reads.
#[derive(Debug, Default)]
pub(crate) struct Staging {
    buffer: Option<wgpu::Buffer>,
}

impl Staging {
    /// A staging buffer of at least `bytes`.
    pub(crate) fn get(&mut self, device: &wgpu::Device, bytes: u64) -> wgpu::Buffer {
        if let Some(b) = &self.buffer
            && b.size() >= bytes
        {
            return b.clone();
        }
        let size = bytes.max(MIN_STAGING_BYTES).next_power_of_two();
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("poot staging"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.buffer = Some(buffer.clone());
        buffer
    }
}

/// Submits `encoder` (when there is one), maps `bytes` of `staging` (when `bytes > 0`) and
/// waits at most `timeout` for the submission, or for the latest one without an encoder. A wait
/// past the timeout is `Timeout`; a failed map or poll is `Lost`.
///
/// The bound covers the wait, not the submit: lavapipe's `vkQueueSubmit` blocks until earlier
/// work ends, which is why a wait with nothing to copy submits nothing.
pub(crate) fn submit_and_wait(
    device: &wgpu::Device,
    queue: &wgpu::Queue,
    encoder: Option<wgpu::CommandEncoder>,
    staging: Option<&wgpu::Buffer>,
    bytes: u64,
    timeout: Duration,
) -> Result<(), DeviceError> {
    let index = encoder.map(|e| queue.submit([e.finish()]));
    let (tx, rx) = mpsc::channel();
    let mapping = staging.filter(|_| bytes > 0);
    if let Some(buffer) = mapping {
        buffer.map_async(wgpu::MapMode::Read, 0..bytes, move |result| {
            // The receiver lives until this wait returns; a late callback has nobody to tell.
            let _ = tx.send(result);
        });
    }
    match device.poll(wgpu::PollType::Wait {
        submission_index: index,
        timeout: Some(timeout),
    }) {
        Ok(_) => {}
        Err(wgpu::PollError::Timeout) => {
            return Err(DeviceError::Timeout {
                seconds: timeout.as_secs(),
            });
        }
        Err(e) => {
            return Err(DeviceError::Lost {
                reason: format!("waiting for the queue failed: {e}"),
            });
        }
    }
    if mapping.is_none() {
        return Ok(());
    }
    let result = match rx.try_recv() {
        Ok(r) => r,
        Err(_) => {
            // The wait returned before the map callback ran; give it one more poll.
            let _ = device.poll(wgpu::PollType::Poll);
            rx.try_recv().map_err(|_| DeviceError::Lost {
                reason: "the staging buffer was never mapped".to_owned(),
            })?
        }
    };
    result.map_err(|e| DeviceError::Lost {
        reason: format!("mapping the staging buffer failed: {e}"),
    })
}
