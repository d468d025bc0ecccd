//! Attention over many query rows on the matrix units (`mma.sync`, FlashAttention-2's shape):
//! both products, the scores `q k^T` and the weighted values `p v`, as 16 x 8 tiles of
//! `m16n8k8` products, with an online softmax between them in registers.
//!
//! A workgroup is up to [`MAX_WARPS`] warps of one head; each warp owns [`WARP_QUERIES`]
//! consecutive query rows, whose features it holds in registers as the products' A fragments
//! (computed once, their rotary embedding included). The workgroup walks the cache positions
//! [`TILE`] at a time:
//! 1. each lane tests the visibility (the mask) of its scores' positions; the warps agree,
//!    through shared memory, on which of the tile's positions any row sees, and a tile none
//!    sees is skipped whole;
//! 2. the tile's keys and values are staged in shared memory (values of positions no row sees
//!    staged as zero, so an unwritten cache slot cannot reach a sum through a zero weight);
//! 3. each warp forms its 16 x [`TILE`] scores on the matrix units, then each score's logit
//!    chain and mask in registers, the rows' maxima and sums across the four lanes sharing a
//!    row, and rescales what it summed before;
//! 4. the probabilities go through shared memory into A fragments, and the warp adds their
//!    product with the staged values into its 16 x `dv` sums.
//!
//! Precision: every f32 factor is split into two tf32 parts and each product formed as three
//! `m16n8k8` products (what the tiled contractions do, [`super::gemm`]): within 3 * 2^-20 of the
//! f32 product, so the results differ from the oracle's by reassociation (the units' order
//! within a product, the softmax's running rescaling) at f32 accuracy. No rounding is added to
//! the graph. Keys and values widened from an f16 or bf16 cache are exact in tf32 (their low
//! part is zero), so their products take two `m16n8k8` products, with the same sums. A row
//! with no visible position is the mean of the values, as in the oracle.
//!
//! A learned sink logit per head (gpt-oss) enters at each row's output, once its maximum and
//! sum are whole ([`sink_factor`]); a row with no visible position is then zero.

use super::access::unflatten;
use super::attention::{Attention, and, exp, neg_inf, rescale, sink_factor};
use super::context::KernelCtx;
use super::gemm::tf32_parts;
use super::{Lowering, PlanError};
use poot_graph_ir::{DType, OpKind, ValueId};
use poot_kernel::build::{
    bin, cast, cmp, eq, load_shared, local_id, lt, max, min, select, shuffle_xor, u32c, un,
};
use poot_kernel::{BinOp, CmpOp, Expr, Ty, UnOp, Var, Word};

/// Lanes of a warp (the matrix units' unit of work).
const WARP: u32 = 32;
/// Query rows a warp owns: the products' M.
const WARP_QUERIES: u32 = 16;
/// Warps of a workgroup, at most.
const MAX_WARPS: u32 = 4;
/// Cache positions a tile stages: four 8-wide blocks of scores, four 8-deep steps of `p v`.
const TILE: u32 = 32;
/// The widest query-key and value heads (the warp's A fragments and sums live in registers).
const MAX_HEAD: u32 = 128;
/// Padding of a staged key row, so a fragment's 8 rows by 4 features fall in 32 banks.
const K_PAD: u32 = 4;
/// Padding of a staged value row: a fragment reads 4 rows by 8 features.
const V_PAD: u32 = 8;
/// Padding of a row of probabilities (read as the keys are).
const P_PAD: u32 = 4;
/// Loads each thread issues before its first store while staging a tile.
const LOADS_IN_FLIGHT: u32 = 8;

/// Words of shared memory the kernel takes.
fn shared_words(dqk: u32, dv: u32, warps: u32) -> u32 {
    TILE * (dqk + K_PAD) + TILE * (dv + V_PAD) + warps * WARP_QUERIES * (TILE + P_PAD) + warps * 4
}

/// One of a lane's scores: row `r` (0: `g`, 1: `g + 8`) and column `c` of the lane's pair in
/// block `j`, in the order of the products' sums (`C[g][2t], C[g][2t+1], C[g+8][2t], ..`).
fn score_slot(i: usize) -> (usize, u32) {
    (i / 2, (i % 2) as u32)
}

/// The tf32 parts of a staged factor: `(high, low)`, or the value's bits alone (`None` for
/// the low part) where it is exact in tf32.
fn factor_parts(cx: &mut KernelCtx, x: Expr, exact: bool) -> (Expr, Option<Expr>) {
    if exact {
        return (cx.kb.let_(Ty::U32, un(UnOp::BitsToU32, x)), None);
    }
    let (hi, lo) = tf32_parts(cx, x);
    (hi, Some(lo))
}

impl Lowering<'_> {
    /// Whether every element of `v` is exact in tf32: moves (views, broadcasts, transposes,
    /// slices, gathers of unpacked tables) of a widening from f16 or bf16, whose low 13
    /// mantissa bits are zero.
    fn tf32_exact(&self, v: ValueId) -> bool {
        let mut v = v;
        loop {
            let Some(i) = self.cls.producer[v.index()] else {
                return false;
            };
            let e = &self.g.eqns()[i];
            match e.op {
                OpKind::Cast { to: DType::F32 } => {
                    let from = self.g.values()[e.inputs[0].index()].ty.dtype;
                    return matches!(from, DType::F16 | DType::BF16);
                }
                OpKind::Reshape { .. }
                | OpKind::Broadcast { .. }
                | OpKind::Transpose { .. }
                | OpKind::Slice { .. }
                | OpKind::DynamicSlice { .. } => v = e.inputs[0],
                OpKind::Gather { .. } => match self.g.values()[e.inputs[0].index()].ty.dtype {
                    DType::Packed(_) | DType::Components(_) => return false,
                    _ => v = e.inputs[0],
                },
                _ => return false,
            }
        }
    }

    /// Whether the matrix-unit kernel takes `a` once its query is a stored value: a target with
    /// the units (and `attn_mma_sinks` where the softmax has a sink), at least a warp's
    /// queries, heads of at most [`MAX_HEAD`] in multiples of 8, and enough shared memory.
    pub(super) fn attention_mma_takes(&self, a: &Attention) -> bool {
        let od = self.g.values()[a.out.index()].ty.dims();
        let (tokens, dv) = (od[2] as u32, od[3] as u32);
        let s_len = self.g.values()[a.scores.index()].ty.dims()[3] as u32;
        let dqk = self.g.values()[a.q.index()].ty.dims()[3] as u32;
        let warps = tokens.div_ceil(WARP_QUERIES).min(MAX_WARPS);
        let limits = &self.target.limits;
        !(a.sinks.is_some() && !self.target.tuning.attention_mma_sinks
            || !self.target.attention_matrix_units()
            || limits.subgroup_size != WARP
            || tokens < WARP_QUERIES
            || s_len == 0
            || !dqk.is_multiple_of(8)
            || !dv.is_multiple_of(8)
            || dqk > MAX_HEAD
            || dv > MAX_HEAD
            || warps * WARP > limits.max_workgroup_threads
            || 4 * shared_words(dqk, dv, warps) > limits.max_shared_bytes)
    }

    /// Plans `a` on the matrix units; `false` (nothing planned) when the kernel does not apply:
    /// a target without them, fewer tokens than a warp's rows, a query
    /// that reads a row reduction, heads wider than [`MAX_HEAD`] or not a multiple of 8, or too
    /// little shared memory.
    pub(super) fn emit_attention_mma(&mut self, a: &Attention) -> Result<bool, PlanError> {
        if self.cls.reads_row_reduce[a.q.index()] || !self.attention_mma_takes(a) {
            return Ok(false);
        }
        let od = self.g.values()[a.out.index()].ty.dims().to_vec();
        let (bsz, heads, tokens, dv) = (od[0], od[1], od[2] as u32, od[3] as u32);
        let s_len = self.g.values()[a.scores.index()].ty.dims()[3] as u32;
        let dqk = self.g.values()[a.q.index()].ty.dims()[3] as u32;
        let warps = tokens.div_ceil(WARP_QUERIES).min(MAX_WARPS);
        let threads = warps * WARP;
        let (k_exact, v_exact) = (self.tf32_exact(a.k), self.tf32_exact(a.v));
        let out = self.scratch_for(a.out)?;
        let mut cx = KernelCtx::labelled("attention_mma", self.label(a.out), threads);
        let outp = cx.param(out, Word::F32, true);
        let k_sh = cx.kb.shared("k", Ty::F32, TILE * (dqk + K_PAD));
        let v_sh = cx.kb.shared("v", Ty::F32, TILE * (dv + V_PAD));
        let p_sh = cx
            .kb
            .shared("p", Ty::F32, warps * WARP_QUERIES * (TILE + P_PAD));
        // Per warp and lane column `t`: the tile's positions (bit 2j + c: position 8j + 2t + c)
        // that some row of the warp sees.
        let seen_sh = cx.kb.shared("seen", Ty::U32, warps * 4);
        let block_rows = warps * WARP_QUERIES;
        let q_tiles = tokens.div_ceil(block_rows);
        let item = Self::begin_rows(&mut cx, bsz as u32 * heads as u32 * q_tiles);
        let bht = unflatten(&mut cx, item, &[bsz, heads, q_tiles as usize]);
        let (b, h) = (bht[0].clone(), bht[1].clone());
        let warp = cx.kb.let_(Ty::U32, local_id() / u32c(WARP));
        let lane = cx.kb.let_(Ty::U32, local_id() % u32c(WARP));
        let g = cx.kb.let_(Ty::U32, lane.clone() / u32c(4));
        let t = cx.kb.let_(Ty::U32, lane.clone() % u32c(4));
        let row0 = cx.kb.let_(
            Ty::U32,
            bht[2].clone() * u32c(block_rows) + warp.clone() * u32c(WARP_QUERIES),
        );
        // The lane's two query rows (`g`, `g + 8`): token, whether it exists, and the token
        // clamped for index reads.
        let mut rows = Vec::with_capacity(2);
        for r in [0, 8] {
            let tok = cx.kb.let_(Ty::U32, row0.clone() + g.clone() + u32c(r));
            let inside = cx.kb.let_(Ty::Bool, lt(tok.clone(), u32c(tokens)));
            let clamped = cx.kb.let_(Ty::U32, min(tok.clone(), u32c(tokens - 1)));
            rows.push((tok, inside, clamped));
        }

        // The queries as A fragments: step `kk`'s `Q[g][8kk+t], Q[g+8][8kk+t], Q[g][8kk+t+4],
        // Q[g+8][8kk+t+4]`; rows past the tokens are zero.
        let mut q_frags: Vec<[Expr; 4]> = Vec::with_capacity((dqk / 8) as usize);
        for kk in 0..dqk / 8 {
            let mut frag = Vec::with_capacity(4);
            for (r, off) in [(0, 0), (1, 0), (0, 4), (1, 4)] {
                let (_, inside, clamped) = &rows[r];
                let d = t.clone() + u32c(8 * kk + off);
                let qv =
                    self.value_at(&mut cx, a.q, &[b.clone(), h.clone(), clamped.clone(), d])?;
                frag.push(
                    cx.kb
                        .let_(Ty::F32, select(inside.clone(), qv, Expr::F32(0.0))),
                );
            }
            q_frags.push(std::array::from_fn(|i| frag[i].clone()));
        }
        let m_rows: Vec<Var> = (0..2).map(|_| cx.kb.var(Ty::F32, neg_inf())).collect();
        let l_rows: Vec<Var> = (0..2).map(|_| cx.kb.var(Ty::F32, Expr::F32(0.0))).collect();
        let o_accs: Vec<[Var; 4]> = (0..dv / 8)
            .map(|_| std::array::from_fn(|_| cx.kb.var(Ty::F32, Expr::F32(0.0))))
            .collect();

        // Under a causal mask no row sees past its position: the walk stops after the block's
        // last one (a serving step's cache is as long as its context, its prompt often far
        // shorter), each tile past it a visibility test and a barrier saved.
        let bound = a
            .causal
            .filter(|_| self.target.tuning.attention_causal_bound);
        let end = match bound {
            Some(pos) => {
                let bound_sh = cx.kb.shared("bound", Ty::U32, warps);
                let mut lane_end = u32c(0);
                for (_, inside, clamped) in &rows {
                    let p = self.value_at(&mut cx, pos, &[b.clone(), clamped.clone()])?;
                    let past = cast(Ty::U32, max(p, Expr::I32(0))) + u32c(1);
                    lane_end = max(lane_end, select(inside.clone(), past, u32c(0)));
                }
                let mut warp_end = cx.kb.let_(Ty::U32, lane_end);
                for mask in [1, 2, 4, 8, 16] {
                    warp_end = cx
                        .kb
                        .let_(Ty::U32, max(warp_end.clone(), shuffle_xor(warp_end, mask)));
                }
                cx.kb.begin_if(eq(lane.clone(), u32c(0)));
                cx.kb.store_shared(bound_sh, warp.clone(), warp_end);
                cx.kb.end();
                cx.kb.barrier();
                let block_end = (0..warps)
                    .map(|i| load_shared(bound_sh, u32c(i)))
                    .reduce(max)
                    .unwrap_or(u32c(0));
                cx.kb.let_(Ty::U32, min(block_end, u32c(s_len)))
            }
            None => u32c(s_len),
        };
        let s0 = cx.kb.begin_for(u32c(0), end, u32c(TILE));
        // The lane's positions in the tile, block `j`, column `c`: 8j + 2t + c.
        let blocks = TILE / 8;
        let mut cols = Vec::with_capacity(2 * blocks as usize);
        for j in 0..blocks {
            for c in 0..2 {
                let s = cx
                    .kb
                    .let_(Ty::U32, s0.clone() + t.clone() * u32c(2) + u32c(8 * j + c));
                let s_c = cx.kb.let_(Ty::U32, min(s.clone(), u32c(s_len - 1)));
                cols.push((lt(s, u32c(s_len)), s_c));
            }
        }
        // vis[j][i]: score slot `i` of block `j` (see `score_slot`).
        let mut vis: Vec<Vec<Expr>> = Vec::with_capacity(blocks as usize);
        let mut col_bits = u32c(0);
        for j in 0..blocks as usize {
            let mut block = Vec::with_capacity(4);
            for i in 0..4 {
                let (r, c) = score_slot(i);
                let (inside_col, s_c) = &cols[2 * j + c as usize];
                let (_, inside_row, clamped) = &rows[r];
                let inside = and(inside_row.clone(), inside_col.clone());
                let v = match a.mask {
                    Some(mask) => {
                        let idx = [b.clone(), h.clone(), clamped.clone(), s_c.clone()];
                        and(inside, self.value_at(&mut cx, mask, &idx)?)
                    }
                    None => inside,
                };
                block.push(cx.kb.let_(Ty::Bool, v));
            }
            for c in 0..2u32 {
                let either = bin(
                    BinOp::Or,
                    block[c as usize].clone(),
                    block[2 + c as usize].clone(),
                );
                let bit = select(either, u32c(1 << (2 * j as u32 + c)), u32c(0));
                col_bits = bin(BinOp::Or, col_bits, bit);
            }
            vis.push(block);
        }
        // The warp's positions seen by any of its rows: the eight lanes of a column agree.
        let mut bits = cx.kb.let_(Ty::U32, col_bits);
        for mask in [4, 8, 16] {
            bits = cx.kb.let_(
                Ty::U32,
                bin(BinOp::Or, bits.clone(), shuffle_xor(bits, mask)),
            );
        }
        cx.kb.begin_if(eq(g.clone(), u32c(0)));
        cx.kb
            .store_shared(seen_sh, warp.clone() * u32c(4) + t.clone(), bits);
        cx.kb.end();
        cx.kb.barrier();
        let any_bits = (0..warps * 4)
            .map(|i| load_shared(seen_sh, u32c(i)))
            .reduce(|x, y| bin(BinOp::Or, x, y))
            .unwrap_or(u32c(0));
        let any = cx.kb.let_(Ty::Bool, cmp(CmpOp::Ne, any_bits, u32c(0)));

        cx.kb.begin_if(any);
        // The tile's keys, then its values (zero where no row sees the position).
        let at = Staging {
            b: &b,
            h: &h,
            s0: &s0,
            s_len,
            threads,
        };
        self.stage_tile(&mut cx, &at, (a.k, dqk), (k_sh, dqk + K_PAD), None)?;
        self.stage_tile(
            &mut cx,
            &at,
            (a.v, dv),
            (v_sh, dv + V_PAD),
            Some((seen_sh, warps)),
        )?;
        cx.kb.barrier();

        // The scores: block `j` is positions 8j.. of the tile, `B[k][n] = K[8j + n][k]`.
        let s_accs: Vec<[Var; 4]> = (0..blocks)
            .map(|_| std::array::from_fn(|_| cx.kb.var(Ty::F32, Expr::F32(0.0))))
            .collect();
        for (kk, frag) in q_frags.iter().enumerate() {
            let parts: Vec<(Expr, Expr)> = frag
                .iter()
                .map(|x| tf32_parts(&mut cx, x.clone()))
                .collect();
            let a_hi: [Expr; 4] = std::array::from_fn(|i| parts[i].0.clone());
            let a_lo: [Expr; 4] = std::array::from_fn(|i| parts[i].1.clone());
            for (j, acc) in s_accs.iter().enumerate() {
                let key = g.clone() + u32c(8 * j as u32);
                let at = |off: u32| {
                    key.clone() * u32c(dqk + K_PAD) + t.clone() + u32c(8 * kk as u32 + off)
                };
                let (h0, l0) = factor_parts(&mut cx, load_shared(k_sh, at(0)), k_exact);
                let (h1, l1) = factor_parts(&mut cx, load_shared(k_sh, at(4)), k_exact);
                cx.kb.mma_tf32(*acc, a_lo.clone(), [h0.clone(), h1.clone()]);
                if let (Some(l0), Some(l1)) = (l0, l1) {
                    cx.kb.mma_tf32(*acc, a_hi.clone(), [l0, l1]);
                }
                cx.kb.mma_tf32(*acc, a_hi.clone(), [h0, h1]);
            }
        }

        // Each score's logit chain, masked to -inf; then the rows' new maxima, across the
        // four lanes that share a row.
        let mut scores: Vec<Vec<Expr>> = Vec::with_capacity(blocks as usize);
        for (j, acc) in s_accs.iter().enumerate() {
            let mut block = Vec::with_capacity(4);
            for (i, &sum) in acc.iter().enumerate() {
                let (r, c) = score_slot(i);
                let sidx = [
                    b.clone(),
                    h.clone(),
                    rows[r].2.clone(),
                    cols[2 * j + c as usize].1.clone(),
                ];
                cx.set_known(a.scores, &sidx, Expr::Var(sum));
                let logit = self.compute(&mut cx, a.logits, &sidx)?;
                block.push(
                    cx.kb
                        .let_(Ty::F32, select(vis[j][i].clone(), logit, neg_inf())),
                );
            }
            scores.push(block);
        }
        let warp_rows = warp.clone() * u32c(WARP_QUERIES * (TILE + P_PAD));
        let mut alphas = Vec::with_capacity(2);
        for r in 0..2 {
            let mine = scores
                .iter()
                .flat_map(|block| [block[2 * r].clone(), block[2 * r + 1].clone()])
                .reduce(max)
                .expect("a block");
            let mut tile_max = cx.kb.let_(Ty::F32, mine);
            for mask in [1, 2] {
                tile_max = cx
                    .kb
                    .let_(Ty::F32, max(tile_max.clone(), shuffle_xor(tile_max, mask)));
            }
            let m_new = cx.kb.let_(Ty::F32, max(Expr::Var(m_rows[r]), tile_max));
            let (live, alpha) = rescale(&mut cx, m_rows[r], &m_new);
            let sum = cx.kb.var(Ty::F32, Expr::F32(0.0));
            let p_row = warp_rows.clone() + (g.clone() + u32c(8 * r as u32)) * u32c(TILE + P_PAD);
            for (j, block) in scores.iter().enumerate() {
                for c in 0..2 {
                    let p = cx.kb.let_(
                        Ty::F32,
                        select(
                            live.clone(),
                            exp(block[2 * r + c].clone() - m_new.clone()),
                            Expr::F32(0.0),
                        ),
                    );
                    let at = p_row.clone() + t.clone() * u32c(2) + u32c(8 * j as u32 + c as u32);
                    cx.kb.store_shared(p_sh, at, p.clone());
                    cx.kb.set(sum, Expr::Var(sum) + p);
                }
            }
            cx.kb.team_sum(sum, 4);
            cx.kb.set(
                l_rows[r],
                Expr::Var(l_rows[r]) * alpha.clone() + Expr::Var(sum),
            );
            cx.kb.set(m_rows[r], m_new);
            alphas.push(alpha);
        }
        for acc in &o_accs {
            for (i, &v) in acc.iter().enumerate() {
                cx.kb.set(v, Expr::Var(v) * alphas[i / 2].clone());
            }
        }
        // The probabilities are in shared memory before any lane reads another's.
        cx.kb.barrier();

        // The weighted values: step `kk` is positions 8kk.. of the tile, `A = P`, `B = V`.
        for kk in 0..blocks {
            let p_at = |r: u32, off: u32| {
                warp_rows.clone()
                    + (g.clone() + u32c(r)) * u32c(TILE + P_PAD)
                    + t.clone()
                    + u32c(8 * kk + off)
            };
            let parts: Vec<(Expr, Expr)> = [(0, 0), (8, 0), (0, 4), (8, 4)]
                .into_iter()
                .map(|(r, off)| tf32_parts(&mut cx, load_shared(p_sh, p_at(r, off))))
                .collect();
            let a_hi: [Expr; 4] = std::array::from_fn(|i| parts[i].0.clone());
            let a_lo: [Expr; 4] = std::array::from_fn(|i| parts[i].1.clone());
            for (n, acc) in o_accs.iter().enumerate() {
                let v_at = |off: u32| {
                    (t.clone() + u32c(8 * kk + off)) * u32c(dv + V_PAD)
                        + g.clone()
                        + u32c(8 * n as u32)
                };
                let (h0, l0) = factor_parts(&mut cx, load_shared(v_sh, v_at(0)), v_exact);
                let (h1, l1) = factor_parts(&mut cx, load_shared(v_sh, v_at(4)), v_exact);
                cx.kb.mma_tf32(*acc, a_lo.clone(), [h0.clone(), h1.clone()]);
                if let (Some(l0), Some(l1)) = (l0, l1) {
                    cx.kb.mma_tf32(*acc, a_hi.clone(), [l0, l1]);
                }
                cx.kb.mma_tf32(*acc, a_hi.clone(), [h0, h1]);
            }
        }
        cx.kb.end();
        // Every warp is done with the tile before the next one is staged.
        cx.kb.barrier();
        cx.kb.end();

        // The outputs: sums over each row's total, or the values' mean where it saw nothing;
        // with a sink, the sums times its factor.
        let sink = self.sink_logit(&mut cx, a, &h)?;
        for (r, (tok, inside, _)) in rows.iter().enumerate() {
            cx.kb.begin_if(inside.clone());
            let row = (b.clone() * u32c(heads as u32) + h.clone()) * u32c(tokens) + tok.clone();
            let base = cx.kb.let_(Ty::U32, row * u32c(dv));
            let feature = |n: usize, c: u32| t.clone() * u32c(2) + u32c(8 * n as u32 + c);
            let store_sums = |cx: &mut KernelCtx, scale: &dyn Fn(Expr) -> Expr| {
                for (n, acc) in o_accs.iter().enumerate() {
                    for c in 0..2 {
                        let sum = Expr::Var(acc[2 * r + c as usize]);
                        cx.kb.store(outp, base.clone() + feature(n, c), scale(sum));
                    }
                }
            };
            if let Some(sink) = &sink {
                let (m, l) = (Expr::Var(m_rows[r]), Expr::Var(l_rows[r]));
                let factor = sink_factor(&mut cx, sink.clone(), m, l);
                store_sums(&mut cx, &|sum| sum * factor.clone());
            } else {
                cx.kb.begin_if(eq(Expr::Var(m_rows[r]), neg_inf()));
                let bht_row = [b.clone(), h.clone(), tok.clone()];
                // A rare row: its features in a loop, not unrolled as the sums' stores are.
                let n = cx.kb.begin_for(u32c(0), u32c(dv / 8), u32c(1));
                for c in 0..2 {
                    let f = cx
                        .kb
                        .let_(Ty::U32, n.clone() * u32c(8) + t.clone() * u32c(2) + u32c(c));
                    let mean =
                        self.mean_of_values(&mut cx, a, &bht_row, f.clone(), s_len as usize)?;
                    cx.kb.store(outp, base.clone() + f, mean);
                }
                cx.kb.end();
                cx.kb.otherwise();
                let l = Expr::Var(l_rows[r]);
                store_sums(&mut cx, &|sum| sum / l.clone());
                cx.kb.end();
            }
            cx.kb.end();
        }
        cx.kb.end();
        let grid = self.groups_for(bsz as u32 * heads as u32 * q_tiles, 1);
        self.push_kernel(cx, grid)?;
        Ok(true)
    }
}

/// Where a tile is staged from: the workgroup's batch and head, the tile's first position, the
/// cache length, the workgroup's threads.
struct Staging<'e> {
    b: &'e Expr,
    h: &'e Expr,
    s0: &'e Expr,
    s_len: u32,
    threads: u32,
}

impl Lowering<'_> {
    /// Whether `v` is read through a gather (a paged cache's blocks, by its block table),
    /// past views and casts.
    fn read_through_gather(&self, mut v: poot_graph_ir::ValueId) -> bool {
        use poot_graph_ir::OpKind;
        while let Some(e) = self.cls.producer[v.index()].map(|p| &self.g.eqns()[p]) {
            match e.op {
                OpKind::Gather { .. } => return true,
                OpKind::Reshape { .. }
                | OpKind::Transpose { .. }
                | OpKind::Cast { .. }
                | OpKind::Broadcast { .. } => v = e.inputs[0],
                _ => return false,
            }
        }
        false
    }

    /// Stages the tile's `width` features of `v` for each of its [`TILE`] positions into `arr`,
    /// rows `stride` apart (positions past the cache clamped to its last): each thread issues
    /// [`LOADS_IN_FLIGHT`] loads before storing any, so a tile costs a few memory latencies, not
    /// one per element. With `seen` (the warps' words of positions some row sees), a position
    /// no row sees is staged as zero.
    fn stage_tile(
        &mut self,
        cx: &mut KernelCtx,
        at: &Staging<'_>,
        (v, width): (poot_graph_ir::ValueId, u32),
        (arr, stride): (poot_kernel::SharedId, u32),
        seen: Option<(poot_kernel::SharedId, u32)>,
    ) -> Result<(), PlanError> {
        let total = TILE * width;
        let per_thread = total.div_ceil(at.threads);
        let run = per_thread.min(LOADS_IN_FLIGHT);
        // A paged cache's position is read through its block table: each thread then takes a
        // run of one position's features, so the table is read and checked once per run, not
        // once per element. Elsewhere consecutive threads take consecutive features (each load
        // of a warp is one contiguous span).
        let runs_of_a_row = self.target.tuning.paged_row_runs
            && self.read_through_gather(v)
            && width.is_multiple_of(run)
            && total.is_multiple_of(run);
        let base = cx.kb.begin_for(u32c(0), u32c(per_thread), u32c(run));
        let mut loaded = Vec::with_capacity(run as usize);
        let row_run = runs_of_a_row.then(|| {
            let slot = cx.kb.let_(
                Ty::U32,
                base.clone() / u32c(run) * u32c(at.threads) + local_id(),
            );
            let first = cx
                .kb
                .let_(Ty::U32, min(slot.clone() * u32c(run), u32c(total - run)));
            let inside = cx.kb.let_(Ty::Bool, lt(slot * u32c(run), u32c(total)));
            let r = cx.kb.let_(Ty::U32, first.clone() / u32c(width));
            let d0 = cx.kb.let_(Ty::U32, first % u32c(width));
            (inside, r, d0)
        });
        for u in 0..run {
            let (inside, r, d) = match &row_run {
                Some((inside, r, d0)) => {
                    let d = cx.kb.let_(Ty::U32, d0.clone() + u32c(u));
                    (inside.clone(), r.clone(), d)
                }
                None => {
                    let e = cx.kb.let_(
                        Ty::U32,
                        (base.clone() + u32c(u)) * u32c(at.threads) + local_id(),
                    );
                    let inside = cx.kb.let_(Ty::Bool, lt(e.clone(), u32c(total)));
                    let e = min(e, u32c(total - 1));
                    let r = cx.kb.let_(Ty::U32, e.clone() / u32c(width));
                    let d = cx.kb.let_(Ty::U32, e % u32c(width));
                    (inside, r, d)
                }
            };
            let s = min(at.s0.clone() + r.clone(), u32c(at.s_len - 1));
            let x = self.value_at(cx, v, &[at.b.clone(), at.h.clone(), s, d.clone()])?;
            let x = cx.kb.let_(Ty::F32, x);
            loaded.push((inside, r, d, x));
        }
        for (inside, r, d, x) in loaded {
            let x = match seen {
                Some((seen_sh, warps)) => {
                    // Position r is bit 2 (r / 8) + r % 2 of word (r % 8) / 2 of each warp.
                    let word = (r.clone() % u32c(8)) / u32c(2);
                    let bit = (r.clone() / u32c(8)) * u32c(2) + r.clone() % u32c(2);
                    let seen_by = (0..warps)
                        .map(|w| load_shared(seen_sh, u32c(4 * w) + word.clone()))
                        .reduce(|x, y| bin(BinOp::Or, x, y))
                        .expect("a warp");
                    let seen = cmp(
                        CmpOp::Ne,
                        bin(BinOp::And, bin(BinOp::Shr, seen_by, bit), u32c(1)),
                        u32c(0),
                    );
                    select(seen, x, Expr::F32(0.0))
                }
                None => x,
            };
            cx.kb.begin_if(inside);
            cx.kb.store_shared(arr, r * u32c(stride) + d, x);
            cx.kb.end();
        }
        cx.kb.end();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::shared_words;

    #[test]
    fn four_warps_of_128_wide_heads_fit_cuda_static_shared_memory() {
        assert!(4 * shared_words(128, 128, 4) <= 48 << 10);
        assert!(4 * shared_words(64, 64, 4) <= 48 << 10);
    }
}
