//! Decode-shaped contractions: a few left-side rows (a decode step, a server's multi-row step)
//! against a constant weight `W [N, K]` read transposed, dense (f32, f16, bf16) or in any block
//! format the planner decodes. Such a contraction reads each weight byte once and does little
//! arithmetic per byte, so it is written to read the weights at memory bandwidth:
//!
//! - A team of `lanes` consecutive threads (8, 16 or 32: a warp or part of one) owns one or a
//!   few consecutive output columns at a time (two for the half-word-aligned block formats
//!   where the columns are many: each left-side value read from shared memory then serves a
//!   weight of each); a workgroup of `threads` holds `threads / lanes` teams, and workgroups
//!   stride over the columns (at most a few per multiprocessor, so each stages its left side
//!   once for several column tiles).
//! - The lanes walk the weight row in units: a fixed share of a block (16 elements, 32 for
//!   Q4_K and Q6_K, a whole block of Q4_0 and IQ4_NL) decoded from whole u32 words, each code
//!   in place by one logic instruction and an exact multiply-add, with the block's scales
//!   decoded once
//!   ([`dequant_unit`](super::dequant_unit)), or dense words (four in one 16-byte load for f16
//!   and bf16 rows of a multiple of 8). Consecutive lanes take consecutive units, so a team's
//!   loads are contiguous; each lane decodes `unroll` units (loads first) per step so several
//!   loads are in flight.
//! - Each lane keeps one partial sum per left-side row, so every weight word is read once for
//!   all rows.
//! - The left side (with a norm in its prologue, a reshape, a gather: whatever the graph
//!   computes in place) is computed once per workgroup into shared memory, padded by four words
//!   every 32 so lanes reading different blocks hit different banks and a unit's aligned runs
//!   of four elements are read in one 16-byte load. When the left sides do not fit whole, each
//!   is staged a chunk of whole 256-element blocks at a time (two barriers per chunk) and the
//!   teams add that chunk's units before the next is staged.
//! - The lanes' partial sums meet by subgroup shuffles where the target has them (no barrier),
//!   else in shared memory (two barriers per column step), and one lane of the team finishes
//!   each (column, row) total: a plain store, the store of each sibling's column (horizontal QKV fusion), or the
//!   value the contraction's sums flow into (a residual add, a gated activation: the epilogue
//!   fusion).
//!
//! Every sum is reassociated against the oracle (lanes, units, then the team), within the
//! tolerance a reordered sum of K products allows. Each weight element decodes bit for bit as
//! the oracle decodes it, but in the block formats whose scale a group of elements shares: there
//! the group's dot product with its codes is scaled once, and where the format adds a term
//! (`y = s q + b`: Q4_1, Q5_1, Q4_K, Q5_K) the term multiplies the left side's sum over the
//! group once (more reassociations).

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};

use poot_formats::{BlockFormat, PackedFormat};
use poot_graph_ir::{DType, OpKind, Storage, ValueId};

use super::access::{device_word, kty, to_word};
use super::classify::Placement;
use super::context::KernelCtx;
use super::dequant::{self, FormatTables};
use super::dequant_unit::{self, Group, PairFormat, Unit};
use super::emit::pairwise;
use super::{Lowering, PlanError};
use poot_kernel::build::{
    bin, eq, group_count_x, group_id, load, load_half, load_shared, local_id, lt, min, mul_add,
    u32c, un,
};
use poot_kernel::ir::BinOp;
use poot_kernel::{Expr, Half, ParamId, SharedId, Ty, UnOp, Var, Word};

/// Partial sums a lane keeps (rows times columns of its team) before a team's columns are cut
/// down; the row count itself is capped by [`Target::gemv_rows`](crate::Target::gemv_rows).
const PARTIAL_SUMS: u32 = 8;

/// Workgroups a contraction should launch at least, where its columns allow: two per
/// multiprocessor of a large GPU (an H200 has 132).
const MIN_WORKGROUPS: u32 = 256;

/// Rows of an indexed contraction (tokens times the experts each selects) read by a
/// decode-shaped kernel at most: every row is staged (in chunks of at least 256 elements), and
/// each has its own weight rows.
const INDEXED_ROWS: usize = 32;

/// Left-side chunks are whole multiples of the largest block (256 elements), so every weight
/// layout's units start and end inside one chunk.
const CHUNK_ALIGN: u32 = 256;

/// Elements of a [`Layout::BlockPairs`] unit.
const PAIR_ELEMS: u32 = 64;

/// Elements of a [`Layout::WholeBlocks`] unit.
const WHOLE_ELEMS: u32 = 32;

/// How a weight's rows are stored, as the kernel reads them.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Layout {
    /// One f32 per word.
    F32,
    /// f16 or bf16 rows of even length: a unit is one word, two elements.
    HalfPairs(Half),
    /// f16 or bf16 rows of a multiple of 8: a unit is four words, eight elements, read in one
    /// 16-byte load.
    HalfOcts(Half),
    /// f16 or bf16 rows of odd length (rows start mid-word): a unit is one element.
    Halves(Half),
    /// GGUF blocks: a unit is a fixed share of a block.
    Blocks(BlockFormat),
    /// Q4_0 or IQ4_NL rows of a multiple of 64: a unit is two blocks, nine whole words (the
    /// 18-byte blocks of [`Layout::Blocks`] are read as half-word-shifted windows).
    BlockPairs(PairFormat),
    /// Q4_0 or IQ4_NL rows: a unit is a whole block, one window of four words (half a block in
    /// [`Layout::Blocks`]).
    WholeBlocks(PairFormat),
}

impl Layout {
    /// Whether the rows are GGUF blocks, read by any unit shape.
    fn blocks(self) -> bool {
        matches!(
            self,
            Layout::Blocks(_) | Layout::BlockPairs(_) | Layout::WholeBlocks(_)
        )
    }

    fn units_per_row(self, k: u32) -> u32 {
        match self {
            Layout::F32 | Layout::Halves(_) => k,
            Layout::HalfPairs(_) => k / 2,
            Layout::HalfOcts(_) => k / 8,
            Layout::Blocks(f) => k / f.block_elems() as u32 * dequant_unit::units_per_block(f),
            Layout::BlockPairs(_) => k / PAIR_ELEMS,
            Layout::WholeBlocks(_) => k / WHOLE_ELEMS,
        }
    }

    /// Whether every unit's first element is a multiple of 4 (its aligned runs of four
    /// elements can be read from the stage in one load).
    fn aligned_units(self) -> bool {
        matches!(
            self,
            Layout::HalfOcts(_)
                | Layout::Blocks(_)
                | Layout::BlockPairs(_)
                | Layout::WholeBlocks(_)
        )
    }

    fn unit_bytes(self) -> u32 {
        match self {
            Layout::F32 | Layout::HalfPairs(_) => 4,
            Layout::HalfOcts(_) => 16,
            Layout::Halves(_) => 2,
            Layout::Blocks(f) => dequant_unit::unit_bytes(f),
            Layout::BlockPairs(p) => 2 * p.block_format().block_bytes() as u32,
            Layout::WholeBlocks(p) => p.block_format().block_bytes() as u32,
        }
    }
}

/// A contraction's weights.
#[derive(Clone, Debug)]
struct Weight {
    value: ValueId,
    layout: Layout,
    /// Columns (weight rows) and the contracted length.
    n: u32,
    k: u32,
    /// Bytes per weight row (block formats).
    row_bytes: u32,
    /// The last word of the weights buffer.
    last_word: u32,
}

/// Output columns `start..start + width` of a sum, read from one weight (`width`: the weight's
/// rows, or an indexed job's rows times columns per expert).
#[derive(Clone, Debug)]
struct Part {
    weight: Weight,
    start: u32,
    width: u32,
    /// The contraction these columns are the output of.
    out: ValueId,
}

/// One sum per output element: left side `lhs` (an index into [`Job::lhs`]) against the part
/// that holds the column.
#[derive(Clone, Debug)]
struct Sum {
    lhs: usize,
    parts: Vec<Part>,
}

/// What a finished column becomes.
#[derive(Clone, Copy, Debug)]
enum Finish {
    /// Each part's sum is stored in its contraction's buffer.
    Store,
    /// The sums are the contractions the value's kernel computes itself; the value is stored.
    Epilogue(ValueId),
}

/// One decode-shaped kernel's work.
#[derive(Clone, Debug)]
struct Job {
    /// The left sides and their contracted lengths.
    lhs: Vec<(ValueId, u32)>,
    sums: Vec<Sum>,
    /// The output's leading axes (their product is the row count) and its column count.
    lead: Vec<usize>,
    columns: u32,
    finish: Finish,
    /// An indexed contraction's rows and their experts: the columns are then (row, column)
    /// pairs, one sum each.
    indexed: Option<Indexed>,
}

/// An indexed contraction (`out[t, n] = sum_k lhs[t, k] W[ids[t], n, k]`) as a decode-shaped
/// job: its weights are the `[experts * n, k]` rows of the stack, and job column `t * n + j`
/// reads left-side row `t` against row `ids[t] * n + j`, so only the selected experts' bytes are
/// read.
#[derive(Clone, Debug)]
struct Indexed {
    /// Each left-side row's expert.
    ids: ValueId,
    /// Left-side rows.
    rows: u32,
    /// Runs of this many consecutive left-side rows are one row repeated (a token's input
    /// broadcast over its selected slots): staged once a run.
    repeat: u32,
    /// Every column tile lies in one left-side row, and a workgroup stages only that row, per
    /// tile (a decode step's down projection: eight slots' rows, of which a tile reads one).
    tile_row: bool,
    /// Columns per expert.
    n: u32,
    experts: u32,
}

/// Routed contractions read by the decode-shaped kernels ([`Lowering::routed`]).
struct Routed {
    lhs: ValueId,
    ids: ValueId,
    experts: u32,
    /// Columns per expert, and rows.
    n: u32,
    rows: u32,
    /// Each stack as weight rows, with its contraction's output.
    weights: Vec<(Weight, ValueId)>,
}

/// How a kernel finds the weight rows of its columns.
#[derive(Clone, Copy)]
enum WeightRows<'a> {
    /// Column `j` reads weight row `j`.
    Plain,
    /// An indexed job's column `t * n + j` reads row `ids[t] * n + j`, against left-side row `t`.
    PerRow(&'a Indexed),
    /// A grouped job's column `j` of the workgroup's expert `e` reads row `e * n + j` (`e`, `n`).
    Expert(&'a Expr, u32),
}

/// Lanes of a grouped kernel's team: narrow, so a workgroup's staged rows serve many columns.
const GROUP_LANES: u32 = 8;

/// Workgroups that share one expert's rows in a grouped kernel (each takes every `splits`-th
/// group of `group_rows`): one per 8 groups the chunk could hold, at most 16. A prompt
/// whose tokens pick the same few experts then still fills the device, where a workgroup
/// per expert walked hundreds of rows alone.
fn row_splits(rows: u32, group_rows: u32) -> u32 {
    (rows / (group_rows * 8)).clamp(1, 16)
}

impl Job {
    fn rows(&self) -> u32 {
        self.lead.iter().product::<usize>() as u32
    }

    /// The left-side rows staged for the job: its rows, or an indexed contraction's.
    fn staged_rows(&self) -> u32 {
        self.indexed.as_ref().map_or_else(
            || self.rows(),
            |ix| match ix.tile_row {
                true => 1,
                false => ix.rows / ix.repeat,
            },
        )
    }

    /// Every `repeat`-th left-side row is staged (1 unless an indexed job's rows repeat).
    fn repeat(&self) -> u32 {
        self.indexed.as_ref().map_or(1, |ix| ix.repeat)
    }

    /// Whether any of its weights is block-quantized (the kernel then takes the block tuning).
    fn blocks(&self) -> bool {
        self.sums
            .iter()
            .flat_map(|s| &s.parts)
            .any(|p| p.weight.layout.blocks())
    }
}

/// Where a left side is staged: row `m`, element `k` of the staged span at
/// `m * stride + padded(k)` of `arr`.
#[derive(Clone, Copy)]
struct Stage {
    arr: SharedId,
    stride: u32,
}

/// Words of padding after every 32 staged elements: lanes reading different blocks hit
/// different banks, and a run of four elements starting at a multiple of 4 stays 16-byte
/// aligned for one wide load.
const PAD: u32 = 4;

/// Element `k`'s place in a staged span.
fn padded(k: Expr) -> Expr {
    k.clone() + ((k >> u32c(5)) << u32c(PAD.trailing_zeros()))
}

/// Words a staged span of `k` elements takes, a multiple of 4 (so every row starts aligned).
fn staged_words(k: u32) -> u32 {
    (k + PAD * k.div_ceil(32)).next_multiple_of(4)
}

/// Elements `first..first + len` of the contracted axis.
struct Span {
    first: Expr,
    len: u32,
}

/// A team's place: its column, and the lane's index among `lanes`.
struct Walk {
    col: Expr,
    lane: Expr,
    lanes: u32,
}

/// The largest power of two at most `x` (1 for 0).
fn floor_pow2(x: u32) -> u32 {
    if x <= 1 {
        1
    } else {
        1 << (31 - x.leading_zeros())
    }
}

/// Lanes per column: at least four units per lane where the row has them, so few lanes idle in
/// the last step, and a team never wider than a warp.
fn team_lanes(units: u32) -> u32 {
    floor_pow2(units / 4).clamp(8, 32)
}

/// Threads per workgroup: as many teams as still give [`MIN_WORKGROUPS`] workgroups.
fn workgroup_threads(columns: u32, lanes: u32) -> u32 {
    for threads in [256, 128] {
        if columns.div_ceil(threads / lanes) >= MIN_WORKGROUPS {
            return threads;
        }
    }
    64
}

/// Steps a lane should take along a block-format row at least: with fewer, the lanes of a short
/// row (1B's 2048) wait on one long batch of loads (measured on the H200: 8B rows gain 13% from
/// 64 bytes a step, 1B rows lose 3% from it).
const MIN_BLOCK_STEPS: u32 = 4;

/// Units per lane per step: `bytes` in flight (at least one unit), no more than the row fills
/// (block formats: in at least [`MIN_BLOCK_STEPS`] steps).
fn unroll(layout: Layout, units: u32, lanes: u32, bytes: u32) -> u32 {
    let want = floor_pow2(bytes / layout.unit_bytes()).min(8);
    let steps = if layout.blocks() { MIN_BLOCK_STEPS } else { 1 };
    want.min(floor_pow2(units / (lanes * steps)))
}

/// The multi-index of flat row `m` over the leading axes `lead`, as constants.
fn lead_index(lead: &[usize], m: u32) -> Vec<Expr> {
    let mut idx = vec![u32c(0); lead.len()];
    let mut rest = m as usize;
    for (i, &d) in lead.iter().enumerate().rev() {
        idx[i] = u32c((rest % d.max(1)) as u32);
        rest /= d.max(1);
    }
    idx
}

impl Lowering<'_> {
    /// The weights of contraction `eqn` when it is decode-shaped: transposed constant weights of
    /// a layout the kernel reads, at most [`Target::gemv_rows`](crate::Target::gemv_rows) output
    /// rows.
    fn gemv_weight(&self, eqn: usize) -> Option<Weight> {
        let e = &self.g.eqns()[eqn];
        if e.op
            != (OpKind::MatMul {
                transpose_rhs: true,
            })
            || e.inputs.len() != 2
        {
            return None;
        }
        let (lhs, rhs, out) = (e.inputs[0], e.inputs[1], e.out);
        // The left side is staged as f32.
        if kty(self.g.values()[lhs.index()].ty.dtype) != Ty::F32 {
            return None;
        }
        let (n, k) = match *self.g.values()[rhs.index()].ty.dims() {
            [n, k] => (n, k),
            _ => return None,
        };
        let out_dims = self.g.values()[out.index()].ty.dims();
        let rows: usize = out_dims[..out_dims.len().checked_sub(1)?].iter().product();
        if rows == 0 || rows > self.target.gemv_rows() {
            return None;
        }
        self.weight_rows(rhs, n, k)
    }

    /// Constant weights `rhs` read as `n` rows of `k` elements, when the kernel reads their
    /// layout.
    fn weight_rows(&self, rhs: ValueId, n: usize, k: usize) -> Option<Weight> {
        let info = &self.g.values()[rhs.index()];
        if !matches!(info.storage, Storage::Const(_))
            || self.cls.placement[rhs.index()] != Placement::Input
            || n == 0
            || k == 0
        {
            return None;
        }
        let size = info.ty.size_bytes()?;
        // Byte addresses are u32.
        if size > u64::from(u32::MAX) || n > u32::MAX as usize || k > u32::MAX as usize {
            return None;
        }
        let (layout, row_bytes) = match info.ty.dtype {
            DType::F32 => (Layout::F32, 4 * k),
            DType::F16 | DType::BF16 => {
                let half = if info.ty.dtype == DType::F16 {
                    Half::F16
                } else {
                    Half::Bf16
                };
                let layout = if k.is_multiple_of(8) && self.target.tuning.gemv_wide_loads {
                    Layout::HalfOcts(half)
                } else if k.is_multiple_of(2) {
                    Layout::HalfPairs(half)
                } else {
                    Layout::Halves(half)
                };
                (layout, 2 * k)
            }
            DType::Packed(g) => match g.packed_format() {
                Ok(Some(PackedFormat::Block(b))) => {
                    let row_bytes = dequant::row_bytes(b, k)?;
                    // Block fields are read at even bytes (MXFP4 has none).
                    if row_bytes % 2 != 0 && b != BlockFormat::MXFP4 {
                        return None;
                    }
                    let tuning = &self.target.tuning;
                    let layout = match PairFormat::of(b) {
                        Some(pair)
                            if k.is_multiple_of(PAIR_ELEMS as usize) && tuning.gemv_block_pairs =>
                        {
                            Layout::BlockPairs(pair)
                        }
                        Some(pair) if tuning.gemv_whole_blocks => Layout::WholeBlocks(pair),
                        _ => Layout::Blocks(b),
                    };
                    (layout, row_bytes)
                }
                _ => return None,
            },
            // Hugging Face component layouts keep the per-element kernel for now.
            DType::Components(_) | DType::I32 | DType::U32 | DType::U8 | DType::Bool => {
                return None;
            }
        };
        Some(Weight {
            value: rhs,
            layout,
            n: n as u32,
            k: k as u32,
            row_bytes: u32::try_from(row_bytes).ok()?,
            last_word: (size.div_ceil(4).max(1) - 1) as u32,
        })
    }

    /// Contractions `group` (one, or siblings reading the same left side, in column order) as
    /// one decode-shaped kernel; `false` when they are not decode-shaped or the kernel would
    /// bind too many buffers (the caller plans them another way).
    pub(super) fn emit_gemv(&mut self, group: &[usize]) -> Result<bool, PlanError> {
        let Some(&first) = group.first() else {
            return Ok(false);
        };
        let e = &self.g.eqns()[first];
        let (lhs, out) = (e.inputs[0], e.out);
        let out_dims = self.g.values()[out.index()].ty.dims().to_vec();
        let lead = out_dims[..out_dims.len().saturating_sub(1)].to_vec();
        let mut parts = Vec::with_capacity(group.len());
        let mut columns = 0u32;
        for &j in group {
            let Some(weight) = self.gemv_weight(j) else {
                return Ok(false);
            };
            let ej = &self.g.eqns()[j];
            let dims = self.g.values()[ej.out.index()].ty.dims();
            if ej.inputs[0] != lhs || dims[..dims.len() - 1] != lead[..] {
                return Ok(false);
            }
            let start = columns;
            columns = match columns.checked_add(weight.n) {
                Some(c) => c,
                None => return Ok(false),
            };
            parts.push(Part {
                width: weight.n,
                weight,
                start,
                out: ej.out,
            });
        }
        let k = parts[0].weight.k;
        let job = Job {
            lhs: vec![(lhs, k)],
            sums: vec![Sum { lhs: 0, parts }],
            lead,
            columns,
            finish: Finish::Store,
            indexed: None,
        };
        let label = self.label(out);
        self.emit_gemv_job(&job, "gemv", label)
    }

    /// The kernel of value `eqn` computing the contractions `mms` in its epilogue, decode-shaped;
    /// `false` when they are not decode-shaped or the kernel would bind too many buffers.
    pub(super) fn emit_gemv_epilogue(
        &mut self,
        eqn: usize,
        mms: &[ValueId],
    ) -> Result<bool, PlanError> {
        let v = self.g.eqns()[eqn].out;
        let dims = self.g.values()[v.index()].ty.dims().to_vec();
        let Some((&columns, lead)) = dims.split_last() else {
            return Ok(false);
        };
        let mut lhs: Vec<(ValueId, u32)> = Vec::new();
        let mut sums = Vec::with_capacity(mms.len());
        for &m in mms {
            let Some(p) = self.cls.producer[m.index()] else {
                return Ok(false);
            };
            let Some(weight) = self.gemv_weight(p) else {
                return Ok(false);
            };
            if self.g.values()[m.index()].ty.dims() != &dims[..] {
                return Ok(false);
            }
            let l = self.g.eqns()[p].inputs[0];
            let at = match lhs.iter().position(|&(x, _)| x == l) {
                Some(at) => at,
                None => {
                    lhs.push((l, weight.k));
                    lhs.len() - 1
                }
            };
            sums.push(Sum {
                lhs: at,
                parts: vec![Part {
                    width: weight.n,
                    weight,
                    start: 0,
                    out: m,
                }],
            });
        }
        let job = Job {
            lhs,
            sums,
            lead: lead.to_vec(),
            columns: columns as u32,
            finish: Finish::Epilogue(v),
            indexed: None,
        };
        let label = self.label(v);
        self.emit_gemv_job(&job, "gemv_epilogue", label)
    }

    /// The routed contractions `group` (one, or siblings of one left side and one set of ids
    /// against stacks of one shape: a layer's gate and up) when the decode-shaped kernels read
    /// their stacks: each stack as `[experts * n, k]` weight rows, with its output.
    fn routed(&self, group: &[usize]) -> Option<Routed> {
        let e = &self.g.eqns()[*group.first()?];
        let (lhs, ids) = (e.inputs[0], e.inputs[2]);
        if kty(self.g.values()[lhs.index()].ty.dtype) != Ty::F32 {
            return None;
        }
        let dims = self.g.values()[e.inputs[1].index()].ty.dims().to_vec();
        let (experts, n, k) = match dims[..] {
            [e, n, k] => (e, n, k),
            _ => return None,
        };
        let rows = match *self.g.values()[e.out.index()].ty.dims() {
            [rows, _] => rows,
            _ => return None,
        };
        let mut weights = Vec::with_capacity(group.len());
        for &j in group {
            let ej = &self.g.eqns()[j];
            let same = ej.inputs[0] == lhs
                && ej.inputs[2] == ids
                && self.g.values()[ej.inputs[1].index()].ty.dims() == &dims[..];
            if !same {
                return None;
            }
            let weight = self.weight_rows(ej.inputs[1], experts.checked_mul(n)?, k)?;
            weights.push((weight, ej.out));
        }
        let columns = rows.checked_mul(n)?.checked_mul(group.len())?;
        if rows == 0 || u32::try_from(columns).is_err() {
            return None;
        }
        Some(Routed {
            lhs,
            ids,
            experts: u32::try_from(experts).ok()?,
            n: n as u32,
            rows: rows as u32,
            weights,
        })
    }

    /// `job` staging one left-side row per column tile of `tile_columns`, when it is an
    /// indexed job of several distinct rows whose tiles each lie in one row.
    fn tile_row_job(&self, job: &Job, tile_columns: u32) -> Option<Job> {
        let ix = job.indexed.as_ref()?;
        let one_row = ix.repeat == 1 && ix.rows > 1 && ix.n.is_multiple_of(tile_columns);
        if !one_row || job.lhs.len() != 1 {
            return None;
        }
        let mut tiled = job.clone();
        tiled.indexed = Some(Indexed {
            tile_row: true,
            ..ix.clone()
        });
        Some(tiled)
    }

    /// How many consecutive rows of `lhs` (`[rows, k]`) repeat one row: `k` slots when it is
    /// a reshape of `[tokens, slots, k]` broadcast from `[tokens, 1, k]` (a token's input over
    /// its selected experts), else 1.
    fn repeated_rows(&self, lhs: ValueId, rows: u32) -> u32 {
        let Ok(reshape) = self.producer_of(lhs) else {
            return 1;
        };
        if !matches!(reshape.op, OpKind::Reshape { .. }) {
            return 1;
        }
        let Ok(broadcast) = self.producer_of(reshape.inputs[0]) else {
            return 1;
        };
        if !matches!(broadcast.op, OpKind::Broadcast { .. }) {
            return 1;
        }
        let dims_of = |v: ValueId| self.g.values()[v.index()].ty.dims().to_vec();
        match (
            &dims_of(broadcast.inputs[0])[..],
            &dims_of(broadcast.out)[..],
        ) {
            ([t, 1, k], [t2, slots, k2])
                if t == t2 && k == k2 && (t * slots) as u64 == u64::from(rows) =>
            {
                *slots as u32
            }
            _ => 1,
        }
    }

    /// Routed contractions `group` ([`Lowering::routed`]) of a few (token, expert) rows as one
    /// decode-shaped kernel that reads only the selected experts' rows; `false` when their
    /// weights or row count do not suit one (the caller plans them another way).
    pub(super) fn emit_indexed_gemv(&mut self, group: &[usize]) -> Result<bool, PlanError> {
        let Some(r) = self.routed(group) else {
            return Ok(false);
        };
        if r.rows as usize > INDEXED_ROWS {
            return Ok(false);
        }
        let per = r.rows * r.n;
        let k = r.weights[0].0.k;
        let label = self.label(r.weights[0].1);
        let parts = r
            .weights
            .into_iter()
            .zip(0u32..)
            .map(|((weight, out), g)| Part {
                weight,
                start: g * per,
                width: per,
                out,
            })
            .collect::<Vec<_>>();
        let job = Job {
            lhs: vec![(r.lhs, k)],
            columns: per * parts.len() as u32,
            sums: vec![Sum { lhs: 0, parts }],
            lead: Vec::new(),
            finish: Finish::Store,
            indexed: Some(Indexed {
                ids: r.ids,
                rows: r.rows,
                repeat: self.repeated_rows(r.lhs, r.rows),
                tile_row: false,
                n: r.n,
                experts: r.experts,
            }),
        };
        self.emit_gemv_job(&job, "indexed_gemv", label)
    }

    /// Indexed contraction `eqn` over many rows (a prompt chunk's (token, expert) rows) as one
    /// kernel over (expert, column): the rows are first listed by expert
    /// ([`Lowering::expert_rows`]), then each workgroup takes an expert and a team's worth of
    /// its columns and walks that expert's rows a group at a time
    /// ([`Tuning::grouped_rows`](crate::Tuning::grouped_rows) rows): the rows staged in shared
    /// memory, each lane decoding its units of the columns' weight rows once for all of them,
    /// as the decode-shaped kernel does. So an expert's weights are read once per group of its
    /// rows, and only the experts some row selected. `false` when the weights' layout does not
    /// suit it.
    pub(super) fn emit_grouped_gemv(&mut self, group: &[usize]) -> Result<bool, PlanError> {
        let Some(r) = self.routed(group) else {
            return Ok(false);
        };
        let (lhs, ids, experts, n, rows) = (r.lhs, r.ids, r.experts, r.n, r.rows);
        let k = r.weights[0].0.k;
        let group_rows = self.target.tuning.grouped_rows;
        let blocks = r.weights.iter().any(|(w, _)| w.layout.blocks());
        // Narrow teams of two columns: a workgroup's staged rows serve 64 columns.
        let lanes = GROUP_LANES;
        let cols = if n.is_multiple_of(2) { 2 } else { 1 };
        let threads = 256;
        let teams = threads / lanes;
        let shuffles = self.target.team_shuffles() && self.target.tuning.gemv_team_shuffles;
        let sums = r.weights.len() as u32;
        let partials = if shuffles {
            0
        } else {
            teams * sums * cols * group_rows * (lanes + 1)
        };
        let reserved = 4 * (partials + 3 * threads);
        let budget = self.target.limits.max_shared_bytes.saturating_sub(reserved);
        let span_len = if 4 * group_rows * staged_words(k) <= budget {
            k
        } else {
            let elems = budget / (4 * group_rows) * 32 / (32 + PAD) / CHUNK_ALIGN * CHUNK_ALIGN;
            if elems == 0 {
                return Ok(false);
            }
            elems
        };
        let listed = self.expert_rows(ids, experts, rows)?;
        let mut out_bufs = Vec::with_capacity(r.weights.len());
        for &(_, out) in &r.weights {
            out_bufs.push(self.scratch_for(out)?);
        }
        let label = self.label(r.weights[0].1);
        let mut cx = KernelCtx::labelled("grouped_gemv", label, threads);
        let tuning = &self.target.tuning;
        cx.kb.set_min_resident(match tuning.grouped_resident {
            Some(n) => n,
            None if blocks => tuning.gemv_block_min_resident,
            None => tuning.gemv_min_resident,
        });
        let outps: Vec<ParamId> = out_bufs
            .into_iter()
            .map(|b| cx.param(b, Word::F32, true))
            .collect();
        let counts = cx.param(listed.counts, Word::U32, false);
        let lists = cx.param(listed.lists, Word::U32, false);
        let lane = cx.kb.let_(Ty::U32, local_id() & u32c(lanes - 1));
        let team = cx
            .kb
            .let_(Ty::U32, local_id() >> u32c(lanes.trailing_zeros()));
        cx.open_prologue();
        let stage = Stage {
            arr: cx
                .kb
                .shared("lhs", Ty::F32, group_rows * staged_words(span_len)),
            stride: staged_words(span_len),
        };
        let partial = (partials > 0).then(|| cx.kb.shared("partials", Ty::F32, partials));
        let col_tiles = n.div_ceil(teams * cols);
        let splits = row_splits(rows, group_rows);
        // Split-major: the first workgroups take every expert's first rows, so when the rows
        // spread over the experts the later splits find none and leave at once, and when a few
        // experts take most rows their splits still spread over the whole grid.
        let tiles = splits * experts * col_tiles;
        let tile = cx.kb.begin_for(group_id(0), u32c(tiles), group_count_x());
        let split = cx
            .kb
            .let_(Ty::U32, tile.clone() / u32c(experts * col_tiles));
        let within = cx.kb.let_(Ty::U32, tile % u32c(experts * col_tiles));
        let expert = cx.kb.let_(Ty::U32, within.clone() / u32c(col_tiles));
        let col = cx.kb.let_(
            Ty::U32,
            (within % u32c(col_tiles) * u32c(teams) + team.clone()) * u32c(cols),
        );
        let count = cx.kb.let_(Ty::U32, load(counts, expert.clone()));
        let listed_at = cx.kb.let_(Ty::U32, expert.clone() * u32c(rows));
        let r0 = cx.kb.begin_for(
            split * u32c(group_rows),
            count.clone(),
            u32c(group_rows * splits),
        );
        // The chunk's rows (the last row again past the count: staged, never stored).
        let chunk_rows: Vec<Expr> = (0..group_rows)
            .map(|m| {
                let at = min(r0.clone() + u32c(m), count.clone() - u32c(1));
                cx.kb.let_(Ty::U32, load(lists, listed_at.clone() + at))
            })
            .collect();
        // Per weight, per column of the team, per row.
        let accs: Vec<Vec<Vec<Var>>> = (0..sums)
            .map(|_| {
                (0..cols)
                    .map(|_| {
                        (0..group_rows)
                            .map(|_| cx.kb.var(Ty::F32, Expr::F32(0.0)))
                            .collect()
                    })
                    .collect()
            })
            .collect();
        let parts: Vec<Part> = r
            .weights
            .iter()
            .map(|(weight, out)| Part {
                weight: weight.clone(),
                start: 0,
                width: n,
                out: *out,
            })
            .collect();
        let walk = Walk {
            col: col.clone(),
            lane: lane.clone(),
            lanes,
        };
        let mut first = 0;
        while first < k {
            let span = Span {
                first: u32c(first),
                len: span_len.min(k - first),
            };
            for (m, row) in chunk_rows.iter().enumerate() {
                let kk = cx.kb.begin_for(local_id(), u32c(span.len), u32c(threads));
                let x = self.value_at(&mut cx, lhs, &[row.clone(), u32c(first) + kk.clone()])?;
                let at = u32c(m as u32 * stage.stride) + padded(kk);
                cx.kb.store_shared(stage.arr, at, x);
                cx.kb.end();
            }
            cx.kb.barrier();
            cx.kb.begin_if(lt(col.clone(), u32c(n)));
            for (part, accs) in parts.iter().zip(&accs) {
                let rows_of = WeightRows::Expert(&expert, n);
                self.gemv_row(
                    &mut cx,
                    (part, rows_of),
                    col.clone(),
                    &stage,
                    &span,
                    &walk,
                    accs,
                )?;
            }
            cx.kb.end();
            // Every team has read the stage before the next span or rows are staged.
            cx.kb.barrier();
            first += span_len;
        }
        // Each (weight, column, row) total `t = (w * cols + c) * group_rows + m`, finished by
        // lane `t % lanes`.
        let per_team = sums * cols * group_rows;
        let flat: Vec<Var> = accs.iter().flatten().flatten().copied().collect();
        let totals: Vec<Expr> = match partial {
            None => {
                for &acc in &flat {
                    cx.kb.team_sum(acc, lanes);
                }
                flat.iter().map(|&a| Expr::Var(a)).collect()
            }
            Some(partial) => {
                let base = cx.kb.let_(Ty::U32, team * u32c(per_team * (lanes + 1)));
                for (t, &acc) in flat.iter().enumerate() {
                    let at = base.clone() + u32c(t as u32 * (lanes + 1)) + lane.clone();
                    cx.kb.store_shared(partial, at, Expr::Var(acc));
                }
                cx.kb.barrier();
                (0..per_team)
                    .map(|t| {
                        let terms = (0..lanes)
                            .map(|l| load_shared(partial, base.clone() + u32c(t * (lanes + 1) + l)))
                            .collect();
                        pairwise(terms)
                    })
                    .collect()
            }
        };
        for (t, total) in totals.into_iter().enumerate() {
            let t = t as u32;
            let (w, c, m) = (
                t / (cols * group_rows),
                t / group_rows % cols,
                t % group_rows,
            );
            let column = col.clone() + u32c(c);
            let mine = eq(lane.clone(), u32c(t % lanes));
            let stored = bin(BinOp::And, mine, lt(column.clone(), u32c(n)));
            let stored = bin(BinOp::And, stored, lt(r0.clone() + u32c(m), count.clone()));
            cx.kb.begin_if(stored);
            let at = chunk_rows[m as usize].clone() * u32c(n) + column;
            cx.kb.store(outps[w as usize], at, total);
            cx.kb.end();
        }
        if partial.is_some() {
            // Every lane has read the partials before the next rows write them.
            cx.kb.barrier();
        }
        cx.kb.end();
        cx.kb.end();
        cx.close_prologue();
        if cx.binding_count() as u32 > self.target.limits.max_bindings {
            return Ok(false);
        }
        let grid = self.groups_for(tiles, 1);
        self.push_kernel(cx, grid)?;
        Ok(true)
    }

    fn emit_gemv_job(&mut self, job: &Job, kind: &str, label: String) -> Result<bool, PlanError> {
        let Some((cx, grid)) = self.gemv_kernel(job, kind, label)? else {
            return Ok(false);
        };
        self.push_kernel(cx, grid)?;
        Ok(true)
    }

    /// Builds `job`'s kernel and its grid; `None` when it would bind more buffers than the
    /// target allows.
    fn gemv_kernel(
        &mut self,
        job: &Job,
        kind: &str,
        label: String,
    ) -> Result<Option<(KernelCtx, [u32; 3])>, PlanError> {
        let rows = job.rows();
        let units = job
            .sums
            .iter()
            .flat_map(|s| &s.parts)
            .map(|p| p.weight.layout.units_per_row(p.weight.k))
            .max()
            .unwrap_or(1);
        let lanes = team_lanes(units);
        let cols = self.team_columns(job, lanes);
        let threads = workgroup_threads(job.columns / cols, lanes);
        let teams = threads / lanes;
        let n_sums = job.sums.len() as u32;
        let tiled_job;
        let job = match self.tile_row_job(job, teams * cols) {
            Some(j) => {
                tiled_job = j;
                &tiled_job
            }
            None => job,
        };
        let staged = job.staged_rows();
        let tile_row = job.indexed.as_ref().is_some_and(|ix| ix.tile_row);
        let mut cx = KernelCtx::labelled(kind, label, threads);
        // Workgroups a multiprocessor must hold at once: the compiler may otherwise spend 200
        // registers on a long row walk's loads and run one workgroup of 8 warps (measured on
        // the H200's Q4_0 down projection).
        let tuning = &self.target.tuning;
        cx.kb.set_min_resident(if job.blocks() {
            tuning.gemv_block_min_resident
        } else {
            tuning.gemv_min_resident
        });

        // Outputs first.
        let mut part_outs: Vec<Vec<ParamId>> = Vec::with_capacity(job.sums.len());
        let mut value_out = None;
        match job.finish {
            Finish::Store => {
                for sum in &job.sums {
                    let mut outs = Vec::with_capacity(sum.parts.len());
                    for part in &sum.parts {
                        let b = self.scratch_for(part.out)?;
                        outs.push(cx.param(b, Word::F32, true));
                    }
                    part_outs.push(outs);
                }
            }
            Finish::Epilogue(v) => {
                let dtype = self.g.values()[v.index()].ty.dtype;
                let b = self.scratch_for(v)?;
                value_out = Some((cx.param(b, device_word(dtype), true), dtype));
            }
        }

        let lane = cx.kb.let_(Ty::U32, local_id() & u32c(lanes - 1));
        let team = cx
            .kb
            .let_(Ty::U32, local_id() >> u32c(lanes.trailing_zeros()));
        // Row reductions of the left sides (a norm's) and of the epilogue are computed here,
        // once per workgroup.
        cx.open_prologue();

        // Each team's lanes write their partial sums here: one padded row of `lanes + 1` per
        // (team, sum, row).
        let shuffles = self.target.team_shuffles() && self.target.tuning.gemv_team_shuffles;
        let partials = if shuffles {
            0
        } else {
            teams * n_sums * cols * rows * (lanes + 1)
        };
        // Prologue reductions take one array of `threads` per element type.
        let reserved = 4 * (partials + 3 * threads);
        let budget = self.target.limits.max_shared_bytes.saturating_sub(reserved);
        let stride = staged_words;
        let whole: u64 = job
            .lhs
            .iter()
            .map(|&(_, k)| 4 * u64::from(staged) * u64::from(stride(k)))
            .sum();
        // Every left side whole, staged once before the column loop; else one chunk of a left
        // side at a time, a whole number of 256-element blocks, restaged per column step.
        let chunk = if whole <= u64::from(budget) {
            None
        } else if tile_row {
            // Staged per tile only whole.
            return Ok(None);
        } else {
            let elems = budget / (4 * staged) * 32 / (32 + PAD) / CHUNK_ALIGN * CHUNK_ALIGN;
            if elems == 0 {
                return Ok(None);
            }
            Some(elems)
        };
        let mut stages = Vec::with_capacity(job.lhs.len());
        match chunk {
            None => {
                for (g, &(lhs, k)) in job.lhs.iter().enumerate() {
                    let stage = Stage {
                        arr: cx.kb.shared(format!("lhs{g}"), Ty::F32, staged * stride(k)),
                        stride: stride(k),
                    };
                    if !tile_row {
                        self.stage_lhs(&mut cx, job, lhs, &stage, u32c(0), k)?;
                    }
                    stages.push(stage);
                }
                if !tile_row {
                    cx.kb.barrier();
                }
            }
            Some(elems) => {
                let stage = Stage {
                    arr: cx.kb.shared("lhs", Ty::F32, staged * stride(elems)),
                    stride: stride(elems),
                };
                stages.extend(job.lhs.iter().map(|_| stage));
            }
        }
        let partial = (partials > 0).then(|| cx.kb.shared("partials", Ty::F32, partials));

        // A team walks columns `col..col + cols` together.
        let tiles = job.columns.div_ceil(teams * cols);
        let tile = cx.kb.begin_for(group_id(0), u32c(tiles), group_count_x());
        let col = cx.kb.let_(
            Ty::U32,
            (tile.clone() * u32c(teams) + team.clone()) * u32c(cols),
        );
        if let Some(ix) = job.indexed.as_ref().filter(|ix| ix.tile_row) {
            // The tile's one left-side row: its first column's, within its part.
            let per = ix.rows * ix.n;
            let first = tile * u32c(teams * cols);
            let t = cx.kb.let_(Ty::U32, first % u32c(per) / u32c(ix.n));
            for (g, &(lhs, k)) in job.lhs.iter().enumerate() {
                let threads = cx.kb.workgroup();
                let kk = cx.kb.begin_for(local_id(), u32c(k), u32c(threads));
                let x = self.value_at(&mut cx, lhs, &[t.clone(), kk.clone()])?;
                cx.kb.store_shared(stages[g].arr, padded(kk), x);
                cx.kb.end();
            }
            cx.kb.barrier();
        }
        // Per sum, per column of the team, per row.
        let accs: Vec<Vec<Vec<Var>>> = job
            .sums
            .iter()
            .map(|_| {
                (0..cols)
                    .map(|_| {
                        (0..rows)
                            .map(|_| cx.kb.var(Ty::F32, Expr::F32(0.0)))
                            .collect()
                    })
                    .collect()
            })
            .collect();
        let walk = Walk {
            col: col.clone(),
            lane: lane.clone(),
            lanes,
        };
        match chunk {
            None => {
                cx.kb.begin_if(lt(col.clone(), u32c(job.columns)));
                for (g, &(_, k)) in job.lhs.iter().enumerate() {
                    let span = Span {
                        first: u32c(0),
                        len: k,
                    };
                    self.accumulate(&mut cx, job, g, &stages[g], &span, &walk, &accs)?;
                }
                cx.kb.end();
            }
            Some(elems) => {
                for (g, &(lhs, k)) in job.lhs.iter().enumerate() {
                    let stage = stages[g];
                    let full = k / elems;
                    if full > 0 {
                        let c = cx.kb.begin_for(u32c(0), u32c(full), u32c(1));
                        let first = cx.kb.let_(Ty::U32, c * u32c(elems));
                        let span = Span { first, len: elems };
                        self.chunk_step(&mut cx, job, g, lhs, &stage, &span, &walk, &accs)?;
                        cx.kb.end();
                    }
                    if full * elems < k {
                        let span = Span {
                            first: u32c(full * elems),
                            len: k - full * elems,
                        };
                        self.chunk_step(&mut cx, job, g, lhs, &stage, &span, &walk, &accs)?;
                    }
                }
            }
        }

        // Each row's totals: in every lane after a shuffle sum, or added up from shared memory by
        // the lane that finishes the row.
        // Totals are numbered (sum, column of the team, row), `cols * rows` per sum.
        let per_sum = cols * rows;
        let shared = match partial {
            None => {
                for &acc in accs.iter().flatten().flatten() {
                    cx.kb.team_sum(acc, lanes);
                }
                None
            }
            Some(partial) => {
                let base = cx
                    .kb
                    .let_(Ty::U32, team * u32c(n_sums * per_sum * (lanes + 1)));
                for (s, accs) in accs.iter().enumerate() {
                    for (t, &acc) in accs.iter().flatten().enumerate() {
                        let row = (s as u32 * per_sum + t as u32) * (lanes + 1);
                        cx.kb.store_shared(
                            partial,
                            base.clone() + u32c(row) + lane.clone(),
                            Expr::Var(acc),
                        );
                    }
                }
                cx.kb.barrier();
                Some((partial, base))
            }
        };
        cx.kb.begin_if(lt(col.clone(), u32c(job.columns)));
        // Lane `t % lanes` finishes the team's total `t` (column `t / rows`, row `t % rows`).
        for t in 0..per_sum {
            let (c, m) = (t / rows, t % rows);
            cx.kb.begin_if(eq(lane.clone(), u32c(t % lanes)));
            let col = cx.kb.let_(Ty::U32, col.clone() + u32c(c));
            let totals: Vec<Expr> = (0..n_sums)
                .map(|s| match &shared {
                    None => Expr::Var(accs[s as usize][c as usize][m as usize]),
                    Some((partial, base)) => {
                        let row = (s * per_sum + t) * (lanes + 1);
                        let terms = (0..lanes)
                            .map(|l| load_shared(*partial, base.clone() + u32c(row + l)))
                            .collect();
                        cx.kb.let_(Ty::F32, pairwise(terms))
                    }
                })
                .collect();
            match (job.finish, value_out) {
                (Finish::Epilogue(v), Some((outp, dtype))) => {
                    let mut oidx = lead_index(&job.lead, m);
                    oidx.push(col.clone());
                    for (sum, total) in job.sums.iter().zip(&totals) {
                        cx.set_known(sum.parts[0].out, &oidx, total.clone());
                    }
                    let value = self.compute(&mut cx, v, &oidx)?;
                    let at = u32c(m * job.columns) + col.clone();
                    cx.kb.store(outp, at, to_word(value, dtype));
                }
                _ => {
                    for ((sum, outs), total) in job.sums.iter().zip(&part_outs).zip(&totals) {
                        let n_parts = sum.parts.len();
                        for (p, (part, &outp)) in sum.parts.iter().zip(outs).enumerate() {
                            let last = p + 1 == n_parts;
                            if !last {
                                cx.kb
                                    .begin_if(lt(col.clone(), u32c(part.start + part.width)));
                            }
                            let at = u32c(m * part.width) + col.clone() - u32c(part.start);
                            cx.kb.store(outp, at, total.clone());
                            if !last {
                                cx.kb.otherwise();
                            }
                        }
                        for _ in 1..n_parts {
                            cx.kb.end();
                        }
                    }
                }
            }
            cx.kb.end();
        }
        cx.kb.end();
        if shared.is_some() || tile_row {
            // Every lane has read the partials (and the staged row) before the next column
            // step writes them.
            cx.kb.barrier();
        }
        cx.kb.end();
        cx.close_prologue();

        if cx.binding_count() as u32 > self.target.limits.max_bindings {
            return Ok(None);
        }
        let groups = self
            .gemv_workgroup_cap(job)
            .map_or(tiles, |most| tiles.min(most));
        let grid = self.groups_for(groups, 1);
        Ok(Some((cx, grid)))
    }

    /// Stages elements `first..first + len` of every row of left side `lhs` in `stage`.
    fn stage_lhs(
        &mut self,
        cx: &mut KernelCtx,
        job: &Job,
        lhs: ValueId,
        stage: &Stage,
        first: Expr,
        len: u32,
    ) -> Result<(), PlanError> {
        let threads = cx.kb.workgroup();
        let lead = match &job.indexed {
            Some(ix) => vec![ix.rows as usize],
            None => job.lead.clone(),
        };
        for m in 0..job.staged_rows() {
            let mut idx = lead_index(&lead, m * job.repeat());
            let kk = cx.kb.begin_for(local_id(), u32c(len), u32c(threads));
            idx.push(first.clone() + kk.clone());
            let x = self.value_at(cx, lhs, &idx)?;
            let at = u32c(m * stage.stride) + padded(kk);
            cx.kb.store_shared(stage.arr, at, x);
            cx.kb.end();
        }
        Ok(())
    }

    /// One chunk of left side `g`: staged by the whole workgroup, then added by every team.
    #[allow(clippy::too_many_arguments)]
    fn chunk_step(
        &mut self,
        cx: &mut KernelCtx,
        job: &Job,
        g: usize,
        lhs: ValueId,
        stage: &Stage,
        span: &Span,
        walk: &Walk,
        accs: &[Vec<Vec<Var>>],
    ) -> Result<(), PlanError> {
        self.stage_lhs(cx, job, lhs, stage, span.first.clone(), span.len)?;
        cx.kb.barrier();
        cx.kb.begin_if(lt(walk.col.clone(), u32c(job.columns)));
        self.accumulate(cx, job, g, stage, span, walk, accs)?;
        cx.kb.end();
        // Every team has read the chunk before the next one is staged.
        cx.kb.barrier();
        Ok(())
    }

    /// Adds span `span` of the sums over left side `g` (staged in `stage`) at the team's
    /// columns to `accs` (per sum, per column of the team, per row).
    #[allow(clippy::too_many_arguments)]
    fn accumulate(
        &mut self,
        cx: &mut KernelCtx,
        job: &Job,
        g: usize,
        stage: &Stage,
        span: &Span,
        walk: &Walk,
        accs: &[Vec<Vec<Var>>],
    ) -> Result<(), PlanError> {
        for (sum, accs) in job.sums.iter().zip(accs).filter(|(s, _)| s.lhs == g) {
            let n_parts = sum.parts.len();
            for (p, part) in sum.parts.iter().enumerate() {
                let last = p + 1 == n_parts;
                if !last {
                    cx.kb
                        .begin_if(lt(walk.col.clone(), u32c(part.start + part.width)));
                }
                let local = cx.kb.let_(Ty::U32, walk.col.clone() - u32c(part.start));
                let rows = job
                    .indexed
                    .as_ref()
                    .map_or(WeightRows::Plain, WeightRows::PerRow);
                self.gemv_row(cx, (part, rows), local, stage, span, walk, accs)?;
                if !last {
                    cx.kb.otherwise();
                }
            }
            for _ in 1..n_parts {
                cx.kb.end();
            }
        }
        Ok(())
    }

    /// Adds to `accs` (per column of the team, per left-side row) this lane's share of span
    /// `span` of weight rows `local..local + accs.len()` of `part` against the staged left side.
    #[allow(clippy::too_many_arguments)]
    fn gemv_row(
        &mut self,
        cx: &mut KernelCtx,
        (part, weight_rows): (&Part, WeightRows<'_>),
        local: Expr,
        stage: &Stage,
        span: &Span,
        walk: &Walk,
        accs: &[Vec<Var>],
    ) -> Result<(), PlanError> {
        let cols = accs.len() as u32;
        let w = &part.weight;
        // Spans start and end on unit boundaries: they are whole 256-element blocks but the
        // last.
        let units = w.layout.units_per_row(span.len);
        let per_unit = w.k / w.layout.units_per_row(w.k);
        let unit0 = cx.kb.let_(
            Ty::U32,
            span.first.clone() >> u32c(per_unit.trailing_zeros()),
        );
        let (lane, lanes) = (&walk.lane, walk.lanes);
        let bytes = if w.layout.blocks() {
            self.target.tuning.gemv_bytes_per_step
        } else {
            self.target.tuning.gemv_dense_bytes_per_step
        };
        let unroll = unroll(w.layout, units, lanes, (bytes / cols).max(1));
        let wide = w.layout.aligned_units() && self.target.tuning.gemv_wide_shared;
        let buf = self.buffer_of(w.value)?;
        let (param, tables) = match w.layout {
            Layout::F32 => (cx.param(buf, Word::F32, false), FormatTables::new()),
            Layout::HalfPairs(_) | Layout::HalfOcts(_) | Layout::Halves(_) => {
                (cx.param(buf, Word::U32, false), FormatTables::new())
            }
            Layout::Blocks(f) => {
                let p = cx.param(buf, Word::U32, false);
                (p, self.tables_for(cx, f))
            }
            Layout::BlockPairs(pair) | Layout::WholeBlocks(pair) => {
                let p = cx.param(buf, Word::U32, false);
                (p, self.tables_for(cx, pair.block_format()))
            }
        };
        // Each row's first word (f32, half pairs), half (halves) or byte (blocks).
        let row_len = match w.layout {
            Layout::F32 | Layout::Halves(_) => w.k,
            Layout::HalfPairs(_) | Layout::HalfOcts(_) => w.k / 2,
            Layout::Blocks(_) | Layout::BlockPairs(_) | Layout::WholeBlocks(_) => w.row_bytes,
        };
        // The team's first weight row, and where its left-side row is staged when that is not
        // row by row: an indexed contraction's columns (their left-side row's, `cols` of one
        // row) start at that row's expert's rows, a grouped job's at the workgroup's expert's.
        let (first, row_base) = match weight_rows {
            WeightRows::Plain => (local, None),
            WeightRows::Expert(expert, n) => {
                (cx.kb.let_(Ty::U32, expert.clone() * u32c(n) + local), None)
            }
            WeightRows::PerRow(ix) => {
                let t = cx.kb.let_(Ty::U32, local.clone() / u32c(ix.n));
                let j = cx.kb.let_(Ty::U32, local % u32c(ix.n));
                let expert = self.value_at(cx, ix.ids, std::slice::from_ref(&t))?;
                let expert =
                    self.checked_index(cx, expert, ix.experts as usize, super::fault::EXPERT_INDEX);
                let first = cx.kb.let_(Ty::U32, expert * u32c(ix.n) + j);
                let staged = match (ix.tile_row, ix.repeat) {
                    (true, _) => u32c(0),
                    (false, 1) => t,
                    (false, repeat) => t / u32c(repeat),
                };
                (
                    first,
                    Some(cx.kb.let_(Ty::U32, staged * u32c(stage.stride))),
                )
            }
        };
        let row_starts: Vec<Expr> = (0..cols)
            .map(|c| {
                cx.kb
                    .let_(Ty::U32, (first.clone() + u32c(c)) * u32c(row_len))
            })
            .collect();
        let step = lanes * unroll;
        let full = units / step * step;
        if full > 0 {
            let u0 = cx.kb.begin_for(lane.clone(), u32c(full), u32c(step));
            let mut decoded = Vec::with_capacity(unroll as usize);
            for r in 0..unroll {
                let u = cx
                    .kb
                    .let_(Ty::U32, unit0.clone() + u0.clone() + u32c(r * lanes));
                let mut per_col = Vec::with_capacity(cols as usize);
                for start in &row_starts {
                    per_col.push(self.gemv_unit(cx, w, param, &tables, start, u.clone())?);
                }
                decoded.push(per_col);
            }
            gemv_dot(cx, decoded, (stage, row_base.clone()), span, accs, wide);
            cx.kb.end();
        }
        if full < units {
            let u = cx
                .kb
                .begin_for(u32c(full) + lane.clone(), u32c(units), u32c(lanes));
            let u = cx.kb.let_(Ty::U32, unit0 + u);
            let mut per_col = Vec::with_capacity(cols as usize);
            for start in &row_starts {
                per_col.push(self.gemv_unit(cx, w, param, &tables, start, u.clone())?);
            }
            gemv_dot(cx, vec![per_col], (stage, row_base), span, accs, wide);
            cx.kb.end();
        }
        Ok(())
    }

    /// Columns a team of `job` (teams of `lanes`) walks at once: the tuning's for the job's
    /// weights, halved until every part's columns divide into whole teams' and the partial sums
    /// stay few, and (where the workgroups are capped) until the tiles still fill the cap.
    /// Measured on the H200: two columns give 8B Q4_0 13% and cost 1B Q4_0 12%, SmolLM2 20% and
    /// 8B Q4_K_M 4% (fewer, longer workgroups; word-aligned blocks gain nothing).
    fn team_columns(&self, job: &Job, lanes: u32) -> u32 {
        let parts = || job.sums.iter().flat_map(|s| &s.parts);
        let half_word_blocks = parts().any(|p| match p.weight.layout {
            Layout::Blocks(f) => f.block_bytes() % 4 != 0,
            Layout::BlockPairs(_) | Layout::WholeBlocks(_) => true,
            Layout::F32 | Layout::HalfPairs(_) | Layout::HalfOcts(_) | Layout::Halves(_) => false,
        });
        let tuning = &self.target.tuning;
        let want = if half_word_blocks {
            tuning.gemv_columns
        } else {
            tuning.gemv_word_columns
        };
        let most = floor_pow2(PARTIAL_SUMS / job.rows().max(1)).max(1);
        let cap = self.gemv_workgroup_cap(job);
        let fits = |cols: u32| {
            let whole = job.columns.is_multiple_of(cols)
                && parts().all(|p| p.start.is_multiple_of(cols) && p.width.is_multiple_of(cols))
                && job
                    .indexed
                    .as_ref()
                    .is_none_or(|ix| ix.n.is_multiple_of(cols));
            let teams = workgroup_threads(job.columns / cols, lanes) / lanes;
            let fills = cap.is_none_or(|cap| job.columns.div_ceil(teams * cols) >= cap);
            whole && fills
        };
        let mut cols = floor_pow2(want.max(1)).min(most);
        while cols > 1 && !fits(cols) {
            cols /= 2;
        }
        cols
    }

    /// The most workgroups `job`'s kernel launches, where the tuning or the device's
    /// multiprocessors bound them.
    fn gemv_workgroup_cap(&self, job: &Job) -> Option<u32> {
        let tuning = &self.target.tuning;
        tuning.gemv_max_workgroups.or_else(|| {
            let per = if job.blocks() {
                tuning.gemv_block_waves
            } else {
                tuning.gemv_waves
            };
            let sms = self.target.limits.multiprocessors?;
            (per > 0).then(|| sms.saturating_mul(per))
        })
    }

    /// Loads and decodes unit `u` of the weight row starting at `row_start`; the unit's `first`
    /// is its first element's index in the row.
    fn gemv_unit(
        &mut self,
        cx: &mut KernelCtx,
        w: &Weight,
        param: ParamId,
        tables: &FormatTables,
        row_start: &Expr,
        u: Expr,
    ) -> Result<Unit, PlanError> {
        Ok(match w.layout {
            Layout::F32 => {
                let x = cx
                    .kb
                    .let_(Ty::F32, load(param, row_start.clone() + u.clone()));
                Unit {
                    first: u,
                    groups: vec![Group::plain(vec![(0, x)])],
                }
            }
            Layout::Halves(half) => {
                let x = cx.kb.let_(
                    Ty::F32,
                    load_half(param, row_start.clone() + u.clone(), half),
                );
                Unit {
                    first: u,
                    groups: vec![Group::plain(vec![(0, x)])],
                }
            }
            Layout::HalfPairs(half) => {
                let at = cx
                    .kb
                    .let_(Ty::U32, (row_start.clone() + u.clone()) << u32c(1));
                let lo = cx.kb.let_(Ty::F32, load_half(param, at.clone(), half));
                let hi = cx.kb.let_(Ty::F32, load_half(param, at + u32c(1), half));
                Unit {
                    first: u << u32c(1),
                    groups: vec![Group::plain(vec![(0, lo), (1, hi)])],
                }
            }
            Layout::HalfOcts(half) => {
                let at = cx
                    .kb
                    .let_(Ty::U32, row_start.clone() + (u.clone() << u32c(2)));
                let words = cx.kb.let_words(param, at, 4);
                let mut elements = Vec::with_capacity(8);
                for (w, word) in words.into_iter().enumerate() {
                    let w = w as u32;
                    let (lo, hi) = half_pair(word, half);
                    elements.push((2 * w, cx.kb.let_(Ty::F32, lo)));
                    elements.push((2 * w + 1, cx.kb.let_(Ty::F32, hi)));
                }
                Unit {
                    first: u << u32c(3),
                    groups: vec![Group::plain(elements)],
                }
            }
            Layout::Blocks(f) => {
                let per_block = dequant_unit::units_per_block(f);
                let block = cx
                    .kb
                    .let_(Ty::U32, u.clone() >> u32c(per_block.trailing_zeros()));
                let sub = cx.kb.let_(Ty::U32, u & u32c(per_block - 1));
                let base = cx.kb.let_(
                    Ty::U32,
                    row_start.clone() + block.clone() * u32c(f.block_bytes() as u32),
                );
                let kb = &mut cx.kb;
                // MXFP4 a byte per element where it is read: its word decoder's shifts cost more
                // than the loads they save here (on an H100, gpt-oss's decode experts 60 -> 66
                // us a layer; the grouped kernel, whose lanes hold each unit's values for all
                // its rows, 7x slower).
                let unit = if f == BlockFormat::MXFP4 {
                    dequant_unit::decode_by_element(kb, f, param, tables, base, sub)?
                } else {
                    dequant_unit::decode_unit(kb, f, param, tables, base, sub, w.last_word)?
                };
                let first = cx
                    .kb
                    .let_(Ty::U32, block * u32c(f.block_elems() as u32) + unit.first);
                Unit {
                    first,
                    groups: unit.groups,
                }
            }
            Layout::BlockPairs(pair) | Layout::WholeBlocks(pair) => {
                let bytes = w.layout.unit_bytes();
                let base = cx
                    .kb
                    .let_(Ty::U32, row_start.clone() + u.clone() * u32c(bytes));
                let (unit, elems) = if let Layout::BlockPairs(_) = w.layout {
                    let unit = dequant_unit::decode_pair(&mut cx.kb, pair, param, tables, base)?;
                    (unit, PAIR_ELEMS)
                } else {
                    let kb = &mut cx.kb;
                    let unit =
                        dequant_unit::decode_whole(kb, pair, param, tables, base, w.last_word)?;
                    (unit, WHOLE_ELEMS)
                };
                Unit {
                    first: u << u32c(elems.trailing_zeros()),
                    groups: unit.groups,
                }
            }
        })
    }
}

/// The two halves of `word` (low, high) widened to f32.
fn half_pair(word: Expr, half: Half) -> (Expr, Expr) {
    match half {
        Half::F16 => (
            un(UnOp::F16ToF32, word.clone()),
            un(UnOp::F16ToF32, word >> u32c(16)),
        ),
        Half::Bf16 => (
            un(UnOp::BitsToF32, word.clone() << u32c(16)),
            un(UnOp::BitsToF32, word & u32c(0xffff_0000)),
        ),
    }
}

/// Adds the dot products of decoded units with each staged left-side row to `accs` (per column
/// of the team, per row). `units[r][c]` is slot `r`'s unit of column `c`: the columns' units
/// share their elements' places, so each left-side value is read from the stage once for all
/// columns (in one 16-byte load per aligned run of four where `wide`). Per group of a unit, one
/// chain of fused multiply-adds over its elements (an instruction per element), then one more
/// multiply-add by the group's scale into the sum, and for an affine group one by its bias
/// times the left side's sum over its elements (added once for all columns). With a `row_base`
/// (an indexed contraction's one row), the row is staged there.
fn gemv_dot(
    cx: &mut KernelCtx,
    units: Vec<Vec<Unit>>,
    (stage, row_base): (&Stage, Option<Expr>),
    span: &Span,
    accs: &[Vec<Var>],
    wide: bool,
) {
    let cols = accs.len();
    let rows = accs.first().map_or(0, Vec::len) as u32;
    for per_col in units {
        let Some(first) = per_col.first().map(|u| u.first.clone()) else {
            continue;
        };
        // The unit's place in the staged span, padded; each element's offset adds its own
        // padding (units never straddle a multiple of 32 past their first element).
        let rel = cx.kb.let_(Ty::U32, first - span.first.clone());
        let at = match &row_base {
            Some(base) => cx.kb.let_(Ty::U32, padded(rel) + base.clone()),
            None => cx.kb.let_(Ty::U32, padded(rel)),
        };
        let offsets: BTreeSet<u32> = per_col[0]
            .groups
            .iter()
            .flat_map(|g| g.elements.iter().map(|&(off, _)| off))
            .collect();
        // An affine group reads each value twice (its dot product and its sum).
        let affine = per_col[0].groups.iter().any(|g| g.bias.is_some());
        // Each row's left-side values at the unit's offsets: read once, shared by the columns.
        let lhs: Vec<HashMap<u32, Expr>> = (0..rows)
            .map(|m| {
                let base = m * stage.stride;
                let mut values = HashMap::new();
                for &off in &offsets {
                    let run = off % 4 == 0 && (1..4).all(|j| offsets.contains(&(off + j)));
                    if wide && run {
                        let index = at.clone() + u32c(base + off + PAD * (off >> 5));
                        let four = cx.kb.let_shared(stage.arr, index, 4);
                        values.extend((off..).zip(four));
                    }
                }
                for &off in &offsets {
                    if let Entry::Vacant(slot) = values.entry(off) {
                        let index = at.clone() + u32c(base + off + PAD * (off >> 5));
                        let a = load_shared(stage.arr, index);
                        slot.insert(if cols > 1 || affine {
                            cx.kb.let_(Ty::F32, a)
                        } else {
                            a
                        });
                    }
                }
                values
            })
            .collect();
        // Each affine group's sum of the left side over its elements, per row: the same
        // offsets in every column's unit, so added once.
        let sums: Vec<Option<Vec<Expr>>> = per_col[0]
            .groups
            .iter()
            .map(|group| {
                group.bias.as_ref()?;
                let sums = lhs
                    .iter()
                    .map(|values| {
                        let terms = group
                            .elements
                            .iter()
                            .map(|(off, _)| values[off].clone())
                            .collect();
                        cx.kb.let_(Ty::F32, pairwise(terms))
                    })
                    .collect();
                Some(sums)
            })
            .collect();
        for (unit, accs) in per_col.into_iter().zip(accs) {
            for (group, sums) in unit.groups.into_iter().zip(&sums) {
                // A value read by several rows is computed once.
                let values: Vec<(u32, Expr)> = group
                    .elements
                    .into_iter()
                    .map(|(off, v)| {
                        if rows > 1 {
                            (off, cx.kb.let_(Ty::F32, v))
                        } else {
                            (off, v)
                        }
                    })
                    .collect();
                for (m, (lhs, &acc)) in lhs.iter().zip(accs).enumerate() {
                    let mut products = values.iter().map(|(off, v)| (lhs[off].clone(), v.clone()));
                    let Some((a, v)) = products.next() else {
                        continue;
                    };
                    let dot = products.fold(a * v, |sum, (a, v)| mul_add(a, v, sum));
                    let mut sum = match &group.scale {
                        Some(scale) => mul_add(scale.clone(), dot, Expr::Var(acc)),
                        None => Expr::Var(acc) + dot,
                    };
                    if let (Some(bias), Some(sums)) = (&group.bias, sums) {
                        sum = mul_add(bias.clone(), sums[m].clone(), sum);
                    }
                    cx.kb.set(acc, sum);
                }
            }
        }
    }
}
