//! Activations rounded to 8-bit blocks: where the device's exact library multiplies
//! block-quantized weights by 8-bit integers (the CPU's, over a prefill chunk's rows), the
//! rounding of the left side is written into the graph, so the CPU oracle computes it too.
//!
//! Each run of [`BLOCK`] elements along the left side's last axis becomes `q * d` with
//! `d = max |x| / 127` and `q = round(x * (1 / d))` (ties to even; `q = 0` where the block is
//! all zeros), so `|q| <= 127`: ggml's `Q8_0` rounding, with the scale kept in f32. The rewrite
//! is primitive ops ([`round_activation_blocks`]); the lowering recognises them
//! ([`activation_blocks_source`]) and gives the library the unrounded left side, which it rounds
//! with the same f32 operations, so its integers and scales are the graph's bit for bit. Its
//! integer sums of `q` times the weights' block integers are exact; what differs from the
//! graph's f32 contraction is the rounding of each product `q * d` and the order of the f32
//! sums, the tolerance every contraction is held to.
//!
//! Against the graph before the rewrite, an element moves by at most `d / 2 = max |x| / 254`
//! of its block: about llama.cpp's error on the same products.

use std::borrow::Cow;
use std::collections::HashMap;

use poot_formats::BlockFormat;
use poot_graph_ir::{
    BinaryOp, CompareOp, DType, Eqn, Graph, OpKind, ReduceOp, Scalar, Shape, TensorType, UnaryOp,
    ValueId, ValueInfo,
};

use crate::lower::exact_library_weights;
use crate::plan::{EXACT_LIBRARY_BLOCKS, StoredWeights};
use crate::precision::{append, value_label};
use crate::refusal::PlanError;
use crate::target::Target;

/// Elements of the left side sharing one scale.
pub const BLOCK: usize = 32;

/// The block formats whose products the library takes in 8-bit integers: every one it decodes.
pub const INTEGER_BLOCKS: [BlockFormat; 8] = EXACT_LIBRARY_BLOCKS;

/// `graph` with the left side of every contraction the target's library multiplies in 8-bit
/// integers rounded to 8-bit blocks ([`integer_blocks`]); `graph` itself where there is none.
/// A left side already rounded is left as it is, so the rewrite may run twice.
pub fn round_activation_blocks<'g>(
    graph: &'g Graph,
    target: &Target,
) -> Result<Cow<'g, Graph>, PlanError> {
    let producers = producers(graph);
    let wanted = |j: usize| {
        integer_blocks(graph, j, target).is_some()
            && activation_blocks_source(graph, &producers, graph.eqns()[j].inputs[0]).is_none()
    };
    if !(0..graph.eqns().len()).any(wanted) {
        return Ok(Cow::Borrowed(graph));
    }
    let mut r = Rewrite {
        values: graph.values().to_vec(),
        eqns: Vec::with_capacity(graph.eqns().len() + 64),
        rounded: HashMap::new(),
    };
    for (j, e) in graph.eqns().iter().enumerate() {
        let mut e = e.clone();
        if wanted(j) {
            e.inputs[0] = r.rounded(e.inputs[0]);
        }
        r.eqns.push(e);
    }
    Ok(Cow::Owned(Graph::from_parts(
        r.values,
        r.eqns,
        graph.outputs().clone(),
    )?))
}

/// The weights' block format when `target`'s library multiplies contraction `eqn` in 8-bit
/// integers: an exact-library contraction against one of [`INTEGER_BLOCKS`] with at least the
/// library's row count for it.
pub fn integer_blocks(g: &Graph, eqn: usize, target: &Target) -> Option<BlockFormat> {
    let min_rows = target.integer_library_rows()?;
    let StoredWeights::Blocks(b) = exact_library_weights(g, eqn)? else {
        return None;
    };
    let e = &g.eqns()[eqn];
    let dims = g.values()[e.inputs[0].index()].ty.dims();
    let (&depth, lead) = dims.split_last()?;
    let rows: usize = lead.iter().product();
    (INTEGER_BLOCKS.contains(&b) && rows >= min_rows && depth.is_multiple_of(BLOCK)).then_some(b)
}

/// The producing equation of every value (none for inputs).
pub(crate) fn producers(g: &Graph) -> Vec<Option<usize>> {
    let mut p = vec![None; g.values().len()];
    for (i, e) in g.eqns().iter().enumerate() {
        p[e.out.index()] = Some(i);
    }
    p
}

/// The rounding's source and the values it computes on the way, when `v` is the rounding
/// [`round_activation_blocks`] writes (`producers` from [`producers`]).
pub(crate) fn activation_blocks_source(
    g: &Graph,
    producers: &[Option<usize>],
    v: ValueId,
) -> Option<(ValueId, Vec<ValueId>)> {
    let mut internal = Vec::new();
    let mut eqn = |v: ValueId, op: &dyn Fn(&OpKind) -> bool| -> Option<&Eqn> {
        let e = &g.eqns()[(*producers.get(v.index())?)?];
        if !op(&e.op) {
            return None;
        }
        internal.push(v);
        Some(e)
    };
    let is = |want: OpKind| move |op: &OpKind| *op == want;
    let unary = |u: UnaryOp| is(OpKind::Unary(u));
    let binary = |b: BinaryOp| is(OpKind::Binary(b));
    let reshape = |op: &OpKind| matches!(op, OpKind::Reshape { .. });
    let broadcast = |op: &OpKind| matches!(op, OpKind::Broadcast { .. });
    let literal = |x: f32| is(OpKind::Literal(Scalar::F32(x)));

    let out = eqn(v, &reshape)?;
    let scaled = eqn(out.inputs[0], &binary(BinaryOp::Mul))?;
    let (q, d_wide) = (scaled.inputs[0], scaled.inputs[1]);
    let d = eqn(d_wide, &broadcast)?.inputs[0];
    let product = eqn(q, &unary(UnaryOp::Round))?.inputs[0];
    let product = eqn(product, &binary(BinaryOp::Mul))?;
    let (blocks, inverse_wide) = (product.inputs[0], product.inputs[1]);
    let inverse = eqn(inverse_wide, &broadcast)?.inputs[0];
    let select = eqn(inverse, &is(OpKind::Select))?;
    let (positive, recip, zero) = (select.inputs[0], select.inputs[1], select.inputs[2]);
    let compare = eqn(positive, &is(OpKind::Compare(CompareOp::Gt)))?;
    if compare.inputs[0] != d || compare.inputs[1] != zero {
        return None;
    }
    if eqn(recip, &unary(UnaryOp::Recip))?.inputs[0] != d {
        return None;
    }
    let zero_literal = eqn(zero, &broadcast)?.inputs[0];
    eqn(zero_literal, &literal(0.0))?;
    let divide = eqn(d, &binary(BinaryOp::Div))?;
    let (max, limit) = (divide.inputs[0], divide.inputs[1]);
    let limit_literal = eqn(limit, &broadcast)?.inputs[0];
    eqn(limit_literal, &literal(127.0))?;
    let max = eqn(max, &|op| {
        matches!(
            op,
            OpKind::Reduce {
                op: ReduceOp::Max,
                ..
            }
        )
    })?;
    let abs = eqn(max.inputs[0], &unary(UnaryOp::Abs))?;
    if abs.inputs[0] != blocks {
        return None;
    }
    let source = eqn(blocks, &reshape)?.inputs[0];
    let (ty, rounded) = (&g.values()[source.index()].ty, &g.values()[v.index()].ty);
    let dims = ty.dims();
    let block_dims = g.values()[blocks.index()].ty.dims();
    let blocked = dims.split_last().is_some_and(|(&depth, lead)| {
        depth.is_multiple_of(BLOCK)
            && block_dims.len() == dims.len() + 1
            && block_dims[..lead.len()] == *lead
            && block_dims[lead.len()..] == [depth / BLOCK, BLOCK]
    });
    (ty.dtype == DType::F32 && rounded == ty && blocked).then_some((source, internal))
}

/// A graph being rewritten: its values and equations so far, and the roundings already made
/// (sibling contractions share them).
struct Rewrite {
    values: Vec<ValueInfo>,
    eqns: Vec<Eqn>,
    rounded: HashMap<ValueId, ValueId>,
}

impl Rewrite {
    fn push(&mut self, op: OpKind, inputs: Vec<ValueId>, ty: TensorType, label: String) -> ValueId {
        append(&mut self.values, &mut self.eqns, op, inputs, ty, label)
    }

    /// A rank-0 f32 `x` broadcast to `dims`.
    fn constant(&mut self, x: f32, dims: &[usize], label: String) -> ValueId {
        let scalar = self.push(
            OpKind::Literal(Scalar::F32(x)),
            vec![],
            TensorType::new(DType::F32, Vec::<usize>::new()),
            format!("{label}.literal"),
        );
        self.broadcast(scalar, dims, label)
    }

    fn broadcast(&mut self, v: ValueId, dims: &[usize], label: String) -> ValueId {
        self.push(
            OpKind::Broadcast {
                shape: Shape::from(dims.to_vec()),
            },
            vec![v],
            TensorType::new(DType::F32, dims.to_vec()),
            label,
        )
    }

    fn rounded(&mut self, x: ValueId) -> ValueId {
        if let Some(&r) = self.rounded.get(&x) {
            return r;
        }
        let label = value_label(&self.values, x);
        let dims = self.values[x.index()].ty.dims().to_vec();
        let (&depth, lead) = dims
            .split_last()
            .expect("a contraction's left side has an axis");
        let block_dims: Vec<usize> = lead.iter().copied().chain([depth / BLOCK, BLOCK]).collect();
        let scale_dims: Vec<usize> = lead.iter().copied().chain([depth / BLOCK, 1]).collect();
        let f32s = |d: &[usize]| TensorType::new(DType::F32, d.to_vec());
        let l = |what: &str| format!("{label}.q8.{what}");
        let blocks = self.push(
            OpKind::Reshape {
                shape: Shape::from(block_dims.clone()),
            },
            vec![x],
            f32s(&block_dims),
            l("blocks"),
        );
        let abs = self.push(
            OpKind::Unary(UnaryOp::Abs),
            vec![blocks],
            f32s(&block_dims),
            l("abs"),
        );
        let axis = block_dims.len() - 1;
        let max = self.push(
            OpKind::Reduce {
                op: ReduceOp::Max,
                axis,
            },
            vec![abs],
            f32s(&scale_dims),
            l("max"),
        );
        let limit = self.constant(127.0, &scale_dims, l("limit"));
        let d = self.push(
            OpKind::Binary(BinaryOp::Div),
            vec![max, limit],
            f32s(&scale_dims),
            l("scale"),
        );
        let zero = self.constant(0.0, &scale_dims, l("zero"));
        let positive = self.push(
            OpKind::Compare(CompareOp::Gt),
            vec![d, zero],
            TensorType::new(DType::Bool, scale_dims.clone()),
            l("positive"),
        );
        let recip = self.push(
            OpKind::Unary(UnaryOp::Recip),
            vec![d],
            f32s(&scale_dims),
            l("recip"),
        );
        let inverse = self.push(
            OpKind::Select,
            vec![positive, recip, zero],
            f32s(&scale_dims),
            l("inverse"),
        );
        let inverse_wide = self.broadcast(inverse, &block_dims, l("inverse_wide"));
        let product = self.push(
            OpKind::Binary(BinaryOp::Mul),
            vec![blocks, inverse_wide],
            f32s(&block_dims),
            l("product"),
        );
        let q = self.push(
            OpKind::Unary(UnaryOp::Round),
            vec![product],
            f32s(&block_dims),
            l("integers"),
        );
        let d_wide = self.broadcast(d, &block_dims, l("scale_wide"));
        let scaled = self.push(
            OpKind::Binary(BinaryOp::Mul),
            vec![q, d_wide],
            f32s(&block_dims),
            l("values"),
        );
        let out = self.push(
            OpKind::Reshape {
                shape: Shape::from(dims.clone()),
            },
            vec![scaled],
            f32s(&dims),
            l("rounded"),
        );
        self.rounded.insert(x, out);
        out
    }
}
