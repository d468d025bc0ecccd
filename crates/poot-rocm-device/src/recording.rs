//! Recordings: a step's dispatch packets, written once and resubmitted on every replay.

use std::sync::Arc;

use crate::buffer::{Allocation, HostBlock};
use crate::context::Context;
use crate::kernel::LoadedExecutable;
use crate::packet::PACKET_WORDS;

/// A recorded sequence of launches of a [`RocmDevice`](crate::RocmDevice): their AQL packets
/// and one block of their kernel arguments, both built when recorded (buffer addresses never
/// change), so a replay only copies the packets into the queue and rings the doorbell. It keeps
/// the executables and buffers its packets name alive.
pub struct RocmRecording {
    pub(crate) packets: Vec<[u32; PACKET_WORDS]>,
    /// The launches' kernel arguments (`None` for a recording of no launches).
    pub(crate) _kernargs: Option<HostBlock>,
    pub(crate) ctx: Arc<Context>,
    /// How fault reports name this recording.
    pub(crate) label: Arc<str>,
    pub(crate) _executables: Vec<Arc<LoadedExecutable>>,
    pub(crate) _buffers: Vec<Arc<Allocation>>,
}

impl RocmRecording {
    /// How fault reports name this recording.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Launches recorded.
    pub fn n_launches(&self) -> usize {
        self.packets.len()
    }
}

impl std::fmt::Debug for RocmRecording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocmRecording")
            .field("label", &self.label)
            .field("n_launches", &self.packets.len())
            .finish()
    }
}
