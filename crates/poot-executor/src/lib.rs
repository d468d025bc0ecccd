//! The executor contract: one generic [`Engine`] over a thin per-backend [`Device`], behind the
//! object-safe [`Executor`] the driver drives.

mod chain;
mod coordinator;
mod device;
mod engine;
mod error;
mod executor;
pub mod in_flight;
mod limits;
pub mod poison;
#[cfg(feature = "suite")]
pub mod suite;
pub mod wait;
pub mod wgsl;

pub use chain::{ChainCounter, ChainFeed, PagedFeed};
pub use coordinator::{Coordinator, GroupAbort, RankExecutor};
pub use device::{Command, Contraction, Device, Launch};
pub use engine::Engine;
pub use error::{DeviceError, ExecError};
pub use executor::{
    ChainId, ConstBytes, ConstSource, CopyBandwidth, EntryId, ExecStats, ExecutableId, Executor,
    KernelTime, StepInputs, StepOutputs,
};
pub use limits::DeviceLimits;

// What a device meets of the planner, re-exported so the device crates take it from the
// contract they implement rather than depend on the planner: the backend and target a device
// is planned as and the tuning its options default to; the operands of the library
// contractions a plan hands it (`Command::Contract`) and the block formats each library
// takes; the codes of the kernel checks a fault reports; a plan's refusal. Kernels themselves
// come from `poot-kernel`, which a device renders.
pub use poot_graph_plan::activation_blocks::INTEGER_BLOCKS;
pub use poot_graph_plan::lower::fault;
pub use poot_graph_plan::{
    Backend, EXACT_LIBRARY_BLOCKS, HalfType, LIBRARY_DECODED_BLOCKS, LaunchOverlap,
    LibraryOperands, PlanError, StoredWeights, Target, Tuning, WeightWords,
};
