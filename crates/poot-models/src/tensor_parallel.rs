//! Tensor parallelism's side of the weight map: which roles a group splits, and the weight map
//! one rank reads.
//!
//! The split follows the roles, so every family tracing its layers with the shared components
//! gets it: query, key and value projections (and their biases) are column-parallel, each rank
//! holding the rows of its heads; gate and up projections (and the up bias) are
//! column-parallel over the feed-forward features; the output and down projections are
//! row-parallel, each rank holding the columns that meet its share of the features, and their
//! partial products are summed across the group ([`poot_graph_ir::ops::row_parallel_linear`]).
//! Everything else (embeddings, norms, the head, rotary tables, output biases) is replicated.
//!
//! Attention splits by key/value head: a rank holds whole key/value heads and the query heads
//! that read them, so grouped-query attention stays within a rank. The feed-forward splits in
//! blocks of its down projection's format (whole blocks when it is packed). Shares are balanced
//! ([`Shard::share`]) and need not be equal.
//!
//! A rank's slice is a view of the stored tensor: a range of rows (contiguous bytes, also for
//! packed rows), or a range of every row's elements (gathered on the host when uploaded; for a
//! packed tensor each rank's share must be whole blocks). A component-format linear (GPTQ, AWQ,
//! FP8, FP4) is sliced component by component, each tensor's range derived from the share and
//! the format's packing ([`component_slices`]), so the slices are exactly the components of the
//! share's `[N, K]` in that format; a share that cuts a packed word, a quantization group or a
//! scale tile is refused ([`TraceError::ComponentSplit`]), as is a GPTQ act-order linear split
//! along its inputs ([`TraceError::ComponentActOrder`]).

use std::ops::Range;
use std::sync::Arc;

use poot_formats::{Fp8Scaling, GroupSize, PackedFormat, StoredType};
use poot_graph_ir::{ComponentFormat, DType, TensorType};

use crate::error::TraceError;
use crate::step::Shard;
use crate::table::ComputedTable;
use crate::weights::{ComponentSource, Role, WeightEntry, WeightMap, WeightRole, WeightSource};

/// The indivisible parts a split weight is cut between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parts {
    /// Attention key/value heads with the query heads that read them (query and output
    /// projections).
    HeadGroups,
    /// Attention key/value heads (key and value projections).
    KvHeads,
    /// One element per query head, in the groups that read each key/value head (ALiBi's
    /// slopes).
    QueryHeads,
    /// Feed-forward features, in blocks of the down projection's format.
    FfnBlocks,
}

impl Parts {
    /// How refusals name these parts.
    pub fn name(self) -> &'static str {
        match self {
            Parts::HeadGroups | Parts::KvHeads | Parts::QueryHeads => "key/value heads",
            Parts::FfnBlocks => "feed-forward blocks",
        }
    }
}

/// A model's attention heads, which decide how its attention weights split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heads {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

impl Heads {
    /// Query heads per key/value head, refused unless whole.
    pub fn per_group(&self) -> Result<usize, TraceError> {
        if self.n_kv_heads == 0 || !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return Err(TraceError::HeadGroups {
                n_heads: self.n_heads,
                n_kv_heads: self.n_kv_heads,
            });
        }
        Ok(self.n_heads / self.n_kv_heads)
    }

    /// The query and key/value heads rank `shard.rank` holds: `(query heads, key/value heads)`.
    pub fn share(&self, shard: Shard) -> Result<(usize, usize), TraceError> {
        let per_group = self.per_group()?;
        let kv = shard.part(Parts::KvHeads.name(), self.n_kv_heads)?.len();
        Ok((kv * per_group, kv))
    }
}

/// How a tensor-parallel group divides a role's weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// Every rank holds the whole weight.
    Replicated,
    /// Each rank holds its parts' rows (outputs) of `[N, K]`, or elements of a vector.
    Rows(Parts),
    /// Each rank holds its parts' columns (inputs) of `[N, K]`.
    Cols(Parts),
}

/// How the group divides `role`'s weight.
pub fn split_of(role: Role) -> Split {
    match role {
        Role::AttnQ | Role::AttnQBias => Split::Rows(Parts::HeadGroups),
        Role::AttnK | Role::AttnKBias | Role::AttnV | Role::AttnVBias => {
            Split::Rows(Parts::KvHeads)
        }
        Role::AttnO => Split::Cols(Parts::HeadGroups),
        Role::FfnGate | Role::FfnUp | Role::FfnUpBias => Split::Rows(Parts::FfnBlocks),
        Role::FfnDown => Split::Cols(Parts::FfnBlocks),
        Role::AlibiSlopes => Split::Rows(Parts::QueryHeads),
        Role::TokenEmbed
        | Role::PositionEmbed
        | Role::TokenTypeEmbed
        | Role::EmbedNorm
        | Role::EmbedNormBias
        | Role::FinalNorm
        | Role::FinalNormBias
        | Role::Head
        | Role::AttnNorm
        | Role::AttnNormBias
        | Role::AttnOBias
        | Role::QNorm
        | Role::KNorm
        | Role::PostAttnNorm
        | Role::PostAttnNormBias
        | Role::FfnNorm
        | Role::FfnNormBias
        | Role::PostFfnNorm
        | Role::PostFfnNormBias
        | Role::FfnDownBias
        // Every rank would route and run all experts; MoE families refuse sharding first.
        | Role::AttnSinks
        | Role::Router
        | Role::RouterBias
        | Role::ExpertGate
        | Role::ExpertUp
        | Role::ExpertDown
        | Role::ExpertGateUp
        | Role::ExpertGateUpBias
        | Role::ExpertDownBias
        | Role::ExpertGateBias
        | Role::ExpertUpBias
        | Role::SharedGate
        | Role::SharedUp
        | Role::SharedDown
        | Role::SharedGateLogit
        | Role::Pooler
        | Role::PoolerBias
        | Role::Classifier
        | Role::ClassifierBias
        | Role::RopeCos(_)
        | Role::RopeSin(_) => Split::Replicated,
    }
}

impl WeightMap {
    /// The weight map rank `shard.rank` of a group of `shard.ranks` reads, for a model with
    /// `heads`: every split role narrowed to the rank's slice (see [`split_of`]), every other
    /// role as it is. A group of one is this map.
    pub fn shard(&self, shard: Shard, heads: Heads) -> Result<WeightMap, TraceError> {
        Shard::new(shard.rank, shard.ranks)?;
        let mut out = WeightMap::new();
        for e in self.iter() {
            out.insert(self.shard_entry(e, shard, heads)?);
        }
        Ok(out)
    }

    /// Features per feed-forward block of `layer`: its down projection's format's block (one
    /// feature when it is dense). For component formats, what the down projection's inputs and
    /// the gate and up projections' outputs pack together, when the features are whole such
    /// blocks (else single features, and a share that cuts one is refused when sliced).
    fn ffn_block(&self, layer: Option<usize>) -> usize {
        let entry = |role| self.get(WeightRole { layer, role });
        match entry(Role::FfnDown).map(|e| e.ty.dtype) {
            Some(DType::Packed(g)) => g.block_elems(),
            Some(DType::Components(f)) => {
                let mut unit = align_of(f, 1);
                for role in [Role::FfnGate, Role::FfnUp] {
                    if let Some(DType::Components(g)) = entry(role).map(|e| e.ty.dtype) {
                        unit = lcm(unit, align_of(g, 0));
                    }
                }
                let features = entry(Role::FfnDown)
                    .and_then(|e| e.ty.dims().get(1).copied())
                    .unwrap_or(0);
                if features.is_multiple_of(unit) {
                    unit
                } else {
                    1
                }
            }
            _ => 1,
        }
    }

    fn shard_entry(
        &self,
        e: &WeightEntry,
        shard: Shard,
        heads: Heads,
    ) -> Result<WeightEntry, TraceError> {
        let (axis, parts) = match split_of(e.role.role) {
            Split::Replicated => return Ok(e.clone()),
            _ if shard.is_whole() => return Ok(e.clone()),
            Split::Rows(p) => (0, p),
            Split::Cols(p) => (1, p),
        };
        let name = e.role.const_name();
        let dims = e.ty.dims();
        let len = dims.get(axis).copied().unwrap_or(0);
        let unit = match parts {
            Parts::HeadGroups => heads.per_group()? * heads.head_dim,
            Parts::KvHeads => heads.head_dim,
            Parts::QueryHeads => heads.per_group()?,
            Parts::FfnBlocks => self.ffn_block(e.role.layer),
        }
        .max(1);
        let count = match parts {
            Parts::HeadGroups | Parts::KvHeads | Parts::QueryHeads => heads.n_kv_heads,
            Parts::FfnBlocks => len / unit,
        };
        if dims.len() > 2 || dims.len() <= axis || count * unit != len {
            return Err(TraceError::SplitShape {
                name,
                dims: dims.to_vec(),
                axis,
                unit,
            });
        }
        let part = shard.part(parts.name(), count)?;
        let range = part.start * unit..part.end * unit;
        if axis == 1
            && let DType::Packed(g) = e.ty.dtype
            && (!range.start.is_multiple_of(g.block_elems())
                || !range.len().is_multiple_of(g.block_elems()))
        {
            return Err(TraceError::PackedSplit {
                name,
                cols: len,
                ranks: shard.ranks,
                per_rank: range.len(),
                block_elems: g.block_elems(),
            });
        }
        let mut new_dims = dims.to_vec();
        new_dims[axis] = range.len();
        let source = match &e.source {
            WeightSource::Tensor { name, rows, cols } => {
                let offset = |base: &Option<Range<u64>>| base.as_ref().map_or(0, |r| r.start);
                let (r, c) = (range.start as u64, range.end as u64);
                if axis == 0 {
                    let o = offset(rows);
                    WeightSource::Tensor {
                        name: name.clone(),
                        rows: Some(o + r..o + c),
                        cols: cols.clone(),
                    }
                } else {
                    let o = offset(cols);
                    WeightSource::Tensor {
                        name: name.clone(),
                        rows: rows.clone(),
                        cols: Some(o + r..o + c),
                    }
                }
            }
            WeightSource::Table(t) => WeightSource::Table(ComputedTable::values(
                new_dims[0],
                new_dims.iter().skip(1).product(),
                slice_table(t.data(), dims, axis, range.clone()),
            )),
            // A rank's rows of an interleaved part are whole runs (heads) of it, the runs from
            // its first head's; its columns are never split (a query, key or value part is
            // split by rows only).
            WeightSource::Strided {
                name: tensor,
                start,
                run,
                period,
                runs,
            } if axis == 0
                && *run > 0
                && (range.start as u64).is_multiple_of(*run)
                && (range.len() as u64).is_multiple_of(*run) =>
            {
                let first = range.start as u64 / run;
                let taken = range.len() as u64 / run;
                WeightSource::Strided {
                    name: tensor.clone(),
                    start: start + first * period,
                    run: *run,
                    period: *period,
                    runs: taken,
                }
            }
            // Expert stacks are replicated (see `split_of`), never split.
            WeightSource::Strided { .. }
            | WeightSource::Stacked { .. }
            | WeightSource::Mxfp4Blocks { .. } => {
                return Err(TraceError::SplitShape {
                    name,
                    dims: dims.to_vec(),
                    axis,
                    unit,
                });
            }
            WeightSource::Components(parts) => {
                let DType::Components(format) = e.ty.dtype else {
                    return Err(TraceError::SplitShape {
                        name,
                        dims: dims.to_vec(),
                        axis,
                        unit,
                    });
                };
                let slices = component_slices(&name, format, dims, axis, range.clone())?;
                let mut out = Vec::with_capacity(parts.len());
                for c in parts {
                    let (rows, cols) = slices
                        .iter()
                        .find(|(role, _, _)| *role == c.role)
                        .map(|(_, r, k)| (r.clone(), k.clone()))
                        .ok_or_else(|| TraceError::SplitShape {
                            name: format!("{name}:{}", c.role),
                            dims: dims.to_vec(),
                            axis,
                            unit,
                        })?;
                    out.push(ComponentSource {
                        role: c.role,
                        tensor: c.tensor.clone(),
                        rows: compose(&c.rows, rows),
                        cols: compose(&c.cols, cols),
                    });
                }
                WeightSource::Components(out)
            }
        };
        Ok(WeightEntry {
            role: e.role,
            ty: TensorType::new(e.ty.dtype, new_dims),
            source,
        })
    }
}

/// `range` within an already sliced range `base` (`None`: the whole tensor, `range: None`: all
/// of `base`).
fn compose(base: &Option<Range<u64>>, range: Option<Range<u64>>) -> Option<Range<u64>> {
    match (base, range) {
        (_, None) => base.clone(),
        (None, Some(r)) => Some(r),
        (Some(b), Some(r)) => Some(b.start + r.start..b.start + r.end),
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

fn lcm(a: usize, b: usize) -> usize {
    if a == 0 || b == 0 {
        a.max(b)
    } else {
        a / gcd(a, b) * b
    }
}

/// Elements of `axis` (0: outputs N, 1: inputs K) a share of a `format` linear must start (and,
/// unless it runs to the end, stop) on, with what they are in the format's words.
fn alignment(format: ComponentFormat, axis: usize) -> (usize, String) {
    let group = |g: GroupSize| match g {
        GroupSize::Channel => 1,
        GroupSize::Elems(n) => n.get() as usize,
    };
    match (format.format(), axis) {
        (PackedFormat::Gptq(_) | PackedFormat::Awq(_), 0) => {
            (8, "int4 words of 8 output rows (packed zeros)".into())
        }
        (PackedFormat::Gptq(g), _) => {
            let a = lcm(8, group(g.group));
            (
                a,
                format!("int4 words of 8 inputs and quantization groups ({a})"),
            )
        }
        (PackedFormat::Awq(a), _) => {
            let g = group(a.group);
            (g, format!("quantization groups of {g}"))
        }
        (PackedFormat::Fp8(p), _) if p.scaling == Fp8Scaling::Block128 => {
            (128, "128x128 scale tiles".into())
        }
        (PackedFormat::Fp4E2M1, 1) => (32, "E8M0 scale groups of 32".into()),
        _ => (1, "elements".into()),
    }
}

fn align_of(format: ComponentFormat, axis: usize) -> usize {
    alignment(format, axis).0
}

/// Each component's `(role, rows, cols)` range (in the component tensor's own elements) holding
/// the share `range` of axis `axis` of the `[N, K]` = `dims` linear `name` stored in `format`:
/// exactly the components of the share's linear in that format. Refused when the share cuts
/// what the format packs together, and for a GPTQ act-order linear split along its inputs.
pub fn component_slices(
    name: &str,
    format: ComponentFormat,
    dims: &[usize],
    axis: usize,
    range: Range<usize>,
) -> Result<Vec<ComponentSlice>, TraceError> {
    let len = dims.get(axis).copied().unwrap_or(0);
    let (align, unit) = alignment(format, axis);
    let r = |a: usize, b: usize| Some(a as u64..b as u64);
    // A share starts on a boundary (or, for 128x128 tiles, lies in one tile: the share's own
    // first tile) and stops where the share's own components can: whole packed words, any
    // group or tile (the last one partial), or the end.
    let end_align = match (format.format(), axis) {
        (PackedFormat::Gptq(_), _) | (PackedFormat::Awq(_), 0) => 8,
        (PackedFormat::Fp4E2M1, 1) => 32,
        _ => 1,
    };
    let in_one_tile = align == 128 && range.start / 128 == range.end.saturating_sub(1) / 128;
    let aligned = range.start.is_multiple_of(align)
        && (range.end.is_multiple_of(end_align) || range.end == len);
    if !(aligned || in_one_tile) || range.end > len {
        return Err(TraceError::ComponentSplit {
            name: name.to_string(),
            format: format.to_string(),
            axis: if axis == 0 {
                "output rows"
            } else {
                "input columns"
            },
            start: range.start,
            end: range.end,
            len,
            align,
            unit,
        });
    }
    let (a, b) = (range.start, range.end);
    let groups = |g: GroupSize| match g {
        GroupSize::Channel => (0, 1),
        GroupSize::Elems(n) => {
            let n = n.get() as usize;
            (a / n, b.div_ceil(n))
        }
    };
    let tiles = (a / 128, b.div_ceil(128));
    Ok(match (format.format(), axis) {
        (PackedFormat::Gptq(_), 0) => vec![
            ("qweight", None, r(a, b)),
            ("qzeros", None, r(a / 8, b / 8)),
            ("scales", None, r(a, b)),
            ("g_idx", None, None),
        ],
        (PackedFormat::Gptq(g), _) => {
            if g.act_order {
                return Err(TraceError::ComponentActOrder {
                    name: name.to_string(),
                    format: format.to_string(),
                });
            }
            let (g0, g1) = groups(g.group);
            vec![
                ("qweight", r(a / 8, b / 8), None),
                ("qzeros", r(g0, g1), None),
                ("scales", r(g0, g1), None),
            ]
        }
        (PackedFormat::Awq(_), 0) => vec![
            ("qweight", None, r(a / 8, b / 8)),
            ("qzeros", None, r(a / 8, b / 8)),
            ("scales", None, r(a, b)),
        ],
        (PackedFormat::Awq(w), _) => {
            let (g0, g1) = groups(w.group);
            vec![
                ("qweight", r(a, b), None),
                ("qzeros", r(g0, g1), None),
                ("scales", r(g0, g1), None),
            ]
        }
        (PackedFormat::Fp8(p), 0) => vec![
            ("weight", r(a, b), None),
            match p.scaling {
                Fp8Scaling::PerChannel => ("weight_scale", r(a, b), None),
                Fp8Scaling::PerTensor => ("weight_scale", None, None),
                Fp8Scaling::Block128 => ("weight_scale_inv", r(tiles.0, tiles.1), None),
            },
        ],
        (PackedFormat::Fp8(p), _) => vec![
            ("weight", None, r(a, b)),
            match p.scaling {
                Fp8Scaling::PerChannel | Fp8Scaling::PerTensor => ("weight_scale", None, None),
                Fp8Scaling::Block128 => ("weight_scale_inv", None, r(tiles.0, tiles.1)),
            },
        ],
        (PackedFormat::Fp4E2M1, 0) => vec![
            ("weight_packed", r(a, b), None),
            ("weight_scale", r(a, b), None),
        ],
        (PackedFormat::Fp4E2M1, _) => vec![
            ("weight_packed", None, r(a / 2, b / 2)),
            ("weight_scale", None, r(a / 32, b / 32)),
        ],
        (PackedFormat::Block(_), _) => {
            return Err(TraceError::SplitShape {
                name: name.to_string(),
                dims: dims.to_vec(),
                axis,
                unit: align,
            });
        }
    })
}

/// A component's role and the rows and each row's columns of its tensor a share reads.
pub type ComponentSlice = (&'static str, Option<Range<u64>>, Option<Range<u64>>);

/// Rows (`axis` 0) or columns (`axis` 1) `range` of a row-major f32 table of `dims`.
fn slice_table(t: &[f32], dims: &[usize], axis: usize, range: Range<usize>) -> Arc<[f32]> {
    let cols: usize = dims.iter().skip(1).product();
    if axis == 0 {
        Arc::from(t.get(range.start * cols..range.end * cols).unwrap_or(&[]))
    } else {
        t.chunks(cols.max(1))
            .flat_map(|row| row.get(range.clone()).unwrap_or(&[]).iter().copied())
            .collect()
    }
}

/// Bytes of columns `cols` of every row of a `[n, k]` tensor stored as `stored` (`bytes` holding
/// whole rows), gathered into one buffer; `None` when the columns are not whole blocks of a
/// packed format or lie outside the rows.
pub(crate) fn gather_cols(
    bytes: &[u8],
    stored: StoredType,
    k: u64,
    cols: &Range<u64>,
) -> Option<Vec<u8>> {
    let row = usize::try_from(stored.bytes_for(k)?).ok()?;
    let start = usize::try_from(stored.bytes_for(cols.start)?).ok()?;
    let end = usize::try_from(stored.bytes_for(cols.end)?).ok()?;
    if row == 0 || end > row || start > end || !bytes.len().is_multiple_of(row) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / row * (end - start));
    for r in bytes.chunks_exact(row) {
        out.extend_from_slice(&r[start..end]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use poot_formats::{AwqFormat, Fp8Format, GptqFormat, GptqZeros, ScaleType};

    use super::*;

    fn gptq(act_order: bool) -> ComponentFormat {
        let group = GroupSize::Elems(NonZeroU32::new(32).unwrap_or(NonZeroU32::MIN));
        ComponentFormat::new(PackedFormat::Gptq(GptqFormat {
            group,
            act_order,
            zeros: GptqZeros::V1PlusOne,
        }))
        .unwrap_or_else(|| panic!("gptq"))
    }

    fn formats() -> Vec<ComponentFormat> {
        let awq = PackedFormat::Awq(AwqFormat {
            group: GroupSize::Elems(NonZeroU32::new(64).unwrap_or(NonZeroU32::MIN)),
        });
        let fp8 = |scaling| {
            PackedFormat::Fp8(Fp8Format {
                scaling,
                scale_type: ScaleType::F32,
            })
        };
        [
            awq,
            fp8(Fp8Scaling::PerChannel),
            fp8(Fp8Scaling::PerTensor),
            fp8(Fp8Scaling::Block128),
            PackedFormat::Fp4E2M1,
        ]
        .into_iter()
        .filter_map(ComponentFormat::new)
        .chain([gptq(false), gptq(true)])
        .collect()
    }

    /// Every component's slice of a `[n, k]` linear has the dims of the share's own component.
    fn assert_slices_are_the_shares_components(
        f: ComponentFormat,
        dims: [usize; 2],
        axis: usize,
        range: Range<usize>,
    ) {
        let slices = component_slices("w", f, &dims, axis, range.clone())
            .unwrap_or_else(|e| panic!("{f} axis {axis} {range:?}: {e}"));
        let whole = f.components(&dims).unwrap_or_default();
        let mut share_dims = dims;
        share_dims[axis] = range.len();
        let share = f.components(&share_dims).unwrap_or_default();
        for spec in &share {
            let (_, rows, cols) = slices
                .iter()
                .find(|(role, _, _)| *role == spec.name)
                .unwrap_or_else(|| panic!("{f}: no slice of {}", spec.name));
            let full = &whole
                .iter()
                .find(|s| s.name == spec.name)
                .unwrap_or_else(|| panic!("{f}: {}", spec.name))
                .dims;
            let mut got = full.clone();
            if let Some(r) = rows {
                got[0] = (r.end - r.start) as usize;
            }
            if let Some(c) = cols {
                got[1] = (c.end - c.start) as usize;
            }
            assert_eq!(got, spec.dims, "{f} axis {axis} {range:?}: {}", spec.name);
        }
    }

    #[test]
    fn aligned_shares_slice_into_the_shares_own_components() {
        for f in formats() {
            for (axis, range) in [(0, 0..128), (0, 128..320), (1, 128..256), (1, 0..128)] {
                if axis == 1 && f == gptq(true) {
                    continue;
                }
                assert_slices_are_the_shares_components(f, [320, 256], axis, range);
            }
        }
        // Within one 128x128 tile, and a partial last group or tile.
        let block = formats()[3];
        assert_slices_are_the_shares_components(block, [320, 256], 0, 32..96);
        assert_slices_are_the_shares_components(gptq(false), [64, 80], 1, 32..80);
        assert_slices_are_the_shares_components(block, [320, 256], 0, 256..320);
    }

    #[test]
    fn shares_off_the_packing_are_refused() {
        let refused = |f: ComponentFormat, axis: usize, range: Range<usize>| match component_slices(
            "w.l0.attn.o",
            f,
            &[320, 256],
            axis,
            range.clone(),
        ) {
            Err(TraceError::ComponentSplit {
                name,
                align,
                start,
                end,
                ..
            }) => {
                assert_eq!(
                    (name.as_str(), start, end),
                    ("w.l0.attn.o", range.start, range.end)
                );
                align
            }
            other => panic!("{f} axis {axis} {range:?}: {other:?}"),
        };
        let all = formats();
        let (awq, block, fp4) = (all[0], all[3], all[4]);
        // Packed zeros hold 8 output rows a word; GPTQ's inputs pack 8 a word, in groups of 32.
        assert_eq!(refused(gptq(false), 0, 0..36), 8);
        assert_eq!(refused(awq, 0, 4..64), 8);
        assert_eq!(refused(gptq(false), 1, 16..128), 32);
        assert_eq!(refused(awq, 1, 32..128), 64);
        assert_eq!(refused(block, 0, 160..320), 128);
        assert_eq!(refused(block, 1, 64..192), 128);
        assert_eq!(refused(fp4, 1, 0..48), 32);
        assert!(component_slices("w", fp4, &[320, 256], 0, 1..3).is_ok());
        assert!(matches!(
            component_slices("w", gptq(true), &[320, 256], 1, 0..128),
            Err(TraceError::ComponentActOrder { .. })
        ));
    }
}
