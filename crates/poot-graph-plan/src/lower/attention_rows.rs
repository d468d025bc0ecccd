//! Attention where a workgroup's threads are loops (the CPU): one thread per (row, partition)
//! item, walking its positions one by one with the features as loops.
//!
//! The GPU kernels spread a position's dot product over lanes and meet in shared memory or
//! shuffles; rendered as loops over threads that costs a pass per lane and keeps per-thread
//! values in arrays the C compiler cannot vectorise. Here a visible position's score is one
//! loop over the query and key features (contiguous words, a reduction the compiler
//! vectorises), the logits chain and the mask are applied as the graph computes them, and an
//! online softmax adds the weighted value row into the item's accumulator (another contiguous
//! loop). A row's positions are cut into blocks of [`BLOCK`] dealt round robin to partitions,
//! as the decode kernel does, so a decode step's few rows still keep every pool thread busy;
//! the partitions meet in [`emit_attention_combine`](Lowering::emit_attention_combine).
//!
//! What it reassociates against the oracle: each dot product's sum (the compiler's vector
//! order), the softmax sum and weighted values formed with running rescaling in position order
//! per partition, then across partitions, divided once at the end (where a softmax sink
//! enters).

use super::attention::{Attention, Finish, MAX_PARTITIONS, at_s, exp, neg_inf, rescale};
use super::context::KernelCtx;
use super::{Lowering, PlanError};
use poot_kernel::build::{cmp, load_shared, lt, max, mul_add, select, u32c};
use poot_kernel::{CmpOp, Expr, Ty, Word};

/// Positions of one block (a partition takes whole blocks).
const BLOCK: usize = 64;
/// Items a pool thread should have at least, where the rows allow, so uneven items balance.
const ITEMS_PER_THREAD: usize = 4;

/// Partitions of each of `rows` rows over `positions`, on `threads` pool threads.
fn partitions(rows: usize, positions: usize, threads: Option<u32>) -> usize {
    let blocks = positions.div_ceil(BLOCK).max(1);
    let threads = threads.map_or(1, |n| n as usize);
    (ITEMS_PER_THREAD * threads)
        .div_ceil(rows.max(1))
        .clamp(1, MAX_PARTITIONS)
        .min(blocks)
}

impl Lowering<'_> {
    /// The kernel computing recognised attention `a` item by item (and the combine where a row
    /// has several partitions).
    pub(super) fn emit_attention_rows(&mut self, a: &Attention) -> Result<(), PlanError> {
        let od = self.g.values()[a.out.index()].ty.dims().to_vec();
        let (rows, dv) = (od[0] * od[1] * od[2], od[3]);
        let s_len = self.g.values()[a.scores.index()].ty.dims()[3];
        let dqk = self.g.values()[a.q.index()].ty.dims()[3];
        let parts = partitions(rows, s_len, self.target.limits.multiprocessors);
        let steps = s_len.div_ceil(BLOCK).max(1).div_ceil(parts);
        let (out, target) = self.attention_targets(a, parts)?;
        let mut cx = KernelCtx::labelled("attention_rows", self.label(a.out), 1);
        let outp = cx.param(target, Word::F32, true);
        let q_sh = cx.kb.shared("q", Ty::F32, dqk as u32);
        let acc_sh = cx.kb.shared("values", Ty::F32, dv as u32);
        let it = self.begin_attention_item(&mut cx, a, parts, q_sh)?;
        let (item, row, part, bht) = (it.item.clone(), it.row.clone(), it.part.clone(), &it.bht);
        let m = cx.kb.var(Ty::F32, neg_inf());
        let l = cx.kb.var(Ty::F32, Expr::F32(0.0));
        let d = cx.kb.begin_for(u32c(0), u32c(dv as u32), u32c(1));
        cx.kb.store_shared(acc_sh, d, Expr::F32(0.0));
        cx.kb.end();

        let step = cx.kb.begin_for(u32c(0), u32c(steps as u32), u32c(1));
        let block = cx
            .kb
            .let_(Ty::U32, part.clone() + step * u32c(parts as u32));
        let j = cx.kb.begin_for(u32c(0), u32c(BLOCK as u32), u32c(1));
        let s = cx.kb.let_(Ty::U32, block * u32c(BLOCK as u32) + j);
        let inside = lt(s.clone(), u32c(s_len as u32));
        let vis = self.visible(&mut cx, a, &it, s.clone(), inside)?;
        cx.kb.begin_if(vis);
        let dot = cx.kb.var(Ty::F32, Expr::F32(0.0));
        let d = cx.kb.begin_for(u32c(0), u32c(dqk as u32), u32c(1));
        let key = self.value_at(&mut cx, a.k, &at_s(bht, s.clone(), d.clone()))?;
        // A product and a sum (not a fused step) so the loop is an ordinary sum reduction, which
        // the C compiler vectorises.
        cx.kb.set(dot, Expr::Var(dot) + load_shared(q_sh, d) * key);
        cx.kb.end();
        let sidx = it.at(s.clone());
        cx.set_known(a.scores, &sidx, Expr::Var(dot));
        let logit = self.compute(&mut cx, a.logits, &sidx)?;
        let logit = cx.kb.let_(Ty::F32, logit);
        let m_new = cx.kb.let_(Ty::F32, max(Expr::Var(m), logit.clone()));
        let (live, alpha) = rescale(&mut cx, m, &m_new);
        let p = cx.kb.let_(
            Ty::F32,
            select(live, exp(logit - m_new.clone()), Expr::F32(0.0)),
        );
        cx.kb.set(l, Expr::Var(l) * alpha.clone() + p.clone());
        let d = cx.kb.begin_for(u32c(0), u32c(dv as u32), u32c(1));
        let value = self.value_at(&mut cx, a.v, &at_s(bht, s, d.clone()))?;
        let sum = mul_add(p, value, load_shared(acc_sh, d.clone()) * alpha);
        cx.kb.store_shared(acc_sh, d, sum);
        cx.kb.end();
        cx.kb.set(m, m_new);
        cx.kb.end();
        cx.kb.end();
        cx.kb.end();

        // The item's result: the row's output, or the partition's record for the combine.
        let record = (parts > 1).then(|| cx.kb.let_(Ty::U32, item * u32c((dv + 2) as u32)));
        let seen = cx
            .kb
            .let_(Ty::Bool, cmp(CmpOp::Ne, Expr::Var(m), neg_inf()));
        let finish =
            self.finish_item(&mut cx, a, record, bht, (Expr::Var(m), Expr::Var(l), seen))?;
        let dj = cx.kb.begin_for(u32c(0), u32c(dv as u32), u32c(1));
        let weighted = load_shared(acc_sh, dj.clone());
        self.store_item_feature(&mut cx, a, outp, &finish, (&row, bht), dj, weighted)?;
        cx.kb.end();
        if let Finish::Record(record) = finish {
            cx.kb.store(outp, record.clone(), Expr::Var(m));
            cx.kb.store(outp, record + u32c(1), Expr::Var(l));
        }
        self.finish_attention(cx, a, parts, target, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decode_row_is_cut_for_every_thread_and_a_prefill_is_not() {
        // Nine heads of one token over 1024 positions on 2 threads: a partition each for
        // the 8 items two threads want, never more than the blocks.
        assert_eq!(partitions(9, 1024, Some(2)), 1);
        assert_eq!(partitions(2, 1024, Some(2)), 4);
        assert_eq!(partitions(1, 100, Some(16)), 2);
        assert_eq!(partitions(4608, 512, Some(2)), 1);
    }
}
