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
//! Block-quantized weights are decoded and rounded to f16 the same way (with the left side) for
//! the library over many rows, and, where the target stages them in tiles
//! ([`Target::block_tiles`]), for tiled contractions of fewer rows: `Cast { to: F32 }(Cast {
//! to: F16 }(Gather(w, every row)))`. The kernels read the stored blocks; the graph says what
//! they compute, so the oracle rounds each decoded weight to f16 as they do. A routed
//! contraction over enough (token, expert) rows against a block-quantized expert stack is
//! rewritten the same way (the stack gathered expert by expert), for the tiles over each
//! expert's listed rows ([`decoded_for_routed_tiles`]).
//!
//! A graph already rounded this way is left as it is, so the rewrite may run twice.

use std::borrow::Cow;
use std::collections::HashMap;

use poot_graph_ir::{DType, Eqn, Graph, OpKind, Storage, TensorType, ValueId, ValueInfo};

use crate::refusal::PlanError;
use crate::target::Target;

/// `graph` with the left side of every tiled contraction against f16 or bf16 weights rounded to
/// the weights' type, where `target` multiplies such contractions in half precision; and, where
/// the target gives contractions of many rows against block-quantized weights to its library,
/// those weights decoded and rounded to f16 and the left side rounded to f16 too. `graph`
/// itself where nothing changes.
pub fn round_half_operands<'g>(
    graph: &'g Graph,
    target: &Target,
) -> Result<Cow<'g, Graph>, PlanError> {
    let half_weights_rounded = target.half_operands();
    if !half_weights_rounded && !target.block_tiles() {
        return Ok(Cow::Borrowed(graph));
    }
    let min_rows = target.tiled_min_rows();
    let wanted = |j: usize| -> Option<Rounding> {
        let e = &graph.eqns()[j];
        let (half, decode) = match half_weights(graph, j, min_rows) {
            Some(half) if half_weights_rounded => (half, None),
            Some(_) => return None,
            None if decoded_for_library(graph, j, target)
                || decoded_for_tiles(graph, j, target)
                || decoded_for_routed_tiles(graph, j, target) =>
            {
                (DType::F16, Some(e.inputs[1]))
            }
            None => return None,
        };
        let round = (half_operand(graph, e.inputs[0]) != Some(half)).then_some((e.inputs[0], half));
        (round.is_some() || decode.is_some()).then_some(Rounding { round, decode })
    };
    if !(0..graph.eqns().len()).any(|j| wanted(j).is_some()) {
        return Ok(Cow::Borrowed(graph));
    }
    let mut r = Rewrite {
        values: graph.values().to_vec(),
        eqns: Vec::with_capacity(graph.eqns().len() + 8),
        rounded: HashMap::new(),
        decoded: HashMap::new(),
    };
    for (j, e) in graph.eqns().iter().enumerate() {
        let mut e = e.clone();
        if let Some(Rounding { round, decode }) = wanted(j) {
            if let Some((lhs, half)) = round {
                e.inputs[0] = r.rounded(lhs, half);
            }
            if let Some(w) = decode {
                e.inputs[1] = r.decoded(w);
            }
        }
        r.eqns.push(e);
    }
    Ok(Cow::Owned(Graph::from_parts(
        r.values,
        r.eqns,
        graph.outputs().clone(),
    )?))
}

/// What one contraction's operands need.
struct Rounding {
    /// The left side, to round to this half type.
    round: Option<(ValueId, DType)>,
    /// Block-quantized weights, to decode and round to f16.
    decode: Option<ValueId>,
}

/// A graph being rewritten: its values and equations so far, and the roundings and decodings
/// already made (sibling contractions share them).
struct Rewrite {
    values: Vec<ValueInfo>,
    eqns: Vec<Eqn>,
    rounded: HashMap<(ValueId, DType), ValueId>,
    decoded: HashMap<ValueId, ValueId>,
}

impl Rewrite {
    fn label(&self, v: ValueId) -> String {
        value_label(&self.values, v)
    }

    /// A new value of `ty` computed by `op` over `inputs`.
    fn push(&mut self, op: OpKind, inputs: Vec<ValueId>, ty: TensorType, label: String) -> ValueId {
        append(&mut self.values, &mut self.eqns, op, inputs, ty, label)
    }

    /// `v` (f32) rounded to `half` and widened back: `Cast { to: F32 }(Cast { to: half }(v))`.
    fn round(&mut self, v: ValueId, half: DType, label: &str) -> ValueId {
        let shape = self.values[v.index()].ty.shape.clone();
        let name = half.name();
        let narrow = self.push(
            OpKind::Cast { to: half },
            vec![v],
            TensorType::new(half, shape.clone()),
            format!("{label}.{name}"),
        );
        self.push(
            OpKind::Cast { to: DType::F32 },
            vec![narrow],
            TensorType::new(DType::F32, shape),
            format!("{label}.{name}_f32"),
        )
    }

    fn rounded(&mut self, v: ValueId, half: DType) -> ValueId {
        if let Some(&r) = self.rounded.get(&(v, half)) {
            return r;
        }
        let label = self.label(v);
        let r = self.round(v, half, &label);
        self.rounded.insert((v, half), r);
        r
    }

    /// The rank-2 block-quantized constant `w` decoded row by row (a gather of every row) and
    /// rounded to f16.
    fn decoded(&mut self, w: ValueId) -> ValueId {
        if let Some(&d) = self.decoded.get(&w) {
            return d;
        }
        let label = self.label(w);
        let dims = self.values[w.index()].ty.dims().to_vec();
        let rows = self.push(
            OpKind::Iota {
                shape: vec![dims[0]].into(),
                axis: 0,
                dtype: DType::I32,
            },
            vec![],
            TensorType::new(DType::I32, vec![dims[0]]),
            format!("{label}.rows"),
        );
        let decoded = self.push(
            OpKind::Gather { axis: 0 },
            vec![w, rows],
            TensorType::new(DType::F32, dims),
            format!("{label}.decoded"),
        );
        let d = self.round(decoded, DType::F16, &label);
        self.decoded.insert(w, d);
        d
    }
}

/// Block-quantized weights as [`round_half_operands`] decodes them for a library: the stored
/// constant, its format, and the values of the decoding (the row indices, the decoded f32
/// words, their f16 rounding and its widening, which is the contraction's operand).
pub(crate) struct DecodedBlocks {
    pub weights: ValueId,
    pub format: poot_formats::BlockFormat,
    pub chain: [ValueId; 4],
}

/// The decoding `v` is the end of, when it is one: `Cast { to: F32 }(Cast { to: F16 }(
/// Gather { axis: 0 }(w, Iota over w's rows)))` of a stored rank-2 block constant `w`, or of a
/// rank-3 expert stack (gathered whole expert by expert).
pub(crate) fn decoded_blocks(g: &Graph, v: ValueId) -> Option<DecodedBlocks> {
    let producer = |v: ValueId| g.eqns().iter().find(|e| e.out == v);
    if half_operand(g, v) != Some(DType::F16) {
        return None;
    }
    let narrow = producer(v)?.inputs[0];
    let decoded = producer(narrow)?.inputs[0];
    let gather = producer(decoded)?;
    let [w, rows] = gather.inputs[..] else {
        return None;
    };
    let info = &g.values()[w.index()];
    let dims = info.ty.dims();
    if !(2..=3).contains(&dims.len()) {
        return None;
    }
    let format = match info.ty.dtype {
        DType::Packed(t) => match t.packed_format() {
            Ok(Some(poot_formats::PackedFormat::Block(b))) => b,
            _ => return None,
        },
        _ => return None,
    };
    let iota = producer(rows)?;
    let whole_rows = matches!(
        iota.op,
        OpKind::Iota { axis: 0, dtype: DType::I32, ref shape } if shape.dims() == [dims[0]]
    );
    (gather.op == OpKind::Gather { axis: 0 }
        && matches!(info.storage, Storage::Const(_))
        && whole_rows
        && g.values()[decoded.index()].ty.dims() == dims)
        .then_some(DecodedBlocks {
            weights: w,
            format,
            chain: [rows, decoded, narrow, v],
        })
}

/// How a rewrite names a value it derives from `v`: its label, or its id where it has none.
pub(crate) fn value_label(values: &[ValueInfo], v: ValueId) -> String {
    let info = &values[v.index()];
    if info.label.is_empty() {
        format!("v{}", v.index())
    } else {
        info.label.clone()
    }
}

/// Appends a new device value of `ty` computed by `op` over `inputs` to a graph being rewritten.
pub(crate) fn append(
    values: &mut Vec<ValueInfo>,
    eqns: &mut Vec<Eqn>,
    op: OpKind,
    inputs: Vec<ValueId>,
    ty: TensorType,
    label: String,
) -> ValueId {
    values.push(ValueInfo {
        ty,
        storage: Storage::Device,
        label,
    });
    let out = ValueId(values.len() as u32 - 1);
    eqns.push(Eqn { op, inputs, out });
    out
}

/// Whether contraction `eqn` is one whose block-quantized weights a device library multiplies
/// once decoded to f16 (where the device has one): a tiled contraction of at least
/// [`Tuning::library_packed_rows`](crate::Tuning::library_packed_rows) rows against
/// a stored rank-2 GGUF block constant, `[columns, depth]` as checkpoints store it, with both a
/// multiple of 8.
pub(crate) fn decoded_for_library(g: &Graph, eqn: usize, target: &Target) -> bool {
    let e = &g.eqns()[eqn];
    if e.op
        != (OpKind::MatMul {
            transpose_rhs: true,
        })
        || !crate::lower::tiled_contraction(g, eqn, target.tiled_min_rows())
    {
        return false;
    }
    let w = &g.values()[e.inputs[1].index()];
    let rows = crate::lower::contraction_rows(g, eqn);
    let dims = w.ty.dims();
    let block = match w.ty.dtype {
        DType::Packed(t) => matches!(
            t.packed_format(),
            Ok(Some(poot_formats::PackedFormat::Block(_)))
        ),
        _ => false,
    };
    block
        && matches!(w.storage, Storage::Const(_))
        && target.library_takes_blocks(rows)
        && dims.len() == 2
        && dims.iter().all(|d| d.is_multiple_of(8))
        && i32::try_from(dims[0]).is_ok()
}

/// Whether contraction `eqn` is one whose block-quantized weights a tiled kernel multiplies in
/// f16 on the matrix units, decoding them slice by slice ([`Target::block_tiles`]): a tiled
/// contraction against a stored rank-2 GGUF block constant, `[columns, depth]`, that the
/// library does not take (fewer rows than
/// [`Tuning::library_packed_rows`](crate::Tuning::library_packed_rows), or no library).
pub(crate) fn decoded_for_tiles(g: &Graph, eqn: usize, target: &Target) -> bool {
    let e = &g.eqns()[eqn];
    if !target.block_tiles()
        || e.op
            != (OpKind::MatMul {
                transpose_rhs: true,
            })
        || !crate::lower::tiled_contraction(g, eqn, target.tiled_min_rows())
        || decoded_for_library(g, eqn, target)
    {
        return false;
    }
    let w = &g.values()[e.inputs[1].index()];
    let (DType::Packed(t), &[n, k]) = (w.ty.dtype, w.ty.dims()) else {
        return false;
    };
    let Ok(Some(poot_formats::PackedFormat::Block(format))) = t.packed_format() else {
        return false;
    };
    matches!(w.storage, Storage::Const(_)) && crate::lower::stages_blocks(format, n, k)
}

/// Whether routed contraction `eqn` is one whose block-quantized expert stack a tiled kernel
/// over each expert's listed rows multiplies in f16, decoding it slice by slice (with the left
/// side rounded to f16): at least [`Tuning::routed_tile_rows`](crate::Tuning::routed_tile_rows)
/// (token, expert) rows where the target stages block tiles, against a stored `[experts,
/// columns, depth]` GGUF block constant whose rows the tiles can stage.
pub(crate) fn decoded_for_routed_tiles(g: &Graph, eqn: usize, target: &Target) -> bool {
    let e = &g.eqns()[eqn];
    let min_rows = target.tuning.routed_tile_rows;
    if e.op != OpKind::IndexedMatMul
        || !target.block_tiles()
        || !target.tuning.routed_units
        || min_rows == 0
    {
        return false;
    }
    let (lhs, w, out) = (
        &g.values()[e.inputs[0].index()],
        &g.values()[e.inputs[1].index()],
        &g.values()[e.out.index()],
    );
    let (DType::Packed(t), &[experts, n, k]) = (w.ty.dtype, w.ty.dims()) else {
        return false;
    };
    let Ok(Some(poot_formats::PackedFormat::Block(format))) = t.packed_format() else {
        return false;
    };
    let rows = match *out.ty.dims() {
        [rows, cols] if cols == n => rows,
        _ => return false,
    };
    lhs.ty.dtype == DType::F32
        && lhs.ty.dims() == [rows, k]
        && rows >= min_rows
        && matches!(w.storage, Storage::Const(_))
        && k.is_multiple_of(32)
        && experts
            .checked_mul(n)
            .is_some_and(|rows| crate::lower::stages_blocks(format, rows, k))
        && rows
            .checked_mul(n)
            .is_some_and(|c| u32::try_from(c).is_ok())
        && experts
            .checked_mul(rows)
            .is_some_and(|c| u32::try_from(c).is_ok())
}

/// The half type (F16 or BF16) of the weights of contraction `eqn` when it is tiled against
/// rank-2 weights of that type.
pub(crate) fn half_weights(g: &Graph, eqn: usize, min_rows: usize) -> Option<DType> {
    let e = &g.eqns()[eqn];
    let rhs = g.values()[e.inputs.get(1)?.index()].ty.dtype;
    (matches!(rhs, DType::F16 | DType::BF16) && crate::lower::tiled_contraction(g, eqn, min_rows))
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
