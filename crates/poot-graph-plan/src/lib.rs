//! The planner: lowers a poot graph to kernel descriptions for a target, with every buffer
//! planned, or refuses with a typed error naming the op or constant and the limit it breaks.
//!
//! [`compile`] is the one entry point ([`compile_entry`] is the same, naming the entry in a
//! refusal). Where the target multiplies in half precision, the left sides of those
//! contractions are first rounded in the graph ([`precision`]); constants too large for one
//! buffer are split into row chunks ([`legalize`]). A plan is a list of kernels (each described
//! once in `poot-kernel`'s IR; the device crates render them), the buffers they bind (inputs,
//! and intermediates packed into reused scratch buffers at fixed addresses), and the dispatch
//! list one step replays.

pub mod activation_blocks;
pub mod legalize;
pub mod lower;
pub mod plan;
pub mod precision;
pub mod refusal;
pub mod target;

use poot_graph_ir::Graph;

pub use plan::{
    BufferDecl, BufferId, BufferRole, Collective, CollectiveOp, DeviceWords, Dispatch,
    EXACT_LIBRARY_BLOCKS, HalfType, HostValue, LIBRARY_DECODED_BLOCKS, LibraryContraction,
    LibraryOperands, MemoryUse, Plan, StoredWeights, WeightWords,
};
pub use refusal::PlanError;
pub use target::{
    Backend, BlockTiles, LaunchOverlap, MatrixUnits, Target, TargetLimits, Tuning, TuningError,
};

/// Plans `graph` for `target`: rounds the left sides of contractions the target multiplies in
/// half precision ([`precision::round_half_operands`]) or in 8-bit integers
/// ([`activation_blocks::round_activation_blocks`]): the plan computes that graph, which is
/// what a device is compared with; splits constants too large for one buffer into row
/// chunks, lowers, and refuses a plan whose buffers exceed the device's memory.
pub fn compile(graph: &Graph, target: &Target) -> Result<Plan, PlanError> {
    graph.validate()?;
    let rounded = rounded_for_target(graph, target)?;
    let legal = legalize::split_large_constants(&rounded, target)?;
    let mut plan = lower::lower(&legal.graph, target)?;
    legalize::bind_chunks(&mut plan, &legal.chunks);
    check_memory(&plan, target)?;
    Ok(plan)
}

/// `graph` with the roundings `target`'s products make written in
/// ([`precision::round_half_operands`], [`activation_blocks::round_activation_blocks`]): the
/// graph a plan for `target` computes, and so what the oracle evaluates to compare a device
/// with.
pub fn rounded_for_target<'g>(
    graph: &'g Graph,
    target: &Target,
) -> Result<std::borrow::Cow<'g, Graph>, PlanError> {
    let half = precision::round_half_operands(graph, target)?;
    Ok(
        match activation_blocks::round_activation_blocks(&half, target)? {
            std::borrow::Cow::Owned(g) => std::borrow::Cow::Owned(g),
            std::borrow::Cow::Borrowed(_) => half,
        },
    )
}

/// [`compile`] for one entry of an executor: a refusal names the entry (`entry` says which step
/// shape or caller label it is).
pub fn compile_entry(graph: &Graph, target: &Target, entry: &str) -> Result<Plan, PlanError> {
    compile(graph, target).map_err(|source| PlanError::InEntry {
        entry: entry.to_string(),
        source: Box::new(source),
    })
}

fn check_memory(plan: &Plan, target: &Target) -> Result<(), PlanError> {
    let Some(memory_bytes) = target.limits.memory_bytes else {
        return Ok(());
    };
    let m = plan.memory();
    if m.total_bytes() <= memory_bytes {
        return Ok(());
    }
    Err(PlanError::OutOfMemory {
        backend: target.backend,
        needed_bytes: m.total_bytes(),
        weight_bytes: m.weight_bytes,
        state_bytes: m.state_bytes,
        slot_bytes: m.slot_bytes,
        scratch_bytes: m.scratch_bytes,
        memory_bytes,
    })
}
