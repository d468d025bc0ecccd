//! Recordings: a captured sequence of launches, instantiated as a CUDA graph.

use std::sync::Arc;

use cudarc::driver::sys::{self, CUgraphExec};

use crate::buffer::Allocation;
use crate::context::Context;
use crate::kernel::LoadedModule;
use crate::nccl::NcclComm;

/// A recorded sequence of launches of a [`PtxDevice`](crate::PtxDevice), replayed with one
/// `cuGraphLaunch`. It keeps the modules and buffers its launches use alive.
pub struct PtxRecording {
    /// `None` for a recording of no launches (replaying it does nothing).
    pub(crate) exec: Option<CUgraphExec>,
    /// The communicator its collectives use: NCCL's graph resources refer to it, so it is
    /// destroyed after the graph (and before the context, declared after it).
    pub(crate) group: Option<Arc<NcclComm>>,
    pub(crate) ctx: Arc<Context>,
    /// How fault reports name this recording.
    pub(crate) label: Arc<str>,
    pub(crate) n_launches: usize,
    pub(crate) _modules: Vec<Arc<LoadedModule>>,
    pub(crate) _buffers: Vec<Arc<Allocation>>,
}

// SAFETY: a graph exec handle is a plain driver handle, usable from any thread with its context
// current (replay makes it current first); the kept-alive parts are themselves Send + Sync.
unsafe impl Send for PtxRecording {}
// SAFETY: as above; shared references only read the handle.
unsafe impl Sync for PtxRecording {}

impl PtxRecording {
    /// How fault reports name this recording.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Launches recorded.
    pub fn n_launches(&self) -> usize {
        self.n_launches
    }
}

impl std::fmt::Debug for PtxRecording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtxRecording")
            .field("label", &self.label)
            .field("n_launches", &self.n_launches)
            .finish()
    }
}

impl Drop for PtxRecording {
    fn drop(&mut self) {
        let Some(exec) = self.exec else { return };
        if !self.ctx.ready_to_release() {
            // The graph is leaked with the dead context; its communicator must not wait on it.
            if let Some(comm) = &self.group {
                comm.abort();
            }
            return;
        }
        // SAFETY: the exec was instantiated in this context and is destroyed exactly once; a
        // replay in flight keeps its own reference to the graph's resources in the driver.
        unsafe {
            let _ = sys::cuGraphExecDestroy(exec);
        }
    }
}
