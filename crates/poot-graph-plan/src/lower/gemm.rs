//! Tiled contractions for many left-side rows (a prefill chunk, an encoder batch).
//!
//! One workgroup of 256 threads computes a tile of `TM x 64` outputs (`TM` is 32 rows for up to
//! 32 rows, else 64; 16 for up to 16 rows of block weights on the matrix units): thread
//! `(tx, ty)` of the 16 x 16 grid owns rows `ty + 16 i` and columns `tx + 16 j` of the tile,
//! `TM / 16 x 4` sums in registers. The contraction axis is walked
//! [`TK`] = 16 elements at a time: the workgroup stages the left side's `TM x 16` slice and
//! each weight's `64 x 16` slice in shared memory (so a packed weight element is decoded once
//! per tile, not once per output), then every thread adds its products from shared memory.
//! Global reads are coalesced along the contraction axis (16 threads read 16 consecutive
//! elements of a row; along the columns for an untransposed weight); the shared arrays are
//! padded by one column so the transposing stores do not conflict.
//!
//! The planner's fusions carry over:
//! - A left side computed in place (a norm's output) is computed while it is staged; the row
//!   reductions it reads at its own row (the norm's sum of squares) are computed once per tile
//!   for all the tile's rows into shared tables ([`KernelCtx::tile_row_value`]).
//! - Sibling contractions (Q, K and V) run as one over their concatenated column tiles: each
//!   workgroup's tile belongs to one of them and stages that one's weights.
//! - An epilogue (a residual add, `silu(gate) * up`) is computed from the registers; the sums
//!   of contractions sharing a left side are formed in one pass over it.
//!
//! With fewer tiles than [`SPLIT_K_WORKGROUPS`] (a 64-row chunk of a small model has a handful)
//! and a long enough contraction, the contraction axis is split too: each workgroup walks one
//! split for one tile and writes its partial sums, and a second kernel, a thread per output,
//! adds them in split order and finishes (stores, or computes the epilogue; a row reduction an
//! epilogue reads is then computed by its own kernel).
//!
//! On a target with matrix units ([`crate::Target::matrix_units`]) the products of each staged
//! step are formed by warps on them, each warp owning a `TM / 2 x 16` block of the tile (a
//! `16 x 8` one of a 16-row tile): against f16 or bf16 weights whose left side the graph
//! rounded to that type ([`crate::precision`]), one `m16n8k16` product per 16 x 8 block and
//! step, in that precision ([`Mma::Half`]); otherwise each f32 factor split into two tf32
//! parts, three `m16n8k8` products per block and half step ([`Mma::Tf32`]). Slices are staged a
//! row per left-side row or weight column: f32 values for tf32, packed pairs of halves
//! ([`poot_kernel::Stmt::StoreSharedHalves`]) for half precision.
//!
//! Block-quantized weights that the graph decodes and rounds to f16 for these tiles
//! ([`crate::precision::decoded_for_tiles`]: a batched decode step's rows, a short prompt
//! chunk) are staged from their stored blocks: each thread decodes whole units of a block
//! ([`super::dequant_unit`]), its scales once, into a slice of 64 (or 32, 128) elements, a
//! column's consecutive units by consecutive threads, so no element is decoded twice and a
//! warp's loads fall in few rows of the weights. Two sets of slices are staged in turn (one
//! barrier a slice). On the matrix units the products are then f16 ones, one per pair, in
//! 16-row tiles for up to 16 rows (each warp a 16 x 8 block); the decoded weights never leave
//! the multiprocessor, where a library would first write them out in full. Their contraction
//! axis is split so the grid fills whole waves of resident workgroups ([`block_splits`]).
//!
//! Each sum adds its products one at a time in `k` order (the oracle keeps eight interleaved
//! partial sums), then the splits in order: the results differ from the oracle's by
//! reassociation only (on the matrix units, in the units' order within a product). A kernel that would not fit the target's workgroup, shared memory or
//! bindings is not made; the one-workgroup-per-output kernels run instead.

use poot_graph_ir::{DType, Graph, OpKind, ValueId};

use super::access::{device_word, kty, to_word};
use super::classify::{Placement, is_identity_elementwise};
use super::context::{KernelCtx, LBuf, TileRow};
use super::emit::{combine, reduce_init};
use super::experts::ExpertRows;
use super::{Lowering, PlanError};
use super::{dequant, dequant_unit};
use crate::plan::BufferRole;
use crate::precision::{DecodedBlocks, decoded_blocks, half_operand};
use crate::target::{MatrixUnits, Target};
use poot_formats::BlockFormat;
use poot_kernel::build::{
    KernelBuilder, Mark, bin, eq, load, load_shared, local_id, lt, min, mul_add, select, u32c, un,
};
use poot_kernel::{BinOp, Expr, Half, ParamId, SharedId, Ty, UnOp, Var, Word};

/// Contraction elements staged per step.
const TK: u32 = 16;
/// Output columns of a tile.
const TN: u32 = 64;
/// Threads along each side of a workgroup's 16 x 16 grid.
const SIDE: u32 = 16;
const THREADS: u32 = SIDE * SIDE;
/// Columns each thread owns (`tx + 16 j`).
const COLS_PER_THREAD: u32 = TN / SIDE;
/// Workgroups a tiled contraction should have at least (about one per multiprocessor of a
/// large GPU): with fewer tiles, the contraction axis is split and a second kernel adds the
/// partial sums.
const SPLIT_K_WORKGROUPS: u32 = 128;
/// The bits of an f32 a tf32 keeps: sign, exponent and the top 10 bits of the mantissa.
const TF32_MASK: u32 = 0xffff_e000;
/// A staged row on the tf32 matrix-unit path: [`TK`] elements and 4 words of padding, so the
/// fragments a warp reads (8 rows by 4 elements) fall in 32 different banks.
const MMA_ROW: u32 = TK + 4;
/// Words of padding after a staged row of packed pairs on the half-precision path (`tk / 2`
/// words): the row is then 4 banks past a multiple of 32 (for `tk` of 16, 32 or 64 words an odd
/// multiple of 4), so the words a warp reads for a fragment (8 rows by 4 words) fall in 32
/// different banks, and so do those 8 threads store 4 at a time in 8 consecutive rows.
const HALF_ROW_PAD: u32 = 4;
/// Values a thread packs into one wide store on the half-precision path, at most.
const HALF_STORE: u32 = 8;
/// Slice widths tried, widest first, for weights decoded from their blocks (from the tuning's
/// widest); each a multiple of [`TK`] (the matrix-unit steps) and every block of at least 32
/// elements divides 32 of them.
const BLOCK_TK: [u32; 3] = [128, 64, 32];
/// Contractions shorter than this are not split (their tiles finish in a few steps).
const SPLIT_K_MIN_LEN: u32 = 256;
/// The fewest contraction elements one split walks.
const SPLIT_K_MIN_PART: u32 = 64;

/// Whether contraction `eqn` is computed by a tiled kernel: a `MatMul` over weights shared by
/// every row (rank 2) with at least `min_rows` rows ([`Target::tiled_min_rows`]).
pub(crate) fn tiled(g: &Graph, eqn: usize, min_rows: usize) -> bool {
    let e = &g.eqns()[eqn];
    matches!(e.op, OpKind::MatMul { .. })
        && g.values()[e.inputs[1].index()].ty.rank() == 2
        && contraction_rows(g, eqn) >= min_rows
}

/// The left-side rows of contraction `eqn`: its output's elements over its last axis.
pub(crate) fn contraction_rows(g: &Graph, eqn: usize) -> usize {
    let out = g.values()[g.eqns()[eqn].out.index()].ty.dims();
    out[..out.len().saturating_sub(1)].iter().product()
}

/// The f16 decoding of contraction `eqn`'s block weights, when a tiled kernel stages them
/// from the stored blocks ([`crate::precision::decoded_for_tiles`] wrote it): `None` where the
/// target does not, or the decoding is the library's.
pub(crate) fn block_tiled(g: &Graph, eqn: usize, target: &Target) -> Option<DecodedBlocks> {
    let e = &g.eqns()[eqn];
    if !target.block_tiles()
        || e.op
            != (OpKind::MatMul {
                transpose_rhs: true,
            })
        || !tiled(g, eqn, target.tiled_min_rows())
    {
        return None;
    }
    if target.library_takes_blocks(contraction_rows(g, eqn)) {
        return None;
    }
    decoded_blocks(g, e.inputs[1])
}

/// The f16 decoding of routed contraction `eqn`'s expert stack, when tiles over each expert's
/// listed rows stage it from the stored blocks
/// ([`crate::precision::decoded_for_routed_tiles`] wrote it).
pub(crate) fn routed_tiled(g: &Graph, eqn: usize, target: &Target) -> Option<DecodedBlocks> {
    let e = &g.eqns()[eqn];
    if e.op != OpKind::IndexedMatMul || !target.block_tiles() {
        return None;
    }
    decoded_blocks(g, e.inputs[1]).filter(|d| g.values()[d.weights.index()].ty.rank() == 3)
}

/// Whether a tiled kernel can stage `[n, k]` weights in block format `f` a unit at a time: rows
/// of whole blocks whose fields sit at even bytes (MXFP4's are read byte by byte), every byte
/// addressed in 32 bits.
pub(crate) fn stages_blocks(f: BlockFormat, n: usize, k: usize) -> bool {
    let Some(row_bytes) = dequant::row_bytes(f, k) else {
        return false;
    };
    (row_bytes % 2 == 0 || f == BlockFormat::MXFP4)
        && (n as u64).saturating_mul(row_bytes as u64) <= u64::from(u32::MAX)
}

/// Units of block format `f` a tiled kernel with slices of `t.tk` elements decodes per weight
/// slice: every unit of the windows a slice holds, or of the one window it lies in.
fn block_units(t: &Tiles, f: BlockFormat) -> u32 {
    let window = dequant_unit::unit_window(f);
    let per_window = dequant_unit::units_per_window(f);
    TN * per_window * (t.tk / window).max(1)
}

/// Rows of a tile for `m` rows in all.
fn tile_rows(m: usize) -> u32 {
    if m <= 32 { 32 } else { 64 }
}

/// One contraction's weights in a tiled kernel and the column tiles it owns.
#[derive(Clone, Copy, Debug)]
struct Weights {
    rhs: ValueId,
    transpose: bool,
    first_tile: u32,
    /// Output columns.
    n: u32,
}

impl Weights {
    fn end_tile(&self) -> u32 {
        self.first_tile + self.n.div_ceil(TN)
    }
}

/// Contractions over one left side, formed in one walk over it. Each sum reads one of its
/// weight choices, picked by the workgroup's column tile (siblings), or its only one.
struct Pass {
    lhs: ValueId,
    k_len: u32,
    sums: Vec<Vec<Weights>>,
}

/// The tiles of a kernel: `m` rows over the leading axes `lead`, `tm` rows a tile.
#[derive(Clone)]
struct Tiles {
    m: u32,
    lead: Vec<usize>,
    tm: u32,
    tiles_m: u32,
    tiles_n: u32,
    /// Contraction elements staged per step: [`TK`], or more where weights are decoded from
    /// their blocks a unit per thread ([`Lowering::stage_block_units`]).
    tk: u32,
    /// Sets of slices staged in turn (1, or 2 for [`Tiled`] kernels staging block weights
    /// where they fit: [`Lowering::tile_pass`]).
    buffers: u32,
    /// Whether the products are formed on matrix units ([`Lowering::mma_step`],
    /// [`Lowering::mma_half_step`]), and in which precision: the shared slices are then stored
    /// row by row (a row's [`TK`] elements, padded to [`Tiles::mma_row`]), and each warp owns a block
    /// of the tile.
    mma: Option<Mma>,
}

/// The precision of a tiled kernel's matrix-unit products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mma {
    /// Three tf32 products per pair of f32 factors: f32 accuracy.
    Tf32,
    /// One f16 (bf16) product per pair: every left side was rounded to it in the graph
    /// ([`crate::precision`]) and every weight is stored in it, so each product is exact.
    Half(Half),
}

impl Tiles {
    fn new(lead: &[usize], tiles_n: u32) -> Tiles {
        let m: usize = lead.iter().product();
        let tm = tile_rows(m);
        Tiles {
            m: m as u32,
            lead: lead.to_vec(),
            tm,
            tiles_m: (m as u32).div_ceil(tm),
            tiles_n,
            tk: TK,
            buffers: 1,
            mma: None,
        }
    }

    fn rows_per_thread(&self) -> u32 {
        self.tm / SIDE
    }

    /// On the matrix-unit path, the 16-row blocks and 8-column blocks each warp owns: warps in
    /// a 2 x 4 grid of `tm / 2 x 16` blocks, or for a 16-row tile a row of 8 of `16 x 8`.
    fn warp_blocks(&self) -> (u32, u32) {
        if self.tm == 16 {
            (1, 1)
        } else {
            (self.tm / 32, 2)
        }
    }

    /// Warps along a row of the tile on the matrix-unit path.
    fn warps_across(&self) -> u32 {
        TN / (8 * self.warp_blocks().1)
    }

    /// The words of a staged row on the matrix-unit paths: f32 elements, or pairs of halves.
    fn mma_row(&self) -> u32 {
        match self.mma {
            Some(Mma::Half(_)) => self.tk / 2 + HALF_ROW_PAD,
            Some(Mma::Tf32) | None => self.tk + MMA_ROW - TK,
        }
    }

    /// The half precision the slices are staged in as packed pairs, if any.
    fn half(&self) -> Option<Half> {
        match self.mma {
            Some(Mma::Half(h)) => Some(h),
            _ => None,
        }
    }

    /// Values each thread packs per store when `rows` rows of a slice are staged in halves.
    fn half_store(&self, rows: u32) -> u32 {
        (rows * self.tk / THREADS).min(HALF_STORE)
    }

    /// The words of the left side's shared slice and of one weight's.
    fn slice_words(&self) -> (u32, u32) {
        if self.mma.is_some() {
            (self.tm * self.mma_row(), TN * self.mma_row())
        } else {
            (self.tk * (self.tm + 1), self.tk * (TN + 1))
        }
    }

    /// Where element `k` of the slice's row `row` (a left-side row of the tile, or a weight's
    /// column) is staged, in an array whose rows are `width` long (the tile's rows or columns).
    fn slot(&self, row: Expr, k: Expr, width: u32) -> Expr {
        if self.mma.is_some() {
            row * u32c(self.mma_row()) + k
        } else {
            k * u32c(width + 1) + row
        }
    }

    /// Whether the last row tile runs past the rows.
    fn ragged(&self) -> bool {
        !self.m.is_multiple_of(self.tm)
    }
}

/// A set of staged slices: the left side's and one per weight of a sum.
type Slices = (SharedId, Vec<SharedId>);

/// Loads of a slice issued before the products of the slice before it, so their latency
/// overlaps those products: a fetching pass over a slice's staging code puts each load it
/// would make (the block units' words, the left side's values) in a variable declared before
/// the walk, and the staging pass that follows the next barrier reads them in the same order.
/// Both passes emit the same loads in the same order, checked as they are read. Variables are
/// pooled by type; loads no thread makes together (a sum's weight choices, units of different
/// sums where every unit has its own thread) take the same ones.
struct Prefetch {
    /// Where the variables are declared: before the walk.
    mark: Mark,
    pools: Vec<Pool>,
    fetching: bool,
    /// Whether a staging pass found other loads than its fetching pass made.
    mismatched: bool,
}

/// The prefetch variables of one type, and the next one of the pass.
struct Pool {
    ty: Ty,
    vars: Vec<Var>,
    next: usize,
}

/// A place in each pool of a [`Prefetch`].
type Cursor = Vec<usize>;

impl Prefetch {
    fn new(mark: Mark) -> Prefetch {
        Prefetch {
            mark,
            pools: Vec::new(),
            fetching: true,
            mismatched: false,
        }
    }

    /// Starts a fetching pass (`true`) or a staging one.
    fn begin(&mut self, fetching: bool) {
        self.fetching = fetching;
        for pool in &mut self.pools {
            pool.next = 0;
        }
    }

    /// Ends a pass; a staging pass must have read every variable.
    fn end(&mut self) {
        if !self.fetching && self.pools.iter().any(|p| p.next != p.vars.len()) {
            self.mismatched = true;
        }
    }

    /// Where the pass is in each pool (pools made later start at 0).
    fn cursor(&self) -> Cursor {
        self.pools.iter().map(|p| p.next).collect()
    }

    /// Goes back to `at`, for loads no thread makes together with those since.
    fn rewind(&mut self, at: &[usize]) {
        for (i, pool) in self.pools.iter_mut().enumerate() {
            pool.next = at.get(i).copied().unwrap_or(0);
        }
    }

    /// The furthest of `a` and the pass's place, pool by pool.
    fn furthest(&self, a: &[usize]) -> Cursor {
        let here = self.cursor();
        (0..here.len().max(a.len()))
            .map(|i| here.get(i).copied().max(a.get(i).copied()).unwrap_or(0))
            .collect()
    }

    fn pool(&mut self, ty: Ty) -> &mut Pool {
        let i = match self.pools.iter().position(|p| p.ty == ty) {
            Some(i) => i,
            None => {
                self.pools.push(Pool {
                    ty,
                    vars: Vec::new(),
                    next: 0,
                });
                self.pools.len() - 1
            }
        };
        &mut self.pools[i]
    }

    /// The next variable of type `ty` of a fetching pass, declared before the walk the first
    /// time it is needed.
    fn slot(&mut self, kb: &mut KernelBuilder, ty: Ty) -> Var {
        let mut mark = self.mark;
        let pool = self.pool(ty);
        let var = match pool.vars.get(pool.next) {
            Some(&var) => var,
            None => {
                kb.begin_detached();
                let var = kb.var(ty, zero(ty));
                kb.insert_detached(&mut mark);
                pool.vars.push(var);
                var
            }
        };
        pool.next += 1;
        self.mark = mark;
        var
    }

    /// The next variable of type `ty` of a staging pass.
    fn fetched(&mut self, ty: Ty) -> Option<Expr> {
        let pool = self.pool(ty);
        match pool.vars.get(pool.next) {
            Some(&var) => {
                pool.next += 1;
                Some(Expr::Var(var))
            }
            None => {
                self.mismatched = true;
                None
            }
        }
    }
}

impl dequant_unit::UnitLoads for Prefetch {
    fn load(&mut self, kb: &mut KernelBuilder, ty: Ty, value: Expr) -> Expr {
        if self.fetching {
            let var = self.slot(kb, ty);
            kb.set(var, value);
            return Expr::Var(var);
        }
        self.fetched(ty).unwrap_or_else(|| kb.let_(ty, value))
    }

    fn load_words(
        &mut self,
        kb: &mut KernelBuilder,
        buf: ParamId,
        index: Expr,
        n: u32,
    ) -> Vec<Expr> {
        if self.fetching {
            let words = kb.let_words(buf, index, n);
            return words
                .into_iter()
                .map(|w| {
                    let var = self.slot(kb, Ty::U32);
                    kb.set(var, w);
                    Expr::Var(var)
                })
                .collect();
        }
        let words: Option<Vec<Expr>> = (0..n).map(|_| self.fetched(Ty::U32)).collect();
        words.unwrap_or_else(|| kb.let_words(buf, index, n))
    }
}

/// The zero of `ty`.
fn zero(ty: Ty) -> Expr {
    match ty {
        Ty::F32 => Expr::F32(0.0),
        Ty::I32 => Expr::I32(0),
        Ty::U32 => u32c(0),
        Ty::Bool => Expr::Bool(false),
    }
}

/// What a tiled kernel does with its sums.
enum Finish {
    /// Stores each weight choice's (sibling's) sums in its own output.
    Columns(Vec<ValueId>),
    /// Computes value `v` from the sums, `sums[p][s]` the contraction of sum `s` of pass `p`.
    Epilogue { v: ValueId, sums: Vec<Vec<ValueId>> },
}

/// A tiled contraction as planned: its passes over left sides, what it finishes, its tiles and
/// how many splits of the contraction axis share each tile.
struct Tiled {
    label: ValueId,
    passes: Vec<Pass>,
    finish: Finish,
    t: Tiles,
    splits: u32,
    /// For routed contractions: the experts whose listed rows the row tiles walk.
    route: Option<Route>,
}

/// The rows of a routed contraction's tiles: each row tile holds rows of one expert, as
/// [`Lowering::expert_rows`] lists them.
struct Route {
    experts: u32,
    listed: ExpertRows,
}

impl Route {
    /// The most row tiles of `tm` rows that `rows` rows over the experts can fill: each
    /// expert's last tile may be partly empty.
    fn row_tiles(&self, rows: u32, tm: u32) -> u32 {
        let most = (rows + self.experts * (tm - 1)) / tm;
        most.min(self.experts * rows.div_ceil(tm)).max(1)
    }
}

impl Tiled {
    fn new(label: ValueId, lead: &[usize], passes: Vec<Pass>, finish: Finish) -> Tiled {
        let tiles_n = passes
            .iter()
            .flat_map(|p| p.sums.iter().flatten())
            .map(Weights::end_tile)
            .max()
            .unwrap_or(1);
        let t = Tiles::new(lead, tiles_n);
        let splits = k_splits(
            t.tiles_m * t.tiles_n,
            max_k_len(&passes),
            SPLIT_K_WORKGROUPS,
        );
        Tiled {
            label,
            passes,
            finish,
            t,
            splits,
            route: None,
        }
    }

    /// Contraction elements of `pass` each split walks: whole steps.
    fn k_part(&self, pass: &Pass) -> u32 {
        pass.k_len.div_ceil(self.splits).div_ceil(self.t.tk) * self.t.tk
    }

    /// Output columns over every sum and weight choice.
    fn columns(&self) -> u64 {
        self.weights().map(|w| u64::from(w.n)).sum()
    }

    /// Every weight choice of every sum of every pass.
    fn weights(&self) -> impl Iterator<Item = &Weights> {
        self.passes.iter().flat_map(|p| p.sums.iter().flatten())
    }
}

/// The longest contraction axis of `passes`.
fn max_k_len(passes: &[Pass]) -> u32 {
    passes.iter().map(|p| p.k_len).max().unwrap_or(0)
}

/// Splits of a contraction over `k_len` elements whose outputs are `tiles` tiles: enough for
/// about `workgroups` workgroups, each walking at least [`SPLIT_K_MIN_PART`]
/// elements; none for a short contraction or enough tiles.
fn k_splits(tiles: u32, k_len: u32, workgroups: u32) -> u32 {
    if k_len < SPLIT_K_MIN_LEN || tiles >= workgroups {
        return 1;
    }
    workgroups
        .div_ceil(tiles)
        .min(k_len / SPLIT_K_MIN_PART)
        .max(1)
}

/// Splits of a contraction over `k_len` elements, staged `tk` at a time, whose outputs are
/// `tiles` tiles, on a target running `workgroups` such workgroups at once: the count with the
/// shortest walk in all, waves of workgroups times the slices each walks (one more for its
/// start and finish), the fewest on a tie. A wave barely overfull costs a whole wave: 224 tiles
/// of 64 slices on 528 workgroups take 2 splits (one wave of 448, 32 slices each), where aiming
/// for 528 workgroups took 3 (two waves, 22 slices each). No split is left empty or walks fewer
/// than [`SPLIT_K_MIN_PART`] elements, and a contraction shorter than [`SPLIT_K_MIN_LEN`] is
/// not split.
fn block_splits(tiles: u32, k_len: u32, tk: u32, workgroups: u32) -> u32 {
    let slices = k_len.div_ceil(tk.max(1));
    if k_len < SPLIT_K_MIN_LEN || slices < 2 {
        return 1;
    }
    let cost = |s: u32| {
        let waves = (tiles * s).div_ceil(workgroups.max(1));
        waves * (slices.div_ceil(s) + 1)
    };
    (1..=slices)
        .filter(|&s| (s - 1) * slices.div_ceil(s) < slices)
        .filter(|&s| s == 1 || slices / s * tk >= SPLIT_K_MIN_PART)
        .min_by_key(|&s| cost(s))
        .unwrap_or(1)
}

/// Where a thread is: its tile (column tile, first row), its split of the contraction axis
/// and its place in the 16 x 16 grid.
struct At {
    tile_n: Expr,
    m0: Expr,
    tx: Expr,
    ty: Expr,
    split: Expr,
    /// On the matrix-unit path, the thread's place in its warp's fragments.
    mma: Option<MmaAt>,
    /// In a routed kernel, the tile's rows among its expert's listed rows (`m0` is then 0 and
    /// rows are the tile's own).
    route: Option<RouteAt>,
}

/// A routed tile: expert `expert`'s listed rows from entry `first` of `lists`, `valid` of them.
struct RouteAt {
    lists: ParamId,
    first: Expr,
    valid: Expr,
    expert: Expr,
}

impl RouteAt {
    /// The left-side row of the tile's row `offset` (its last row's for offsets past it).
    fn row(&self, cx: &mut KernelCtx, offset: Expr) -> Expr {
        let entry = min(offset, self.valid.clone() - u32c(1));
        cx.kb
            .let_(Ty::U32, load(self.lists, self.first.clone() + entry))
    }
}

/// A thread's place on the matrix-unit path: its warp owns the blocks of the tile from row
/// `row0` and column `col0` ([`Tiles::warp_blocks`]), and within each 16 x 8 block it holds
/// rows `g`, `g + 8` and columns `2q`, `2q + 1`.
struct MmaAt {
    row0: Expr,
    col0: Expr,
    g: Expr,
    q: Expr,
}

fn and(a: Expr, b: Expr) -> Expr {
    bin(BinOp::And, a, b)
}

/// f32 `x` as two tf32 parts (u32 bit patterns): `hi`, its top 19 bits, and `lo = x - hi` (exact)
/// cut to 19 bits too, so `hi * y_hi + hi * y_lo + lo * y_hi` is a product within 3 * 2^-20 of
/// `x * y`.
pub(super) fn tf32_parts(cx: &mut KernelCtx, x: Expr) -> (Expr, Expr) {
    let x = cx.kb.let_(Ty::F32, x);
    let hi = cx.kb.let_(
        Ty::U32,
        bin(BinOp::And, un(UnOp::BitsToU32, x.clone()), u32c(TF32_MASK)),
    );
    let rest = x - un(UnOp::BitsToF32, hi.clone());
    let lo = cx.kb.let_(
        Ty::U32,
        bin(BinOp::And, un(UnOp::BitsToU32, rest), u32c(TF32_MASK)),
    );
    (hi, lo)
}

/// The conjunction of the conditions that apply (`None`: always true).
fn all(conds: impl IntoIterator<Item = Option<Expr>>) -> Option<Expr> {
    conds.into_iter().flatten().reduce(and)
}

/// The left side's row at the tile's row `offset` (its index over the leading axes), and when
/// the tile may hold no row there, the condition that it does.
fn tile_lhs_row(
    cx: &mut KernelCtx,
    t: &Tiles,
    at: &At,
    offset: &Expr,
) -> (Option<Expr>, Vec<Expr>) {
    if let Some(r) = &at.route {
        let inside = lt(offset.clone(), r.valid.clone());
        return (Some(inside), vec![r.row(cx, offset.clone())]);
    }
    let m = cx.kb.let_(Ty::U32, at.m0.clone() + offset.clone());
    let inside = t.ragged().then(|| lt(m.clone(), u32c(t.m)));
    (inside, row_index(cx, m, &t.lead))
}

/// The index over `lead` of flat row `m`; an axis of size 1 is the literal 0, as a broadcast
/// from it reads it.
fn row_index(cx: &mut KernelCtx, m: Expr, lead: &[usize]) -> Vec<Expr> {
    let mut out = vec![u32c(0); lead.len()];
    let mut rest = m;
    let outer = lead.iter().position(|&d| d != 1);
    for (i, &d) in lead.iter().enumerate().rev() {
        if d == 1 {
            continue;
        }
        if Some(i) == outer {
            out[i] = cx.kb.let_(Ty::U32, rest);
            break;
        }
        out[i] = cx.kb.let_(Ty::U32, rest.clone() % u32c(d as u32));
        rest = cx.kb.let_(Ty::U32, rest / u32c(d as u32));
    }
    out
}

impl Lowering<'_> {
    /// Contractions `group` (one, or siblings reading one left side with the same leading
    /// axes) as tiles; `false` when they are not tiled or the kernels would not fit the target
    /// (nothing is planned then).
    pub(super) fn emit_tiled_matmuls(&mut self, group: &[usize]) -> Result<bool, PlanError> {
        let min_rows = self.target.tiled_min_rows();
        if group.is_empty() || !group.iter().all(|&j| tiled(self.g, j, min_rows)) {
            return Ok(false);
        }
        let first = &self.g.eqns()[group[0]];
        let (lhs, first_out) = (first.inputs[0], first.out);
        let od = self.g.values()[first_out.index()].ty.dims().to_vec();
        let lhs_dims = self.g.values()[lhs.index()].ty.dims();
        let k_len = lhs_dims[lhs_dims.len() - 1] as u32;
        let mut columns = Vec::with_capacity(group.len());
        for &j in group {
            let e = &self.g.eqns()[j];
            let OpKind::MatMul { transpose_rhs } = e.op else {
                return Ok(false);
            };
            columns.push((e.inputs[1], transpose_rhs, e.out));
        }
        let (choices, outs) = self.column_choices(&columns)?;
        let passes = vec![Pass {
            lhs,
            k_len,
            sums: vec![choices],
        }];
        self.emit_tiled(Tiled::new(
            first_out,
            &od[..od.len() - 1],
            passes,
            Finish::Columns(outs),
        ))
    }

    /// Sibling contractions `(weights, transposed, output)` as weight choices owning
    /// consecutive column tiles, in order, with their outputs.
    fn column_choices(
        &self,
        columns: &[(ValueId, bool, ValueId)],
    ) -> Result<(Vec<Weights>, Vec<ValueId>), PlanError> {
        let mut choices = Vec::with_capacity(columns.len());
        let mut tiles_n = 0u32;
        for &(rhs, transpose, out) in columns {
            self.n_elems(out)?;
            let n = *self.g.values()[out.index()].ty.dims().last().unwrap_or(&1) as u32;
            let w = Weights {
                rhs,
                transpose,
                first_tile: tiles_n,
                n,
            };
            tiles_n = w.end_tile();
            choices.push(w);
        }
        Ok((choices, columns.iter().map(|c| c.2).collect()))
    }

    /// Routed contractions `group` (one, or siblings of one left side and one set of ids: a
    /// layer's gate and up) over many (token, expert) rows as tiles over each expert's listed
    /// rows ([`Lowering::expert_rows`]): every row tile holds rows of one expert, whose weights
    /// it decodes slice by slice as the block tiles do, in f16 on the matrix units where the
    /// target has them ([`crate::precision::decoded_for_routed_tiles`] rounded both sides).
    /// So an expert's weights are read once per tile of its rows, and only the experts some
    /// row selected. `false` when the kernel would not fit the target.
    pub(super) fn emit_routed_tiles(&mut self, group: &[usize]) -> Result<bool, PlanError> {
        let Some(&i) = group.first() else {
            return Ok(false);
        };
        let Some(d) = routed_tiled(self.g, i, self.target) else {
            return Ok(false);
        };
        let e = &self.g.eqns()[i];
        let (lhs, ids) = (e.inputs[0], e.inputs[2]);
        let (experts, k) = match *self.g.values()[d.weights.index()].ty.dims() {
            [experts, _, k] => (experts as u32, k as u32),
            _ => return Ok(false),
        };
        let rows = self.g.values()[e.out.index()].ty.dims()[0] as u32;
        let mut columns = Vec::with_capacity(group.len());
        for &j in group {
            let ej = &self.g.eqns()[j];
            let same = ej.inputs[0] == lhs
                && ej.inputs[2] == ids
                && routed_tiled(self.g, j, self.target).is_some_and(|dj| {
                    self.g.values()[dj.weights.index()].ty.dims()[0] == experts as usize
                });
            if !same {
                return Ok(false);
            }
            columns.push((ej.inputs[1], true, ej.out));
        }
        let (choices, outs) = self.column_choices(&columns)?;
        let passes = vec![Pass {
            lhs,
            k_len: k,
            sums: vec![choices],
        }];
        let listed = self.expert_rows(ids, experts, rows)?;
        let mut tiled = Tiled::new(e.out, &[rows as usize], passes, Finish::Columns(outs));
        tiled.route = Some(Route { experts, listed });
        self.emit_tiled(tiled)
    }

    /// The kernel of value `eqn` computing the contractions `mms` its value reads element by
    /// element (its epilogue) as tiles; `false` when they are not tiled or the kernels would
    /// not fit the target (nothing is planned then).
    pub(super) fn emit_tiled_epilogue(
        &mut self,
        eqn: usize,
        mms: &[ValueId],
    ) -> Result<bool, PlanError> {
        let v = self.g.eqns()[eqn].out;
        let dims = self.g.values()[v.index()].ty.dims().to_vec();
        if dims.len() < 2 || mms.is_empty() {
            return Ok(false);
        }
        self.n_elems(v)?;
        let n = dims[dims.len() - 1] as u32;
        let mut passes: Vec<Pass> = Vec::new();
        let mut sums: Vec<Vec<ValueId>> = Vec::new();
        for &mm in mms {
            let Some(i) = self.cls.producer[mm.index()] else {
                return Ok(false);
            };
            let e = &self.g.eqns()[i];
            let OpKind::MatMul { transpose_rhs } = e.op else {
                return Ok(false);
            };
            if !tiled(self.g, i, self.target.tiled_min_rows())
                || self.g.values()[mm.index()].ty.dims() != dims
            {
                return Ok(false);
            }
            let lhs = e.inputs[0];
            let lhs_dims = self.g.values()[lhs.index()].ty.dims();
            let k_len = lhs_dims[lhs_dims.len() - 1] as u32;
            let w = Weights {
                rhs: e.inputs[1],
                transpose: transpose_rhs,
                first_tile: 0,
                n,
            };
            match passes.iter().position(|p| p.lhs == lhs && p.k_len == k_len) {
                Some(p) => {
                    passes[p].sums.push(vec![w]);
                    sums[p].push(mm);
                }
                None => {
                    passes.push(Pass {
                        lhs,
                        k_len,
                        sums: vec![vec![w]],
                    });
                    sums.push(vec![mm]);
                }
            }
        }
        self.emit_tiled(Tiled::new(
            v,
            &dims[..dims.len() - 1],
            passes,
            Finish::Epilogue { v, sums },
        ))
    }

    /// Plans `tiled`: one kernel, or a kernel per split of the contraction axis writing partial
    /// sums and a kernel adding them up and finishing; `false` when they would not fit.
    fn emit_tiled(&mut self, mut tiled: Tiled) -> Result<bool, PlanError> {
        tiled.t.mma = self.matrix_precision(&tiled);
        let widest = tiled.passes.iter().map(|p| p.sums.len()).max().unwrap_or(1);
        let limits = &self.target.limits;
        let fits = |t: &Tiles| {
            let (a_words, b_words) = t.slice_words();
            4 * t.buffers * (a_words + widest as u32 * b_words) <= limits.max_shared_bytes
        };
        // Weights decoded from their blocks are staged in the widest slices that fit and
        // divide every contraction: a unit per thread, and fewer barriers per element.
        if self.decodes_blocks(&tiled) {
            let mut t = tiled.t.clone();
            let widest_slice = self.target.tuning.block_slice;
            for tk in BLOCK_TK.into_iter().filter(|&tk| tk <= widest_slice) {
                t.tk = tk;
                if fits(&t) && tiled.passes.iter().all(|p| p.k_len.is_multiple_of(tk)) {
                    tiled.t.tk = tk;
                    break;
                }
            }
            // Up to 16 rows (a batched decode step's) on the matrix units: 16-row tiles, each
            // warp a 16 x 8 block, where 32-row ones multiplied as many padding rows as rows.
            // Each thread stages at least a pair of the left side's elements.
            let narrow = t.half().is_some() && tiled.t.tk * 16 >= 2 * THREADS;
            if t.m <= 16 && narrow {
                tiled.t.tm = 16;
            }
            if let Some(route) = &tiled.route {
                // Row tiles about as tall as an expert's share of the rows.
                let share = t.m.div_ceil(route.experts.max(1));
                tiled.t.tm = match share {
                    0..=16 if narrow => 16,
                    0..=32 => 32,
                    _ => 64,
                };
                tiled.t.tiles_m = route.row_tiles(t.m, tiled.t.tm);
            }
            t.tm = tiled.t.tm;
            t.tk = tiled.t.tk;
            t.buffers = self.target.tuning.block_buffers;
            if fits(&t) {
                tiled.t.buffers = t.buffers;
            }
            // Each workgroup walks its slices one after another, waiting on every slice's
            // loads: several per multiprocessor hide each other's waits. And its left side is
            // read from a buffer computed once, not recomputed by every column tile.
            let workgroups = self.target.tuning.block_workgroups
                * limits.multiprocessors.unwrap_or(SPLIT_K_WORKGROUPS);
            tiled.splits = block_splits(
                tiled.t.tiles_m * tiled.t.tiles_n,
                max_k_len(&tiled.passes),
                tiled.t.tk,
                workgroups,
            );
            if tiled.route.is_some() {
                // A routed kernel's row tiles are many; and its left side (a token's input
                // for each of its experts) is read in place where it needs no row tables.
                tiled.splits = 1;
                for pass in &tiled.passes {
                    let mut tables = Vec::new();
                    self.tile_row_reductions(pass.lhs, &tiled.t.lead, &mut tables);
                    if !tables.is_empty() {
                        self.materialized(pass.lhs)?;
                    }
                }
            } else {
                for pass in &tiled.passes {
                    self.materialized(pass.lhs)?;
                }
            }
        }
        if tiled.route.is_some() && (tiled.splits > 1 || !self.decodes_blocks(&tiled)) {
            return Ok(false);
        }
        let t = &tiled.t;
        if THREADS > limits.max_workgroup_threads || !fits(t) {
            return Ok(false);
        }
        let split = tiled.splits > 1;
        let kind = match (&tiled.finish, split) {
            _ if tiled.route.is_some() => "routed_gemm",
            (_, true) => "gemm_split",
            (Finish::Columns(_), false) => "gemm",
            (Finish::Epilogue { .. }, false) => "gemm_epilogue",
        };
        let mut cx = KernelCtx::labelled(kind, self.label(tiled.label), THREADS);
        if t.tk > TK {
            cx.kb
                .set_min_resident(self.target.tuning.block_min_resident);
        }
        let sets: Vec<Slices> = (0..t.buffers)
            .map(|set| Self::tile_arrays(&mut cx, t, widest, set))
            .collect();
        let at = match &tiled.route {
            Some(route) => Self::open_routed_tiles(&mut cx, t, route),
            None => Self::open_tiles(&mut cx, t, tiled.splits),
        };
        let mut accs = Vec::with_capacity(tiled.passes.len());
        for pass in &tiled.passes {
            self.tile_row_tables(&mut cx, pass.lhs, t, &at)?;
            let part = tiled.k_part(pass);
            let start = cx.kb.let_(Ty::U32, at.split.clone() * u32c(part));
            let end = cx
                .kb
                .let_(Ty::U32, min(start.clone() + u32c(part), u32c(pass.k_len)));
            accs.push(self.tile_pass(&mut cx, t, &at, pass, &sets, (start, end))?);
        }
        let grid = t.tiles_m * t.tiles_n * tiled.splits;
        if !split {
            self.finish_tiles(&mut cx, &tiled, &at, &accs)?;
            if tiled.route.is_some() {
                Self::close_routed_tiles(&mut cx);
            } else {
                Self::close_tiles(&mut cx);
            }
            return self.push_tiles(vec![(cx, grid)]);
        }
        // The partial sums: per pass, sum and weight choice, `[splits, m, n]`.
        if !self.fits(&cx, 1) {
            return Ok(false);
        }
        let size = 4 * u64::from(tiled.splits) * u64::from(t.m) * tiled.columns();
        self.check_size(tiled.label, size)?;
        let partials = self.new_buffer(BufferRole::Scratch, size);
        let pp = cx.param(partials, Word::F32, true);
        let mut offset = 0u32;
        for (pass, pass_accs) in tiled.passes.iter().zip(&accs) {
            for (choices, sum_accs) in pass.sums.iter().zip(pass_accs) {
                Self::by_choice(&mut cx, &at, choices, &mut |cx, c, w, col0| {
                    let base =
                        offset + (0..c).map(|d| choices[d].n).sum::<u32>() * t.m * tiled.splits;
                    let region = cx
                        .kb
                        .let_(Ty::U32, u32c(base) + at.split.clone() * u32c(t.m * w.n));
                    Self::each_output(cx, t, &at, w.n, col0, &mut |cx, slot, m, col| {
                        let acc = Expr::Var(sum_accs[slot]);
                        cx.kb.store(pp, region.clone() + m * u32c(w.n) + col, acc);
                    });
                });
                offset += choices.iter().map(|w| w.n).sum::<u32>() * t.m * tiled.splits;
            }
        }
        Self::close_tiles(&mut cx);
        let combine = self.combine_tiles(&tiled, partials)?;
        if !self.fits(&cx, 0) || !self.fits(&combine.0, 0) {
            // Unused: the smallest buffer a plan holds.
            self.bufs[partials.0 as usize].size_bytes = 4;
            return Ok(false);
        }
        self.push_tiles(vec![(cx, grid), combine])
    }

    /// How `tiled` multiplies on the target's matrix units: in half precision when the target
    /// does ([`MatrixUnits::Half`]) and every pass's left side was rounded to the type all its
    /// weights are stored in; else in tf32 where the target has matrix units.
    fn matrix_precision(&self, tiled: &Tiled) -> Option<Mma> {
        let half = || {
            let mut found = None;
            for pass in &tiled.passes {
                let h = half_operand(self.g, pass.lhs)?;
                let weights = pass.sums.iter().flatten();
                let same = weights.map(|w| self.weight_type(w.rhs)).all(|d| d == h);
                if !same || found.is_some_and(|f| f != h) {
                    return None;
                }
                found = Some(h);
            }
            match found? {
                DType::F16 => Some(Half::F16),
                DType::BF16 => Some(Half::Bf16),
                _ => None,
            }
        };
        // Weights decoded from blocks for these tiles were rounded to f16 for this.
        let all_decoded = tiled
            .weights()
            .all(|w| decoded_blocks(self.g, w.rhs).is_some());
        match self.target.matrix_units() {
            MatrixUnits::Off => None,
            MatrixUnits::Tf32 if all_decoded && self.target.block_tiles() => {
                Some(half().map_or(Mma::Tf32, Mma::Half))
            }
            MatrixUnits::Tf32 => Some(Mma::Tf32),
            MatrixUnits::Half => Some(half().map_or(Mma::Tf32, Mma::Half)),
        }
    }

    /// The type a tiled kernel multiplies weights `rhs` in: their stored type, or f16 for
    /// block weights the graph decodes and rounds to f16 ([`crate::precision`]).
    fn weight_type(&self, rhs: ValueId) -> DType {
        match decoded_blocks(self.g, rhs) {
            Some(_) => DType::F16,
            None => self.g.values()[rhs.index()].ty.dtype,
        }
    }

    /// Whether some weight of `tiled` is staged from its stored blocks.
    fn decodes_blocks(&self, tiled: &Tiled) -> bool {
        tiled
            .weights()
            .any(|w| w.transpose && decoded_blocks(self.g, w.rhs).is_some())
    }

    /// Whether kernel `cx`, with `more` bindings yet to add, fits the target's shared memory
    /// and bindings.
    fn fits(&self, cx: &KernelCtx, more: usize) -> bool {
        let limits = &self.target.limits;
        cx.shared_bytes() <= u64::from(limits.max_shared_bytes)
            && (cx.binding_count() + more) as u32 <= limits.max_bindings
    }

    /// Adds kernels over tiles (each with its workgroups), or returns `false` when one binds
    /// more buffers or shared memory than the target allows.
    fn push_tiles(&mut self, kernels: Vec<(KernelCtx, u32)>) -> Result<bool, PlanError> {
        if !kernels.iter().all(|(cx, _)| self.fits(cx, 0)) {
            return Ok(false);
        }
        for (cx, items) in kernels {
            let grid = self.groups_for(items, 1);
            self.push_kernel(cx, grid)?;
        }
        Ok(true)
    }

    /// Runs `body(cx, c, weights, col0)` for the weight choice the workgroup's column tile
    /// belongs to (a branch every thread of the workgroup takes); `col0` is the tile's first
    /// column among that choice's.
    fn by_choice(
        cx: &mut KernelCtx,
        at: &At,
        choices: &[Weights],
        body: &mut dyn FnMut(&mut KernelCtx, usize, &Weights, Expr),
    ) {
        for (c, w) in choices.iter().enumerate() {
            let branch = c + 1 < choices.len();
            if branch {
                cx.kb.begin_if(lt(at.tile_n.clone(), u32c(w.end_tile())));
            }
            let col0 = cx
                .kb
                .let_(Ty::U32, (at.tile_n.clone() - u32c(w.first_tile)) * u32c(TN));
            body(cx, c, w, col0);
            if branch {
                cx.kb.otherwise();
            }
        }
        for _ in 1..choices.len() {
            cx.kb.end();
        }
    }

    /// Runs `body(cx, slot, m, col)` for each output the thread owns that lies inside the
    /// rows and the `n` columns (`slot` its register, `m` its row, `col` its column).
    fn each_output(
        cx: &mut KernelCtx,
        t: &Tiles,
        at: &At,
        n: u32,
        col0: Expr,
        body: &mut dyn FnMut(&mut KernelCtx, usize, Expr, Expr),
    ) {
        if let Some(w) = &at.mma {
            return Self::each_mma_output(cx, t, at, w, n, col0, body);
        }
        for i in 0..t.rows_per_thread() {
            let m = cx
                .kb
                .let_(Ty::U32, at.m0.clone() + at.ty.clone() + u32c(SIDE * i));
            for j in 0..COLS_PER_THREAD {
                let col = cx
                    .kb
                    .let_(Ty::U32, col0.clone() + at.tx.clone() + u32c(SIDE * j));
                let slot = (i * COLS_PER_THREAD + j) as usize;
                Self::output_at(cx, (t, at), n, (slot, m.clone(), col), body);
            }
        }
    }

    /// Runs `body(cx, slot, m, col)` for output `(m, col)` where it lies inside the rows and
    /// the `n` columns.
    fn output_at(
        cx: &mut KernelCtx,
        (t, at): (&Tiles, &At),
        n: u32,
        (slot, m, col): (usize, Expr, Expr),
        body: &mut dyn FnMut(&mut KernelCtx, usize, Expr, Expr),
    ) {
        let rows = match &at.route {
            Some(r) => Some(lt(m.clone(), r.valid.clone())),
            None => t.ragged().then(|| lt(m.clone(), u32c(t.m))),
        };
        let inside = all([
            rows,
            (!n.is_multiple_of(TN)).then(|| lt(col.clone(), u32c(n))),
        ]);
        if let Some(c) = &inside {
            cx.kb.begin_if(c.clone());
        }
        // A routed tile's row `m` is its expert's listed row.
        let m = match &at.route {
            Some(r) => cx.kb.let_(Ty::U32, load(r.lists, r.first.clone() + m)),
            None => m,
        };
        body(cx, slot, m, col);
        if inside.is_some() {
            cx.kb.end();
        }
    }

    /// [`Lowering::each_output`] on the matrix-unit path: slot `(mi * nb + ni) * 4 + r` (`nb`
    /// the warp's column blocks) is the sum at row `g + 8 (r / 2)` and column `2q + r % 2` of
    /// the warp's 16 x 8 block `(mi, ni)`.
    fn each_mma_output(
        cx: &mut KernelCtx,
        t: &Tiles,
        at: &At,
        w: &MmaAt,
        n: u32,
        col0: Expr,
        body: &mut dyn FnMut(&mut KernelCtx, usize, Expr, Expr),
    ) {
        let (row_blocks, col_blocks) = t.warp_blocks();
        for mi in 0..row_blocks {
            for ni in 0..col_blocks {
                for r in 0..4 {
                    let m = cx.kb.let_(
                        Ty::U32,
                        at.m0.clone() + w.row0.clone() + w.g.clone() + u32c(mi * 16 + r / 2 * 8),
                    );
                    let col = cx.kb.let_(
                        Ty::U32,
                        col0.clone()
                            + w.col0.clone()
                            + w.q.clone() * u32c(2)
                            + u32c(ni * 8 + r % 2),
                    );
                    let slot = ((mi * col_blocks + ni) * 4 + r) as usize;
                    Self::output_at(cx, (t, at), n, (slot, m, col), body);
                }
            }
        }
    }

    /// The products of one staged step on the matrix units, a warp's blocks at a time, for each
    /// half of the step: every f32 factor `x` split into tf32 parts `hi` (its top 19 bits) and
    /// `lo = x - hi` (exact, then cut to 19 bits too), and each block's sums given `lo * hi`, then
    /// `hi * lo`, then `hi * hi`. What is left out (the `lo * lo` term and the bits each `lo`
    /// loses) is under 3 * 2^-20 of the product.
    fn mma_step(
        cx: &mut KernelCtx,
        t: &Tiles,
        w: &MmaAt,
        (a_sh, b_sh): (SharedId, &[SharedId]),
        k0: u32,
        accs: &[Vec<Var>],
    ) {
        let stride = t.mma_row();
        let parts = |cx: &mut KernelCtx, arr: SharedId, row: Expr, k: Expr| -> (Expr, Expr) {
            tf32_parts(cx, load_shared(arr, row * u32c(stride) + k))
        };
        let (row_blocks, col_blocks) = t.warp_blocks();
        for half in [0, 8] {
            let k = |off: u32| w.q.clone() + u32c(k0 + half + off);
            // A's fragments for each of the warp's row blocks: rows g, g + 8; elements q, q + 4.
            let a: Vec<([Expr; 4], [Expr; 4])> = (0..row_blocks)
                .map(|mi| {
                    let row = w.row0.clone() + w.g.clone() + u32c(mi * 16);
                    let f = [
                        parts(cx, a_sh, row.clone(), k(0)),
                        parts(cx, a_sh, row.clone() + u32c(8), k(0)),
                        parts(cx, a_sh, row.clone(), k(4)),
                        parts(cx, a_sh, row + u32c(8), k(4)),
                    ];
                    (f.clone().map(|p| p.0), f.map(|p| p.1))
                })
                .collect();
            for (s, sum_accs) in accs.iter().enumerate() {
                for ni in 0..col_blocks {
                    // B's fragment: column g of the block; elements q, q + 4.
                    let col = w.col0.clone() + w.g.clone() + u32c(ni * 8);
                    let (h0, l0) = parts(cx, b_sh[s], col.clone(), k(0));
                    let (h1, l1) = parts(cx, b_sh[s], col, k(4));
                    let (b_hi, b_lo) = ([h0, h1], [l0, l1]);
                    for (mi, (a_hi, a_lo)) in a.iter().enumerate() {
                        let slot = (mi * col_blocks as usize + ni as usize) * 4;
                        let acc = [0, 1, 2, 3].map(|r| sum_accs[slot + r]);
                        cx.kb.mma_tf32(acc, a_lo.clone(), b_hi.clone());
                        cx.kb.mma_tf32(acc, a_hi.clone(), b_lo.clone());
                        cx.kb.mma_tf32(acc, a_hi.clone(), b_hi.clone());
                    }
                }
            }
        }
    }

    /// The products of one staged step on the matrix units in half precision, one product per
    /// pair: the warp's blocks for the step's [`TK`] = 16 elements at once, from the packed
    /// pairs the staging rounded to `half` (the graph rounded the left side and the weights to
    /// it, so every product is exact in f32).
    #[allow(clippy::too_many_arguments)]
    fn mma_half_step(
        cx: &mut KernelCtx,
        t: &Tiles,
        w: &MmaAt,
        half: Half,
        (a_sh, b_sh): (SharedId, &[SharedId]),
        k0: u32,
        accs: &[Vec<Var>],
    ) {
        // The pair of elements `k0 + 2q + off` and the next of staged row `row`: one word.
        let stride = t.mma_row();
        let word = |cx: &mut KernelCtx, arr: SharedId, row: Expr, off: u32| -> Expr {
            let at = row * u32c(stride) + w.q.clone() + u32c((k0 + off) / 2);
            cx.kb.let_(Ty::U32, load_shared(arr, at))
        };
        // A's fragments for each of the warp's row blocks: rows g, g + 8 by pair q, then the
        // same rows by pair q + 4.
        let (row_blocks, col_blocks) = t.warp_blocks();
        let a: Vec<[Expr; 4]> = (0..row_blocks)
            .map(|mi| {
                let lo = w.row0.clone() + w.g.clone() + u32c(mi * 16);
                let hi = lo.clone() + u32c(8);
                [
                    word(cx, a_sh, lo.clone(), 0),
                    word(cx, a_sh, hi.clone(), 0),
                    word(cx, a_sh, lo, 8),
                    word(cx, a_sh, hi, 8),
                ]
            })
            .collect();
        for (s, sum_accs) in accs.iter().enumerate() {
            for ni in 0..col_blocks {
                // B's fragment: column g of the block by pairs q and q + 4.
                let col = w.col0.clone() + w.g.clone() + u32c(ni * 8);
                let b = [word(cx, b_sh[s], col.clone(), 0), word(cx, b_sh[s], col, 8)];
                for (mi, a) in a.iter().enumerate() {
                    let slot = (mi * col_blocks as usize + ni as usize) * 4;
                    let acc = [0, 1, 2, 3].map(|r| sum_accs[slot + r]);
                    cx.kb.mma_half(half, acc, a.clone(), b.clone());
                }
            }
        }
    }

    /// Stores the sums held in registers (`accs[pass][sum][slot]`) as `tiled` finishes.
    fn finish_tiles(
        &mut self,
        cx: &mut KernelCtx,
        tiled: &Tiled,
        at: &At,
        accs: &[Vec<Vec<Var>>],
    ) -> Result<(), PlanError> {
        let t = &tiled.t;
        match &tiled.finish {
            Finish::Columns(outs) => {
                let mut params = Vec::with_capacity(outs.len());
                for &v in outs {
                    let b = self.scratch_for(v)?;
                    params.push(cx.param(b, Word::F32, true));
                }
                let choices = &tiled.passes[0].sums[0];
                Self::by_choice(cx, at, choices, &mut |cx, c, w, col0| {
                    Self::each_output(cx, t, at, w.n, col0, &mut |cx, slot, m, col| {
                        let acc = Expr::Var(accs[0][0][slot]);
                        cx.kb.store(params[c], m * u32c(w.n) + col, acc);
                    });
                });
                Ok(())
            }
            Finish::Epilogue { v, sums } => {
                let v = *v;
                let n = tiled.passes[0].sums[0][0].n;
                let out = self.scratch_for(v)?;
                let dtype = self.g.values()[v.index()].ty.dtype;
                let outp = cx.param(out, device_word(dtype), true);
                let col0 = cx.kb.let_(Ty::U32, at.tile_n.clone() * u32c(TN));
                let mut failed = None;
                Self::each_output(cx, t, at, n, col0, &mut |cx, slot, m, col| {
                    let totals: Vec<Vec<Expr>> = accs
                        .iter()
                        .map(|p| p.iter().map(|s| Expr::Var(s[slot])).collect())
                        .collect();
                    let offset = m.clone() - at.m0.clone();
                    let done =
                        self.finish_value(cx, (v, outp), sums, &totals, (m, col), t, Some(offset));
                    if let Err(e) = done {
                        failed.get_or_insert(e);
                    }
                });
                failed.map_or(Ok(()), Err)
            }
        }
    }

    /// Computes epilogue value `v` at row `m`, column `col` from the sums of its contractions
    /// (`totals[p][s]` the value of `sums[p][s]` there) and stores it into `out`. `tile_row`:
    /// the row's offset in the kernel's tile, when the kernel holds the tile's row tables.
    #[allow(clippy::too_many_arguments)]
    fn finish_value(
        &mut self,
        cx: &mut KernelCtx,
        (v, out): (ValueId, ParamId),
        sums: &[Vec<ValueId>],
        totals: &[Vec<Expr>],
        (m, col): (Expr, Expr),
        t: &Tiles,
        tile_row: Option<Expr>,
    ) -> Result<(), PlanError> {
        let dims = self.g.values()[v.index()].ty.dims();
        let (n, dtype) = (
            dims[dims.len() - 1] as u32,
            self.g.values()[v.index()].ty.dtype,
        );
        let row = row_index(cx, m.clone(), &t.lead);
        let mut oidx = row.clone();
        oidx.push(col.clone());
        for (vs, ts) in sums.iter().zip(totals) {
            for (&mm, total) in vs.iter().zip(ts) {
                cx.set_known(mm, &oidx, total.clone());
            }
        }
        cx.set_tile_row(tile_row.map(|offset| TileRow {
            row,
            dims: t.lead.clone(),
            offset,
        }));
        let value = self.compute(cx, v, &oidx);
        cx.set_tile_row(None);
        cx.kb.store(out, m * u32c(n) + col, to_word(value?, dtype));
        Ok(())
    }

    /// The kernel adding up the partial sums of split `tiled` in split order and finishing
    /// each output, a thread per output; and its workgroups.
    fn combine_tiles(
        &mut self,
        tiled: &Tiled,
        partials: LBuf,
    ) -> Result<(KernelCtx, u32), PlanError> {
        let t = &tiled.t;
        let splits = tiled.splits;
        let mut cx = KernelCtx::labelled("gemm_combine", self.label(tiled.label), THREADS);
        let pp = cx.param(partials, Word::F32, false);
        // The sum over the splits of a region `[splits, m, n]` at `at`, `stride` = m * n.
        let total = |cx: &mut KernelCtx, at: Expr, stride: u32| {
            let acc = cx.kb.var(Ty::F32, Expr::F32(0.0));
            let s = cx.kb.begin_for(u32c(0), u32c(splits), u32c(1));
            cx.kb
                .set(acc, Expr::Var(acc) + load(pp, at + s * u32c(stride)));
            cx.kb.end();
            Expr::Var(acc)
        };
        let mut items = 0u32;
        match &tiled.finish {
            Finish::Columns(outs) => {
                let mut base = 0u32;
                for (w, &v) in tiled.passes[0].sums[0].iter().zip(outs) {
                    let b = self.scratch_for(v)?;
                    let outp = cx.param(b, Word::F32, true);
                    let n = t.m * w.n;
                    let idx = Self::begin_grid_stride(&mut cx, n);
                    let sum = total(&mut cx, u32c(base) + idx.clone(), n);
                    cx.kb.store(outp, idx, sum);
                    cx.kb.end();
                    base += splits * n;
                    items = items.max(n);
                }
            }
            Finish::Epilogue { v, sums } => {
                let v = *v;
                let n = tiled.passes[0].sums[0][0].n;
                let out = self.scratch_for(v)?;
                let dtype = self.g.values()[v.index()].ty.dtype;
                let outp = cx.param(out, device_word(dtype), true);
                items = t.m * n;
                let idx = Self::begin_grid_stride(&mut cx, items);
                let m = cx.kb.let_(Ty::U32, idx.clone() / u32c(n));
                let col = cx.kb.let_(Ty::U32, idx.clone() % u32c(n));
                let mut base = 0u32;
                let mut totals = Vec::with_capacity(sums.len());
                for vs in sums {
                    let mut ts = Vec::with_capacity(vs.len());
                    for _ in vs {
                        ts.push(total(&mut cx, u32c(base) + idx.clone(), items));
                        base += splits * items;
                    }
                    totals.push(ts);
                }
                self.finish_value(&mut cx, (v, outp), sums, &totals, (m, col), t, None)?;
                cx.kb.end();
            }
        }
        Ok((cx, items.div_ceil(THREADS)))
    }

    /// The left side's staging array and one per weight tile, each `TK` rows of one padded
    /// tile row or column.
    fn tile_arrays(cx: &mut KernelCtx, t: &Tiles, weights: usize, set: u32) -> Slices {
        let (a_words, b_words) = t.slice_words();
        // Packed pairs of halves are u32 words.
        let ty = if t.half().is_some() { Ty::U32 } else { Ty::F32 };
        // The first set's names as before; a second set's with its number.
        let tag = if set == 0 {
            String::new()
        } else {
            format!("_{set}")
        };
        let a = cx.kb.shared(format!("tile_a{tag}"), ty, a_words);
        let b = (0..weights)
            .map(|s| cx.kb.shared(format!("tile_b{s}{tag}"), ty, b_words))
            .collect();
        (a, b)
    }

    /// Opens the loop over tiles and splits (column tile major within a split, so workgroups
    /// next to each other share a weight tile) and names the thread's place.
    fn open_tiles(cx: &mut KernelCtx, t: &Tiles, splits: u32) -> At {
        let tx = cx.kb.let_(Ty::U32, local_id() % u32c(SIDE));
        let ty = cx.kb.let_(Ty::U32, local_id() / u32c(SIDE));
        let tiles = t.tiles_m * t.tiles_n;
        let item = Self::begin_rows(cx, tiles * splits);
        let split = cx.kb.let_(Ty::U32, item.clone() / u32c(tiles));
        let rest = cx.kb.let_(Ty::U32, item % u32c(tiles));
        let tile_n = cx.kb.let_(Ty::U32, rest.clone() / u32c(t.tiles_m));
        let m0 = cx.kb.let_(Ty::U32, (rest % u32c(t.tiles_m)) * u32c(t.tm));
        let mma = Self::mma_place(cx, t);
        At {
            tile_n,
            m0,
            tx,
            ty,
            split,
            mma,
            route: None,
        }
    }

    /// The thread's place in its warp's fragments on the matrix-unit path.
    fn mma_place(cx: &mut KernelCtx, t: &Tiles) -> Option<MmaAt> {
        t.mma.map(|_| {
            let warp = local_id() / u32c(32);
            let lane = local_id() % u32c(32);
            let (across, (_, col_blocks)) = (t.warps_across(), t.warp_blocks());
            MmaAt {
                row0: cx.kb.let_(
                    Ty::U32,
                    warp.clone() / u32c(across) * u32c(t.tm * across / 8),
                ),
                col0: cx
                    .kb
                    .let_(Ty::U32, warp % u32c(across) * u32c(8 * col_blocks)),
                g: cx.kb.let_(Ty::U32, lane.clone() / u32c(4)),
                q: cx.kb.let_(Ty::U32, lane % u32c(4)),
            }
        })
    }

    /// Opens the loop over a routed kernel's tiles (row tiles within a column tile, so
    /// workgroups next to each other read one expert's weight tile) and names the thread's
    /// place. Each expert's listed rows take whole row tiles, experts in order; the tile's
    /// expert is found by walking the experts' row counts, and a tile past the last expert's
    /// rows is skipped (the grid is sized for the most tiles any routing can need).
    fn open_routed_tiles(cx: &mut KernelCtx, t: &Tiles, route: &Route) -> At {
        let tx = cx.kb.let_(Ty::U32, local_id() % u32c(SIDE));
        let ty = cx.kb.let_(Ty::U32, local_id() / u32c(SIDE));
        let counts = cx.param(route.listed.counts, Word::U32, false);
        let lists = cx.param(route.listed.lists, Word::U32, false);
        let experts = route.experts;
        let item = Self::begin_rows(cx, t.tiles_m * t.tiles_n);
        let tile_n = cx.kb.let_(Ty::U32, item.clone() / u32c(t.tiles_m));
        let row_tile = cx.kb.let_(Ty::U32, item % u32c(t.tiles_m));
        let seen = cx.kb.var(Ty::U32, u32c(0));
        let found = cx.kb.var(Ty::U32, u32c(experts));
        let found_at = cx.kb.var(Ty::U32, u32c(0));
        let e = cx.kb.begin_for(u32c(0), u32c(experts), u32c(1));
        let tiles = cx.kb.let_(
            Ty::U32,
            (load(counts, e.clone()) + u32c(t.tm - 1)) / u32c(t.tm),
        );
        let hit = cx.kb.let_(
            Ty::Bool,
            and(
                eq(Expr::Var(found), u32c(experts)),
                lt(row_tile.clone(), Expr::Var(seen) + tiles.clone()),
            ),
        );
        cx.kb.set(found, select(hit.clone(), e, Expr::Var(found)));
        cx.kb
            .set(found_at, select(hit, Expr::Var(seen), Expr::Var(found_at)));
        cx.kb.set(seen, Expr::Var(seen) + tiles);
        cx.kb.end();
        cx.kb.begin_if(lt(Expr::Var(found), u32c(experts)));
        let expert = cx.kb.let_(Ty::U32, Expr::Var(found));
        let first = cx
            .kb
            .let_(Ty::U32, (row_tile - Expr::Var(found_at)) * u32c(t.tm));
        let count = cx.kb.let_(Ty::U32, load(counts, expert.clone()));
        let route = RouteAt {
            lists,
            first: cx
                .kb
                .let_(Ty::U32, expert.clone() * u32c(t.m) + first.clone()),
            valid: cx.kb.let_(Ty::U32, min(count - first, u32c(t.tm))),
            expert,
        };
        let mma = Self::mma_place(cx, t);
        At {
            tile_n,
            m0: u32c(0),
            tx,
            ty,
            split: u32c(0),
            mma,
            route: Some(route),
        }
    }

    /// Closes [`Lowering::open_tiles`]; every thread is done with the shared arrays before the
    /// next tile writes them.
    fn close_tiles(cx: &mut KernelCtx) {
        cx.kb.barrier();
        cx.kb.end();
    }

    /// Closes [`Lowering::open_routed_tiles`]: the tile's rows, then the loop.
    fn close_routed_tiles(cx: &mut KernelCtx) {
        cx.kb.barrier();
        cx.kb.end();
        cx.kb.end();
    }

    /// Computes the row reductions `lhs` reads at its own row for every row of the tile, into
    /// shared tables the staging reads (see [`KernelCtx::tile_row_value`]).
    fn tile_row_tables(
        &mut self,
        cx: &mut KernelCtx,
        lhs: ValueId,
        t: &Tiles,
        at: &At,
    ) -> Result<(), PlanError> {
        let mut found = Vec::new();
        self.tile_row_reductions(lhs, &t.lead, &mut found);
        for r in found {
            if !cx.has_tile_rows(r) {
                self.tile_row_table(cx, r, t, at)?;
            }
        }
        Ok(())
    }

    /// The row reductions computing `v` in place reads at `v`'s own row, through ops that keep
    /// the row (same-shape element-wise ops, broadcasts along the last axis), innermost first.
    fn tile_row_reductions(&self, v: ValueId, lead: &[usize], out: &mut Vec<ValueId>) {
        let d = self.g.values()[v.index()].ty.dims();
        if d.len() != lead.len() + 1 || d[..lead.len()] != *lead || out.contains(&v) {
            return;
        }
        let Some(p) = self.cls.producer[v.index()] else {
            return;
        };
        let e = &self.g.eqns()[p];
        match self.cls.placement[v.index()] {
            Placement::RowReduce => {
                if matches!(e.op, OpKind::Reduce { axis, .. } if axis == lead.len()) {
                    self.tile_row_reductions(e.inputs[0], lead, out);
                    out.push(v);
                }
            }
            Placement::Inline
                if is_identity_elementwise(&e.op) || matches!(e.op, OpKind::Broadcast { .. }) =>
            {
                for &w in &e.inputs {
                    self.tile_row_reductions(w, lead, out);
                }
            }
            Placement::Inline
            | Placement::Input
            | Placement::Materialized
            | Placement::View
            | Placement::Absorbed => {}
        }
    }

    /// Row reduction `r` for every row of the tile: 16 threads per row (16 rows at a time),
    /// each folding a stride of the row, then one of them folding the 16 in order.
    fn tile_row_table(
        &mut self,
        cx: &mut KernelCtx,
        r: ValueId,
        t: &Tiles,
        at: &At,
    ) -> Result<(), PlanError> {
        let e = self.producer_of(r)?;
        let (op, axis, x) = match e.op {
            OpKind::Reduce { op, axis } => (op, axis, e.inputs[0]),
            _ => {
                return Err(PlanError::Unplaced {
                    label: self.label(r),
                });
            }
        };
        let xt = &self.g.values()[x.index()].ty;
        let ty = kty(xt.dtype);
        let len = xt.dims()[axis] as u32;
        let table = cx.kb.shared("tile_rows", ty, t.tm);
        let part = cx.reduce_array(ty);
        for round in 0..t.rows_per_thread() {
            let offset = cx.kb.let_(Ty::U32, at.ty.clone() + u32c(SIDE * round));
            // A row past the last reads the last (its entry is never used).
            let m = cx
                .kb
                .let_(Ty::U32, min(at.m0.clone() + offset.clone(), u32c(t.m - 1)));
            let row = row_index(cx, m, &t.lead);
            cx.set_tile_row(Some(TileRow {
                row: row.clone(),
                dims: t.lead.clone(),
                offset: offset.clone(),
            }));
            let acc = cx.kb.var(ty, reduce_init(op, ty));
            let k = cx.kb.begin_for(at.tx.clone(), u32c(len), u32c(SIDE));
            let mut xi = row;
            xi.push(k);
            let xv = self.value_at(cx, x, &xi)?;
            cx.kb.set(acc, combine(op, Expr::Var(acc), xv));
            cx.kb.end();
            cx.set_tile_row(None);
            cx.kb.store_shared(part, local_id(), Expr::Var(acc));
            cx.kb.barrier();
            cx.kb.begin_if(eq(at.tx.clone(), u32c(0)));
            let total = cx.kb.var(ty, load_shared(part, local_id()));
            for lane in 1..SIDE {
                let next = load_shared(part, local_id() + u32c(lane));
                cx.kb.set(total, combine(op, Expr::Var(total), next));
            }
            cx.kb.store_shared(table, offset, Expr::Var(total));
            cx.kb.end();
            cx.kb.barrier();
        }
        cx.add_tile_rows(r, table);
        Ok(())
    }

    /// Stages the slice `[kt, kt + tk)` of the contraction axis of a tile's weight columns from
    /// their stored blocks (`w`'s weights are `d`, a decoding of them the graph rounds to f16):
    /// each thread decodes whole units ([`dequant_unit::decode_unit`]), the block's scales
    /// once per unit, where staging element by element decodes every element's scales again.
    /// A unit keeps to its window ([`dequant_unit::unit_window`]): a slice holds whole windows,
    /// or lies in one, whose units then store only their elements inside the slice. Each value
    /// is the oracle's decoding bit for bit, rounded to f16 as the graph does: by the packing
    /// on the half-precision matrix units ([`Lowering::store_unit_halves`]), else here. Columns
    /// past the weight's are left as they are: no product reaches an output from them.
    fn stage_block_units(
        &mut self,
        cx: &mut KernelCtx,
        t: &Tiles,
        (w, d): (&Weights, &DecodedBlocks),
        (kt, col0, first_thread, first_row): (&Expr, &Expr, u32, Option<&Expr>),
        (arr, mut pre): (Option<SharedId>, Option<&mut Prefetch>),
    ) -> Result<(), PlanError> {
        let fetching = pre.as_ref().is_some_and(|p| p.fetching);
        let f = d.format;
        let info = &self.g.values()[d.weights.index()];
        let k = *info.ty.dims().last().unwrap_or(&0);
        let (row_bytes, size) = match (dequant::row_bytes(f, k), info.ty.size_bytes()) {
            (Some(r), Some(size)) => (r as u32, size),
            _ => {
                return Err(PlanError::Unplaced {
                    label: self.label(w.rhs),
                });
            }
        };
        let last_word = (size.div_ceil(4).max(1) - 1) as u32;
        let buf = self.buffer_of(d.weights)?;
        let param = cx.param(buf, Word::U32, false);
        let tables = self.tables_for(cx, f);
        let (block_elems, block_bytes) = (f.block_elems() as u32, f.block_bytes() as u32);
        let window = dequant_unit::unit_window(f);
        let per_window = dequant_unit::units_per_window(f);
        // Units per column of the slice, and whether some of their elements fall outside it.
        let partial = window > t.tk;
        let per_column = block_units(t, f) / TN;
        let units = TN * per_column;
        // Thread `first_thread` takes unit 0 (the threads before it wrap past every unit).
        for j in 0..(first_thread + units).div_ceil(THREADS) {
            let unit = cx
                .kb
                .let_(Ty::U32, local_id() + u32c(THREADS * j) - u32c(first_thread));
            // Consecutive threads take a column's consecutive units (a warp's loads fall in
            // fewer rows of the weights), or consecutive columns (their stores fall in
            // different banks).
            let (n_in, r) = if self.target.tuning.block_units_along {
                (
                    unit.clone() / u32c(per_column),
                    unit.clone() % u32c(per_column),
                )
            } else {
                (unit.clone() % u32c(TN), unit.clone() / u32c(TN))
            };
            let n_in = cx.kb.let_(Ty::U32, n_in);
            let r = cx.kb.let_(Ty::U32, r);
            let col = cx.kb.let_(Ty::U32, col0.clone() + n_in.clone());
            let inside = all([
                (first_thread > 0 || units < THREADS * (j + 1))
                    .then(|| lt(unit.clone(), u32c(units))),
                (!w.n.is_multiple_of(TN)).then(|| lt(col.clone(), u32c(w.n))),
            ]);
            if let Some(c) = inside.clone() {
                cx.kb.begin_if(c);
            }
            // The unit's window along the row, and its place among the window's units.
            let (index, place) = if partial {
                (kt.clone() / u32c(window), r)
            } else {
                (
                    kt.clone() / u32c(window) + r.clone() / u32c(per_window),
                    r % u32c(per_window),
                )
            };
            let start = cx.kb.let_(Ty::U32, index * u32c(window));
            let block = cx.kb.let_(Ty::U32, start.clone() / u32c(block_elems));
            let sub = cx.kb.let_(
                Ty::U32,
                start % u32c(block_elems) / u32c(window) * u32c(per_window) + place,
            );
            // An expert stack's columns start at the expert's first row.
            let row = match first_row {
                Some(first) => first.clone() + col,
                None => col,
            };
            let base = cx.kb.let_(
                Ty::U32,
                row * u32c(row_bytes) + block.clone() * u32c(block_bytes),
            );
            let loads: &mut dyn dequant_unit::UnitLoads = match pre.as_deref_mut() {
                Some(p) => p,
                None => &mut dequant_unit::DirectLoads,
            };
            let unit = (param, base, sub, last_word);
            let decoded = dequant_unit::decode_unit_with(&mut cx.kb, loads, f, &tables, unit)?;
            let arr = match arr {
                Some(arr) if !fetching => arr,
                _ => {
                    if inside.is_some() {
                        cx.kb.end();
                    }
                    continue;
                }
            };
            // Where the unit's offset 0 falls in the slice (wrapping below it when partial).
            let origin = cx.kb.let_(
                Ty::U32,
                block * u32c(block_elems) + decoded.first - kt.clone(),
            );
            let values = decoded.groups.into_iter().flat_map(|group| {
                let (scale, bias) = (group.scale, group.bias);
                group.elements.into_iter().map(move |(off, e)| {
                    let value = match (&scale, &bias) {
                        // `scale * e` is exact in f32 for the affine formats (an f16 times a
                        // code of at most 11 bits all told), so one fused rounding is the
                        // oracle's two (tests/dequant.rs checks it).
                        (Some(scale), Some(bias)) => mul_add(scale.clone(), e, bias.clone()),
                        (Some(scale), None) => scale.clone() * e,
                        (None, _) => e,
                    };
                    (off, value)
                })
            });
            if let Some(half) = t.half() {
                let mut values: Vec<(u32, Expr)> = values.collect();
                values.sort_by_key(|v| v.0);
                self.store_unit_halves(cx, t, half, (arr, &n_in), (&origin, partial), values, w)?;
            } else {
                for (off, value) in values {
                    // Staged in f32: rounded here as the graph rounds it.
                    let value = un(UnOp::RoundF16, value);
                    let at = cx.kb.let_(Ty::U32, origin.clone() + u32c(off));
                    if partial {
                        cx.kb.begin_if(lt(at.clone(), u32c(t.tk)));
                    }
                    cx.kb.store_shared(arr, t.slot(n_in.clone(), at, TN), value);
                    if partial {
                        cx.kb.end();
                    }
                }
            }
            if inside.is_some() {
                cx.kb.end();
            }
        }
        Ok(())
    }

    /// Stores a decoded unit's `values` (sorted by offset from `origin`, where the unit's
    /// offset 0 falls in the slice) into column `n_in` of `arr` as packed pairs of halves, 8
    /// values a store: every unit's elements come in aligned runs of 8 from an element that is
    /// a multiple of 8 ([`dequant_unit`]'s tests check it), so each run is 4 whole words at a
    /// multiple of 4, and lies wholly inside a slice or outside it (`partial`).
    #[allow(clippy::too_many_arguments)]
    fn store_unit_halves(
        &self,
        cx: &mut KernelCtx,
        t: &Tiles,
        half: Half,
        (arr, n_in): (SharedId, &Expr),
        (origin, partial): (&Expr, bool),
        values: Vec<(u32, Expr)>,
        w: &Weights,
    ) -> Result<(), PlanError> {
        for run in values.chunks(HALF_STORE as usize) {
            let start = run[0].0;
            let whole = run.len() == HALF_STORE as usize
                && start.is_multiple_of(HALF_STORE)
                && run.iter().zip(start..).all(|(v, off)| v.0 == off);
            if !whole {
                return Err(PlanError::Unplaced {
                    label: self.label(w.rhs),
                });
            }
            let at = cx.kb.let_(Ty::U32, origin.clone() + u32c(start));
            if partial {
                cx.kb.begin_if(lt(at.clone(), u32c(t.tk)));
            }
            let word = n_in.clone() * u32c(t.mma_row()) + (at >> u32c(1));
            let run = run.iter().map(|v| v.1.clone()).collect();
            cx.kb.store_shared_halves(half, arr, word, run);
            if partial {
                cx.kb.end();
            }
        }
        Ok(())
    }

    /// A variable holding the value `value` builds where `inside` holds (always when `None`),
    /// zero elsewhere.
    fn staged_value(
        &mut self,
        cx: &mut KernelCtx,
        inside: Option<Expr>,
        value: impl FnOnce(&mut Self, &mut KernelCtx) -> Result<Expr, PlanError>,
    ) -> Result<Expr, PlanError> {
        let Some(c) = inside else {
            let x = value(self, cx)?;
            return Ok(cx.kb.let_(Ty::F32, x));
        };
        let var = cx.kb.var(Ty::F32, Expr::F32(0.0));
        cx.kb.begin_if(c);
        let x = value(self, cx)?;
        cx.kb.set(var, x);
        cx.kb.end();
        Ok(Expr::Var(var))
    }

    /// Stores into `arr[slot]` the value `value` builds where `inside` holds (always when
    /// `None`), zero elsewhere.
    fn stage(
        &mut self,
        cx: &mut KernelCtx,
        inside: Option<Expr>,
        arr: SharedId,
        slot: Expr,
        value: impl FnOnce(&mut Self, &mut KernelCtx) -> Result<Expr, PlanError>,
    ) -> Result<(), PlanError> {
        if let Some(c) = inside.clone() {
            cx.kb.begin_if(c);
        }
        let x = value(self, cx)?;
        cx.kb.store_shared(arr, slot.clone(), x);
        if inside.is_some() {
            cx.kb.otherwise();
            cx.kb.store_shared(arr, slot, Expr::F32(0.0));
            cx.kb.end();
        }
        Ok(())
    }

    /// The walk over `[k_start, k_end)` of the contraction axis of `pass` (whole steps, or up
    /// to the axis's end): stage the left side's and each weight's slice, then add the
    /// products into each thread's registers. Returns the registers of each sum (row `i`,
    /// column `j` of the thread at `i * 4 + j`).
    fn tile_pass(
        &mut self,
        cx: &mut KernelCtx,
        t: &Tiles,
        at: &At,
        pass: &Pass,
        sets: &[Slices],
        (k_start, k_end): (Expr, Expr),
    ) -> Result<Vec<Vec<Var>>, PlanError> {
        let per_thread = t.rows_per_thread() * COLS_PER_THREAD;
        let mark = cx.kb.mark();
        let accs: Vec<Vec<Var>> = pass
            .sums
            .iter()
            .map(|_| {
                (0..per_thread)
                    .map(|_| cx.kb.var(Ty::F32, Expr::F32(0.0)))
                    .collect()
            })
            .collect();
        let tk = t.tk;
        match sets {
            // Two sets are staged only for block weights ([`Lowering::emit_tiled`]).
            [first, second] if self.target.tuning.block_prefetch => {
                let mut pre = Prefetch::new(mark);
                // The first slice's loads, then each slice staged from the loads made before
                // the products of the one before it.
                cx.kb.begin_if(lt(k_start.clone(), k_end.clone()));
                self.prefetch_pass(cx, t, at, pass, (None, &k_start), &mut pre)?;
                cx.kb.end();
                let kt = cx.kb.begin_for(k_start, k_end.clone(), u32c(2 * tk));
                let next = cx.kb.let_(Ty::U32, kt.clone() + u32c(tk));
                let after = cx.kb.let_(Ty::U32, next.clone() + u32c(tk));
                self.prefetch_pass(cx, t, at, pass, (Some(first), &kt), &mut pre)?;
                cx.kb.barrier();
                cx.kb.begin_if(lt(next.clone(), k_end.clone()));
                self.prefetch_pass(cx, t, at, pass, (None, &next), &mut pre)?;
                cx.kb.end();
                Self::multiply_slice(cx, t, at, first, &accs);
                cx.kb.begin_if(lt(next.clone(), k_end.clone()));
                self.prefetch_pass(cx, t, at, pass, (Some(second), &next), &mut pre)?;
                cx.kb.barrier();
                cx.kb.begin_if(lt(after.clone(), k_end));
                self.prefetch_pass(cx, t, at, pass, (None, &after), &mut pre)?;
                cx.kb.end();
                Self::multiply_slice(cx, t, at, second, &accs);
                cx.kb.end();
                cx.kb.end();
                cx.kb.barrier();
                if pre.mismatched {
                    return Err(PlanError::Unplaced {
                        label: self.label(pass.lhs),
                    });
                }
            }
            [first, second] => {
                // Two sets of slices, a step each: a set is staged again only after the
                // barrier that follows the other's staging, which every thread reaches after
                // multiplying this set's. One barrier a slice, and a warp done multiplying
                // stages the next slice while others still multiply.
                let kt = cx.kb.begin_for(k_start, k_end.clone(), u32c(2 * tk));
                self.tile_slice(cx, t, at, pass, first, &kt, &accs)?;
                let next = cx.kb.let_(Ty::U32, kt + u32c(tk));
                cx.kb.begin_if(lt(next.clone(), k_end));
                self.tile_slice(cx, t, at, pass, second, &next, &accs)?;
                cx.kb.end();
                cx.kb.end();
                // Every thread is done with the slices before anything stages again.
                cx.kb.barrier();
            }
            _ => {
                let kt = cx.kb.begin_for(k_start, k_end, u32c(tk));
                self.tile_slice(cx, t, at, pass, &sets[0], &kt, &accs)?;
                cx.kb.end();
            }
        }
        Ok(accs)
    }

    /// A pass of [`Prefetch`] over the slice at `kt`: staging into `set`, or with `None`
    /// fetching (its loads, no stores).
    #[allow(clippy::too_many_arguments)]
    fn prefetch_pass(
        &mut self,
        cx: &mut KernelCtx,
        t: &Tiles,
        at: &At,
        pass: &Pass,
        (set, kt): (Option<&Slices>, &Expr),
        pre: &mut Prefetch,
    ) -> Result<(), PlanError> {
        pre.begin(set.is_none());
        // A fetching pass writes no set.
        let unwritten = (SharedId(0), Vec::new());
        let set = set.unwrap_or(&unwritten);
        self.stage_slice(cx, t, at, pass, set, kt, Some(pre))?;
        pre.end();
        Ok(())
    }

    /// One step of [`Lowering::tile_pass`]: stages the left side's and each weight's slice at
    /// `kt` into `set`, then adds their products into the sums `accs`.
    #[allow(clippy::too_many_arguments)]
    fn tile_slice(
        &mut self,
        cx: &mut KernelCtx,
        t: &Tiles,
        at: &At,
        pass: &Pass,
        set: &Slices,
        kt: &Expr,
        accs: &[Vec<Var>],
    ) -> Result<(), PlanError> {
        self.stage_slice(cx, t, at, pass, set, kt, None)?;
        cx.kb.barrier();
        Self::multiply_slice(cx, t, at, set, accs);
        if t.buffers == 1 {
            // Every thread is done with the slices before the next step stages its own.
            cx.kb.barrier();
        }
        Ok(())
    }

    /// Adds the products of the slices staged in `set` into the sums `accs`.
    fn multiply_slice(cx: &mut KernelCtx, t: &Tiles, at: &At, set: &Slices, accs: &[Vec<Var>]) {
        let (a_sh, b_sh) = (set.0, &set.1[..]);
        for k0 in (0..t.tk).step_by(TK as usize) {
            match (&at.mma, t.mma) {
                (Some(w), Some(Mma::Half(half))) => {
                    Self::mma_half_step(cx, t, w, half, (a_sh, b_sh), k0, accs)
                }
                (Some(w), _) => Self::mma_step(cx, t, w, (a_sh, b_sh), k0, accs),
                (None, _) => Self::fma_step(cx, t, at, (a_sh, b_sh), k0, accs),
            }
        }
    }

    /// Stages the left side's and each weight's slice at `kt` into `set`. With `pre`, in its
    /// pass: a fetching pass makes only the loads [`Prefetch`] holds (the block units' words
    /// and the packed left side's values) and stores nothing; a staging pass reads those and
    /// makes every other load and store.
    #[allow(clippy::too_many_arguments)]
    fn stage_slice(
        &mut self,
        cx: &mut KernelCtx,
        t: &Tiles,
        at: &At,
        pass: &Pass,
        set: &Slices,
        kt: &Expr,
        mut pre: Option<&mut Prefetch>,
    ) -> Result<(), PlanError> {
        let fetching = pre.as_ref().is_some_and(|p| p.fetching);
        let (a_sh, b_sh) = (set.0, &set.1[..]);
        let kt = kt.clone();
        let k_len = pass.k_len;
        let tk = t.tk;
        let k_ragged = !k_len.is_multiple_of(tk);
        // The left side: packed in pairs, or row `ty + 16 i`, element `tx + 16 h` of the slice.
        let f32_columns = match t.half() {
            Some(half) => {
                let to = (half, a_sh);
                self.stage_lhs_halves(cx, t, at, pass, to, &kt, pre.as_deref_mut())?;
                0
            }
            None if fetching => 0,
            None => tk / SIDE,
        };
        for h in 0..f32_columns {
            let kk = cx.kb.let_(Ty::U32, at.tx.clone() + u32c(SIDE * h));
            let k = cx.kb.let_(Ty::U32, kt.clone() + kk.clone());
            for i in 0..t.rows_per_thread() {
                let offset = cx.kb.let_(Ty::U32, at.ty.clone() + u32c(SIDE * i));
                if at.route.is_some() {
                    let (row_inside, mut idx) = tile_lhs_row(cx, t, at, &offset);
                    let inside = all([row_inside, k_ragged.then(|| lt(k.clone(), u32c(k_len)))]);
                    let slot = t.slot(offset.clone(), kk.clone(), t.tm);
                    idx.push(k.clone());
                    let lhs = pass.lhs;
                    self.stage(cx, inside, a_sh, slot, |this, cx| {
                        this.value_at(cx, lhs, &idx)
                    })?;
                    continue;
                }
                let m = cx.kb.let_(Ty::U32, at.m0.clone() + offset.clone());
                let inside = all([
                    t.ragged().then(|| lt(m.clone(), u32c(t.m))),
                    k_ragged.then(|| lt(k.clone(), u32c(k_len))),
                ]);
                let slot = t.slot(offset.clone(), kk.clone(), t.tm);
                let (lhs, lead, k) = (pass.lhs, t.lead.clone(), k.clone());
                self.stage(cx, inside, a_sh, slot, |this, cx| {
                    let row = row_index(cx, m, &lead);
                    cx.set_tile_row(Some(TileRow {
                        row: row.clone(),
                        dims: lead,
                        offset,
                    }));
                    let mut idx = row;
                    idx.push(k);
                    let a = this.value_at(cx, lhs, &idx);
                    cx.set_tile_row(None);
                    a
                })?;
            }
        }
        // The weights: `[N, K]` read along K like the left side, `[K, N]` along N. Sums staged
        // from blocks in fewer units than threads start where the sum before them ended, so
        // two sums' units (gate and up) are decoded by different threads at once.
        let sum_units: Vec<Option<u32>> = pass
            .sums
            .iter()
            .map(|choices| {
                choices
                    .iter()
                    .filter(|w| w.transpose)
                    .filter_map(|w| decoded_blocks(self.g, w.rhs))
                    .map(|d| block_units(t, d.format))
                    .max()
            })
            .collect();
        // Prefetched loads of different sums share variables where each unit has its own
        // thread; a sum's weight choices always do (a workgroup takes one).
        let own_threads = sum_units.iter().flatten().sum::<u32>() <= THREADS;
        let start = pre.as_ref().map(|p| p.cursor()).unwrap_or_default();
        let mut furthest = start.clone();
        let mut first_thread = 0u32;
        for (s, choices) in pass.sums.iter().enumerate() {
            let units = sum_units[s];
            let base = if own_threads { &start } else { &furthest }.clone();
            for (c, &w) in choices.iter().enumerate() {
                if let Some(p) = pre.as_deref_mut() {
                    p.rewind(&base);
                }
                let branch = c + 1 < choices.len();
                if branch {
                    cx.kb.begin_if(lt(at.tile_n.clone(), u32c(w.end_tile())));
                }
                let col0 = cx
                    .kb
                    .let_(Ty::U32, (at.tile_n.clone() - u32c(w.first_tile)) * u32c(TN));
                if let Some(d) = decoded_blocks(self.g, w.rhs).filter(|_| w.transpose) {
                    let first_row = at
                        .route
                        .as_ref()
                        .map(|r| cx.kb.let_(Ty::U32, r.expert.clone() * u32c(w.n)));
                    let at = (&kt, &col0, first_thread, first_row.as_ref());
                    let to = (b_sh.get(s).copied(), pre.as_deref_mut());
                    self.stage_block_units(cx, t, (&w, &d), at, to)?;
                    if let Some(p) = pre.as_deref_mut() {
                        furthest = p.furthest(&furthest);
                    }
                    if branch {
                        cx.kb.otherwise();
                    }
                    continue;
                }
                if let Some(half) = t.half().filter(|_| !fetching) {
                    self.stage_weight_halves(cx, t, (&w, k_len), half, (&kt, &col0), b_sh[s])?;
                    if branch {
                        cx.kb.otherwise();
                    }
                    continue;
                }
                let staged = if fetching { 0 } else { TN * tk / THREADS };
                for j in 0..staged {
                    let (n_in, kk) = if w.transpose {
                        (
                            at.ty.clone() + u32c(SIDE * (j % COLS_PER_THREAD)),
                            at.tx.clone() + u32c(SIDE * (j / COLS_PER_THREAD)),
                        )
                    } else {
                        (
                            local_id() % u32c(TN),
                            local_id() / u32c(TN) + u32c(THREADS / TN * j),
                        )
                    };
                    let n_in = cx.kb.let_(Ty::U32, n_in);
                    let kk = cx.kb.let_(Ty::U32, kk);
                    let col = cx.kb.let_(Ty::U32, col0.clone() + n_in.clone());
                    let kw = cx.kb.let_(Ty::U32, kt.clone() + kk.clone());
                    let inside = all([
                        (!w.n.is_multiple_of(TN)).then(|| lt(col.clone(), u32c(w.n))),
                        k_ragged.then(|| lt(kw.clone(), u32c(k_len))),
                    ]);
                    let slot = t.slot(n_in, kk, TN);
                    let idx = if w.transpose {
                        vec![col, kw]
                    } else {
                        vec![kw, col]
                    };
                    self.stage(cx, inside, b_sh[s], slot, |this, cx| {
                        this.value_at(cx, w.rhs, &idx)
                    })?;
                }
                if branch {
                    cx.kb.otherwise();
                }
            }
            for _ in 1..choices.len() {
                cx.kb.end();
            }
            if let Some(units) = units {
                first_thread = (first_thread + units) % THREADS;
            }
        }
        if let Some(p) = pre {
            p.rewind(&furthest);
        }
        Ok(())
    }

    /// Stages the left side's slice at `kt` as packed pairs of `half`: each thread a run of
    /// [`Tiles::half_store`] elements of one row, in one wide store; zero past the rows and the
    /// contraction.
    #[allow(clippy::too_many_arguments)]
    fn stage_lhs_halves(
        &mut self,
        cx: &mut KernelCtx,
        t: &Tiles,
        at: &At,
        pass: &Pass,
        (half, a_sh): (Half, SharedId),
        kt: &Expr,
        mut pre: Option<&mut Prefetch>,
    ) -> Result<(), PlanError> {
        let fetching = pre.as_ref().is_some_and(|p| p.fetching);
        let per = t.half_store(t.tm);
        let runs = t.tk / per;
        for j in 0..t.tm * runs / THREADS {
            let run = cx.kb.let_(Ty::U32, local_id() + u32c(THREADS * j));
            let offset = cx.kb.let_(Ty::U32, run.clone() / u32c(runs));
            let kk = cx.kb.let_(Ty::U32, run % u32c(runs) * u32c(per));
            let (row_inside, row) = tile_lhs_row(cx, t, at, &offset);
            let mut values = Vec::with_capacity(per as usize);
            for e in 0..per {
                let k = cx.kb.let_(Ty::U32, kt.clone() + kk.clone() + u32c(e));
                let inside = all([
                    row_inside.clone(),
                    (!pass.k_len.is_multiple_of(t.tk)).then(|| lt(k.clone(), u32c(pass.k_len))),
                ]);
                let tile_row = TileRow {
                    row: row.clone(),
                    dims: t.lead.clone(),
                    offset: offset.clone(),
                };
                let mut idx = row.clone();
                idx.push(k);
                let value = |this: &mut Self, cx: &mut KernelCtx| {
                    cx.set_tile_row(Some(tile_row));
                    let a = this.value_at(cx, pass.lhs, &idx);
                    cx.set_tile_row(None);
                    a
                };
                let fetched = match pre.as_deref_mut() {
                    Some(p) if fetching => {
                        let var = p.slot(&mut cx.kb, Ty::F32);
                        let x = self.staged_value(cx, inside, value)?;
                        cx.kb.set(var, x);
                        continue;
                    }
                    Some(p) => p.fetched(Ty::F32),
                    None => None,
                };
                values.push(match fetched {
                    Some(x) => x,
                    None => self.staged_value(cx, inside, value)?,
                });
            }
            if fetching {
                continue;
            }
            let word = offset * u32c(t.mma_row()) + (kk >> u32c(1));
            cx.kb.store_shared_halves(half, a_sh, word, values);
        }
        Ok(())
    }

    /// Stages weights `w` (a contraction of `k_len`) at `kt` for the column tile from `col0`
    /// as packed pairs of `half`: each thread a run of [`Tiles::half_store`] elements of one
    /// column, consecutive threads in consecutive columns; zero past the columns and the
    /// contraction.
    fn stage_weight_halves(
        &mut self,
        cx: &mut KernelCtx,
        t: &Tiles,
        (w, k_len): (&Weights, u32),
        half: Half,
        (kt, col0): (&Expr, &Expr),
        arr: SharedId,
    ) -> Result<(), PlanError> {
        let per = t.half_store(TN);
        let runs = t.tk / per;
        for j in 0..TN * runs / THREADS {
            let run = cx.kb.let_(Ty::U32, local_id() + u32c(THREADS * j));
            let n_in = cx.kb.let_(Ty::U32, run.clone() % u32c(TN));
            let kk = cx.kb.let_(Ty::U32, run / u32c(TN) * u32c(per));
            let col = cx.kb.let_(Ty::U32, col0.clone() + n_in.clone());
            let mut values = Vec::with_capacity(per as usize);
            for e in 0..per {
                let kw = cx.kb.let_(Ty::U32, kt.clone() + kk.clone() + u32c(e));
                let inside = all([
                    (!w.n.is_multiple_of(TN)).then(|| lt(col.clone(), u32c(w.n))),
                    (!k_len.is_multiple_of(t.tk)).then(|| lt(kw.clone(), u32c(k_len))),
                ]);
                let idx = if w.transpose {
                    vec![col.clone(), kw]
                } else {
                    vec![kw, col.clone()]
                };
                values.push(
                    self.staged_value(cx, inside, |this, cx| this.value_at(cx, w.rhs, &idx))?,
                );
            }
            let word = n_in * u32c(t.mma_row()) + (kk >> u32c(1));
            cx.kb.store_shared_halves(half, arr, word, values);
        }
        Ok(())
    }

    /// The products of one staged step on the FMA pipes: each thread's 4 x 4 (or 2 x 4) sums,
    /// element by element of the step.
    fn fma_step(
        cx: &mut KernelCtx,
        t: &Tiles,
        at: &At,
        (a_sh, b_sh): (SharedId, &[SharedId]),
        k0: u32,
        accs: &[Vec<Var>],
    ) {
        for kk in k0..k0 + TK {
            let a: Vec<Expr> = (0..t.rows_per_thread())
                .map(|i| {
                    let at_a = u32c(kk * (t.tm + 1) + SIDE * i) + at.ty.clone();
                    cx.kb.let_(Ty::F32, load_shared(a_sh, at_a))
                })
                .collect();
            for (s, sum_accs) in accs.iter().enumerate() {
                let b: Vec<Expr> = (0..COLS_PER_THREAD)
                    .map(|j| {
                        let at_b = u32c(kk * (TN + 1) + SIDE * j) + at.tx.clone();
                        cx.kb.let_(Ty::F32, load_shared(b_sh[s], at_b))
                    })
                    .collect();
                for (i, ai) in a.iter().enumerate() {
                    for (j, bj) in b.iter().enumerate() {
                        let acc = sum_accs[i * COLS_PER_THREAD as usize + j];
                        cx.kb
                            .set(acc, mul_add(ai.clone(), bj.clone(), Expr::Var(acc)));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use poot_kernel::expr_eval::{Env, Value};
    use poot_kernel::{Builtin, Stmt};

    #[test]
    fn block_splits_fill_whole_waves() {
        // 8B gate/up at 16 rows on 132 multiprocessors holding 4: one wave of 448.
        assert_eq!(block_splits(224, 4096, 64, 528), 2);
        // 8B down (64 tiles over 14336): 8 splits, 512 workgroups, one wave.
        assert_eq!(block_splits(64, 14336, 64, 528), 8);
        // A whole wave of tiles: no split; a wave and a bit: splits that even the waves out.
        assert_eq!(block_splits(528, 4096, 64, 528), 1);
        assert_eq!(block_splits(600, 4096, 64, 528), 5);
        // Short contractions are not split, and no split is empty.
        assert_eq!(block_splits(1, 128, 64, 528), 1);
        let s = block_splits(1, 4096, 64, 528);
        assert!((s - 1) * 64usize.div_ceil(s as usize) as u32 * 64 < 4096);
        assert!(4096 / s >= SPLIT_K_MIN_PART);
    }

    /// One warp's half-precision step, emulated lane by lane: the statements
    /// [`Lowering::mma_half_step`] emits are evaluated for each of the 32 lanes, the operands of
    /// each product gathered from all of them and multiplied as the PTX ISA lays out the
    /// fragments of `mma.m16n8k16` (written here independently: "Matrix Fragments for
    /// mma.m16n8k16 with floating point type"), and each lane's sums read back through
    /// [`Lowering::each_mma_output`]'s convention. They must be the product of the staged
    /// slices. (How the renderer packs each operand pair into a word, the first in the low half,
    /// is the render golden's to check.)
    #[test]
    fn half_fragments_follow_the_ptx_layout() {
        // Each tile height, in a 16-element slice and at the last step of a 64-element one.
        for (tm, tk, k0) in [
            (32, 16, 0),
            (64, 16, 0),
            (32, 64, 48),
            (64, 64, 48),
            (16, 64, 48),
            (16, 32, 16),
        ] {
            let mut t = Tiles::new(&[tm as usize], 1);
            t.mma = Some(Mma::Half(Half::F16));
            t.tm = tm;
            t.tk = tk;
            let (row_blocks, col_blocks) = t.warp_blocks();
            let mut cx = KernelCtx::labelled("gemm", "t".to_string(), 32);
            let (a_sh, b_sh) = Lowering::tile_arrays(&mut cx, &t, 1, 0);
            let lane = local_id() % u32c(32);
            let w = MmaAt {
                row0: u32c(0),
                col0: u32c(0),
                g: cx.kb.let_(Ty::U32, lane.clone() / u32c(4)),
                q: cx.kb.let_(Ty::U32, lane % u32c(4)),
            };
            let accs: Vec<Vec<Var>> = vec![
                (0..t.rows_per_thread() * COLS_PER_THREAD)
                    .map(|_| cx.kb.var(Ty::F32, Expr::F32(0.0)))
                    .collect(),
            ];
            Lowering::mma_half_step(&mut cx, &t, &w, Half::F16, (a_sh, &b_sh), k0, &accs);
            let k = cx.kb.finish();
            // Staged slices: the warp's rows (tm / 2) and 16 columns, small integers (exact),
            // packed in pairs of f16 at the step's 16 elements; NaN elsewhere.
            let row = t.mma_row() as usize;
            let a_val = |m: usize, kk: usize| ((m * 7 + kk * 3) % 11) as f32 - 5.0;
            let b_val = |n: usize, kk: usize| ((n * 5 + kk * 2) % 13) as f32 - 6.0;
            let pack = |lo: f32, hi: f32| {
                let bits = |x: f32| u32::from(half::f16::from_f32(x).to_bits());
                Value::U32(bits(lo) | bits(hi) << 16)
            };
            let nan = Value::U32(0x7e00_7e00);
            let mut a = vec![nan; tm as usize * row];
            let mut b = vec![nan; TN as usize * row];
            for p in 0..TK as usize / 2 {
                let at = k0 as usize / 2 + p;
                for m in 0..tm as usize {
                    a[m * row + at] = pack(a_val(m, 2 * p), a_val(m, 2 * p + 1));
                }
                for n in 0..TN as usize {
                    b[n * row + at] = pack(b_val(n, 2 * p), b_val(n, 2 * p + 1));
                }
            }
            // Each lane's variables, statement by statement; the products' operands per lane.
            let mut vars: Vec<Vec<(Var, Value)>> = vec![Vec::new(); 32];
            // A product's A and B operands (unpacked) and its sums, as one lane passes them.
            type Operands = ([f32; 8], [f32; 4], [Var; 4]);
            let mut products: Vec<Vec<Operands>> = vec![Vec::new(); 32];
            let unpack = |w: u32| {
                let f = |h: u32| half::f16::from_bits(h as u16).to_f32();
                [f(w & 0xffff), f(w >> 16)]
            };
            for (l, (vs, ps)) in vars.iter_mut().zip(&mut products).enumerate() {
                let env = |vs: &[(Var, Value)]| {
                    let mut env = Env::new();
                    env.bind_shared(a_sh, &a).bind_shared(b_sh[0], &b);
                    env.set_builtin(Builtin::LocalId, l as u32);
                    for &(v, x) in vs {
                        env.set_var(v, x);
                    }
                    env
                };
                for s in &k.body {
                    match s {
                        Stmt::Let { var, value, .. } => {
                            let x = env(vs).eval(value).unwrap();
                            vs.push((*var, x));
                        }
                        Stmt::MmaHalf { half, acc, a, b } => {
                            assert_eq!(*half, Half::F16);
                            let e = env(vs);
                            let mut f = a.iter().chain(b).map(|x| unpack(e.eval_u32(x).unwrap()));
                            let mut next = || f.next().unwrap();
                            let a = [next(), next(), next(), next()].concat();
                            let b = [next(), next()].concat();
                            ps.push((a.try_into().unwrap(), b.try_into().unwrap(), *acc));
                        }
                        other => panic!("unexpected statement {other:?}"),
                    }
                }
            }
            // The ISA's fragments, lane by lane: A (16 x 16, row), B (16 x 8, col), C (16 x 8).
            let a_at = |i: usize, g: usize, t: usize| {
                let r = if i < 2 || (4..6).contains(&i) {
                    g
                } else {
                    g + 8
                };
                let c = t * 2 + (i & 1) + if i >= 4 { 8 } else { 0 };
                (r, c)
            };
            let b_at =
                |i: usize, g: usize, t: usize| (t * 2 + (i & 1) + if i >= 2 { 8 } else { 0 }, g);
            let c_at =
                |i: usize, g: usize, t: usize| (if i < 2 { g } else { g + 8 }, t * 2 + (i & 1));
            let n_products = products[0].len();
            assert_eq!(n_products, (row_blocks * col_blocks) as usize);
            let mut sums: HashMap<Var, [f32; 32]> = HashMap::new();
            for p in 0..n_products {
                let mut am = [[f32::NAN; 16]; 16];
                let mut bm = [[f32::NAN; 8]; 16];
                for (l, ps) in products.iter().enumerate() {
                    let (g, t) = (l / 4, l % 4);
                    for i in 0..8 {
                        let (r, c) = a_at(i, g, t);
                        am[r][c] = ps[p].0[i];
                    }
                    for i in 0..4 {
                        let (r, c) = b_at(i, g, t);
                        bm[r][c] = ps[p].1[i];
                    }
                }
                for (l, ps) in products.iter().enumerate() {
                    let (g, t) = (l / 4, l % 4);
                    for i in 0..4 {
                        let (r, c) = c_at(i, g, t);
                        let d: f32 = (0..16).map(|kk| am[r][kk] * bm[kk][c]).sum();
                        sums.entry(ps[p].2[i]).or_insert([0.0; 32])[l] += d;
                    }
                }
            }
            // Slot (mi * nb + ni) * 4 + r: row g + 8 (r / 2) of row block mi, column 2q + r % 2
            // of column block ni.
            let nb = col_blocks as usize;
            for mi in 0..row_blocks as usize {
                for ni in 0..nb {
                    for r in 0..4 {
                        let lanes = &sums[&accs[0][(mi * nb + ni) * 4 + r]];
                        for (l, &got) in lanes.iter().enumerate() {
                            let (g, q) = (l / 4, l % 4);
                            let m = mi * 16 + g + r / 2 * 8;
                            let n = ni * 8 + q * 2 + r % 2;
                            let want: f32 = (0..16).map(|kk| a_val(m, kk) * b_val(n, kk)).sum();
                            assert_eq!(got, want, "tile rows {tm}, lane {l}, ({m}, {n})");
                        }
                    }
                }
            }
        }
    }
}
