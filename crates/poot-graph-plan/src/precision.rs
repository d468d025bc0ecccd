//! Precision legalization: where a tiled contraction multiplies on half-precision matrix units,
//! the rounding that costs is written into the graph, so the CPU oracle computes it too.
//!
//! On a target whose tiled contractions use [`MatrixUnits::Half`](crate::MatrixUnits::Half) or
//! go to the device's library ([`Target::half_operands`]), each contraction that is
//! tiled (at least 9 left-side rows: a prefill chunk or a batched step, never a decode step's
//! product of a few rows) against rank-2 f16 or bf16 weights reads its left side through an explicit rounding to the weights' type:
//! `Cast { to: F32 }(Cast { to: F16 }(x))` (or BF16). Contractions of one left side against
//! weights of one type share one rounding, so sibling projections stay one kernel.
//!
//! The lowering recognises the pair ([`half_operand`]) and multiplies on the matrix units in
//! that precision, one product per pair: both factors are exact in f16 (bf16), their product
//! exact in f32, and the sums are f32. So the device computes the rewritten graph up to
//! reassociation of f32 sums, the tolerance every tiled contraction is held to; the rewrite
//! itself is where precision is given up, and the oracle sees it. Against the graph before the
//! rewrite, each left-side element carries a relative error of at most 2^-11 (f16: 10 stored
//! mantissa bits, round to nearest) or 2^-8 (bf16), so a sum of products `a_k w_k` is off by at
//! most 2^-11 (2^-8) times `sum |a_k w_k|`, plus the f32 reassociation. The relative bound holds
//! in f16's normal range (magnitudes 2^-14 to 65504): below it f16 is subnormal and an element
//! may be off by up to 2^-25 absolutely (adding at most 2^-25 `sum |w_k|` to a sum), and above
//! 65504 it becomes infinite, which normalized activations do not reach. bf16 has f32's range.
//!
//! A graph already rounded this way is left as it is, so the rewrite may run twice.

use std::borrow::Cow;
use std::collections::HashMap;

use poot_graph_ir::{DType, Eqn, Graph, OpKind, Storage, TensorType, ValueId, ValueInfo};

use crate::refusal::PlanError;
use crate::target::Target;

/// `graph` with the left side of every tiled contraction against f16 or bf16 weights rounded to
/// the weights' type, where `target` multiplies such contractions in half precision; `graph`
/// itself elsewhere.
pub fn round_half_operands<'g>(
    graph: &'g Graph,
    target: &Target,
) -> Result<Cow<'g, Graph>, PlanError> {
    if !target.half_operands() {
        return Ok(Cow::Borrowed(graph));
    }
    let wanted = |j: usize| -> Option<(ValueId, DType)> {
        let e = &graph.eqns()[j];
        let half = half_weights(graph, j)?;
        (half_operand(graph, e.inputs[0]) != Some(half)).then_some((e.inputs[0], half))
    };
    if !(0..graph.eqns().len()).any(|j| wanted(j).is_some()) {
        return Ok(Cow::Borrowed(graph));
    }
    let mut values: Vec<ValueInfo> = graph.values().to_vec();
    let mut eqns: Vec<Eqn> = Vec::with_capacity(graph.eqns().len() + 2);
    let mut rounded: HashMap<(ValueId, DType), ValueId> = HashMap::new();
    for (j, e) in graph.eqns().iter().enumerate() {
        let mut e = e.clone();
        if let Some((lhs, half)) = wanted(j) {
            let r = match rounded.get(&(lhs, half)) {
                Some(&r) => r,
                None => {
                    let info = &graph.values()[lhs.index()];
                    let label = if info.label.is_empty() {
                        format!("v{}", lhs.index())
                    } else {
                        info.label.clone()
                    };
                    let shape = info.ty.shape.clone();
                    let mut push = |dtype: DType, suffix: &str, input: ValueId| {
                        values.push(ValueInfo {
                            ty: TensorType::new(dtype, shape.clone()),
                            storage: Storage::Device,
                            label: format!("{label}.{suffix}"),
                        });
                        let out = ValueId(values.len() as u32 - 1);
                        eqns.push(Eqn {
                            op: OpKind::Cast { to: dtype },
                            inputs: vec![input],
                            out,
                        });
                        out
                    };
                    let name = half.name();
                    let narrow = push(half, name, lhs);
                    let r = push(DType::F32, &format!("{name}_f32"), narrow);
                    rounded.insert((lhs, half), r);
                    r
                }
            };
            e.inputs[0] = r;
        }
        eqns.push(e);
    }
    Ok(Cow::Owned(Graph::from_parts(
        values,
        eqns,
        graph.outputs().clone(),
    )?))
}

/// The half type (F16 or BF16) of the weights of contraction `eqn` when it is tiled against
/// rank-2 weights of that type.
pub(crate) fn half_weights(g: &Graph, eqn: usize) -> Option<DType> {
    let e = &g.eqns()[eqn];
    let rhs = g.values()[e.inputs.get(1)?.index()].ty.dtype;
    (matches!(rhs, DType::F16 | DType::BF16) && crate::lower::tiled_contraction(g, eqn))
        .then_some(rhs)
}

/// The half type `v` was rounded to, when `v` is an f32 value cast from an f16 or bf16 value
/// cast from f32 (the rounding [`round_half_operands`] writes).
pub fn half_operand(g: &Graph, v: ValueId) -> Option<DType> {
    let producer = |v: ValueId| g.eqns().iter().find(|e| e.out == v);
    let wide = producer(v)?;
    if !matches!(wide.op, OpKind::Cast { to: DType::F32 }) {
        return None;
    }
    let narrow = producer(wide.inputs[0])?;
    let OpKind::Cast { to } = narrow.op else {
        return None;
    };
    let source = g.values()[narrow.inputs[0].index()].ty.dtype;
    (matches!(to, DType::F16 | DType::BF16) && source == DType::F32).then_some(to)
}
