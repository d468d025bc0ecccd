//! Decode-shaped attention (flash decoding by teams of lanes), for the recognised attentions
//! of [`attention`](super::attention) with few rows (batch x heads x tokens): a decode step's
//! rows cannot fill a large GPU one workgroup each, and the prefill kernel's shape (one thread
//! per position computing a whole dot product alone, a barrier-separated tree per tile) leaves
//! each of those workgroups waiting on one dependent phase after another.
//!
//! - Each row's positions are cut into blocks of `teams * per_team` positions, and the blocks
//!   dealt round robin to `parts` partitions (partition `p` walks blocks `p`, `p + parts`, ..),
//!   so a causal mask's visible prefix is shared evenly whatever the cache's capacity. There is
//!   one workgroup per (row, partition), at least two per multiprocessor where the rows allow,
//!   and enough that none walks more than [`MAX_STEPS`] blocks (a masked block costs its mask
//!   test).
//! - A workgroup is `teams` teams of `lanes` threads (one warp where the target shuffles). In
//!   each step a team takes `per_team` positions of the block (`team`, `team + teams`, ..); for
//!   each, lane `l` holds features `l`, `l + lanes`, .. of the query (staged once, its rotary
//!   embedding and norm computed there, as the prefill kernel does), of the key and of the
//!   value, so the team's loads of one feature are contiguous. Every key and value load of
//!   the step is issued before any product, and a masked position issues none.
//! - The lanes' products meet in the score by subgroup shuffles (every lane gets it), or where
//!   the target has none through shared memory between two barriers. The logits chain and the
//!   mask are applied as the graph computes them, and each team keeps an online softmax in
//!   registers: its running maximum, its sum, and each lane's share of the weighted values,
//!   rescaled when the maximum grows. A step where nothing is visible is skipped whole where
//!   the team is one warp (the shuffles need no barrier); elsewhere it runs with zero weights.
//! - The teams' `(max, sum, values)` meet in shared memory (one barrier); the row's output is
//!   divided once, or the partition's record is written for
//!   [`emit_attention_combine`](Lowering::emit_attention_combine).
//!
//! Every team runs the same number of steps (positions past the end are guarded, not cut from
//! the loop), so barriers stay in uniform control flow.
//!
//! What it reassociates, against the oracle: each score's dot product is summed per lane
//! (features `lanes` apart), then across the team; the softmax sum and the weighted values are
//! formed per team with running rescaling over the team's positions (in block order, not
//! position order), then across teams, then across partitions, and divided once at the end
//! (the oracle divides each weight first). Masked positions contribute exactly zero whenever a
//! visible logit of the row exceeds `f32::MIN + 104`, and a row with no visible position is the
//! mean of the values, as in the prefill kernel.

use super::attention::{Attention, MAX_PARTITIONS, and, at_s, exp, neg_inf, rescale};
use super::context::KernelCtx;
use super::emit::pairwise;
use super::{Lowering, PlanError};
use poot_kernel::build::{cmp, eq, load_shared, local_id, lt, max, min, mul_add, select, u32c};
use poot_kernel::{BinOp, CmpOp, Expr, Ty, Var, Word};

/// Lanes of a team at most: one warp, the widest a subgroup shuffle sums.
const MAX_LANES: u32 = 32;
/// Teams per workgroup.
const TEAMS: u32 = 4;
/// Positions a team takes per step at most.
const MAX_PER_TEAM: u32 = 4;
/// Key and value words a lane loads per step at most (the loads in flight, held in registers).
const LOADS_PER_LANE: usize = 32;
/// Features of the query, key or value a lane holds at most; wider heads take the prefill
/// kernel.
const MAX_FEATURES_PER_LANE: usize = 16;
/// Workgroups a decode attention should launch at least, per multiprocessor.
const WORKGROUPS_PER_MULTIPROCESSOR: usize = 2;
/// Multiprocessors assumed where the target does not say (an H200's).
const DEFAULT_MULTIPROCESSORS: usize = 132;
/// Steps a partition walks at most: a long cache's masked blocks cost a mask test each, so a
/// cache far longer than the visible prefix is cut into more partitions rather than walked
/// by a few workgroups.
const MAX_STEPS: usize = 32;

/// How one decode attention's work is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct DecodeLayout {
    /// Threads of a team (a power of two, at most one warp).
    lanes: u32,
    teams: u32,
    /// Positions each team takes per step.
    per_team: u32,
    /// Query and key features per lane.
    qk_per_lane: usize,
    /// Value features per lane.
    v_per_lane: usize,
    /// Blocks of `teams * per_team` positions per row.
    blocks: usize,
    /// Partitions of each row's blocks.
    parts: usize,
}

impl DecodeLayout {
    /// The layout for `rows` rows over `positions` cache positions with query/key features
    /// `dqk` and value features `dv` on a device of `multiprocessors`; `None` when a head is
    /// too wide for a lane's registers.
    pub(super) fn new(
        rows: usize,
        positions: usize,
        dqk: usize,
        dv: usize,
        multiprocessors: Option<u32>,
    ) -> Option<DecodeLayout> {
        let widest = dqk.max(dv).max(1);
        let lanes = (widest.next_power_of_two() as u32).min(MAX_LANES);
        let qk_per_lane = dqk.div_ceil(lanes as usize);
        let v_per_lane = dv.div_ceil(lanes as usize);
        if qk_per_lane.max(v_per_lane) > MAX_FEATURES_PER_LANE {
            return None;
        }
        let fit = (LOADS_PER_LANE / (qk_per_lane + v_per_lane).max(1)).max(1) as u32;
        let per_team = 1 << fit.min(MAX_PER_TEAM).ilog2();
        let blocks = positions.div_ceil((TEAMS * per_team) as usize).max(1);
        let sms = multiprocessors.map_or(DEFAULT_MULTIPROCESSORS, |n| n as usize);
        let wanted = (WORKGROUPS_PER_MULTIPROCESSOR * sms).div_ceil(rows.max(1));
        let parts = wanted
            .max(blocks.div_ceil(MAX_STEPS))
            .clamp(1, MAX_PARTITIONS)
            .min(blocks);
        Some(DecodeLayout {
            lanes,
            teams: TEAMS,
            per_team,
            qk_per_lane,
            v_per_lane,
            blocks,
            parts,
        })
    }

    /// Positions of one block (one step of the whole workgroup).
    fn block_positions(&self) -> u32 {
        self.teams * self.per_team
    }
}

/// Feature `f`'s index for lane `lane` (`lane + f * lanes`), and whether it may fall past
/// `len` (only the lanes of a head's last, partial stripe need the test).
fn feature(lane: &Expr, f: usize, lanes: u32, len: usize) -> (Expr, Option<Expr>) {
    let first = f as u32 * lanes;
    let d = lane.clone() + u32c(first);
    let partial = first + lanes > len as u32;
    (
        d,
        partial.then(|| lt(lane.clone(), u32c(len as u32 - first))),
    )
}

fn any(conds: &[Expr]) -> Expr {
    conds
        .iter()
        .cloned()
        .reduce(|a, b| poot_kernel::build::bin(BinOp::Or, a, b))
        .unwrap_or(Expr::Bool(false))
}

impl Lowering<'_> {
    /// The kernels computing recognised attention `a` laid out as `layout`: the partition
    /// kernel, and the combine where there are several partitions.
    pub(super) fn emit_attention_decode(
        &mut self,
        a: &Attention,
        layout: DecodeLayout,
    ) -> Result<(), PlanError> {
        let dv = self.g.values()[a.out.index()].ty.dims()[3];
        let s_len = self.g.values()[a.scores.index()].ty.dims()[3];
        let dqk = self.g.values()[a.q.index()].ty.dims()[3];
        let DecodeLayout {
            lanes,
            teams,
            per_team,
            qk_per_lane,
            v_per_lane,
            blocks,
            parts,
        } = layout;
        let wg = lanes * teams;
        let steps = blocks.div_ceil(parts);
        let block_positions = layout.block_positions();
        let (out, target) = self.attention_targets(a, parts)?;
        let shuffles = self.target.team_shuffles();
        // A team of one whole warp may skip a step its lanes agree is all masked: its shuffles
        // need no other warp.
        let skip_masked = shuffles && lanes == self.target.limits.subgroup_size;
        let mut cx = KernelCtx::labelled("attention_decode", self.label(a.out), wg);
        let outp = cx.param(target, Word::F32, true);
        let q_sh = cx.kb.shared("q", Ty::F32, dqk as u32);
        let sums_sh = (!shuffles).then(|| cx.kb.shared("sums", Ty::F32, teams * per_team * lanes));
        let m_sh = cx.kb.shared("team_max", Ty::F32, teams);
        let l_sh = cx.kb.shared("team_sum", Ty::F32, teams);
        let acc_sh = cx.kb.shared("team_values", Ty::F32, teams * dv as u32);
        let lane = cx.kb.let_(Ty::U32, local_id() & u32c(lanes - 1));
        let team = cx
            .kb
            .let_(Ty::U32, local_id() >> u32c(lanes.trailing_zeros()));
        let it = self.begin_attention_item(&mut cx, a, parts, q_sh)?;
        let (item, row, part, bht) = (it.item.clone(), it.row.clone(), it.part.clone(), &it.bht);
        let at = |x: Expr| it.at(x);
        let qs: Vec<Expr> = (0..qk_per_lane)
            .map(|f| {
                let (d, partial) = feature(&lane, f, lanes, dqk);
                let value = match partial {
                    None => load_shared(q_sh, d),
                    Some(inside) => select(
                        inside,
                        load_shared(q_sh, min(d, u32c(dqk as u32 - 1))),
                        Expr::F32(0.0),
                    ),
                };
                cx.kb.let_(Ty::F32, value)
            })
            .collect();
        let m = cx.kb.var(Ty::F32, neg_inf());
        let l = cx.kb.var(Ty::F32, Expr::F32(0.0));
        let accs: Vec<Var> = (0..v_per_lane)
            .map(|_| cx.kb.var(Ty::F32, Expr::F32(0.0)))
            .collect();

        let step = cx.kb.begin_for(u32c(0), u32c(steps as u32), u32c(1));
        let block = cx
            .kb
            .let_(Ty::U32, part.clone() + step * u32c(parts as u32));
        let first = cx
            .kb
            .let_(Ty::U32, block * u32c(block_positions) + team.clone());
        let mut positions = Vec::with_capacity(per_team as usize);
        for j in 0..per_team {
            let s = cx.kb.let_(Ty::U32, first.clone() + u32c(j * teams));
            let inside = lt(s.clone(), u32c(s_len as u32));
            let vis = self.visible(&mut cx, a, &it, s.clone(), inside)?;
            positions.push((s, vis));
        }
        let visible: Vec<Expr> = positions.iter().map(|(_, v)| v.clone()).collect();
        if skip_masked {
            cx.kb.begin_if(any(&visible));
        }
        // Every key and value word of the step first (none for a masked position), then the
        // products.
        let mut keys = Vec::with_capacity(positions.len());
        let mut values = Vec::with_capacity(positions.len());
        for (s, vis) in &positions {
            let k: Vec<Var> = (0..qk_per_lane)
                .map(|_| cx.kb.var(Ty::F32, Expr::F32(0.0)))
                .collect();
            let v: Vec<Var> = (0..v_per_lane)
                .map(|_| cx.kb.var(Ty::F32, Expr::F32(0.0)))
                .collect();
            cx.kb.begin_if(vis.clone());
            for (words, of, len) in [(&k, a.k, dqk), (&v, a.v, dv)] {
                for (f, &w) in words.iter().enumerate() {
                    let (d, partial) = feature(&lane, f, lanes, len);
                    if let Some(inside) = &partial {
                        cx.kb.begin_if(inside.clone());
                    }
                    let x = self.value_at(&mut cx, of, &at_s(bht, s.clone(), d))?;
                    cx.kb.set(w, x);
                    if partial.is_some() {
                        cx.kb.end();
                    }
                }
            }
            cx.kb.end();
            keys.push(k);
            values.push(v);
        }
        let dots: Vec<Var> = keys
            .iter()
            .map(|k| {
                let dot = qs.iter().zip(k).fold(Expr::F32(0.0), |acc, (q, &kv)| {
                    mul_add(q.clone(), Expr::Var(kv), acc)
                });
                cx.kb.var(Ty::F32, dot)
            })
            .collect();
        match sums_sh {
            None => {
                for &dot in &dots {
                    cx.kb.team_sum(dot, lanes);
                }
            }
            Some(sums) => {
                // Each lane adds its team's partials in the same order, so every lane of a
                // team holds the same score.
                let base = cx.kb.let_(Ty::U32, team.clone() * u32c(per_team * lanes));
                for (j, &dot) in dots.iter().enumerate() {
                    let at_lane = base.clone() + u32c(j as u32 * lanes) + lane.clone();
                    cx.kb.store_shared(sums, at_lane, Expr::Var(dot));
                }
                cx.kb.barrier();
                for (j, &dot) in dots.iter().enumerate() {
                    let terms = (0..lanes)
                        .map(|i| load_shared(sums, base.clone() + u32c(j as u32 * lanes + i)))
                        .collect();
                    cx.kb.set(dot, pairwise(terms));
                }
                // Read before the next step writes.
                cx.kb.barrier();
            }
        }
        let mut scores = Vec::with_capacity(positions.len());
        for ((s, vis), &dot) in positions.iter().zip(&dots) {
            let score = cx.kb.var(Ty::F32, neg_inf());
            cx.kb.begin_if(vis.clone());
            let sidx = at(s.clone());
            cx.set_known(a.scores, &sidx, Expr::Var(dot));
            let logit = self.compute(&mut cx, a.logits, &sidx)?;
            cx.kb.set(score, logit);
            cx.kb.end();
            scores.push(Expr::Var(score));
        }
        let step_max = scores.iter().cloned().reduce(max).unwrap_or_else(neg_inf);
        let m_new = cx.kb.let_(Ty::F32, max(Expr::Var(m), step_max));
        // While nothing is visible the step adds nothing.
        let (live, alpha) = rescale(&mut cx, m, &m_new);
        let weights: Vec<Expr> = scores
            .into_iter()
            .zip(&visible)
            .map(|(score, vis)| {
                let p = select(
                    and(live.clone(), vis.clone()),
                    exp(score - m_new.clone()),
                    Expr::F32(0.0),
                );
                cx.kb.let_(Ty::F32, p)
            })
            .collect();
        let total = weights
            .iter()
            .fold(Expr::Var(l) * alpha.clone(), |acc, p| acc + p.clone());
        cx.kb.set(l, total);
        // A masked position's value words stay zero and its weight is zero: the sum is kept.
        for (f, &acc) in accs.iter().enumerate() {
            let sum = weights
                .iter()
                .zip(&values)
                .fold(Expr::Var(acc) * alpha.clone(), |sum, (p, v)| {
                    mul_add(p.clone(), Expr::Var(v[f]), sum)
                });
            cx.kb.set(acc, sum);
        }
        cx.kb.set(m, m_new);
        if skip_masked {
            cx.kb.end();
        }
        cx.kb.end();

        // The teams meet: each team's maximum, sum and values in shared memory, weighed by
        // every thread against the workgroup's maximum.
        cx.kb.begin_if(eq(lane.clone(), u32c(0)));
        cx.kb.store_shared(m_sh, team.clone(), Expr::Var(m));
        cx.kb.store_shared(l_sh, team.clone(), Expr::Var(l));
        cx.kb.end();
        for (f, &acc) in accs.iter().enumerate() {
            let (d, partial) = feature(&lane, f, lanes, dv);
            if let Some(inside) = &partial {
                cx.kb.begin_if(inside.clone());
            }
            let at_acc = team.clone() * u32c(dv as u32) + d;
            cx.kb.store_shared(acc_sh, at_acc, Expr::Var(acc));
            if partial.is_some() {
                cx.kb.end();
            }
        }
        cx.kb.barrier();
        let big_m = (0..teams)
            .map(|t| load_shared(m_sh, u32c(t)))
            .reduce(max)
            .unwrap_or_else(neg_inf);
        let big_m = cx.kb.let_(Ty::F32, big_m);
        let seen = cx
            .kb
            .let_(Ty::Bool, cmp(CmpOp::Ne, big_m.clone(), neg_inf()));
        let team_w: Vec<Expr> = (0..teams)
            .map(|t| {
                let w = select(
                    seen.clone(),
                    exp(load_shared(m_sh, u32c(t)) - big_m.clone()),
                    Expr::F32(0.0),
                );
                cx.kb.let_(Ty::F32, w)
            })
            .collect();
        let big_l = team_w
            .iter()
            .enumerate()
            .map(|(t, w)| load_shared(l_sh, u32c(t as u32)) * w.clone())
            .reduce(|a, b| a + b)
            .unwrap_or(Expr::F32(0.0));
        let big_l = cx.kb.let_(Ty::F32, big_l);
        let record = (parts > 1).then(|| cx.kb.let_(Ty::U32, item * u32c((dv + 2) as u32)));
        let dj = cx.kb.begin_for(local_id(), u32c(dv as u32), u32c(wg));
        let weighted = team_w
            .iter()
            .enumerate()
            .map(|(t, w)| load_shared(acc_sh, u32c(t as u32 * dv as u32) + dj.clone()) * w.clone())
            .reduce(|a, b| a + b)
            .unwrap_or(Expr::F32(0.0));
        let weighted = cx.kb.let_(Ty::F32, weighted);
        self.store_item_feature(
            &mut cx,
            a,
            outp,
            record.as_ref(),
            (&row, bht),
            dj,
            (weighted, big_l.clone(), seen),
        )?;
        cx.kb.end();
        if let Some(record) = record {
            cx.kb.begin_if(eq(local_id(), u32c(0)));
            cx.kb.store(outp, record.clone(), big_m);
            cx.kb.store(outp, record + u32c(1), big_l);
            cx.kb.end();
        }
        self.finish_attention(cx, a, parts, target, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decode_step_fills_two_workgroups_per_multiprocessor() {
        // 32 heads of 64 features over 2048 positions: a warp per team, four positions per
        // team and step, nine partitions of 32-position blocks.
        let l = DecodeLayout::new(32, 2048, 64, 64, Some(132)).unwrap();
        assert_eq!(
            (l.lanes, l.per_team, l.qk_per_lane, l.v_per_lane),
            (32, 4, 2, 2)
        );
        assert_eq!((l.blocks, l.parts), (128, 9));
        assert!(32 * l.parts >= 2 * 132);
    }

    #[test]
    fn a_long_cache_is_cut_so_no_partition_walks_more_than_max_steps() {
        // 131072 positions in 8192 blocks of 16: 256 partitions of 32 steps.
        let l = DecodeLayout::new(32, 131_072, 128, 128, Some(132)).unwrap();
        assert_eq!((l.per_team, l.blocks, l.parts), (4, 8192, 256));
        // Past MAX_PARTITIONS the steps grow instead.
        let l = DecodeLayout::new(32, 1 << 20, 128, 128, Some(132)).unwrap();
        assert_eq!(l.parts, MAX_PARTITIONS);
    }

    #[test]
    fn wide_heads_take_fewer_positions_per_step_and_the_widest_none() {
        let l = DecodeLayout::new(8, 4096, 256, 256, None).unwrap();
        assert_eq!((l.lanes, l.per_team, l.qk_per_lane), (32, 2, 8));
        let l = DecodeLayout::new(8, 4096, 320, 320, None).unwrap();
        assert_eq!((l.per_team, l.qk_per_lane), (1, 10));
        assert_eq!(DecodeLayout::new(8, 4096, 1024, 1024, None), None);
    }

    #[test]
    fn short_caches_and_narrow_heads_keep_at_least_a_block_per_partition() {
        let l = DecodeLayout::new(6, 12, 16, 16, None).unwrap();
        assert_eq!((l.lanes, l.blocks, l.parts), (16, 1, 1));
        let l = DecodeLayout::new(6, 150, 6, 10, None).unwrap();
        assert_eq!((l.lanes, l.qk_per_lane, l.v_per_lane), (16, 1, 1));
        assert!(l.parts <= l.blocks);
    }
}
