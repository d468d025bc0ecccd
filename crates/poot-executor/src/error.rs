//! Typed device failures.

/// A device failure. Those that [`DeviceError::poisons`] leave the device unusable: every later
/// call returns [`DeviceError::Poisoned`] without touching it. A kernel fault does not by itself
/// (the step's results are discarded and its executable needs a state reset); a backend whose
/// faults are sticky (a CUDA trap) reports the poisoning itself on the next call.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DeviceError {
    /// No device of this backend could be opened (no driver, no adapter).
    #[error("no {backend} device: {reason}")]
    Unavailable {
        backend: &'static str,
        reason: String,
    },
    /// An allocation the device cannot satisfy.
    #[error("out of device memory allocating {bytes} B")]
    OutOfMemory { bytes: u64 },
    /// A kernel failed to compile (a renderer or planner bug, with the compiler's log).
    #[error("kernel `{kernel}` failed to compile: {log}")]
    Compile { kernel: String, log: String },
    /// A kernel check failed on the device (a trap, or a fault bit on SPIR-V targets).
    #[error("kernel `{kernel}` faulted with code {code}")]
    KernelFault { kernel: String, code: u32 },
    /// The device was lost or reported an error (a sticky CUDA error, a lost wgpu device).
    #[error("device lost: {reason}")]
    Lost { reason: String },
    /// A wait outlasted the configured timeout.
    #[error("device wait exceeded {seconds} s")]
    Timeout { seconds: u64 },
    /// An earlier fault poisoned the device; nothing was submitted.
    #[error("device is poisoned by an earlier fault: {first}")]
    Poisoned { first: String },
    /// A launch the device refused before submitting it (wrong buffer count, a grid over the
    /// device's limits, a buffer of another device): an engine bug; nothing reached the device.
    #[error("launch of `{kernel}` refused: {reason}")]
    BadLaunch { kernel: String, reason: String },
    /// A collective on a device that belongs to no group (or whose backend has none): plan the
    /// whole model for it instead of a rank's graph.
    #[error("device {device} runs no collectives (it is not one rank of a group)")]
    NoCollectives { device: String },
    /// A library contraction on a device without the library (a plan made for another device).
    #[error("device {device} has no library for half-precision contractions")]
    NoLibrary { device: String },
    /// A collective failed on the device's group (NCCL's error text), or the group was aborted
    /// because another rank failed.
    #[error("collective failed: {reason}")]
    Collective { reason: String },
    /// A host-side copy out of a buffer's bounds (an engine bug).
    #[error("copy of {len} B at offset {offset} exceeds a {size} B buffer")]
    OutOfBounds { offset: u64, len: u64, size: u64 },
}

impl DeviceError {
    /// Whether this error leaves the device unusable.
    pub fn poisons(&self) -> bool {
        !matches!(
            self,
            DeviceError::Compile { .. }
                | DeviceError::OutOfMemory { .. }
                | DeviceError::Unavailable { .. }
                | DeviceError::BadLaunch { .. }
                | DeviceError::KernelFault { .. }
                | DeviceError::NoCollectives { .. }
                | DeviceError::NoLibrary { .. }
        )
    }
}

/// Why an executor call failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ExecError {
    /// The device failed (see [`DeviceError::poisons`]).
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The planner refused the graph for this device.
    #[error(transparent)]
    Plan(#[from] poot_graph_plan::PlanError),
    /// An earlier failure poisoned the engine; nothing was submitted.
    #[error("the executor is poisoned by an earlier failure: {first}")]
    Poisoned { first: String },
    /// A step failed after it replayed; call `reset_state` before stepping again.
    #[error("entry {entry} needs reset_state after a failed step")]
    NeedsReset { entry: usize },
    #[error("no executable {id}")]
    UnknownExecutable { id: usize },
    #[error("no entry {id}")]
    UnknownEntry { id: usize },
    /// A chain that does not fit its entry, or a chain call out of its bounds.
    #[error("chained decode: {why}")]
    Chain { why: String },
    /// A graph names a constant the executable's source does not provide.
    #[error("constant `{name}` is not bound by the executable's weights")]
    UnboundConst { name: String },
    /// A host write into a constant that is not one whole uploaded buffer (unknown, split into
    /// row chunks for the target's buffer limit), or past its end, or an executor that does not
    /// write constants after loading (a device group).
    #[error("constant `{name}` cannot be written at {offset_bytes}+{len_bytes} B: {why}")]
    ConstWrite {
        name: String,
        offset_bytes: u64,
        len_bytes: u64,
        why: &'static str,
    },
    #[error("state `{name}` is not allocated")]
    UnboundState { name: String },
    /// Two entries of one executable declare one state with different sizes.
    #[error("state `{name}` exists with {existing_bytes} B; an entry asks for {requested_bytes} B")]
    StateShape {
        name: String,
        existing_bytes: u64,
        requested_bytes: u64,
    },
    /// The step was not given a slot its entry reads.
    #[error("slot `{slot}` is not bound")]
    MissingSlot { slot: String },
    #[error("slot `{slot}` needs {expected_bytes} B, got {got_bytes} B")]
    SlotSize {
        slot: String,
        expected_bytes: u64,
        got_bytes: u64,
    },
    /// A constant chunk a plan binds lies outside the constant's bytes (the graph's constant
    /// type does not match the bytes the source holds for it).
    #[error(
        "constant `{name}` has {size_bytes} B; a plan binds {len_bytes} B of it from offset {offset_bytes}"
    )]
    ConstRange {
        name: String,
        offset_bytes: u64,
        len_bytes: u64,
        size_bytes: u64,
    },
    /// Allocating `what` (the weights, or an entry by its label) would take the device past its
    /// memory; nothing was allocated. Unload an executable or remove entries first, or plan a
    /// smaller step.
    #[error(
        "{what}: needs {needed_bytes} B more of device memory; {held_bytes} B are held and the device has {memory_bytes} B"
    )]
    OutOfMemory {
        what: String,
        needed_bytes: u64,
        held_bytes: u64,
        memory_bytes: u64,
    },
    /// A call that needs one graph or weight source per rank was given another number (a group
    /// of `ranks` is driven through the ranked calls).
    #[error("the executor drives {ranks} ranks; {given} were given")]
    RankCount { ranks: usize, given: usize },
    /// Rank `rank` of a group failed; a failure after the step was submitted poisons the group
    /// (its collectives are aborted on every rank).
    #[error("rank {rank}: {source}")]
    Rank { rank: usize, source: Box<ExecError> },
    /// A rank's worker is gone (its thread ended); the group is unusable.
    #[error("rank {rank}'s worker is gone")]
    RankLost { rank: usize },
    /// An engine invariant failed (a bug), reported instead of panicking.
    #[error("executor invariant failed: {what}")]
    Internal { what: &'static str },
}
