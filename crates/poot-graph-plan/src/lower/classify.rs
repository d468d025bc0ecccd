//! Which values get a buffer, and which kernel computes each. An element-wise equation is
//! computed inside its readers' kernels (recomputed in each when it has several and is cheap); a
//! reduction by the readers that need its rows ([`Placement::RowReduce`]); a contraction whose
//! sums flow element by element into one stored value by that value's kernel
//! ([`Placement::Absorbed`]); a recognised attention by its rewrite. Everything else is
//! materialized once.

use std::collections::{HashMap, HashSet};

use poot_graph_ir::{DType, Graph, OpKind, Storage, ValueId};

use super::attention::{self, Attention};
use super::{gemm, split};

/// How a value is produced in the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// A graph input (const, slot, state): it has its own buffer.
    Input,
    /// Computed inside the kernel of its reader, element by element.
    Inline,
    /// Computed by its own kernel into a buffer.
    Materialized,
    /// A reshape of a buffered value: the same buffer, no kernel.
    View,
    /// A reduction each reader computes for the rows it needs, once per row, before it reads
    /// them (a norm's sum of squares inside the projection that consumes the norm). A reader
    /// that cannot (its index is not known before its loop) materializes it instead. A
    /// reduction over rows long enough to split across workgroups (a vocabulary's logits, see
    /// `split`) is materialized from the start.
    RowReduce,
    /// A contraction computed by the kernel of the value its sums flow into element by element
    /// (a residual add, a gated activation): its epilogue, see [`Classification::epilogues`].
    Absorbed,
}

/// Ops computed one output element at a time from a few input elements.
pub fn is_elementwise_like(op: &OpKind) -> bool {
    match op {
        OpKind::Literal(_)
        | OpKind::Iota { .. }
        | OpKind::Unary(_)
        | OpKind::Binary(_)
        | OpKind::Compare(_)
        | OpKind::Select
        | OpKind::Cast { .. }
        | OpKind::Reshape { .. }
        | OpKind::Broadcast { .. }
        | OpKind::Transpose { .. }
        | OpKind::Slice { .. }
        | OpKind::Concat { .. }
        | OpKind::Gather { .. }
        | OpKind::TakeAlong { .. }
        | OpKind::DynamicSlice { .. } => true,
        OpKind::DynamicUpdateSlice
        | OpKind::ScatterUpdate { .. }
        | OpKind::Reduce { .. }
        | OpKind::ArgMax { .. }
        | OpKind::ArgTopK { .. }
        | OpKind::MatMul { .. }
        | OpKind::IndexedMatMul
        | OpKind::AllReduceSum { .. }
        | OpKind::BroadcastFrom { .. } => false,
    }
}

/// How a reader reads one operand, which decides whether a producer may be computed inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Read {
    /// Each operand element once per output element (or once in all): inlining a producer
    /// costs what a kernel of its own would.
    Elementwise,
    /// The left side of a contraction: each element once per output column.
    ContractionLhs,
    /// Anything else (the operand updated in place, a contraction's weights, top-k's passes).
    Other,
}

fn read_kind(op: &OpKind, operand: usize) -> Read {
    match op {
        OpKind::Literal(_)
        | OpKind::Iota { .. }
        | OpKind::Unary(_)
        | OpKind::Binary(_)
        | OpKind::Compare(_)
        | OpKind::Select
        | OpKind::Cast { .. }
        | OpKind::Reshape { .. }
        | OpKind::Broadcast { .. }
        | OpKind::Transpose { .. }
        | OpKind::Slice { .. }
        | OpKind::Concat { .. }
        | OpKind::Gather { .. }
        | OpKind::TakeAlong { .. }
        | OpKind::DynamicSlice { .. }
        | OpKind::Reduce { .. }
        | OpKind::ArgMax { .. } => Read::Elementwise,
        // The new values and their positions are read once each; the operand is updated.
        OpKind::DynamicUpdateSlice | OpKind::ScatterUpdate { .. } if operand > 0 => {
            Read::Elementwise
        }
        OpKind::MatMul { .. } | OpKind::IndexedMatMul if operand == 0 => Read::ContractionLhs,
        OpKind::DynamicUpdateSlice
        | OpKind::ScatterUpdate { .. }
        | OpKind::MatMul { .. }
        | OpKind::IndexedMatMul
        | OpKind::ArgTopK { .. }
        // A collective reads its operand's buffer, not elements a kernel could compute.
        | OpKind::AllReduceSum { .. }
        | OpKind::BroadcastFrom { .. } => Read::Other,
    }
}

/// The most arithmetic a value with several readers may cost to be recomputed in each of them
/// rather than stored once (a rotary embedding, a norm's scaling): every reader
/// computes it per element it needs, which at batch 1 is far cheaper than a launch.
const RECOMPUTE_MAX: u32 = 64;

/// The same bound when a contraction reads the value (a norm feeding projections): each of its
/// output columns recomputes the whole row, so only a norm-sized chain is worth it.
const RECOMPUTE_IN_CONTRACTION_MAX: u32 = 24;

/// The most output columns a contraction may have to recompute its left side: a wider one (a
/// vocabulary head) would redo the whole row's work in each of very many workgroups, which
/// costs more than storing the row once.
const RECOMPUTE_COLUMNS_MAX: usize = 16384;

/// The most rows a contraction may have to recompute its left side. With few rows (a decode
/// step) a contraction is bound by reading its weights and recomputing a norm per column is
/// free; with many (a prefill chunk, an encoder batch) it is bound by arithmetic, which the
/// recomputation would multiply. A tiled contraction ([`gemm`](super::gemm)) computes its left
/// side once per tile of 64 columns, and its norm once per tile of rows: it may have any rows.
const RECOMPUTE_ROWS_MAX: usize = 16;

/// Output rows of the contraction `eqn` (every axis but the last).
fn rows(g: &Graph, eqn: usize) -> usize {
    let out = g.eqns()[eqn].out;
    let dims = g.values()[out.index()].ty.dims();
    dims[..dims.len().saturating_sub(1)].iter().product()
}

/// Output columns of the contraction `eqn`.
fn columns(g: &Graph, eqn: usize) -> usize {
    let out = g.eqns()[eqn].out;
    g.values()[out.index()]
        .ty
        .dims()
        .last()
        .copied()
        .unwrap_or(1)
}

/// The same bound for a value that also feeds a reduction: only what is little more than a load
/// (a mask from the positions, an embedding row), so chains of recomputation stay short.
const RECOMPUTE_UNDER_REDUCTION_MAX: u32 = 6;

/// Arithmetic `op` costs per element when computed in place; movement is index arithmetic.
fn op_cost(op: &OpKind) -> u32 {
    match op {
        OpKind::Literal(_)
        | OpKind::Iota { .. }
        | OpKind::Reshape { .. }
        | OpKind::Broadcast { .. }
        | OpKind::Transpose { .. }
        | OpKind::Slice { .. }
        | OpKind::Cast { .. } => 0,
        OpKind::Unary(_)
        | OpKind::Binary(_)
        | OpKind::Compare(_)
        | OpKind::Select
        | OpKind::Concat { .. }
        | OpKind::Gather { .. }
        | OpKind::TakeAlong { .. }
        | OpKind::DynamicSlice { .. }
        | OpKind::DynamicUpdateSlice
        | OpKind::ScatterUpdate { .. }
        | OpKind::Reduce { .. }
        | OpKind::ArgMax { .. }
        | OpKind::ArgTopK { .. }
        | OpKind::MatMul { .. }
        | OpKind::IndexedMatMul
        | OpKind::AllReduceSum { .. }
        | OpKind::BroadcastFrom { .. } => 1,
    }
}

/// Use counts, producers and placements of every value.
pub struct Classification {
    pub uses: Vec<u32>,
    pub producer: Vec<Option<usize>>,
    pub placement: Vec<Placement>,
    /// Whether computing the value in place reads a row reduction (it is one, or inlines one).
    pub reads_row_reduce: Vec<bool>,
    /// The contractions each materialized value's kernel computes itself, by value index.
    pub epilogues: HashMap<usize, Vec<ValueId>>,
    /// Recognised attentions, by the equation of their output contraction.
    pub attention: HashMap<usize, Attention>,
    /// Every (equation, operand) reading each value.
    pub readers: Vec<Vec<(usize, usize)>>,
}

impl Classification {
    /// Whether the kernel computing `eqn`'s output reads a row reduction through its inputs, so
    /// it should run one workgroup per row.
    pub fn eqn_reads_row_reduce(&self, g: &Graph, eqn: usize) -> bool {
        g.eqns()[eqn]
            .inputs
            .iter()
            .any(|v| self.reads_row_reduce[v.index()])
    }
}

/// How values are placed; `rewrite_attention` takes the flash-attention rewrite where it applies.
pub fn classify(
    g: &Graph,
    rewrite_attention: bool,
    library: &HashSet<usize>,
    tiled_min_rows: usize,
) -> Classification {
    let n = g.values().len();
    let mut uses = vec![0u32; n];
    let mut producer = vec![None; n];
    let mut consumer: Vec<Option<usize>> = vec![None; n];
    // Every (reader, operand) of each value.
    let mut readers: Vec<Vec<(usize, usize)>> = vec![Vec::new(); n];
    for (i, e) in g.eqns().iter().enumerate() {
        producer[e.out.index()] = Some(i);
        for (j, &v) in e.inputs.iter().enumerate() {
            uses[v.index()] += 1;
            consumer[v.index()] = Some(i);
            readers[v.index()].push((i, j));
        }
    }
    let mut pinned = vec![false; n];
    for &o in &g.outputs().primary {
        pinned[o.index()] = true;
    }
    for &(_, so) in &g.outputs().state {
        pinned[so.index()] = true;
    }
    let attention = if rewrite_attention {
        attention::find_all(g, &uses, &pinned, &producer)
    } else {
        HashMap::new()
    };
    // The rewrite reads each query element once per workgroup, not once per score.
    let query_reads: Vec<usize> = attention.values().map(|a| a.scores_eqn).collect();
    let read_kind = |r: usize, j: usize| {
        if j == 0 && query_reads.contains(&r) {
            Read::Elementwise
        } else {
            read_kind(&g.eqns()[r].op, j)
        }
    };
    // Whether a value reaches a reduction through element-wise ops; and through ops whose
    // results have no other reader (so the reduction reads the value itself, not a stored
    // result built on it).
    let mut feeds_reduce = vec![false; n];
    let mut feeds_reduce_alone = vec![false; n];
    for e in g.eqns().iter().rev() {
        let out = e.out.index();
        let (through, alone) = match &e.op {
            OpKind::Reduce { .. } | OpKind::ArgMax { .. } => (true, true),
            op if is_elementwise_like(op) => {
                (feeds_reduce[out], feeds_reduce_alone[out] && uses[out] == 1)
            }
            _ => (false, false),
        };
        for v in &e.inputs {
            feeds_reduce[v.index()] |= through;
            feeds_reduce_alone[v.index()] |= alone;
        }
    }
    let mut placement = vec![Placement::Materialized; n];
    for (i, v) in g.values().iter().enumerate() {
        if !matches!(v.storage, Storage::Device) {
            placement[i] = Placement::Input;
        }
    }
    // Values computed by index arithmetic alone from buffered values (views, movement ops and
    // dense gathers through buffered indices):
    // cheap enough to inline even into readers that read each element many times.
    let mut movement_only: Vec<bool> = placement.iter().map(|p| *p == Placement::Input).collect();
    // What reading each value costs per element: a load when it has a buffer, its arithmetic
    // when it is computed in place.
    let mut cost = vec![1u32; n];
    // Whether a contraction's sums reach the value through same-shape element-wise ops.
    let mut reaches_contraction = vec![false; n];
    for e in g.eqns() {
        let out = e.out.index();
        let op = &e.op;
        let moves = match op {
            OpKind::Reshape { .. }
            | OpKind::Broadcast { .. }
            | OpKind::Transpose { .. }
            | OpKind::Slice { .. } => true,
            // Widening a half to f32 (an f16 KV cache read by attention) is exact and costs
            // no more than the load.
            OpKind::Cast { to: DType::F32 } => matches!(
                g.values()[e.inputs[0].index()].ty.dtype,
                DType::F16 | DType::BF16
            ),
            // A dense gather through a buffered index (a paged KV cache read through its block
            // table) is index arithmetic plus one index load per element.
            OpKind::Gather { .. } => {
                !matches!(g.values()[e.inputs[0].index()].ty.dtype, DType::Packed(_))
                    && movement_only[e.inputs[1].index()]
            }
            _ => false,
        };
        let into_contraction = matches!(
            consumer[out].map(|c| &g.eqns()[c].op),
            Some(OpKind::MatMul { .. } | OpKind::IndexedMatMul)
        );
        let own_cost = e
            .inputs
            .iter()
            .fold(op_cost(op), |c, v| c.saturating_add(cost[v.index()]));
        reaches_contraction[out] = is_identity_elementwise(op)
            && e.inputs.iter().any(|v| {
                let i = v.index();
                g.values()[i].ty.shape == g.values()[out].ty.shape
                    && ((plain_contraction(g, producer[i], placement[i], pinned[i], library)
                        && !feeds_reduce_alone[i])
                        || (placement[i] == Placement::Inline && reaches_contraction[i]))
            });
        // Computed in place by each of its readers, when each reads it element by element (or
        // as a contraction's left side) and recomputing it is cheap enough. A value with several
        // readers is stored once instead when a contraction's sums flow into it (stored, its
        // kernel computes them: see `epilogues`), or when it feeds a reduction (a residual sum
        // feeding a norm: recomputed, it would be recomputed again inside every later value
        // built on it, and per element in every pass over the row) and is more than a load or
        // two (a mask, an embedding row).
        let recompute = || {
            let single = uses[out] == 1;
            let single_elementwise = single
                && readers[out]
                    .iter()
                    .all(|&(r, j)| read_kind(r, j) == Read::Elementwise);
            single_elementwise
                || ((!feeds_reduce[out] || own_cost <= RECOMPUTE_UNDER_REDUCTION_MAX)
                    && !reaches_contraction[out]
                    && !readers[out].is_empty()
                    && readers[out].iter().all(|&(r, j)| match read_kind(r, j) {
                        Read::Elementwise => own_cost <= RECOMPUTE_MAX,
                        Read::ContractionLhs => {
                            own_cost <= RECOMPUTE_IN_CONTRACTION_MAX
                                && columns(g, r) <= RECOMPUTE_COLUMNS_MAX
                                && (rows(g, r) <= RECOMPUTE_ROWS_MAX
                                    || gemm::tiled(g, r, tiled_min_rows))
                        }
                        Read::Other => false,
                    }))
        };
        placement[out] = if moves
            && movement_only[e.inputs[0].index()]
            && into_contraction
            && !pinned[out]
            && uses[out] == 1
        {
            // A contraction reads a repeated or permuted operand (GQA's shared K/V heads) in place.
            match placement[e.inputs[0].index()] {
                Placement::Input | Placement::Materialized | Placement::View
                    if matches!(op, OpKind::Reshape { .. }) =>
                {
                    Placement::View
                }
                Placement::Input
                | Placement::Materialized
                | Placement::View
                | Placement::Inline
                | Placement::RowReduce
                | Placement::Absorbed => Placement::Inline,
            }
        } else if matches!(op, OpKind::Reshape { .. })
            && matches!(
                placement[e.inputs[0].index()],
                Placement::Input | Placement::Materialized | Placement::View
            )
        {
            Placement::View
        } else if matches!(op, OpKind::Literal(_) | OpKind::Iota { .. }) && !pinned[out] {
            Placement::Inline
        } else if matches!(op, OpKind::Reduce { .. })
            && !pinned[out]
            && split::reduction_parts(g, e) == 1
        {
            Placement::RowReduce
        } else if is_elementwise_like(op) && !pinned[out] && recompute() {
            Placement::Inline
        } else {
            Placement::Materialized
        };
        movement_only[out] = match placement[out] {
            Placement::Materialized | Placement::View | Placement::Input => true,
            Placement::Inline => moves && movement_only[e.inputs[0].index()],
            Placement::RowReduce | Placement::Absorbed => false,
        };
        cost[out] = match placement[out] {
            Placement::Inline => own_cost,
            // Computed once per row before the reader's loop: a variable, plus the pass.
            Placement::RowReduce => own_cost.saturating_add(1),
            Placement::Materialized | Placement::View | Placement::Input | Placement::Absorbed => 1,
        };
    }
    for a in attention.values() {
        for v in &a.internal {
            placement[v.index()] = Placement::Absorbed;
        }
    }
    let mut reads_row_reduce = vec![false; n];
    for e in g.eqns() {
        let out = e.out.index();
        reads_row_reduce[out] = match placement[out] {
            Placement::RowReduce => true,
            Placement::Inline => e.inputs.iter().any(|v| reads_row_reduce[v.index()]),
            Placement::Input | Placement::Materialized | Placement::View | Placement::Absorbed => {
                false
            }
        };
    }
    let mut sinks = Sinks {
        g,
        readers: &readers,
        placement: &placement,
        memo: HashMap::new(),
    };
    let mut epilogues: HashMap<usize, Vec<ValueId>> = HashMap::new();
    for (i, e) in g.eqns().iter().enumerate() {
        let out = e.out.index();
        if plain_contraction(g, Some(i), placement[out], pinned[out], library)
            && let Some(sink) = sinks.sink(out)
        {
            epilogues.entry(sink).or_default().push(e.out);
        }
    }
    for mms in epilogues.values() {
        for v in mms {
            placement[v.index()] = Placement::Absorbed;
        }
    }
    Classification {
        uses,
        producer,
        placement,
        reads_row_reduce,
        epilogues,
        attention,
        readers,
    }
}

/// Ops that compute each output element from the same index of same-shape inputs.
pub(super) fn is_identity_elementwise(op: &OpKind) -> bool {
    matches!(
        op,
        OpKind::Unary(_)
            | OpKind::Binary(_)
            | OpKind::Compare(_)
            | OpKind::Select
            | OpKind::Cast { .. }
    )
}

/// Whether the value `eqn` produces is a materialized plain contraction (`MatMul`) that another
/// kernel may compute instead.
/// Whether eqn's contraction is computed by a kernel of its own that can take an epilogue (not
/// by the device's library, whose result is stored as it is).
fn plain_contraction(
    g: &Graph,
    eqn: Option<usize>,
    p: Placement,
    pinned: bool,
    library: &HashSet<usize>,
) -> bool {
    let Some(i) = eqn else { return false };
    p == Placement::Materialized
        && !pinned
        && !library.contains(&i)
        && matches!(g.eqns()[i].op, OpKind::MatMul { .. })
        && g.values()[g.eqns()[i].out.index()].ty.rank() >= 2
}

/// Where a value's every use flows, element by element.
struct Sinks<'a> {
    g: &'a Graph,
    readers: &'a [Vec<(usize, usize)>],
    placement: &'a [Placement],
    memo: HashMap<usize, Option<usize>>,
}

impl Sinks<'_> {
    /// The one materialized value every use of `v` reaches through same-shape element-wise ops
    /// computed in place (so it reads `v` at its own index only), if there is one.
    fn sink(&mut self, v: usize) -> Option<usize> {
        if let Some(&s) = self.memo.get(&v) {
            return s;
        }
        let mut found = None;
        let mut ok = !self.readers[v].is_empty();
        for &(r, _) in &self.readers[v] {
            let e = &self.g.eqns()[r];
            let w = e.out.index();
            if !is_identity_elementwise(&e.op)
                || self.g.values()[w].ty.shape != self.g.values()[v].ty.shape
            {
                ok = false;
                break;
            }
            let s = match self.placement[w] {
                Placement::Materialized => Some(w),
                Placement::Inline => self.sink(w),
                Placement::Input | Placement::View | Placement::RowReduce | Placement::Absorbed => {
                    None
                }
            };
            match (s, found) {
                (None, _) => ok = false,
                (Some(s), Some(f)) if s != f => ok = false,
                (Some(s), _) => found = Some(s),
            }
            if !ok {
                break;
            }
        }
        let result = if ok { found } else { None };
        self.memo.insert(v, result);
        result
    }
}
