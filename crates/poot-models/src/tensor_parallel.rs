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
//! packed tensor each rank's share must be whole blocks).

use std::ops::Range;
use std::sync::Arc;

use poot_formats::StoredType;
use poot_graph_ir::{DType, TensorType};

use crate::error::TraceError;
use crate::step::Shard;
use crate::weights::{Role, WeightEntry, WeightMap, WeightRole, WeightSource};

/// The indivisible parts a split weight is cut between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parts {
    /// Attention key/value heads with the query heads that read them (query and output
    /// projections).
    HeadGroups,
    /// Attention key/value heads (key and value projections).
    KvHeads,
    /// Feed-forward features, in blocks of the down projection's format.
    FfnBlocks,
}

impl Parts {
    /// How refusals name these parts.
    pub fn name(self) -> &'static str {
        match self {
            Parts::HeadGroups | Parts::KvHeads => "key/value heads",
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
    /// feature when it is dense).
    fn ffn_block(&self, layer: Option<usize>) -> usize {
        let down = WeightRole {
            layer,
            role: Role::FfnDown,
        };
        match self.get(down).map(|e| e.ty.dtype) {
            Some(DType::Packed(g)) => g.block_elems(),
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
            Parts::FfnBlocks => self.ffn_block(e.role.layer),
        }
        .max(1);
        let count = match parts {
            Parts::HeadGroups | Parts::KvHeads => heads.n_kv_heads,
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
            WeightSource::Table(t) => {
                WeightSource::Table(slice_table(t, dims, axis, range.clone()))
            }
            WeightSource::Components(_) => {
                return Err(TraceError::ComponentSplit {
                    name,
                    format: e.ty.dtype.to_string(),
                });
            }
        };
        Ok(WeightEntry {
            role: e.role,
            ty: TensorType::new(e.ty.dtype, new_dims),
            source,
        })
    }
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
