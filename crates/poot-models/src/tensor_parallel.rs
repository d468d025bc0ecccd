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
//! A rank's slice is a view of the stored tensor: a range of rows (contiguous bytes, also for
//! packed rows), or a range of every row's elements (gathered on the host when uploaded; for a
//! packed tensor each rank's share must be whole blocks).

use std::ops::Range;
use std::sync::Arc;

use poot_formats::StoredType;
use poot_graph_ir::{DType, TensorType};

use crate::error::TraceError;
use crate::step::Shard;
use crate::weights::{Role, WeightEntry, WeightMap, WeightSource};

/// The indivisible parts a split weight is cut between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parts {
    /// Attention query heads (`head_dim` features each).
    QueryHeads,
    /// Attention key/value heads (`head_dim` features each).
    KvHeads,
    /// Feed-forward features (one each).
    FfnFeatures,
}

impl Parts {
    /// How refusals name these parts.
    pub fn name(self) -> &'static str {
        match self {
            Parts::QueryHeads => "query heads",
            Parts::KvHeads => "key/value heads",
            Parts::FfnFeatures => "feed-forward features",
        }
    }

    /// Features per part.
    fn unit(self, head_dim: usize) -> usize {
        match self {
            Parts::QueryHeads | Parts::KvHeads => head_dim,
            Parts::FfnFeatures => 1,
        }
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
        Role::AttnQ | Role::AttnQBias => Split::Rows(Parts::QueryHeads),
        Role::AttnK | Role::AttnKBias | Role::AttnV | Role::AttnVBias => {
            Split::Rows(Parts::KvHeads)
        }
        Role::AttnO => Split::Cols(Parts::QueryHeads),
        Role::FfnGate | Role::FfnUp | Role::FfnUpBias => Split::Rows(Parts::FfnFeatures),
        Role::FfnDown => Split::Cols(Parts::FfnFeatures),
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
        | Role::Pooler
        | Role::PoolerBias
        | Role::Classifier
        | Role::ClassifierBias
        | Role::RopeCos(_)
        | Role::RopeSin(_) => Split::Replicated,
    }
}

impl WeightMap {
    /// The weight map rank `shard.rank` of a group of `shard.ranks` reads, for a model of
    /// `head_dim` features per attention head: every split role narrowed to the rank's slice
    /// (see [`split_of`]), every other role as it is. A group of one is this map.
    pub fn shard(&self, shard: Shard, head_dim: usize) -> Result<WeightMap, TraceError> {
        Shard::new(shard.rank, shard.ranks)?;
        let mut out = WeightMap::new();
        for e in self.iter() {
            out.insert(shard_entry(e, shard, head_dim)?);
        }
        Ok(out)
    }
}

fn shard_entry(e: &WeightEntry, shard: Shard, head_dim: usize) -> Result<WeightEntry, TraceError> {
    let (axis, parts) = match split_of(e.role.role) {
        Split::Replicated => return Ok(e.clone()),
        _ if shard.is_whole() => return Ok(e.clone()),
        Split::Rows(p) => (0, p),
        Split::Cols(p) => (1, p),
    };
    let name = e.role.const_name();
    let dims = e.ty.dims();
    let (Some(&len), true) = (dims.get(axis), axis < 2 && dims.len() <= 2) else {
        return Err(TraceError::Indivisible {
            what: parts.name(),
            count: dims.get(axis).copied().unwrap_or(0),
            ranks: shard.ranks,
        });
    };
    let unit = parts.unit(head_dim).max(1);
    if !len.is_multiple_of(unit) {
        return Err(TraceError::Indivisible {
            what: parts.name(),
            count: len,
            ranks: shard.ranks,
        });
    }
    let part = shard.part(parts.name(), len / unit)?;
    let range = part.start * unit..part.end * unit;
    if axis == 1
        && let DType::Packed(g) = e.ty.dtype
        && !range.len().is_multiple_of(g.block_elems())
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
        WeightSource::Table(t) => WeightSource::Table(slice_table(t, dims, axis, range.clone())),
    };
    Ok(WeightEntry {
        role: e.role,
        ty: TensorType::new(e.ty.dtype, new_dims),
        source,
    })
}

/// Rows (`axis` 0) or columns (`axis` 1) `range` of a row-major f32 table of `dims`.
fn slice_table(t: &Arc<[f32]>, dims: &[usize], axis: usize, range: Range<usize>) -> Arc<[f32]> {
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
