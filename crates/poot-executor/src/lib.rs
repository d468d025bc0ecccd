//! The executor contract: one generic [`Engine`] over a thin per-backend [`Device`], behind the
//! object-safe [`Executor`] the driver drives.

mod chain;
mod coordinator;
mod device;
mod engine;
mod error;
mod executor;
mod limits;
#[cfg(feature = "suite")]
pub mod suite;

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
