//! Which values get a buffer. An elementwise-like equation whose only reader computes element by
//! element is inlined into that reader's kernel; everything else is materialized once.

use poot_graph_ir::{Graph, OpKind, Storage};

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
    /// that cannot (its index is not known before its loop) materializes it instead.
    RowReduce,
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
        | OpKind::IndexedMatMul => false,
    }
}

/// Readers that consume each input element once per output element they compute, so an inlined
/// producer is not recomputed more than an element-wise kernel would.
fn reads_elementwise(op: &OpKind) -> bool {
    is_elementwise_like(op) || matches!(op, OpKind::Reduce { .. } | OpKind::ArgMax { .. })
}

/// Use counts, producers and placements of every value.
pub struct Classification {
    pub uses: Vec<u32>,
    pub producer: Vec<Option<usize>>,
    pub placement: Vec<Placement>,
    /// Whether computing the value in place reads a row reduction (it is one, or inlines one).
    pub reads_row_reduce: Vec<bool>,
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

pub fn classify(g: &Graph) -> Classification {
    let n = g.values().len();
    let mut uses = vec![0u32; n];
    let mut producer = vec![None; n];
    let mut consumer: Vec<Option<usize>> = vec![None; n];
    for (i, e) in g.eqns().iter().enumerate() {
        producer[e.out.index()] = Some(i);
        for &v in &e.inputs {
            uses[v.index()] += 1;
            consumer[v.index()] = Some(i);
        }
    }
    let mut pinned = vec![false; n];
    for &o in &g.outputs().primary {
        pinned[o.index()] = true;
    }
    for &(_, so) in &g.outputs().state {
        pinned[so.index()] = true;
    }
    let mut placement = vec![Placement::Materialized; n];
    for (i, v) in g.values().iter().enumerate() {
        if !matches!(v.storage, Storage::Device) {
            placement[i] = Placement::Input;
        }
    }
    // Values computed by index arithmetic alone from buffered values (views and movement ops):
    // cheap enough to inline even into readers that read each element many times.
    let mut movement_only: Vec<bool> = placement.iter().map(|p| *p == Placement::Input).collect();
    for e in g.eqns() {
        let out = e.out.index();
        let op = &e.op;
        let moves = matches!(
            op,
            OpKind::Reshape { .. }
                | OpKind::Broadcast { .. }
                | OpKind::Transpose { .. }
                | OpKind::Slice { .. }
        );
        let into_contraction = matches!(
            consumer[out].map(|c| &g.eqns()[c].op),
            Some(OpKind::MatMul { .. } | OpKind::IndexedMatMul)
        );
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
                | Placement::RowReduce => Placement::Inline,
            }
        } else if let OpKind::Reshape { .. } = op {
            match placement[e.inputs[0].index()] {
                Placement::Input | Placement::Materialized | Placement::View => Placement::View,
                Placement::Inline | Placement::RowReduce if pinned[out] || uses[out] != 1 => {
                    Placement::Materialized
                }
                Placement::Inline | Placement::RowReduce => {
                    inline_if_reader_allows(g, &consumer, out)
                }
            }
        } else if matches!(op, OpKind::Literal(_) | OpKind::Iota { .. }) && !pinned[out] {
            Placement::Inline
        } else if matches!(op, OpKind::Reduce { .. }) && !pinned[out] {
            Placement::RowReduce
        } else if is_elementwise_like(op) && !pinned[out] && uses[out] == 1 {
            inline_if_reader_allows(g, &consumer, out)
        } else {
            Placement::Materialized
        };
        movement_only[out] = match placement[out] {
            Placement::Materialized | Placement::View | Placement::Input => true,
            Placement::Inline => moves && movement_only[e.inputs[0].index()],
            Placement::RowReduce => false,
        };
    }
    let mut reads_row_reduce = vec![false; n];
    for e in g.eqns() {
        let out = e.out.index();
        reads_row_reduce[out] = match placement[out] {
            Placement::RowReduce => true,
            Placement::Inline => e.inputs.iter().any(|v| reads_row_reduce[v.index()]),
            Placement::Input | Placement::Materialized | Placement::View => false,
        };
    }
    Classification {
        uses,
        producer,
        placement,
        reads_row_reduce,
    }
}

fn inline_if_reader_allows(g: &Graph, consumer: &[Option<usize>], v: usize) -> Placement {
    match consumer[v] {
        Some(c) if reads_elementwise(&g.eqns()[c].op) => Placement::Inline,
        _ => Placement::Materialized,
    }
}
