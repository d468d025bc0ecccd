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
//!   divided once (a softmax sink entering there), or the partition's record is written for
//!   [`emit_attention_combine`](Lowering::emit_attention_combine), which applies the sink.
//!
//! - Where many rows decode together under grouped-query attention, one workgroup serves the
//!   query heads that share a key and value head (`decode_group`): each key and value word and
//!   each mask test of a step is loaded once for all of them, while each head keeps its own
//!   query, scores, softmax and sums (a lone decode step keeps a workgroup per head, so its
//!   kernel is unchanged).
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
//! mean of the values (0 with a sink), as in the prefill kernel.

use super::access::unflatten;
use super::attention::{Attention, Finish, Item, MAX_PARTITIONS, and, at_s, exp, neg_inf, rescale};
use super::context::KernelCtx;
use super::emit::pairwise;
use super::{Lowering, PlanError};
use poot_graph_ir::OpKind;
use poot_kernel::build::{cmp, eq, load_shared, local_id, lt, max, min, mul_add, select, u32c};
use poot_kernel::{BinOp, CmpOp, Expr, Ty, Var, Word};

/// Lanes of a team at most: one warp, the widest a subgroup shuffle sums.
const MAX_LANES: u32 = 32;
/// Teams per workgroup.
const TEAMS: u32 = 4;
/// Key and value words a lane loads per step at most (the loads in flight, held in registers).
const LOADS_PER_LANE: usize = 32;
/// Features of the query, key or value a lane holds at most; wider heads take the prefill
/// kernel.
const MAX_FEATURES_PER_LANE: usize = 16;
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
    /// `dqk` and value features `dv` on a device of `multiprocessors`, launching at least
    /// `per_multiprocessor` workgroups on each, each team taking at most `max_per_team`
    /// positions a step; `None` when a head is too wide for a lane's registers.
    pub(super) fn new(
        rows: usize,
        positions: usize,
        (dqk, dv): (usize, usize),
        multiprocessors: Option<u32>,
        per_multiprocessor: usize,
        max_per_team: u32,
    ) -> Option<DecodeLayout> {
        let widest = dqk.max(dv).max(1);
        let lanes = (widest.next_power_of_two() as u32).min(MAX_LANES);
        let qk_per_lane = dqk.div_ceil(lanes as usize);
        let v_per_lane = dv.div_ceil(lanes as usize);
        if qk_per_lane.max(v_per_lane) > MAX_FEATURES_PER_LANE {
            return None;
        }
        let fit = (LOADS_PER_LANE / (qk_per_lane + v_per_lane).max(1)).max(1) as u32;
        let per_team = 1 << fit.min(max_per_team.max(1)).ilog2();
        let blocks = positions.div_ceil((TEAMS * per_team) as usize).max(1);
        let sms = multiprocessors.map_or(DEFAULT_MULTIPROCESSORS, |n| n as usize);
        let wanted = (per_multiprocessor * sms).div_ceil(rows.max(1));
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

    /// Whether a lane's registers hold `group` heads' query features and sums (the features a
    /// lane holds for one head, at most [`MAX_FEATURES_PER_LANE`], times the heads).
    pub(super) fn fits_group(&self, group: usize) -> bool {
        group * self.qk_per_lane.max(self.v_per_lane) <= 2 * MAX_FEATURES_PER_LANE
    }

    /// Positions of one block (one step of the whole workgroup).
    fn block_positions(&self) -> u32 {
        self.teams * self.per_team
    }
}

/// Feature `f`'s index for lane `lane` (`lane + f * lanes`), and whether it may fall past
/// `len` (only the lanes of a head's last, partial stripe need the test). `paired` (keys and
/// values stored as f16 pairs, an even count of features per lane): lane `l` holds features
/// `2l` and `2l + 1` of each stripe of `2 * lanes`, both halves of one stored word.
fn feature(lane: &Expr, f: usize, lanes: u32, len: usize, paired: bool) -> (Expr, Option<Expr>) {
    if paired {
        let first = (f / 2) as u32 * 2 * lanes;
        let d = lane.clone() * u32c(2) + u32c(first + (f % 2) as u32);
        let partial = first + 2 * lanes > len as u32;
        return (d.clone(), partial.then(|| lt(d, u32c(len as u32))));
    }
    let first = f as u32 * lanes;
    let d = lane.clone() + u32c(first);
    let partial = first + lanes > len as u32;
    (
        d,
        partial.then(|| lt(lane.clone(), u32c(len as u32 - first))),
    )
}

/// `base + e`, or `e` itself where `base` is 0 (so a one-head kernel renders as before
/// grouping existed).
fn plus(base: u32, e: Expr) -> Expr {
    if base == 0 { e } else { u32c(base) + e }
}

fn any(conds: &[Expr]) -> Expr {
    conds
        .iter()
        .cloned()
        .reduce(|a, b| poot_kernel::build::bin(BinOp::Or, a, b))
        .unwrap_or(Expr::Bool(false))
}

impl Lowering<'_> {
    /// The query heads that share each key and value head of `a` (GQA's `n_rep`), where a
    /// workgroup may serve them together: keys and values read through `repeat_kv` (a reshape
    /// of a broadcast along a new axis of one), and a mask the same for every head (broadcast
    /// from one head). 1 where either does not hold.
    pub(super) fn shared_kv_heads(&self, a: &Attention) -> usize {
        let g = self.g;
        let eqn = |v: poot_graph_ir::ValueId| self.cls.producer[v.index()].map(|i| &g.eqns()[i]);
        let dims = |v: poot_graph_ir::ValueId| g.values()[v.index()].ty.dims().to_vec();
        // [B, H, S, D] = reshape(broadcast([B, Hkv, 1, S, D] -> [B, Hkv, n, S, D])): n.
        let repeated = |v| -> Option<usize> {
            let r = eqn(v)?;
            if !matches!(r.op, OpKind::Reshape { .. }) {
                return None;
            }
            let b = eqn(r.inputs[0])?;
            let OpKind::Broadcast { shape } = &b.op else {
                return None;
            };
            let (from, to) = (dims(b.inputs[0]), shape.dims().to_vec());
            (from.len() == 5 && to.len() == 5 && from[2] == 1 && from[..2] == to[..2])
                .then_some(to[2])
        };
        let (Some(nk), Some(nv)) = (repeated(a.k), repeated(a.v)) else {
            return 1;
        };
        let mask_shared = a.mask.is_none_or(|m| {
            eqn(m).is_some_and(|e| {
                matches!(e.op, OpKind::Broadcast { .. }) && dims(e.inputs[0]).get(1) == Some(&1)
            })
        });
        if nk == nv && mask_shared { nk } else { 1 }
    }

    /// The kernels computing recognised attention `a` laid out as `layout`: the partition
    /// kernel, and the combine where there are several. With `group` > 1 each workgroup serves
    /// `group` consecutive query heads that share their keys, values and mask
    /// ([`Lowering::shared_kv_heads`]): every key and value word and every mask test of a step
    /// serves all of them, each head keeping its own scores, softmax and sums.
    pub(super) fn emit_attention_decode(
        &mut self,
        a: &Attention,
        layout: DecodeLayout,
        group: usize,
    ) -> Result<(), PlanError> {
        let od = self.g.values()[a.out.index()].ty.dims().to_vec();
        let (bsz, heads, tokens, dv) = (od[0], od[1], od[2], od[3]);
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
        // Keys and values stored as f16 pairs: each lane reads whole words.
        let paired = qk_per_lane % 2 == 0
            && v_per_lane % 2 == 0
            && self.reads_halves(a.k)
            && self.reads_halves(a.v);
        let block_positions = layout.block_positions();
        let (out, target) = self.attention_targets(a, parts)?;
        let shuffles = self.target.team_shuffles();
        // A team of one whole warp may skip a step its lanes agree is all masked: its shuffles
        // need no other warp.
        let skip_masked = shuffles && lanes == self.target.limits.subgroup_size;
        let gu = group as u32;
        let mut cx = KernelCtx::labelled("attention_decode", self.label(a.out), wg);
        let outp = cx.param(target, Word::F32, true);
        let q_sh = cx.kb.shared("q", Ty::F32, gu * dqk as u32);
        let sums_sh =
            (!shuffles).then(|| cx.kb.shared("sums", Ty::F32, gu * teams * per_team * lanes));
        let m_sh = cx.kb.shared("team_max", Ty::F32, gu * teams);
        let l_sh = cx.kb.shared("team_sum", Ty::F32, gu * teams);
        let acc_sh = cx.kb.shared("team_values", Ty::F32, gu * teams * dv as u32);
        let lane = cx.kb.let_(Ty::U32, local_id() & u32c(lanes - 1));
        let team = cx
            .kb
            .let_(Ty::U32, local_id() >> u32c(lanes.trailing_zeros()));
        // The workgroup's (batch, head group, token) and partition; each head's item, its query
        // staged once (its rotary embedding and norm computed there).
        let groups = heads / group;
        let items = if group == 1 {
            vec![self.begin_attention_item(&mut cx, a, parts, q_sh)?]
        } else {
            let item = Self::begin_rows(&mut cx, (bsz * groups * tokens * parts) as u32);
            let grow = cx.kb.let_(Ty::U32, item.clone() / u32c(parts as u32));
            let part = cx.kb.let_(Ty::U32, item % u32c(parts as u32));
            let bgt = unflatten(&mut cx, grow, &[bsz, groups, tokens]);
            let items: Vec<Item> = (0..gu)
                .map(|i| {
                    let h = cx.kb.let_(Ty::U32, bgt[1].clone() * u32c(gu) + u32c(i));
                    let row = cx.kb.let_(
                        Ty::U32,
                        (bgt[0].clone() * u32c(heads as u32) + h.clone()) * u32c(tokens as u32)
                            + bgt[2].clone(),
                    );
                    let item = cx
                        .kb
                        .let_(Ty::U32, row.clone() * u32c(parts as u32) + part.clone());
                    Item {
                        item,
                        row,
                        part: part.clone(),
                        bht: vec![bgt[0].clone(), h, bgt[2].clone()],
                    }
                })
                .collect();
            cx.open_prologue();
            for (i, it) in items.iter().enumerate() {
                let d = cx.kb.begin_for(local_id(), u32c(dqk as u32), u32c(wg));
                let qv = self.value_at(&mut cx, a.q, &it.at(d.clone()))?;
                cx.kb.store_shared(q_sh, plus((i * dqk) as u32, d), qv);
                cx.kb.end();
            }
            cx.kb.barrier();
            items
        };
        let part = items[0].part.clone();
        // Keys, values and the mask are read as the group's first head reads them.
        let first_head = &items[0];
        let qs: Vec<Vec<Expr>> = (0..group)
            .map(|i| {
                (0..qk_per_lane)
                    .map(|f| {
                        let (d, partial) = feature(&lane, f, lanes, dqk, paired);
                        let base = (i * dqk) as u32;
                        let value = match partial {
                            None => load_shared(q_sh, plus(base, d)),
                            Some(inside) => select(
                                inside,
                                load_shared(q_sh, plus(base, min(d, u32c(dqk as u32 - 1)))),
                                Expr::F32(0.0),
                            ),
                        };
                        cx.kb.let_(Ty::F32, value)
                    })
                    .collect()
            })
            .collect();
        let ms: Vec<Var> = (0..group).map(|_| cx.kb.var(Ty::F32, neg_inf())).collect();
        let ls: Vec<Var> = (0..group)
            .map(|_| cx.kb.var(Ty::F32, Expr::F32(0.0)))
            .collect();
        let accs: Vec<Vec<Var>> = (0..group)
            .map(|_| {
                (0..v_per_lane)
                    .map(|_| cx.kb.var(Ty::F32, Expr::F32(0.0)))
                    .collect()
            })
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
            let vis = self.visible(&mut cx, a, first_head, s.clone(), inside)?;
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
                    let (d, partial) = feature(&lane, f, lanes, len, paired);
                    if let Some(inside) = &partial {
                        cx.kb.begin_if(inside.clone());
                    }
                    let x = self.value_at(&mut cx, of, &at_s(&first_head.bht, s.clone(), d))?;
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
        // dots[i][j]: head i's product with position j's key.
        let dots: Vec<Vec<Var>> = qs
            .iter()
            .map(|q| {
                keys.iter()
                    .map(|k| {
                        let dot = q.iter().zip(k).fold(Expr::F32(0.0), |acc, (q, &kv)| {
                            mul_add(q.clone(), Expr::Var(kv), acc)
                        });
                        cx.kb.var(Ty::F32, dot)
                    })
                    .collect()
            })
            .collect();
        match sums_sh {
            None => {
                for &dot in dots.iter().flatten() {
                    cx.kb.team_sum(dot, lanes);
                }
            }
            Some(sums) => {
                // Each lane adds its team's partials in the same order, so every lane of a
                // team holds the same score.
                let base = cx
                    .kb
                    .let_(Ty::U32, team.clone() * u32c(gu * per_team * lanes));
                for (n, &dot) in dots.iter().flatten().enumerate() {
                    let at_lane = base.clone() + u32c(n as u32 * lanes) + lane.clone();
                    cx.kb.store_shared(sums, at_lane, Expr::Var(dot));
                }
                cx.kb.barrier();
                for (n, &dot) in dots.iter().flatten().enumerate() {
                    let terms = (0..lanes)
                        .map(|i| load_shared(sums, base.clone() + u32c(n as u32 * lanes + i)))
                        .collect();
                    cx.kb.set(dot, pairwise(terms));
                }
                // Read before the next step writes.
                cx.kb.barrier();
            }
        }
        for (i, it) in items.iter().enumerate() {
            let (m, l) = (ms[i], ls[i]);
            let mut scores = Vec::with_capacity(positions.len());
            for ((s, vis), &dot) in positions.iter().zip(&dots[i]) {
                let score = cx.kb.var(Ty::F32, neg_inf());
                cx.kb.begin_if(vis.clone());
                let sidx = it.at(s.clone());
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
            // A masked position's value words stay zero and its weight is zero: the sum is
            // kept.
            for (f, &acc) in accs[i].iter().enumerate() {
                let sum = weights
                    .iter()
                    .zip(&values)
                    .fold(Expr::Var(acc) * alpha.clone(), |sum, (p, v)| {
                        mul_add(p.clone(), Expr::Var(v[f]), sum)
                    });
                cx.kb.set(acc, sum);
            }
            cx.kb.set(m, m_new);
        }
        if skip_masked {
            cx.kb.end();
        }
        cx.kb.end();

        // The teams meet: each team's maximum, sum and values per head in shared memory,
        // weighed by every thread against the workgroup's maximum.
        let slot = |i: usize, t: Expr| plus(i as u32 * teams, t);
        cx.kb.begin_if(eq(lane.clone(), u32c(0)));
        for i in 0..group {
            cx.kb
                .store_shared(m_sh, slot(i, team.clone()), Expr::Var(ms[i]));
            cx.kb
                .store_shared(l_sh, slot(i, team.clone()), Expr::Var(ls[i]));
        }
        cx.kb.end();
        for (i, head_accs) in accs.iter().enumerate() {
            for (f, &acc) in head_accs.iter().enumerate() {
                let (d, partial) = feature(&lane, f, lanes, dv, paired);
                if let Some(inside) = &partial {
                    cx.kb.begin_if(inside.clone());
                }
                let at_acc = slot(i, team.clone()) * u32c(dv as u32) + d;
                cx.kb.store_shared(acc_sh, at_acc, Expr::Var(acc));
                if partial.is_some() {
                    cx.kb.end();
                }
            }
        }
        cx.kb.barrier();
        for (i, it) in items.iter().enumerate() {
            let big_m = (0..teams)
                .map(|t| load_shared(m_sh, slot(i, u32c(t))))
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
                        exp(load_shared(m_sh, slot(i, u32c(t))) - big_m.clone()),
                        Expr::F32(0.0),
                    );
                    cx.kb.let_(Ty::F32, w)
                })
                .collect();
            let big_l = team_w
                .iter()
                .enumerate()
                .map(|(t, w)| load_shared(l_sh, slot(i, u32c(t as u32))) * w.clone())
                .reduce(|a, b| a + b)
                .unwrap_or(Expr::F32(0.0));
            let big_l = cx.kb.let_(Ty::F32, big_l);
            let record =
                (parts > 1).then(|| cx.kb.let_(Ty::U32, it.item.clone() * u32c((dv + 2) as u32)));
            let finish = self.finish_item(
                &mut cx,
                a,
                record,
                &it.bht,
                (big_m.clone(), big_l.clone(), seen.clone()),
            )?;
            let dj = cx.kb.begin_for(local_id(), u32c(dv as u32), u32c(wg));
            let weighted = team_w
                .iter()
                .enumerate()
                .map(|(t, w)| {
                    let first = (i as u32 * teams + t as u32) * dv as u32;
                    load_shared(acc_sh, u32c(first) + dj.clone()) * w.clone()
                })
                .reduce(|a, b| a + b)
                .unwrap_or(Expr::F32(0.0));
            let weighted = cx.kb.let_(Ty::F32, weighted);
            self.store_item_feature(&mut cx, a, outp, &finish, (&it.row, &it.bht), dj, weighted)?;
            cx.kb.end();
            if let Finish::Record(record) = finish {
                cx.kb.begin_if(eq(local_id(), u32c(0)));
                cx.kb.store(outp, record.clone(), big_m);
                cx.kb.store(outp, record + u32c(1), big_l);
                cx.kb.end();
            }
        }
        if group == 1 {
            return self.finish_attention(cx, a, parts, target, out);
        }
        cx.close_prologue();
        cx.kb.end();
        let grid = self.groups_for((bsz * groups * tokens * parts) as u32, 1);
        self.push_kernel(cx, grid)?;
        if parts > 1 {
            self.emit_attention_combine(a, target, out, parts, s_len)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decode_step_fills_two_workgroups_per_multiprocessor() {
        // 32 heads of 64 features over 2048 positions: a warp per team, four positions per
        // team and step, nine partitions of 32-position blocks.
        let l = DecodeLayout::new(32, 2048, (64, 64), Some(132), 2, 4).unwrap();
        assert_eq!(
            (l.lanes, l.per_team, l.qk_per_lane, l.v_per_lane),
            (32, 4, 2, 2)
        );
        assert_eq!((l.blocks, l.parts), (128, 9));
        assert!(32 * l.parts >= 2 * 132);
        // Asked for eight a multiprocessor: four times the partitions, each walking a quarter.
        let l = DecodeLayout::new(32, 2048, (64, 64), Some(132), 8, 4).unwrap();
        assert_eq!((l.blocks, l.parts), (128, 33));
    }

    #[test]
    fn a_long_cache_is_cut_so_no_partition_walks_more_than_max_steps() {
        // 131072 positions in 8192 blocks of 16: 256 partitions of 32 steps.
        let l = DecodeLayout::new(32, 131_072, (128, 128), Some(132), 2, 4).unwrap();
        assert_eq!((l.per_team, l.blocks, l.parts), (4, 8192, 256));
        // Past MAX_PARTITIONS the steps grow instead.
        let l = DecodeLayout::new(32, 1 << 20, (128, 128), Some(132), 2, 4).unwrap();
        assert_eq!(l.parts, MAX_PARTITIONS);
    }

    #[test]
    fn wide_heads_take_fewer_positions_per_step_and_the_widest_none() {
        let l = DecodeLayout::new(8, 4096, (256, 256), None, 2, 4).unwrap();
        assert_eq!((l.lanes, l.per_team, l.qk_per_lane), (32, 2, 8));
        let l = DecodeLayout::new(8, 4096, (320, 320), None, 2, 4).unwrap();
        assert_eq!((l.per_team, l.qk_per_lane), (1, 10));
        assert_eq!(DecodeLayout::new(8, 4096, (1024, 1024), None, 2, 4), None);
    }

    #[test]
    fn short_caches_and_narrow_heads_keep_at_least_a_block_per_partition() {
        let l = DecodeLayout::new(6, 12, (16, 16), None, 2, 4).unwrap();
        assert_eq!((l.lanes, l.blocks, l.parts), (16, 1, 1));
        let l = DecodeLayout::new(6, 150, (6, 10), None, 2, 4).unwrap();
        assert_eq!((l.lanes, l.qk_per_lane, l.v_per_lane), (16, 1, 1));
        assert!(l.parts <= l.blocks);
    }
}
