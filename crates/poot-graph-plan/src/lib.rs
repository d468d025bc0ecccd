//! The planner: lowers a poot graph to kernel descriptions for a target, with every buffer
//! planned, or refuses with a typed error naming the op or constant and the limit it breaks.
//!
//! [`compile`] is the one entry point. A plan is a list of kernels (each described once in
//! [`kernel::ir`] and rendered per backend), the buffers they bind (inputs, and intermediates
//! packed into reused scratch buffers at fixed addresses), and the dispatch list one step
//! replays.

pub mod kernel;
pub mod lower;
pub mod plan;
pub mod refusal;
pub mod target;

use poot_graph_ir::Graph;

pub use plan::{BufferDecl, BufferId, BufferRole, DeviceWords, Dispatch, HostValue, Plan};
pub use refusal::PlanError;
pub use target::{Backend, Target, TargetLimits};

/// Plans `graph` for `target`.
pub fn compile(graph: &Graph, target: &Target) -> Result<Plan, PlanError> {
    graph.validate()?;
    lower::lower(graph, target)
}
