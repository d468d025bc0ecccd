//! Counts over a traced graph.

use crate::graph::Graph;
use crate::op::OpKind;

/// Dispatches an unfused graph would issue: one per equation that computes or moves data.
/// Reshapes (views) and literals (folded into their consumers) issue none.
pub fn dispatch_count(g: &Graph) -> usize {
    g.eqns()
        .iter()
        .filter(|e| !e.op.is_view() && !matches!(e.op, OpKind::Literal(_)))
        .count()
}

/// Equations per op name, sorted by name: a compact summary for plan snapshots.
pub fn op_histogram(g: &Graph) -> Vec<(&'static str, usize)> {
    let mut counts = std::collections::BTreeMap::new();
    for e in g.eqns() {
        *counts.entry(e.op.name()).or_insert(0) += 1;
    }
    counts.into_iter().collect()
}
