//! The object-safe executor contract the driver drives, on every backend alike.

use std::borrow::Cow;

use poot_graph_ir::{Graph, Slot};
use poot_graph_plan::Target;

use crate::error::ExecError;

/// An executable: one model's weights on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExecutableId(pub usize);

/// One compiled step shape of an executable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EntryId(pub usize);

/// A constant's data as the weight store holds it.
pub enum ConstBytes<'a> {
    /// Stored bytes: little-endian words, or packed blocks.
    Stored(Cow<'a, [u8]>),
    /// A computed f32 table.
    F32(Cow<'a, [f32]>),
}

impl ConstBytes<'_> {
    /// Bytes the constant occupies (4 per f32 of a table).
    pub fn len(&self) -> u64 {
        match self {
            ConstBytes::Stored(b) => b.len() as u64,
            ConstBytes::F32(v) => v.len() as u64 * 4,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where an executable's constants come from: every name a graph may bind, and its bytes as
/// stored. The driver implements it over a model's weight map and the weight store.
pub trait ConstSource: Send {
    fn names(&self) -> Vec<String>;
    fn bytes(&self, name: &str) -> Option<ConstBytes<'_>>;
    /// The length of `name`'s bytes, without producing them where a source can tell (a
    /// gathered slice); by default from [`ConstSource::bytes`].
    fn byte_len(&self, name: &str) -> Option<u64> {
        self.bytes(name).map(|b| b.len())
    }
}

/// The per-step inputs: each slot's contents as device words (little-endian).
#[derive(Clone, Debug, Default)]
pub struct StepInputs {
    slots: Vec<(Slot, Vec<u8>)>,
}

impl StepInputs {
    pub fn new() -> StepInputs {
        StepInputs::default()
    }

    pub fn set(&mut self, slot: Slot, bytes: Vec<u8>) {
        match self.slots.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, b)) => *b = bytes,
            None => self.slots.push((slot, bytes)),
        }
    }

    pub fn set_i32(&mut self, slot: Slot, values: &[i32]) {
        self.set(slot, bytemuck::cast_slice(values).to_vec());
    }

    /// Sets every slot `other` holds, replacing any of the same name.
    pub fn extend(&mut self, other: StepInputs) {
        for (slot, bytes) in other.slots {
            self.set(slot, bytes);
        }
    }

    /// Takes a slot out, returning its bytes.
    pub fn remove(&mut self, slot: &Slot) -> Option<Vec<u8>> {
        let i = self.slots.iter().position(|(s, _)| s == slot)?;
        Some(self.slots.remove(i).1)
    }

    pub fn slot(&self, slot: &Slot) -> Option<&[u8]> {
        self.slots
            .iter()
            .find(|(s, _)| s == slot)
            .map(|(_, b)| b.as_slice())
    }
}

/// The step's primary outputs, read back as device words.
#[derive(Clone, Debug, Default)]
pub struct StepOutputs {
    pub values: Vec<Vec<u8>>,
}

impl StepOutputs {
    /// Output `i` as f32 (an f32-word output).
    pub fn f32(&self, i: usize) -> Option<Vec<f32>> {
        self.values.get(i).map(|b| {
            b.chunks_exact(4)
                .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .collect()
        })
    }

    /// Output `i` as i32 (an i32-word output).
    pub fn i32(&self, i: usize) -> Option<Vec<i32>> {
        self.values.get(i).map(|b| {
            b.chunks_exact(4)
                .map(|w| i32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .collect()
        })
    }
}

/// What an executor has done, for benchmarks and tests (bytes crossing the bus, dispatches).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExecStats {
    pub steps: u64,
    pub weight_bytes: u64,
    pub state_bytes: u64,
    pub scratch_bytes: u64,
    /// Dispatches each entry replays per step, in entry order.
    pub dispatches_per_step: Vec<usize>,
    /// Bytes the last step read back to the host.
    pub last_read_bytes: u64,
    /// Steps that ran in two parts, their late slots written in between
    /// ([`Executor::step_overlapped`]).
    pub overlapped_steps: u64,
}

/// One dispatch of a profiled step.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTime {
    /// The kernel's name (`matmul`, `rmsnorm`...).
    pub kernel: String,
    /// The graph value it computes (`l3.attn.q`).
    pub label: String,
    pub grid: [u32; 3],
    pub seconds: f64,
}

/// A chained decode prepared on an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChainId(pub usize);

/// A device-to-device copy probe: the device's attainable memory bandwidth, the ceiling a
/// memory-bound decode step is measured against.
#[derive(Clone, Debug, PartialEq)]
pub struct CopyBandwidth {
    /// Bytes each copy reads (and writes).
    pub buffer_bytes: u64,
    /// Copies queued back to back per timed round.
    pub copies_per_round: u32,
    /// Timed rounds (after one untimed warm-up round).
    pub rounds: u32,
    /// The fastest round, submission to completion.
    pub best_seconds: f64,
}

impl CopyBandwidth {
    /// Bytes read plus bytes written per second in the fastest round.
    pub fn bytes_per_second(&self) -> f64 {
        if self.best_seconds > 0.0 {
            2.0 * self.buffer_bytes as f64 * f64::from(self.copies_per_round) / self.best_seconds
        } else {
            0.0
        }
    }
}

/// The backend-neutral contract: the driver above it never branches on a backend.
///
/// An executor may drive a tensor-parallel group of [`Executor::ranks`] devices in lockstep (a
/// [`crate::Coordinator`]): then each rank has its own weights and graph, given through
/// [`Executor::load_weights_ranked`] and [`Executor::add_entry_ranked`], and every other call
/// applies to every rank.
pub trait Executor {
    /// The target entries are planned for (rank 0's, in a group).
    fn target(&self) -> &Target;
    /// Ranks driven in lockstep: 1 for one device.
    fn ranks(&self) -> usize {
        1
    }
    /// [`Executor::load_weights`] with one source per rank, in rank order.
    fn load_weights_ranked(
        &mut self,
        sources: Vec<Box<dyn ConstSource>>,
    ) -> Result<ExecutableId, ExecError> {
        let given = sources.len();
        match <[Box<dyn ConstSource>; 1]>::try_from(sources) {
            Ok([source]) => self.load_weights(source),
            Err(_) => Err(ExecError::RankCount {
                ranks: self.ranks(),
                given,
            }),
        }
    }
    /// [`Executor::add_entry`] with one graph per rank, in rank order (the same step shape
    /// traced for each rank).
    fn add_entry_ranked(
        &mut self,
        executable: ExecutableId,
        graphs: &[Graph],
        label: &str,
    ) -> Result<EntryId, ExecError> {
        match graphs {
            [graph] => self.add_entry(executable, graph, label),
            _ => Err(ExecError::RankCount {
                ranks: self.ranks(),
                given: graphs.len(),
            }),
        }
    }
    /// Uploads a model's constants once, as one executable. A constant too large for one
    /// buffer of the target is uploaded as the row chunks the first entry that reads it binds.
    fn load_weights(&mut self, source: Box<dyn ConstSource>) -> Result<ExecutableId, ExecError>;
    /// Plans, compiles and records one step shape of an executable. `label` names the entry
    /// (its program and step shape) in a refusal.
    fn add_entry(
        &mut self,
        executable: ExecutableId,
        graph: &Graph,
        label: &str,
    ) -> Result<EntryId, ExecError>;
    /// Writes the slots, replays the entry, and reads its outputs back.
    fn step(
        &mut self,
        entry: EntryId,
        inputs: &StepInputs,
        outputs: &mut StepOutputs,
    ) -> Result<(), ExecError>;
    /// [`Executor::step`] with some slots computed while the device already runs: `inputs`
    /// holds every slot but the late ones, the kernels before the first that reads a late slot
    /// are queued, then `late` runs on the host and returns the late slots, which are written
    /// before the rest is queued. Guided decoding computes its token masks this way, during the
    /// forward pass that precedes the sampling suffix. The default computes them first.
    fn step_overlapped(
        &mut self,
        entry: EntryId,
        inputs: &StepInputs,
        late: &mut dyn FnMut() -> StepInputs,
        outputs: &mut StepOutputs,
    ) -> Result<(), ExecError> {
        let mut all = inputs.clone();
        all.extend(late());
        self.step(entry, &all, outputs)
    }
    /// Prepares chained replays of `entry` (compiles the feed kernel, sizes the record).
    fn add_chain(&mut self, entry: EntryId, feed: &crate::ChainFeed) -> Result<ChainId, ExecError>;
    /// Writes the slots once, then replays the chain's entry `steps` times (at most the
    /// chain's `max_steps`), feeding each step's picks into the next on the device, and waits
    /// once. Returns every step's pick output, `[steps, rows, width]` words.
    fn step_chain(
        &mut self,
        chain: ChainId,
        inputs: &StepInputs,
        steps: usize,
    ) -> Result<Vec<i32>, ExecError>;
    /// Times every dispatch of `entry` on the device with `inputs` in its slots (`reps` runs
    /// each); `None` when the backend cannot time kernels. The entry's state is left as after
    /// an ordinary step only if every kernel is idempotent: reset it after profiling.
    fn profile(
        &mut self,
        entry: EntryId,
        inputs: &StepInputs,
        reps: u32,
    ) -> Result<Option<Vec<KernelTime>>, ExecError>;
    /// Overwrites `bytes` of constant `name` at `offset_bytes`, in place: every entry of the
    /// executable reads the new values from its next step, with nothing re-recorded (adapter
    /// tables written at run time). Only a constant uploaded as one whole buffer can be written.
    fn write_const(
        &mut self,
        executable: ExecutableId,
        name: &str,
        offset_bytes: u64,
        bytes: &[u8],
    ) -> Result<(), ExecError> {
        let _ = executable;
        Err(ExecError::ConstWrite {
            name: name.to_string(),
            offset_bytes,
            len_bytes: bytes.len() as u64,
            why: "this executor does not write constants after loading",
        })
    }
    /// Zeroes the carried state of the entry's executable and clears a failed step's mark.
    fn reset_state(&mut self, entry: EntryId) -> Result<(), ExecError>;
    fn remove_entry(&mut self, entry: EntryId);
    fn stats(&self) -> &ExecStats;
    fn unload(&mut self, executable: ExecutableId);
    /// Measures copy bandwidth with two device buffers of `buffer_bytes` (capped at the
    /// device's single-buffer limit): one warm-up round, then `rounds` timed rounds of copies
    /// back and forth; the best round counts. The buffers are freed before it returns.
    fn copy_bandwidth(
        &mut self,
        buffer_bytes: u64,
        rounds: u32,
    ) -> Result<CopyBandwidth, ExecError>;
}
