//! Recordings: the dispatch list built once (pipelines, bind groups, grids, fault slots) and
//! re-encoded from the cache on every replay.

use std::sync::Arc;

use crate::fault::FaultSlots;

/// One cached dispatch.
#[derive(Debug)]
pub(crate) struct Dispatch {
    pub(crate) pipeline: wgpu::ComputePipeline,
    pub(crate) bind_group: wgpu::BindGroup,
    pub(crate) grid: [u32; 3],
}

/// A recorded sequence of launches. Replay binds the same buffers every time: the host
/// rewrites their contents (slots) between replays.
#[derive(Debug)]
pub struct WgpuRecording {
    pub(crate) dispatches: Vec<Dispatch>,
    /// The fault words of the faulting dispatches, `None` when no kernel can fault.
    pub(crate) faults: Option<Arc<FaultSlots>>,
}

impl WgpuRecording {
    /// Dispatches per replay.
    pub fn len(&self) -> usize {
        self.dispatches.len()
    }

    pub fn is_empty(&self) -> bool {
        self.dispatches.is_empty()
    }

    /// Encodes every dispatch, in order, into one compute pass. wgpu places each dispatch in its
    /// own usage scope and inserts the barriers between dispatches that share a storage buffer.
    pub(crate) fn encode(&self, encoder: &mut wgpu::CommandEncoder) {
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("poot replay"),
            timestamp_writes: None,
        });
        for d in &self.dispatches {
            pass.set_pipeline(&d.pipeline);
            pass.set_bind_group(0, &d.bind_group, &[]);
            pass.dispatch_workgroups(d.grid[0], d.grid[1], d.grid[2]);
        }
    }
}
