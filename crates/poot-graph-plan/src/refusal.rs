//! Why a graph cannot be planned for a target. A refusal is a normal outcome: it names the op or
//! constant, what was asked, and what the target allows.

use poot_graph_ir::{DType, ValidationError};

use crate::target::Backend;
use poot_kernel::KernelError;

#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A refusal while planning one entry: which entry (its step shape or label), and why.
    #[error("{entry}: {source}")]
    InEntry {
        entry: String,
        source: Box<PlanError>,
    },
    /// A constant too large for one buffer whose rows are each too large as well, so splitting
    /// it by rows cannot help. A device with a larger buffer limit may plan it.
    #[error(
        "{backend}: constant `{name}` has rows of {row_bytes} bytes, more than the device's single-buffer limit of {limit_bytes}; a row is the smallest piece it splits into"
    )]
    ConstantRowTooLarge {
        backend: Backend,
        name: String,
        row_bytes: u64,
        limit_bytes: u64,
    },
    /// A constant too large for one buffer that a reader does not read by rows, so it cannot be
    /// split into row chunks.
    #[error(
        "{backend}: constant `{name}` needs a buffer of {needed_bytes} bytes (the device's single-buffer limit is {limit_bytes}) and cannot be split into row chunks: {reader} ({reason})"
    )]
    ConstantNotRowSplittable {
        backend: Backend,
        name: String,
        needed_bytes: u64,
        limit_bytes: u64,
        reader: String,
        reason: &'static str,
    },
    /// The plan's buffers together exceed the device's memory. A shorter context (smaller KV
    /// state), fewer tokens per step or a smaller weight format may fit.
    #[error(
        "{backend}: the step needs {needed_bytes} bytes of device memory (weights {weight_bytes}, state {state_bytes}, slots {slot_bytes}, scratch {scratch_bytes}); the device has {memory_bytes}"
    )]
    OutOfMemory {
        backend: Backend,
        needed_bytes: u64,
        weight_bytes: u64,
        state_bytes: u64,
        slot_bytes: u64,
        scratch_bytes: u64,
        memory_bytes: u64,
    },
    /// A constant too large for one buffer of the target.
    #[error(
        "{backend}: constant `{name}` needs a buffer of {needed_bytes} bytes (the device's single-buffer limit is {limit_bytes})"
    )]
    ConstantTooLarge {
        backend: Backend,
        name: String,
        needed_bytes: u64,
        limit_bytes: u64,
    },
    /// An intermediate, slot or state too large for one buffer of the target.
    #[error(
        "{backend}: value `{label}` needs a buffer of {needed_bytes} bytes (the device's single-buffer limit is {limit_bytes})"
    )]
    ValueTooLarge {
        backend: Backend,
        label: String,
        needed_bytes: u64,
        limit_bytes: u64,
    },
    /// A kernel would bind more buffers than the target allows.
    #[error("{backend}: kernel `{kernel}` binds {needed} buffers (the device allows {limit})")]
    TooManyBindings {
        backend: Backend,
        kernel: String,
        needed: u32,
        limit: u32,
    },
    /// An op reads a stored type the target has no lowering for.
    #[error("{backend}: `{op}` at `{label}` cannot read {dtype}")]
    UnsupportedType {
        backend: Backend,
        op: &'static str,
        label: String,
        dtype: DType,
    },
    /// A collective over another number of ranks than the device's group holds (a graph traced
    /// for another group size, or a rank's graph planned for a device alone).
    #[error(
        "{backend}: `{label}` is {what} over {ranks} ranks; the device is one of a group of {group_ranks}"
    )]
    GroupRanks {
        backend: Backend,
        label: String,
        /// The collective: `an all-reduce`, `a broadcast`.
        what: &'static str,
        ranks: usize,
        group_ranks: usize,
    },
    /// A value's element count does not fit 32-bit kernel indexing.
    #[error("value `{label}` has {n_elems} elements; kernels index with 32 bits")]
    IndexOverflow { label: String, n_elems: u64 },
    /// A value the planner neither buffered nor can compute in place (a planner bug).
    #[error("value `{label}` has no placement the planner can lower")]
    Unplaced { label: String },
    /// The graph failed validation (it was edited into a bad state).
    #[error(transparent)]
    Graph(#[from] ValidationError),
    /// A packed decode was built without its codebook tables (a planner bug).
    #[error(transparent)]
    Dequant(#[from] crate::lower::dequant::DequantError),
    /// A component-format decode was built without its components (a planner bug).
    #[error(transparent)]
    ComponentDecode(#[from] crate::lower::components::ComponentDecodeError),
    /// The planner built a malformed kernel (a planner bug).
    #[error(transparent)]
    Kernel(#[from] KernelError),
}

impl PlanError {
    /// The refusal itself, without the entry it was raised in.
    pub fn root(&self) -> &PlanError {
        match self {
            PlanError::InEntry { source, .. } => source.root(),
            e => e,
        }
    }
}
