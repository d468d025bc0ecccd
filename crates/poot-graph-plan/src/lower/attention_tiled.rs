//! Attention over many query rows (a prefill chunk, an encoder batch) a tile of [`QUERIES`]
//! queries of one head per workgroup, so each key and value read from memory serves all of
//! them (the one-row kernel of [`attention`](super::attention) reads every key once per query).
//!
//! The workgroup stages its queries once, then walks the cache positions a tile of `st` (32, or
//! 16 where shared memory is small) at a time:
//! 1. each of [`LANES`] threads per query tests its positions' visibility (the mask); a tile no
//!    query sees is skipped whole (nothing staged, nothing added);
//! 2. the tile's keys and values are staged in shared memory;
//! 3. each thread forms its positions' scores (the dot product in the oracle's order, then the
//!    logit chain), and the row's lanes agree on the tile's maximum and sum through shared
//!    memory (an online softmax: what was summed before is rescaled);
//! 4. each thread adds the weighted values into the outputs it owns.
//!
//! It reassociates exactly what the one-row kernel does (the softmax sum and the weighted sum
//! of values are formed per tile with running rescaling and divided once at the end); a
//! masked position contributes exactly zero, and a row with no visible position is the mean of
//! the values, as in the oracle. A softmax sink enters at each row's output (see
//! [`attention`](super::attention)). It is used where the query is computed element by element (a
//! rotary embedding, not a norm: a row reduction per query would have to be formed per tile row).

use super::access::unflatten;
use super::attention::{Attention, and, exp, neg_inf, rescale, sink_factor};
use super::context::KernelCtx;
use super::{Lowering, PlanError};
use poot_kernel::build::{
    bin, cmp, eq, load_shared, local_id, lt, max, min, mul_add, select, u32c,
};
use poot_kernel::{BinOp, CmpOp, Expr, SharedId, Ty, Var, Word};

/// Query rows a workgroup computes.
const QUERIES: u32 = 16;
const THREADS: u32 = 256;
/// Threads per query row while scoring.
const LANES: u32 = THREADS / QUERIES;

/// The positions a tile stages, the largest of 32 and 16 whose arrays fit `shared_bytes`
/// (query and key rows padded by one word, so a warp's rows fall in different banks).
fn tile_positions(dqk: u32, dv: u32, shared_bytes: u32) -> Option<u32> {
    [32, 16].into_iter().find(|&st| {
        let words = QUERIES * (dqk + 1) + st * (dqk + 1) + st * dv + QUERIES * st + THREADS;
        4 * (words + 3 * QUERIES) <= shared_bytes
    })
}

/// The shared arrays of the kernel.
struct Arrays {
    q: SharedId,
    k: SharedId,
    v: SharedId,
    p: SharedId,
    red: SharedId,
    /// Per query row: the tile's rescaling factor, then the final sum, then the final maximum.
    rows: SharedId,
}

impl Lowering<'_> {
    /// Plans `a` as tiles of queries; `false` (nothing planned) when the kernel does not apply:
    /// fewer tokens than a tile, a query that reads a row reduction, a value head that does not
    /// divide the workgroup (or is under 16 wide), or too little shared memory.
    pub(super) fn emit_attention_tiled(&mut self, a: &Attention) -> Result<bool, PlanError> {
        let od = self.g.values()[a.out.index()].ty.dims().to_vec();
        let (bsz, heads, tokens, dv) = (od[0], od[1], od[2] as u32, od[3] as u32);
        let s_len = self.g.values()[a.scores.index()].ty.dims()[3] as u32;
        let dqk = self.g.values()[a.q.index()].ty.dims()[3] as u32;
        let limits = &self.target.limits;
        let st = match tile_positions(dqk, dv, limits.max_shared_bytes) {
            Some(st) => st,
            None => return Ok(false),
        };
        if !self.target.tuning.attention_tiles
            || tokens < QUERIES
            || s_len == 0
            || dv * QUERIES < THREADS
            || self.cls.reads_row_reduce[a.q.index()]
            || !THREADS.is_multiple_of(dv)
            || THREADS > limits.max_workgroup_threads
        {
            return Ok(false);
        }
        let out = self.scratch_for(a.out)?;
        let mut cx = KernelCtx::labelled("attention_tiled", self.label(a.out), THREADS);
        let outp = cx.param(out, Word::F32, true);
        let sh = Arrays {
            q: cx.kb.shared("q", Ty::F32, QUERIES * (dqk + 1)),
            k: cx.kb.shared("k", Ty::F32, st * (dqk + 1)),
            v: cx.kb.shared("v", Ty::F32, st * dv),
            p: cx.kb.shared("p", Ty::F32, QUERIES * st),
            red: cx.kb.shared("red", Ty::F32, THREADS),
            rows: cx.kb.shared("rows", Ty::F32, 3 * QUERIES),
        };
        let t_tiles = tokens.div_ceil(QUERIES);
        let item = Self::begin_rows(&mut cx, bsz as u32 * heads as u32 * t_tiles);
        let bht = unflatten(&mut cx, item, &[bsz, heads, t_tiles as usize]);
        let (b, h) = (bht[0].clone(), bht[1].clone());
        let t0 = cx.kb.let_(Ty::U32, bht[2].clone() * u32c(QUERIES));

        // The queries, row `r` at `r * (dqk + 1)`; rows past the tokens are zero.
        let e = cx
            .kb
            .begin_for(local_id(), u32c(QUERIES * dqk), u32c(THREADS));
        let r = cx.kb.let_(Ty::U32, e.clone() / u32c(dqk));
        let d = cx.kb.let_(Ty::U32, e % u32c(dqk));
        let t = cx.kb.let_(Ty::U32, t0.clone() + r.clone());
        let slot = r * u32c(dqk + 1) + d.clone();
        cx.kb.begin_if(lt(t.clone(), u32c(tokens)));
        let qv = self.value_at(&mut cx, a.q, &[b.clone(), h.clone(), t, d])?;
        cx.kb.store_shared(sh.q, slot.clone(), qv);
        cx.kb.otherwise();
        cx.kb.store_shared(sh.q, slot, Expr::F32(0.0));
        cx.kb.end();
        cx.kb.end();
        cx.kb.barrier();

        // This thread's query row while scoring, and its token (clamped, for index reads).
        let qi = cx.kb.let_(Ty::U32, local_id() / u32c(LANES));
        let lane = cx.kb.let_(Ty::U32, local_id() % u32c(LANES));
        let t_me = cx.kb.let_(Ty::U32, t0.clone() + qi.clone());
        let row_in = cx.kb.let_(Ty::Bool, lt(t_me.clone(), u32c(tokens)));
        let t_c = cx.kb.let_(Ty::U32, min(t_me, u32c(tokens - 1)));
        let m_row = cx.kb.var(Ty::F32, neg_inf());
        let l_row = cx.kb.var(Ty::F32, Expr::F32(0.0));
        // The outputs this thread owns: feature `oj` of rows `oq + j * (THREADS / dv)`.
        let per_thread = QUERIES * dv / THREADS;
        let oj = cx.kb.let_(Ty::U32, local_id() % u32c(dv));
        let oq = cx.kb.let_(Ty::U32, local_id() / u32c(dv));
        let accs: Vec<Var> = (0..per_thread)
            .map(|_| cx.kb.var(Ty::F32, Expr::F32(0.0)))
            .collect();

        let s0 = cx.kb.begin_for(u32c(0), u32c(s_len), u32c(st));
        let mine = st / LANES;
        let mut pos = Vec::with_capacity(mine as usize);
        for j in 0..mine {
            let si = cx.kb.let_(Ty::U32, lane.clone() + u32c(LANES * j));
            let s = cx.kb.let_(Ty::U32, s0.clone() + si.clone());
            let s_c = cx.kb.let_(Ty::U32, min(s.clone(), u32c(s_len - 1)));
            let inside = and(row_in.clone(), lt(s, u32c(s_len)));
            let vis = match a.mask {
                Some(mask) => {
                    let idx = [b.clone(), h.clone(), t_c.clone(), s_c.clone()];
                    and(inside, self.value_at(&mut cx, mask, &idx)?)
                }
                None => inside,
            };
            let vis = cx.kb.let_(Ty::Bool, vis);
            pos.push((si, s_c, vis));
        }
        // Whether any query sees any position of the tile (a uniform branch below).
        let seen = pos
            .iter()
            .map(|(_, _, vis)| vis.clone())
            .reduce(|x, y| bin(BinOp::Or, x, y))
            .unwrap_or(Expr::Bool(false));
        cx.kb.store_shared(
            sh.red,
            local_id(),
            select(seen, Expr::F32(1.0), Expr::F32(0.0)),
        );
        self.tree_reduce(&mut cx, &[sh.red], &|x, y| {
            vec![max(x[0].clone(), y[0].clone())]
        });
        let any = cx.kb.let_(
            Ty::Bool,
            cmp(CmpOp::Ne, load_shared(sh.red, u32c(0)), Expr::F32(0.0)),
        );
        cx.kb.barrier();

        // The tile's keys and values (positions past the cache clamped to its last).
        cx.kb.begin_if(any.clone());
        for (arr, v, width, pad) in [(sh.k, a.k, dqk, 1), (sh.v, a.v, dv, 0)] {
            let e = cx.kb.begin_for(local_id(), u32c(st * width), u32c(THREADS));
            let r = cx.kb.let_(Ty::U32, e.clone() / u32c(width));
            let d = cx.kb.let_(Ty::U32, e % u32c(width));
            let s = min(s0.clone() + r.clone(), u32c(s_len - 1));
            let x = self.value_at(&mut cx, v, &[b.clone(), h.clone(), s, d.clone()])?;
            cx.kb.store_shared(arr, r * u32c(width + pad) + d, x);
            cx.kb.end();
        }
        cx.kb.end();
        cx.kb.barrier();

        // The scores of this thread's positions (-inf where not visible).
        let mut scores = Vec::with_capacity(pos.len());
        for (si, s_c, vis) in &pos {
            let score = cx.kb.var(Ty::F32, neg_inf());
            cx.kb.begin_if(vis.clone());
            let dot = cx.kb.var(Ty::F32, Expr::F32(0.0));
            let d = cx.kb.begin_for(u32c(0), u32c(dqk), u32c(1));
            let qv = load_shared(sh.q, qi.clone() * u32c(dqk + 1) + d.clone());
            let kv = load_shared(sh.k, si.clone() * u32c(dqk + 1) + d);
            cx.kb.set(dot, mul_add(qv, kv, Expr::Var(dot)));
            cx.kb.end();
            let sidx = [b.clone(), h.clone(), t_c.clone(), s_c.clone()];
            cx.set_known(a.scores, &sidx, Expr::Var(dot));
            let logit = self.compute(&mut cx, a.logits, &sidx)?;
            cx.kb.set(score, logit);
            cx.kb.end();
            scores.push(score);
        }
        // The row's maximum over the tile, from its lanes' maxima.
        let my_max = scores
            .iter()
            .map(|&s| Expr::Var(s))
            .reduce(max)
            .unwrap_or(neg_inf());
        cx.kb.store_shared(sh.red, local_id(), my_max);
        cx.kb.barrier();
        let first = cx.kb.let_(Ty::U32, qi.clone() * u32c(LANES));
        let tile_max = Self::row_fold(&mut cx, sh.red, &first, neg_inf(), &max);
        let m_new = cx.kb.let_(Ty::F32, max(Expr::Var(m_row), tile_max));
        let (live, alpha) = rescale(&mut cx, m_row, &m_new);
        let mut my_sum = Expr::F32(0.0);
        for ((si, _, vis), &score) in pos.iter().zip(&scores) {
            let p = cx.kb.let_(
                Ty::F32,
                select(
                    and(live.clone(), vis.clone()),
                    exp(Expr::Var(score) - m_new.clone()),
                    Expr::F32(0.0),
                ),
            );
            cx.kb
                .store_shared(sh.p, qi.clone() * u32c(st) + si.clone(), p.clone());
            my_sum = my_sum + p;
        }
        // Every lane has read the maxima before the sums replace them.
        cx.kb.barrier();
        cx.kb.store_shared(sh.red, local_id(), my_sum);
        cx.kb.barrier();
        let tile_sum = Self::row_fold(&mut cx, sh.red, &first, Expr::F32(0.0), &|x, y| x + y);
        cx.kb
            .set(l_row, Expr::Var(l_row) * alpha.clone() + tile_sum);
        cx.kb.set(m_row, m_new);
        cx.kb.begin_if(eq(lane.clone(), u32c(0)));
        cx.kb.store_shared(sh.rows, qi.clone(), alpha);
        cx.kb.end();
        cx.kb.barrier();

        // The weighted values into this thread's outputs; a zero weight leaves a sum as it is,
        // whatever the value's row holds.
        cx.kb.begin_if(any);
        for (j, &acc) in accs.iter().enumerate() {
            let q = cx
                .kb
                .let_(Ty::U32, oq.clone() + u32c(j as u32 * (THREADS / dv)));
            let scale = load_shared(sh.rows, q.clone());
            cx.kb.set(acc, Expr::Var(acc) * scale);
            let si = cx.kb.begin_for(u32c(0), u32c(st), u32c(1));
            let p = cx
                .kb
                .let_(Ty::F32, load_shared(sh.p, q * u32c(st) + si.clone()));
            let vv = load_shared(sh.v, si * u32c(dv) + oj.clone());
            let sum = mul_add(p.clone(), vv, Expr::Var(acc));
            cx.kb.set(
                acc,
                select(cmp(CmpOp::Ne, p, Expr::F32(0.0)), sum, Expr::Var(acc)),
            );
            cx.kb.end();
        }
        cx.kb.end();
        // Every thread is done with the tile before the next one is staged.
        cx.kb.barrier();
        cx.kb.end();

        // Each row's sum and maximum, then the outputs.
        cx.kb.begin_if(eq(lane, u32c(0)));
        cx.kb
            .store_shared(sh.rows, u32c(QUERIES) + qi.clone(), Expr::Var(l_row));
        cx.kb
            .store_shared(sh.rows, u32c(2 * QUERIES) + qi, Expr::Var(m_row));
        cx.kb.end();
        cx.kb.barrier();
        let sink = self.sink_logit(&mut cx, a, &h)?;
        for (j, &acc) in accs.iter().enumerate() {
            let q = cx
                .kb
                .let_(Ty::U32, oq.clone() + u32c(j as u32 * (THREADS / dv)));
            let t = cx.kb.let_(Ty::U32, t0.clone() + q.clone());
            cx.kb.begin_if(lt(t.clone(), u32c(tokens)));
            let row = (b.clone() * u32c(heads as u32) + h.clone()) * u32c(tokens) + t.clone();
            let o = cx.kb.let_(Ty::U32, row * u32c(dv) + oj.clone());
            let m = load_shared(sh.rows, u32c(2 * QUERIES) + q.clone());
            let l = load_shared(sh.rows, u32c(QUERIES) + q);
            if let Some(sink) = &sink {
                let factor = sink_factor(&mut cx, sink.clone(), m, l);
                cx.kb.store(outp, o, Expr::Var(acc) * factor);
            } else {
                cx.kb.begin_if(eq(m, neg_inf()));
                let bht = [b.clone(), h.clone(), t];
                let mean = self.mean_of_values(&mut cx, a, &bht, oj.clone(), s_len as usize)?;
                cx.kb.store(outp, o.clone(), mean);
                cx.kb.otherwise();
                cx.kb.store(outp, o, Expr::Var(acc) / l);
                cx.kb.end();
            }
            cx.kb.end();
        }
        // The shared arrays are rewritten for the next tile of queries only after every read.
        cx.kb.barrier();
        cx.kb.end();
        let grid = self.groups_for(bsz as u32 * heads as u32 * t_tiles, 1);
        self.push_kernel(cx, grid)?;
        Ok(true)
    }

    /// `init` folded with the [`LANES`] entries of `arr` from `first` on, in order.
    fn row_fold(
        cx: &mut KernelCtx,
        arr: SharedId,
        first: &Expr,
        init: Expr,
        op: &dyn Fn(Expr, Expr) -> Expr,
    ) -> Expr {
        let acc = cx.kb.var(Ty::F32, init);
        let i = cx.kb.begin_for(u32c(0), u32c(LANES), u32c(1));
        cx.kb
            .set(acc, op(Expr::Var(acc), load_shared(arr, first.clone() + i)));
        cx.kb.end();
        Expr::Var(acc)
    }
}

#[cfg(test)]
mod tests {
    use super::tile_positions;

    #[test]
    fn tiles_shrink_to_fit_shared_memory() {
        // 64-wide heads: 32 positions fit CUDA's 48 KB and lavapipe's 32 KB.
        assert_eq!(tile_positions(64, 64, 48 << 10), Some(32));
        assert_eq!(tile_positions(64, 64, 32 << 10), Some(32));
        // 128-wide heads: 32 positions on CUDA, 16 in 32 KB.
        assert_eq!(tile_positions(128, 128, 48 << 10), Some(32));
        assert_eq!(tile_positions(128, 128, 32 << 10), Some(16));
        // 256-wide heads fit neither: the one-query kernel runs.
        assert_eq!(tile_positions(256, 256, 48 << 10), None);
    }
}
