//! Legalization: rewrites a graph so every constant fits one buffer of the target, before
//! lowering.
//!
//! A constant larger than the target's single-buffer limit is split into row chunks, each a
//! contiguous byte range of the stored tensor (a packed row is whole blocks), so the executor
//! binds each chunk as a sub-range of the stored bytes without copying the tensor. Its readers are
//! rewritten to read through the chunks:
//!
//! - a contraction against it as a transposed weight (`x @ W^T`, `W [N, K]`) becomes one
//!   contraction per chunk and a concatenation of their columns;
//! - a row gather (`W[idx]`, an embedding) becomes one gather per chunk at the index shifted into
//!   the chunk and clamped to it, and a select of the chunk that holds the index. The first chunk
//!   is not clamped below and the last is not clamped above, so an index outside the table still
//!   faults as the original gather would.
//!
//! Both rewrites compute every element exactly as before: a contraction's output column is the
//! same dot product whichever chunk holds its weight row. What chunking cannot fix is refused:
//! a single row over the limit, or a reader that does not read the constant by rows.
//!
//! A component-format constant (FP8, FP4) is split when any one component is over the limit:
//! each chunk is a component-format constant of its own whose components are byte ranges of the
//! source's components (an FP8 block-scaled weight in whole 128-row tiles). GPTQ and AWQ, whose
//! words pack 8 output rows, are refused.

use std::borrow::Cow;
use std::ops::Range;

use poot_formats::{FP8_BLOCK_ELEMS, Fp8Scaling, PackedFormat};
use poot_graph_ir::{
    BinaryOp, CompareOp, DType, Eqn, Graph, OpKind, OutputIds, Scalar, Shape, Storage, TensorType,
    ValueId, ValueInfo, component_const_name,
};

use crate::plan::{BufferRole, Plan};

/// The most chunk results one concatenation or select chain combines, so a kernel that reads
/// them fits the target's bindings once the planner computes inner nodes apart.
const FAN_IN: usize = 8;
use crate::refusal::PlanError;
use crate::target::Target;

/// One row chunk of a split constant: a constant of its own in the legalized graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConstChunk {
    /// The chunk's constant name in the legalized graph (`w.embed#rows0..131072`).
    pub name: String,
    /// The constant it was cut from, as the weight source names it.
    pub source: String,
    /// The rows of the source it holds.
    pub rows: Range<usize>,
    /// Its bytes within the source's stored bytes.
    pub offset_bytes: u64,
    pub len_bytes: u64,
}

/// A graph whose constants each fit one buffer, and the chunks it reads in place of those that
/// did not.
#[derive(Clone, Debug)]
pub struct Legalized<'g> {
    pub graph: Cow<'g, Graph>,
    pub chunks: Vec<ConstChunk>,
}

/// How a too-large constant is cut.
struct Split {
    value: ValueId,
    source: String,
    /// Rows of the stored tensor and bytes of one row.
    rows: usize,
    row_bytes: u64,
    /// Each chunk's rows.
    ranges: Vec<Range<usize>>,
    /// For a component-format constant, how each component's rows follow the weight's.
    components: Vec<ComponentRows>,
}

/// One component of a row-split component-format constant: component row `r` holds weight rows
/// `r * weight_rows .. (r + 1) * weight_rows` and is `row_bytes` long.
struct ComponentRows {
    role: &'static str,
    weight_rows: usize,
    row_bytes: u64,
}

/// Splits every constant larger than `target`'s single-buffer limit into row chunks and rewrites
/// its readers; returns the graph unchanged when every constant fits.
pub fn split_large_constants<'g>(
    graph: &'g Graph,
    target: &Target,
) -> Result<Legalized<'g>, PlanError> {
    let limit = target.limits.max_buffer_bytes;
    let mut splits = Vec::new();
    for (v, name, ty) in graph.consts() {
        if let DType::Components(format) = ty.dtype {
            let Ok(specs) = format.components(ty.dims()) else {
                continue; // lowering refuses a malformed constant with its own error
            };
            let largest = specs
                .iter()
                .map(|c| c.n_bytes().map_or(u64::MAX, |b| round_up4(b as u64)))
                .max()
                .unwrap_or(0);
            if largest > limit {
                splits.push(plan_component_split(graph, target, v, name, ty, largest)?);
            }
            continue;
        }
        let Some(size) = ty.size_bytes() else {
            continue; // lowering refuses an unsized constant with its own error
        };
        if round_up4(size) <= limit {
            continue;
        }
        splits.push(plan_split(graph, target, v, name, ty, size)?);
    }
    if splits.is_empty() {
        return Ok(Legalized {
            graph: Cow::Borrowed(graph),
            chunks: Vec::new(),
        });
    }
    rewrite(graph, &splits)
}

/// Marks the plan's buffers of chunk constants as byte ranges of their source constants.
pub fn bind_chunks(plan: &mut Plan, chunks: &[ConstChunk]) {
    for b in &mut plan.buffers {
        let BufferRole::Const { name } = &b.role else {
            continue;
        };
        if let Some(c) = chunks.iter().find(|c| &c.name == name) {
            b.role = BufferRole::ConstPart {
                name: c.source.clone(),
                offset_bytes: c.offset_bytes,
                len_bytes: c.len_bytes,
            };
        }
    }
}

fn round_up4(n: u64) -> u64 {
    n.div_ceil(4).saturating_mul(4)
}

/// Checks that `v` can be split by rows, and picks equal chunks that each fit.
fn plan_split(
    g: &Graph,
    target: &Target,
    v: ValueId,
    name: &str,
    ty: &TensorType,
    size: u64,
) -> Result<Split, PlanError> {
    let limit = target.limits.max_buffer_bytes;
    let not_rows = |reader: &str, reason: &'static str| PlanError::ConstantNotRowSplittable {
        backend: target.backend,
        name: name.to_string(),
        needed_bytes: size,
        limit_bytes: limit,
        reader: reader.to_string(),
        reason,
    };
    for e in g.eqns() {
        for (pos, &inp) in e.inputs.iter().enumerate() {
            if inp != v {
                continue;
            }
            let label = g.values()[e.out.index()].label.as_str();
            let reader = format!("{} at `{label}`", e.op.name());
            match (&e.op, pos) {
                (
                    OpKind::MatMul {
                        transpose_rhs: true,
                    },
                    1,
                ) if ty.rank() == 2 => {}
                (OpKind::MatMul { .. }, _) => {
                    return Err(not_rows(
                        &reader,
                        "a contraction splits only a rank-2 weight it reads transposed ([N, K])",
                    ));
                }
                (OpKind::Gather { axis: 0 }, 0) => {}
                _ => {
                    return Err(not_rows(
                        &reader,
                        "only a transposed-weight contraction and a row gather read by rows",
                    ));
                }
            }
        }
    }
    if g.outputs().primary.contains(&v) {
        return Err(not_rows("the graph's output", "an output is read whole"));
    }
    let rows = ty.dims().first().copied().unwrap_or(1);
    if i32::try_from(rows).is_err() {
        return Err(not_rows("its layout", "chunk indices are 32-bit"));
    }
    let mut row_dims = ty.dims().to_vec();
    if let Some(d) = row_dims.first_mut() {
        *d = 1;
    }
    let row_bytes = TensorType::new(ty.dtype, row_dims)
        .size_bytes()
        .filter(|&b| ty.rank() >= 1 && b.checked_mul(rows as u64) == Some(size))
        .ok_or_else(|| not_rows("its layout", "its rows are not equal byte ranges"))?;
    // The most rows one buffer holds (buffers are whole words).
    let mut per = limit / row_bytes.max(1);
    while per > 0 && round_up4(per * row_bytes) > limit {
        per -= 1;
    }
    if per == 0 {
        return Err(PlanError::ConstantRowTooLarge {
            backend: target.backend,
            name: name.to_string(),
            row_bytes,
            limit_bytes: limit,
        });
    }
    // Equal chunks: identical shapes share one compiled kernel.
    let n = (rows as u64).div_ceil(per);
    let per = (rows as u64).div_ceil(n) as usize;
    let ranges = (0..rows)
        .step_by(per)
        .map(|s| s..(s + per).min(rows))
        .collect();
    Ok(Split {
        value: v,
        source: name.to_string(),
        rows,
        row_bytes,
        ranges,
        components: Vec::new(),
    })
}

/// Checks that the component-format constant `v` can be split by rows, and picks chunks that
/// each fit. Formats whose components are all row-major along N split (FP8, FP4; a 128x128 FP8
/// block scale in chunks of whole 128-row tiles, a per-tensor scale whole in every chunk); GPTQ
/// and AWQ pack output rows along the inner axis of their words and are refused.
fn plan_component_split(
    g: &Graph,
    target: &Target,
    v: ValueId,
    name: &str,
    ty: &TensorType,
    largest: u64,
) -> Result<Split, PlanError> {
    let limit = target.limits.max_buffer_bytes;
    let not_rows = |reader: &str, reason: &'static str| PlanError::ConstantNotRowSplittable {
        backend: target.backend,
        name: name.to_string(),
        needed_bytes: largest,
        limit_bytes: limit,
        reader: reader.to_string(),
        reason,
    };
    let DType::Components(format) = ty.dtype else {
        return Err(not_rows("its layout", "not a component format"));
    };
    let granule = match format.format() {
        PackedFormat::Fp8(p) => match p.scaling {
            Fp8Scaling::PerChannel | Fp8Scaling::PerTensor => 1,
            Fp8Scaling::Block128 => FP8_BLOCK_ELEMS,
        },
        PackedFormat::Fp4E2M1 => 1,
        PackedFormat::Gptq(_) | PackedFormat::Awq(_) | PackedFormat::Block(_) => {
            return Err(not_rows(
                "its layout",
                "GPTQ and AWQ pack 8 output rows into each word of qweight and qzeros, so rows are not byte ranges",
            ));
        }
    };
    for e in g.eqns() {
        for (pos, &inp) in e.inputs.iter().enumerate() {
            if inp != v {
                continue;
            }
            let label = g.values()[e.out.index()].label.as_str();
            if !matches!(
                (&e.op, pos),
                (
                    OpKind::MatMul {
                        transpose_rhs: true
                    },
                    1
                )
            ) {
                return Err(not_rows(
                    &format!("{} at `{label}`", e.op.name()),
                    "only a transposed-weight contraction reads a component format",
                ));
            }
        }
    }
    if g.outputs().primary.contains(&v) {
        return Err(not_rows("the graph's output", "an output is read whole"));
    }
    let specs = format
        .components(ty.dims())
        .map_err(|_| not_rows("its layout", "its shape is not one the format stores"))?;
    let rows = ty.dims().first().copied().unwrap_or(1);
    if i32::try_from(rows).is_err() {
        return Err(not_rows("its layout", "chunk indices are 32-bit"));
    }
    // Every component is row-major with one row per weight row, or (a block scale) per granule.
    let mut components = Vec::with_capacity(specs.len());
    for c in &specs {
        let component_rows = c.dims.first().copied().unwrap_or(1).max(1);
        let weight_rows = if component_rows == rows {
            1
        } else if component_rows == 1 {
            // One scale for the whole weight: every chunk reads it whole.
            rows
        } else if component_rows == rows.div_ceil(granule) {
            granule
        } else {
            return Err(not_rows(
                "its layout",
                "a component's rows do not follow the weight's",
            ));
        };
        let row_bytes = c.n_bytes().map_or(u64::MAX, |b| b as u64) / component_rows as u64;
        components.push(ComponentRows {
            role: c.name,
            weight_rows,
            row_bytes,
        });
    }
    // The most whole granules one buffer of every component holds.
    let fits = |weight_rows: usize| {
        components.iter().all(|c| {
            let n = weight_rows.div_ceil(c.weight_rows) as u64;
            round_up4(n.saturating_mul(c.row_bytes)) <= limit
        })
    };
    if !fits(granule) {
        return Err(PlanError::ConstantRowTooLarge {
            backend: target.backend,
            name: name.to_string(),
            row_bytes: components
                .iter()
                .map(|c| granule.div_ceil(c.weight_rows) as u64 * c.row_bytes)
                .max()
                .unwrap_or(0),
            limit_bytes: limit,
        });
    }
    let (mut lo, mut hi) = (1usize, rows.div_ceil(granule));
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid * granule) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    // Equal chunks of whole granules: identical shapes share one compiled kernel.
    let granules = rows.div_ceil(granule);
    let n = granules.div_ceil(lo);
    let per = granules.div_ceil(n) * granule;
    let ranges = (0..rows)
        .step_by(per)
        .map(|s| s..(s + per).min(rows))
        .collect();
    Ok(Split {
        value: v,
        source: name.to_string(),
        rows,
        row_bytes: 0,
        ranges,
        components,
    })
}

/// The graph with each split constant replaced by its chunks and its readers rewritten.
fn rewrite<'g>(g: &Graph, splits: &[Split]) -> Result<Legalized<'g>, PlanError> {
    let mut r = Rewriter {
        values: Vec::with_capacity(g.values().len() + 8 * splits.len()),
        eqns: Vec::with_capacity(g.eqns().len() + 8 * splits.len()),
        map: vec![None; g.values().len()],
    };
    let split_of = |v: ValueId| splits.iter().position(|s| s.value == v);
    // Every value but the split constants keeps its place, in order; new values follow.
    for (i, info) in g.values().iter().enumerate() {
        if split_of(ValueId(i as u32)).is_none() {
            r.values.push(info.clone());
            r.map[i] = Some(ValueId(r.values.len() as u32 - 1));
        }
    }
    let mut chunks = Vec::new();
    let mut chunk_values: Vec<Vec<ValueId>> = Vec::with_capacity(splits.len());
    for s in splits {
        let info = &g.values()[s.value.index()];
        let mut ids = Vec::with_capacity(s.ranges.len());
        for range in &s.ranges {
            let name = format!("{}#rows{}..{}", s.source, range.start, range.end);
            let mut dims = info.ty.dims().to_vec();
            dims[0] = range.len();
            let label = format!("{}#rows{}..{}", info.label, range.start, range.end);
            ids.push(r.input(
                TensorType::new(info.ty.dtype, dims),
                Storage::Const(name.clone()),
                label,
            ));
            if s.components.is_empty() {
                chunks.push(ConstChunk {
                    name,
                    source: s.source.clone(),
                    rows: range.clone(),
                    offset_bytes: range.start as u64 * s.row_bytes,
                    len_bytes: range.len() as u64 * s.row_bytes,
                });
                continue;
            }
            // A chunk's components are each a byte range of the source's component.
            for c in &s.components {
                let first = range.start / c.weight_rows;
                let end = range.end.div_ceil(c.weight_rows);
                chunks.push(ConstChunk {
                    name: component_const_name(&name, c.role),
                    source: component_const_name(&s.source, c.role),
                    rows: range.clone(),
                    offset_bytes: first as u64 * c.row_bytes,
                    len_bytes: (end - first) as u64 * c.row_bytes,
                });
            }
        }
        debug_assert_eq!(s.ranges.last().map(|r| r.end), Some(s.rows));
        chunk_values.push(ids);
    }
    for e in g.eqns() {
        let split = e.inputs.iter().find_map(|&v| split_of(v));
        let out_info = &g.values()[e.out.index()];
        match split {
            None => {
                let inputs = e
                    .inputs
                    .iter()
                    .map(|&v| r.get(v))
                    .collect::<Result<Vec<_>, _>>()?;
                let out = r.get(e.out)?;
                r.eqns.push(Eqn {
                    op: e.op.clone(),
                    inputs,
                    out,
                });
            }
            Some(s) => {
                let (split, parts) = (&splits[s], &chunk_values[s]);
                let out = r.get(e.out)?;
                match e.op {
                    OpKind::MatMul { .. } => {
                        let x = r.get(e.inputs[0])?;
                        r.split_matmul(x, split, parts, out_info, out)?;
                    }
                    _ => {
                        let idx = r.get(e.inputs[1])?;
                        r.split_gather(idx, split, parts, out_info, out)?;
                    }
                }
            }
        }
    }
    let outputs = OutputIds {
        primary: g
            .outputs()
            .primary
            .iter()
            .map(|&v| r.get(v))
            .collect::<Result<_, _>>()?,
        state: g
            .outputs()
            .state
            .iter()
            .map(|&(a, b)| Ok((r.get(a)?, r.get(b)?)))
            .collect::<Result<_, PlanError>>()?,
    };
    let graph = Graph::from_parts(r.values, r.eqns, outputs)?;
    Ok(Legalized {
        graph: Cow::Owned(graph),
        chunks,
    })
}

/// The legalized graph under construction.
struct Rewriter {
    values: Vec<ValueInfo>,
    eqns: Vec<Eqn>,
    /// Each original value's id in the new graph.
    map: Vec<Option<ValueId>>,
}

impl Rewriter {
    fn get(&self, v: ValueId) -> Result<ValueId, PlanError> {
        self.map
            .get(v.index())
            .copied()
            .flatten()
            .ok_or_else(|| PlanError::Unplaced {
                label: format!("{v} (while splitting constants)"),
            })
    }

    fn input(&mut self, ty: TensorType, storage: Storage, label: String) -> ValueId {
        self.values.push(ValueInfo { ty, storage, label });
        ValueId(self.values.len() as u32 - 1)
    }

    fn infer(&self, op: &OpKind, inputs: &[ValueId]) -> Result<TensorType, PlanError> {
        let tys: Vec<&TensorType> = inputs.iter().map(|v| &self.values[v.index()].ty).collect();
        Ok(op
            .infer(&tys)
            .map_err(|source| poot_graph_ir::ValidationError::Infer {
                eqn: self.eqns.len(),
                source,
            })?)
    }

    /// Appends `op(inputs)` as a new value, inferring its type.
    fn push(
        &mut self,
        op: OpKind,
        inputs: Vec<ValueId>,
        label: String,
    ) -> Result<ValueId, PlanError> {
        let ty = self.infer(&op, &inputs)?;
        self.values.push(ValueInfo {
            ty,
            storage: Storage::Device,
            label,
        });
        let out = ValueId(self.values.len() as u32 - 1);
        self.eqns.push(Eqn { op, inputs, out });
        Ok(out)
    }

    /// Appends `op(inputs)` defining the existing value `out` (the rewritten equation's own
    /// output, which keeps its id, type and label).
    fn push_into(
        &mut self,
        op: OpKind,
        inputs: Vec<ValueId>,
        out: ValueId,
    ) -> Result<(), PlanError> {
        let ty = self.infer(&op, &inputs)?;
        let recorded = &self.values[out.index()].ty;
        if &ty != recorded {
            return Err(poot_graph_ir::ValidationError::TypeDrift {
                eqn: self.eqns.len(),
                op: op.name(),
                recorded: recorded.clone(),
                inferred: ty,
            }
            .into());
        }
        self.eqns.push(Eqn { op, inputs, out });
        Ok(())
    }

    /// An i32 scalar broadcast to `shape`.
    fn splat(&mut self, x: i32, shape: &Shape, label: &str) -> Result<ValueId, PlanError> {
        let s = self.push(OpKind::Literal(Scalar::I32(x)), vec![], label.to_string())?;
        self.push(
            OpKind::Broadcast {
                shape: shape.clone(),
            },
            vec![s],
            label.to_string(),
        )
    }

    /// `x @ W^T` as one contraction per chunk, concatenated along the output's columns (in a
    /// tree of at most [`FAN_IN`] inputs a node).
    fn split_matmul(
        &mut self,
        x: ValueId,
        split: &Split,
        parts: &[ValueId],
        out: &ValueInfo,
        out_id: ValueId,
    ) -> Result<(), PlanError> {
        let mut cols = Vec::with_capacity(parts.len());
        for (&w, range) in parts.iter().zip(&split.ranges) {
            cols.push(self.push(
                OpKind::MatMul {
                    transpose_rhs: true,
                },
                vec![x, w],
                format!("{}#cols{}..{}", out.label, range.start, range.end),
            )?);
        }
        let axis = out.ty.rank().saturating_sub(1);
        while cols.len() > FAN_IN {
            let mut next = Vec::with_capacity(cols.len().div_ceil(FAN_IN));
            for group in cols.chunks(FAN_IN) {
                next.push(match group {
                    [one] => *one,
                    _ => self.push(OpKind::Concat { axis }, group.to_vec(), out.label.clone())?,
                });
            }
            cols = next;
        }
        self.push_into(OpKind::Concat { axis }, cols, out_id)
    }

    /// `W[idx]` as a gather from each chunk and a select of the chunk holding each index (in a
    /// tree of at most [`FAN_IN`] chunks a node).
    fn split_gather(
        &mut self,
        idx: ValueId,
        split: &Split,
        parts: &[ValueId],
        out: &ValueInfo,
        out_id: ValueId,
    ) -> Result<(), PlanError> {
        let label = out.label.as_str();
        let idx_ty = self.values[idx.index()].ty.clone();
        // Index arithmetic in i32: a u32 index past i32::MAX wraps negative and still faults.
        let idx = if idx_ty.dtype == DType::I32 {
            idx
        } else {
            self.push(
                OpKind::Cast { to: DType::I32 },
                vec![idx],
                label.to_string(),
            )?
        };
        let shape = idx_ty.shape.clone();
        let last = parts.len() - 1;
        // Each chunk's rows at the index shifted into it, with the chunk's first row.
        let mut items = Vec::with_capacity(parts.len());
        for (c, (&w, range)) in parts.iter().zip(&split.ranges).enumerate() {
            let (start, end) = (range.start as i32, range.end as i32);
            let mut local = idx;
            if c > 0 {
                let s = self.splat(start, &shape, label)?;
                local = self.push(
                    OpKind::Binary(BinaryOp::Sub),
                    vec![local, s],
                    label.to_string(),
                )?;
                let zero = self.splat(0, &shape, label)?;
                local = self.push(
                    OpKind::Binary(BinaryOp::Max),
                    vec![local, zero],
                    label.to_string(),
                )?;
            }
            if c < last {
                let top = self.splat(end - start - 1, &shape, label)?;
                local = self.push(
                    OpKind::Binary(BinaryOp::Min),
                    vec![local, top],
                    label.to_string(),
                )?;
            }
            let rows = self.push(
                OpKind::Gather { axis: 0 },
                vec![w, local],
                format!("{label}#rows{}..{}", range.start, range.end),
            )?;
            items.push((start, rows));
        }
        let pick = Pick {
            idx,
            shape: &shape,
            out,
        };
        while items.len() > FAN_IN {
            let mut next = Vec::with_capacity(items.len().div_ceil(FAN_IN));
            for group in items.chunks(FAN_IN) {
                next.push((group[0].0, self.pick_chunk(&pick, group, None)?));
            }
            items = next;
        }
        self.pick_chunk(&pick, &items, Some(out_id))?;
        Ok(())
    }

    /// The rows of the last of `items` (chunk start, rows) whose start is at or below each
    /// index: a chain of selects, into `into` when given.
    fn pick_chunk(
        &mut self,
        pick: &Pick<'_>,
        items: &[(i32, ValueId)],
        into: Option<ValueId>,
    ) -> Result<ValueId, PlanError> {
        let label = pick.out.label.as_str();
        let Some((&(_, first), rest)) = items.split_first() else {
            return Err(PlanError::Unplaced {
                label: label.to_string(),
            });
        };
        let mut below = first;
        for (j, &(start, rows)) in rest.iter().enumerate() {
            let s = self.splat(start, pick.shape, label)?;
            let inside = self.push(
                OpKind::Compare(CompareOp::Ge),
                vec![pick.idx, s],
                label.to_string(),
            )?;
            // The per-index choice, broadcast over the row's elements.
            let mut dims = pick.shape.dims().to_vec();
            dims.extend(std::iter::repeat_n(
                1,
                pick.out.ty.rank() - pick.shape.rank(),
            ));
            let inside = self.push(
                OpKind::Reshape {
                    shape: Shape::new(dims),
                },
                vec![inside],
                label.to_string(),
            )?;
            let inside = self.push(
                OpKind::Broadcast {
                    shape: pick.out.ty.shape.clone(),
                },
                vec![inside],
                label.to_string(),
            )?;
            let inputs = vec![inside, rows, below];
            below = match into {
                Some(out) if j + 1 == rest.len() => {
                    self.push_into(OpKind::Select, inputs, out)?;
                    out
                }
                _ => self.push(OpKind::Select, inputs, format!("{label}#from{start}"))?,
            };
        }
        Ok(below)
    }
}

/// What every select of a split gather shares.
struct Pick<'a> {
    /// The index, as i32.
    idx: ValueId,
    /// The index's shape.
    shape: &'a Shape,
    /// The gather's output.
    out: &'a ValueInfo,
}
