//! What one decode step must move through device memory, read off the decode graph the driver
//! replays: every constant the step reads (only the gathered rows of a table it indexes, such as
//! the token embedding), and the KV cache per position of context. This is the floor a
//! memory-bound decode is measured against; the planner's own traffic can only be larger.

use std::collections::HashMap;

use poot_executor::{ConstBytes, ConstSource};
use poot_graph_ir::{Graph, OpKind, ValueId};
use poot_graph_plan::{Target, compile};
use poot_llm::sampling::{Head, append_head};
use poot_llm::{HandleWeights, ModelHandle};
use poot_models::{KvType, StepShape, StepSpec};

use crate::error::CliError;

/// One decode step's memory traffic and size.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodeTraffic {
    /// Constant bytes the step reads (a constant stored once counts once).
    pub weight_bytes: u64,
    /// KV cache bytes per position of context, as the device stores them.
    pub kv_bytes_per_position: u64,
    /// KV cache elements per position (for comparing engines that store it in another type).
    pub kv_elems_per_position: u64,
    /// Kernel launches the decode entry replays per token.
    pub dispatches: usize,
}

impl DecodeTraffic {
    /// Weights plus the KV cache read at `context` positions.
    pub fn bytes_at(&self, context: f64) -> f64 {
        self.weight_bytes as f64 + self.kv_bytes_per_position as f64 * context
    }
}

/// Traces and plans the greedy single-token step at `capacity` for `target`, as the driver
/// prepares it, and measures it.
pub fn decode_traffic(
    handle: &std::sync::Arc<ModelHandle>,
    target: &Target,
    capacity: usize,
    kv_type: KvType,
    trace: poot_graph_ir::TraceLimits,
) -> Result<DecodeTraffic, CliError> {
    let shape = StepShape::new(1, 1, capacity).with_kv_type(kv_type);
    let graph = handle
        .model()
        .trace(&StepSpec::step(shape), trace)
        .map_err(|e| CliError::Driver(e.into()))?;
    let graph = append_head(graph, Head::Greedy, trace, 1)
        .map_err(|e| CliError::Driver(poot_llm::DriverError::Suffix(e)))?;
    let plan = compile(&graph, target)
        .map_err(|e| CliError::Driver(poot_llm::DriverError::Exec(e.into())))?;
    let weights = HandleWeights::new(std::sync::Arc::clone(handle));
    // Constants that borrow the same stored bytes (a tied embedding and head) are one buffer
    // on the device: key them by address and keep the larger fraction read.
    let mut read: HashMap<(usize, usize), (u64, f64)> = HashMap::new();
    for (id, name, ty) in graph.consts() {
        let stored = ty.size_bytes().unwrap_or(0);
        let key = match weights.bytes(name) {
            Some(ConstBytes::Stored(b)) => (b.as_ptr() as usize, b.len()),
            Some(ConstBytes::F32(v)) => (v.as_ptr() as usize, v.len() * 4),
            None => (id.index(), usize::MAX),
        };
        let fraction = read_fraction(&graph, id);
        let e = read.entry(key).or_insert((stored, 0.0));
        e.0 = e.0.max(stored);
        e.1 = (e.1 + fraction).min(1.0);
    }
    let weight_bytes = read
        .values()
        .map(|&(bytes, fraction)| (bytes as f64 * fraction).round() as u64)
        .sum();
    let (mut kv_bytes, mut kv_elems) = (0u64, 0u64);
    for (_, _, ty) in graph.states() {
        kv_bytes += ty.size_bytes().unwrap_or(0);
        kv_elems += ty.shape.n_elems().unwrap_or(0) as u64;
    }
    let per = capacity.max(1) as u64;
    Ok(DecodeTraffic {
        weight_bytes,
        kv_bytes_per_position: kv_bytes / per,
        kv_elems_per_position: kv_elems / per,
        dispatches: plan.dispatches.len(),
    })
}

/// The fraction of `value` the step reads: whole, unless every use only indexes into it
/// (gathered rows, a slice, selected experts), possibly through reshapes and transposes.
fn read_fraction(graph: &Graph, value: ValueId) -> f64 {
    let elems = |id: ValueId| {
        graph
            .ty(id)
            .and_then(|t| t.shape.n_elems())
            .unwrap_or(0)
            .max(1) as f64
    };
    let mut total = 0.0;
    for eqn in graph.eqns() {
        for (slot, &input) in eqn.inputs.iter().enumerate() {
            if input != value {
                continue;
            }
            let part = match (&eqn.op, slot) {
                (OpKind::Reshape { .. } | OpKind::Transpose { .. }, 0) => {
                    read_fraction(graph, eqn.out)
                }
                (OpKind::Gather { .. } | OpKind::Slice { .. } | OpKind::DynamicSlice { .. }, 0) => {
                    elems(eqn.out) / elems(value)
                }
                (OpKind::IndexedMatMul, 1) => {
                    let experts = graph
                        .ty(value)
                        .and_then(|t| t.dims().first().copied())
                        .unwrap_or(1)
                        .max(1) as f64;
                    let rows = eqn.inputs.get(2).map_or(experts, |&idx| elems(idx));
                    rows.min(experts) / experts
                }
                _ => 1.0,
            };
            total += part;
        }
    }
    total.min(1.0)
}
