//! The flash-attention rewrite. `ops::attention_masked` traces attention as primitives:
//!
//! ```text
//! scores = q @ k^T                     [B, H, T, S]  (k read through repeat_kv)
//! logits = f(scores)                   scale, optional softcap: same-shape element-wise ops
//! x      = select(mask, logits, MIN)   (absent when nothing is masked)
//! p      = exp(x - max(x)) / sum(exp(x - max(x)))
//! out    = p @ v                       [B, H, T, Dv]
//! ```
//!
//! or, with a learned sink logit per head (gpt-oss), `sink = broadcast(reshape(sinks [H]))`,
//! `m = max(max(x), sink)` and `p = exp(x - m) / (sum(exp(x - m)) + exp(sink - m))`.
//!
//! [`find`] recognises exactly that shape (every intermediate read only inside it, the floor
//! the literal `f32::MIN`) and anything else is planned unfused. The rewrite computes `out` with
//! one workgroup per (row, head, token) and partition of the cache positions: it stages the
//! query in shared memory (computing its rotary embedding and norm there), then walks the
//! positions a tile at a time with an online softmax, reading keys and values of the shared
//! KV head directly (GQA costs no copy). A masked position costs its mask test only: no key or
//! value is read for it. With few rows the positions are split across partitions whose partial
//! results (running max, sum, weighted values) a second kernel combines (flash decoding).
//!
//! That is the kernel for many rows (a prefill). On GPUs, rows fewer than [`ROWS_WITHOUT_SPLIT`],
//! and a decode step's rows (one token each) however many, take the decode kernel of
//! [`attention_decode`](super::attention_decode)
//! instead, where teams of lanes share each position's dot product; it keeps every semantic
//! below and shares this module's combine. Many rows of one head take a tile of queries per
//! workgroup: on the matrix units where the target has them
//! ([`attention_mma`](super::attention_mma)), else on the FMA pipes
//! ([`attention_tiled`](super::attention_tiled)). This kernel still serves what neither takes
//! (heads too wide for their registers or shared memory, a query that reads a row reduction).
//!
//! What it reassociates, against the oracle: each score's dot product is summed in the oracle's
//! order; the softmax sum and the weighted sum of values are formed per thread and tile with
//! running rescaling, then across threads, then across partitions, and divided once at the end
//! (the oracle divides each weight first). Masked positions contribute exactly zero whenever a
//! visible logit of the row exceeds `f32::MIN + 104` (the oracle's `exp(MIN - max)` underflows
//! to zero there, for any realistic scores); a row with no visible position is the mean of the
//! values, as in the oracle.
//!
//! A sink enters once a row's maximum `m`, sum `l` and weighted values `acc` are whole (after
//! the threads, teams and partitions meet, so in the combine where there are partitions):
//! with `M = max(m, sink)`, `out = acc exp(m - M) / (l exp(m - M) + exp(sink - M))`. A row with
//! no visible position is then 0, as in the oracle (its floored logits underflow beside the
//! sink). Every kernel below applies it.

use std::collections::HashMap;

use poot_graph_ir::{
    BinaryOp, CompareOp, DType, Eqn, Graph, OpKind, ReduceOp, Scalar, UnaryOp, ValueId,
};

use super::access::unflatten;
use super::attention_decode::DecodeLayout;
use super::classify::Placement;
use super::context::{KernelCtx, LBuf};
use super::emit::row_threads;
use super::{Lowering, PlanError};
use crate::plan::BufferRole;
use poot_kernel::build::{
    cmp, eq, load, load_shared, local_id, lt, max, min, mul_add, select, u32c, un,
};
use poot_kernel::{BinOp, CmpOp, Expr, ParamId, SharedId, Ty, UnOp, Var, Word};

/// Cache positions one partition walks when the rows alone do not fill the device.
const PARTITION_POSITIONS: usize = 64;
/// Rows (batch x heads x tokens) at which the positions are not split (and below which the
/// decode kernel is used).
const ROWS_WITHOUT_SPLIT: usize = 128;
/// The most query heads one decode workgroup serves together (their queries and sums are in
/// registers).
const MAX_GROUPED_HEADS: usize = 8;
/// The most partitions of one row (their weights sit in shared memory while combining).
pub(super) const MAX_PARTITIONS: usize = 1024;

/// One recognised attention.
#[derive(Clone, Debug)]
pub struct Attention {
    /// The output `p @ v`, `[B, H, T, Dv]`.
    pub out: ValueId,
    /// `[B, H, T, Dqk]`.
    pub q: ValueId,
    /// `[B, H, S, Dqk]`, as the scores contraction reads it (through repeat_kv).
    pub k: ValueId,
    /// `[B, H, S, Dv]`.
    pub v: ValueId,
    /// `q @ k^T`.
    pub scores: ValueId,
    /// The score after the element-wise chain, before masking.
    pub logits: ValueId,
    /// Where positions are visible, `[B, H, T, S]` (bool).
    pub mask: Option<ValueId>,
    /// Where the mask is causal ([`poot_graph_ir::ops::causal_mask`]'s shape): the positions
    /// `[B, T]` (i32) no key past which is visible, so a kernel may stop walking there.
    pub causal: Option<ValueId>,
    /// The learned sink logit of each query head, `[H]` (f32): one more term of each row's
    /// softmax denominator, carrying no value.
    pub sinks: Option<ValueId>,
    /// The equation computing the scores (its query operand is read once per workgroup).
    pub scores_eqn: usize,
    /// Values only the rewrite computes (the scores, the softmax, the masked logits).
    pub internal: Vec<ValueId>,
}

/// The attention whose output contraction is equation `pv`, if the graph has exactly the
/// traced shape there.
pub fn find(
    g: &Graph,
    pv: usize,
    uses: &[u32],
    pinned: &[bool],
    producer: &[Option<usize>],
) -> Option<Attention> {
    let eqn = |v: ValueId| producer[v.index()].map(|i| &g.eqns()[i]);
    let dims = |v: ValueId| g.values()[v.index()].ty.dims().to_vec();
    let only_here = |v: ValueId, n: u32| uses[v.index()] == n && !pinned[v.index()];
    let e = &g.eqns()[pv];
    if !matches!(
        e.op,
        OpKind::MatMul {
            transpose_rhs: false
        }
    ) {
        return None;
    }
    let (p, v, out) = (e.inputs[0], e.inputs[1], e.out);
    let (pd, vd, od) = (dims(p), dims(v), dims(out));
    if pd.len() != 4 || vd.len() != 4 || od.len() != 4 || vd[..2] != pd[..2] {
        return None;
    }
    // p = e / broadcast(sum(e)), with a sink: e / broadcast(sum(e) + exp(sink - m))
    let (e_val, sb) = binary(eqn(p)?, BinaryOp::Div)?;
    let total = broadcast_of(eqn(sb)?, &pd)?;
    let (ssum, sink_share) = match binary(eqn(total)?, BinaryOp::Add) {
        Some((sum, share)) => (sum, Some(share)),
        None => (total, None),
    };
    let (ss_in, ss_op) = reduce_last(eqn(ssum)?)?;
    if ss_in != e_val || ss_op != ReduceOp::Sum {
        return None;
    }
    // e = exp(x - broadcast(m)), m = max(x), with a sink: m = max(max(x), sink)
    let dm = unary(eqn(e_val)?, UnaryOp::Exp)?;
    let (x, mb) = binary(eqn(dm)?, BinaryOp::Sub)?;
    let m = broadcast_of(eqn(mb)?, &pd)?;
    let (row_max, sink) = match sink_share {
        Some(share) => {
            let (row_max, sink) = binary(eqn(m)?, BinaryOp::Max)?;
            (
                row_max,
                Some(find_sink(g, producer, &only_here, sink, m, share, &pd)?),
            )
        }
        None => (m, None),
    };
    let (m_in, m_op) = reduce_last(eqn(row_max)?)?;
    if m_in != x || m_op != ReduceOp::Max || dims(x) != pd {
        return None;
    }
    let m_uses = if sink.is_some() { 2 } else { 1 };
    let single = [p, sb, ssum, dm, mb, row_max];
    if !single.iter().all(|&w| only_here(w, 1))
        || !only_here(m, m_uses)
        || !only_here(e_val, 2)
        || !only_here(x, 2)
    {
        return None;
    }
    // x = select(mask, logits, MIN), or the logits themselves.
    let x_eqn = eqn(x)?;
    let (logits, mask) = match x_eqn.op {
        OpKind::Select => {
            let (c, t, f) = (x_eqn.inputs[0], x_eqn.inputs[1], x_eqn.inputs[2]);
            if !is_floor(g, producer, f) || !only_here(t, 1) || dims(c) != pd {
                return None;
            }
            (t, Some(c))
        }
        _ => (x, None),
    };
    let scores = find_scores(g, producer, uses, pinned, logits, &pd, 16)?;
    let se = eqn(scores)?;
    if !matches!(
        se.op,
        OpKind::MatMul {
            transpose_rhs: true
        }
    ) || !only_here(scores, 1)
    {
        return None;
    }
    let (q, k) = (se.inputs[0], se.inputs[1]);
    let (qd, kd) = (dims(q), dims(k));
    if qd.len() != 4 || kd.len() != 4 || qd[..3] != pd[..3] || kd[..2] != pd[..2] {
        return None;
    }
    if kd[2] != pd[3] || vd[2] != pd[3] || qd[3] != kd[3] || od[..3] != pd[..3] {
        return None;
    }
    let mut internal = vec![scores, x, m, mb, dm, e_val, ssum, sb, p];
    if logits != x {
        internal.push(logits);
    }
    if let Some(s) = &sink {
        internal.extend([row_max, total]);
        internal.extend(s.internal);
    }
    Some(Attention {
        out,
        q,
        k,
        v,
        scores,
        logits,
        mask,
        causal: mask.and_then(|m| causal_positions(g, producer, m)),
        sinks: sink.map(|s| s.sinks),
        scores_eqn: producer[scores.index()]?,
        internal,
    })
}

/// The positions `pos [B, T]` bounding a mask `[B, H, T, S]` traced as `causal_mask` traces it:
/// `broadcast(reshape(c, [B, 1, T, S]))` where `c` is `iota_s <= broadcast(reshape(pos, [B, T,
/// 1]))`, alone or and-ed with another condition (a sliding window's). Wherever the mask is
/// true, `s <= pos[b, t]`.
fn causal_positions(g: &Graph, producer: &[Option<usize>], mask: ValueId) -> Option<ValueId> {
    let eqn = |v: ValueId| producer[v.index()].map(|i| &g.eqns()[i]);
    let dims = |v: ValueId| g.values()[v.index()].ty.dims().to_vec();
    let md = dims(mask);
    let &[bsz, _, t, s] = md.as_slice() else {
        return None;
    };
    let mut m = mask;
    if let OpKind::Broadcast { .. } = eqn(m)?.op {
        m = eqn(m)?.inputs[0];
    }
    if dims(m) != [bsz, 1, t, s] {
        return None;
    }
    let reshape = eqn(m)?;
    if !matches!(reshape.op, OpKind::Reshape { .. }) {
        return None;
    }
    let rows = [bsz, t, s];
    let c = reshape.inputs[0];
    if dims(c) != rows {
        return None;
    }
    // `iota_s <= p`: `p` where `c` is that comparison.
    let bound = |v: ValueId| -> Option<ValueId> {
        let e = eqn(v)?;
        if e.op != OpKind::Compare(CompareOp::Le) {
            return None;
        }
        let keys = eqn(e.inputs[0])?;
        match &keys.op {
            OpKind::Iota { shape, axis: 2, .. } if shape.dims() == rows => Some(e.inputs[1]),
            _ => None,
        }
    };
    let e = eqn(c)?;
    let p = match e.op {
        OpKind::Binary(BinaryOp::And) => bound(e.inputs[0]).or_else(|| bound(e.inputs[1]))?,
        _ => bound(c)?,
    };
    let spread = eqn(p)?;
    if !matches!(&spread.op, OpKind::Broadcast { shape } if shape.dims() == rows) {
        return None;
    }
    let column = spread.inputs[0];
    let reshaped = eqn(column)?;
    if dims(column) != [bsz, t, 1] || !matches!(reshaped.op, OpKind::Reshape { .. }) {
        return None;
    }
    let pos = reshaped.inputs[0];
    let info = &g.values()[pos.index()].ty;
    (info.dims() == [bsz, t] && info.dtype == DType::I32).then_some(pos)
}

/// A recognised sink term of the softmax: the `[H]` logits and the values that spread them over
/// the rows.
struct Sink {
    sinks: ValueId,
    internal: [ValueId; 4],
}

/// The sink of a softmax whose row maximum is `m = max(max(x), sink)` and whose denominator adds
/// `share`: `sink = broadcast(reshape(sinks [H], [1, H, 1, 1]), [B, H, T, 1])` and
/// `share = exp(sink - m)`, every intermediate read only there.
fn find_sink(
    g: &Graph,
    producer: &[Option<usize>],
    only_here: &dyn Fn(ValueId, u32) -> bool,
    sink: ValueId,
    m: ValueId,
    share: ValueId,
    scores_shape: &[usize],
) -> Option<Sink> {
    let eqn = |v: ValueId| producer[v.index()].map(|i| &g.eqns()[i]);
    let dims = |v: ValueId| g.values()[v.index()].ty.dims().to_vec();
    let diff = unary(eqn(share)?, UnaryOp::Exp)?;
    if binary(eqn(diff)?, BinaryOp::Sub)? != (sink, m) {
        return None;
    }
    let rows = [scores_shape[0], scores_shape[1], scores_shape[2], 1];
    let per_head = broadcast_of(eqn(sink)?, &rows)?;
    let reshaped = eqn(per_head)?;
    if !matches!(reshaped.op, OpKind::Reshape { .. }) {
        return None;
    }
    let sinks = reshaped.inputs[0];
    let heads = scores_shape[1];
    if dims(per_head) != [1, heads, 1, 1] || dims(sinks) != [heads] {
        return None;
    }
    let single = [share, diff, per_head];
    if !single.iter().all(|&w| only_here(w, 1)) || !only_here(sink, 2) {
        return None;
    }
    Some(Sink {
        sinks,
        internal: [sink, per_head, diff, share],
    })
}

fn binary(e: &Eqn, op: BinaryOp) -> Option<(ValueId, ValueId)> {
    match e.op {
        OpKind::Binary(b) if b == op => Some((e.inputs[0], e.inputs[1])),
        _ => None,
    }
}

fn unary(e: &Eqn, op: UnaryOp) -> Option<ValueId> {
    match e.op {
        OpKind::Unary(u) if u == op => Some(e.inputs[0]),
        _ => None,
    }
}

/// The input of a broadcast to `to` along the last axis only.
fn broadcast_of(e: &Eqn, to: &[usize]) -> Option<ValueId> {
    match &e.op {
        OpKind::Broadcast { shape } if shape.dims() == to => Some(e.inputs[0]),
        _ => None,
    }
}

/// The input and operator of a reduction over the last of four axes.
fn reduce_last(e: &Eqn) -> Option<(ValueId, ReduceOp)> {
    match e.op {
        OpKind::Reduce { op, axis: 3 } => Some((e.inputs[0], op)),
        _ => None,
    }
}

/// Whether `v` is the literal `f32::MIN`, broadcast or not.
fn is_floor(g: &Graph, producer: &[Option<usize>], v: ValueId) -> bool {
    let Some(e) = producer[v.index()].map(|i| &g.eqns()[i]) else {
        return false;
    };
    match &e.op {
        OpKind::Literal(Scalar::F32(x)) => *x == f32::MIN,
        OpKind::Broadcast { .. } => is_floor(g, producer, e.inputs[0]),
        _ => false,
    }
}

/// The scores contraction under `v`: `v` itself, or reached through same-shape element-wise
/// ops read only on this path (the scale, the softcap).
fn find_scores(
    g: &Graph,
    producer: &[Option<usize>],
    uses: &[u32],
    pinned: &[bool],
    v: ValueId,
    shape: &[usize],
    depth: usize,
) -> Option<ValueId> {
    let e = &g.eqns()[producer[v.index()]?];
    if matches!(e.op, OpKind::MatMul { .. }) {
        return Some(v);
    }
    let elementwise = matches!(
        e.op,
        OpKind::Unary(_) | OpKind::Binary(_) | OpKind::Select | OpKind::Cast { .. }
    );
    if depth == 0 || !elementwise {
        return None;
    }
    let mut found = None;
    for &w in &e.inputs {
        let wt = &g.values()[w.index()].ty;
        if wt.dims() != shape || uses[w.index()] != 1 || pinned[w.index()] {
            continue;
        }
        if let Some(s) = find_scores(g, producer, uses, pinned, w, shape, depth - 1) {
            if found.is_some() {
                return None;
            }
            found = Some(s);
        }
    }
    found
}

/// Every attention of `g` the rewrite takes, by the equation of its output contraction.
pub fn find_all(
    g: &Graph,
    uses: &[u32],
    pinned: &[bool],
    producer: &[Option<usize>],
) -> HashMap<usize, Attention> {
    (0..g.eqns().len())
        .filter_map(|i| find(g, i, uses, pinned, producer).map(|a| (i, a)))
        .collect()
}

/// One (row, partition) item of an attention kernel, as [`Lowering::begin_attention_item`]
/// opens it: the flat item, its row and partition, and the row's `[b, h, t]`.
pub(super) struct Item {
    pub item: Expr,
    pub row: Expr,
    pub part: Expr,
    pub bht: Vec<Expr>,
}

impl Item {
    /// The row's index with `x` as the last axis (a position of the scores or mask, a feature
    /// of the query).
    pub fn at(&self, x: Expr) -> Vec<Expr> {
        let mut i = self.bht.clone();
        i.push(x);
        i
    }
}

/// How the positions of each row are split: (partitions, positions per partition).
fn partitions(rows: usize, positions: usize, tile: usize) -> (usize, usize) {
    if rows >= ROWS_WITHOUT_SPLIT || positions <= PARTITION_POSITIONS {
        return (1, positions);
    }
    let chunk = PARTITION_POSITIONS.max(positions.div_ceil(MAX_PARTITIONS));
    let chunk = chunk.div_ceil(tile) * tile;
    (positions.div_ceil(chunk), chunk)
}

pub(super) fn neg_inf() -> Expr {
    Expr::F32(f32::NEG_INFINITY)
}

pub(super) fn exp(x: Expr) -> Expr {
    un(UnOp::Exp, x)
}

/// An online softmax's step from running maximum `m` to `m_new` (`max(m, ..)`): whether anything
/// is visible yet, and the factor that rescales what was summed so far. The factor is computed
/// only when the maximum grows (else it is exactly 1, as `exp(0)` is), which also keeps
/// -inf - -inf out while nothing is visible, and spares an exponential where the C renderer's
/// conditional is lazy.
pub(super) fn rescale(cx: &mut KernelCtx, m: Var, m_new: &Expr) -> (Expr, Expr) {
    let live = cx
        .kb
        .let_(Ty::Bool, cmp(CmpOp::Ne, m_new.clone(), neg_inf()));
    let alpha = cx.kb.let_(
        Ty::F32,
        select(
            cmp(CmpOp::Gt, m_new.clone(), Expr::Var(m)),
            exp(Expr::Var(m) - m_new.clone()),
            Expr::F32(1.0),
        ),
    );
    (live, alpha)
}

pub(super) fn and(a: Expr, b: Expr) -> Expr {
    poot_kernel::build::bin(BinOp::And, a, b)
}

/// The factor turning a row's weighted values into its output where the softmax has a sink
/// `sink`, from the row's running maximum `m` and sum `l`: with `M = max(m, sink)`,
/// `exp(m - M) / (l exp(m - M) + exp(sink - M))`. A row with nothing visible (`m` = -inf) gets
/// 0, as in the oracle (its floored logits underflow against the sink).
pub(super) fn sink_factor(cx: &mut KernelCtx, sink: Expr, m: Expr, l: Expr) -> Expr {
    let big_m = cx.kb.let_(Ty::F32, max(m.clone(), sink.clone()));
    let kept = cx.kb.let_(Ty::F32, exp(m - big_m.clone()));
    cx.kb
        .let_(Ty::F32, kept.clone() / (l * kept + exp(sink - big_m)))
}

/// How an item's weighted values end: in its partition's record, or as its row's output.
pub(super) enum Finish {
    /// The partition's record at this offset, for the combine (which applies any sink).
    Record(Expr),
    /// `weighted / l`, or the mean of the values where nothing was `seen`.
    Divide { l: Expr, seen: Expr },
    /// `weighted` times [`sink_factor`]'s factor.
    Sink(Expr),
}

impl Lowering<'_> {
    /// The kernels computing recognised attention `a` (one, or a partition kernel and its
    /// combine).
    pub(super) fn emit_attention(&mut self, a: &Attention) -> Result<(), PlanError> {
        let od = self.g.values()[a.out.index()].ty.dims().to_vec();
        let (bsz, heads, tokens, dv) = (od[0], od[1], od[2], od[3]);
        let s_len = self.g.values()[a.scores.index()].ty.dims()[3];
        let dqk = self.g.values()[a.q.index()].ty.dims()[3];
        let rows = bsz * heads * tokens;
        if self.target.threads_are_loops() {
            return self.emit_attention_rows(a);
        }
        // The decode kernel's teams share each position's dot product across lanes; where a
        // subgroup is one thread (the CPU), every lane's loop would repeat the team's sums and
        // exponentials, so the kernel below, one position per thread, serves (measured on
        // SmolLM2's decode step on 2 cores: 46 ms -> 4.7 ms of attention).
        // A decode step (one new token per row) takes it at any row count: many rows decoding
        // together would otherwise get the prefill-shaped kernel below, one thread per
        // position reading a whole key row alone (measured on an H100, 1B F16 at 64 rows: 197
        // us a layer, about ten times its K and V bytes at the copy bandwidth).
        let decode_step = tokens == 1 && self.target.tuning.decode_attention_rows;
        if (rows < ROWS_WITHOUT_SPLIT || decode_step) && self.target.limits.subgroup_size > 1 {
            let sms = self.target.limits.multiprocessors;
            let wgs = self.target.tuning.decode_workgroups;
            let per_team = self.target.tuning.decode_positions;
            // Many rows decoding together: a workgroup serves the query heads that share a key
            // and value head, reading each key and value once for all of them (measured on an
            // H100, 64 rows of the 1B model: the decode attention was 1.49 of 1.86 ms a step,
            // every head reading its shared keys and values alone).
            let tuning = &self.target.tuning;
            let group = if decode_step
                && (rows >= ROWS_WITHOUT_SPLIT || tuning.decode_group_lone)
                && tuning.decode_group_heads
            {
                self.shared_kv_heads(a)
            } else {
                1
            };
            if group > 1
                && group <= MAX_GROUPED_HEADS
                && heads.is_multiple_of(group)
                && let Some(layout) =
                    DecodeLayout::new(rows / group, s_len, (dqk, dv), sms, wgs, per_team)
                && layout.fits_group(group)
            {
                return self.emit_attention_decode(a, layout, group);
            }
            if let Some(layout) = DecodeLayout::new(rows, s_len, (dqk, dv), sms, wgs, per_team) {
                return self.emit_attention_decode(a, layout, 1);
            }
        }
        // A query computed from a row reduction (Qwen3's per-head norm) is stored once for the
        // matrix-unit kernel, which reads queries without row tables: otherwise the kernel
        // below, a workgroup per query row, takes the prompt.
        if self.attention_mma_takes(a)
            && self.cls.reads_row_reduce[a.q.index()]
            && self.cls.placement[a.q.index()] == Placement::Inline
        {
            self.materialized(a.q)?;
            self.cls.reads_row_reduce[a.q.index()] = false;
        }
        if self.emit_attention_mma(a)? || self.emit_attention_tiled(a)? {
            return Ok(());
        }
        let wg = row_threads(dv);
        let (parts, chunk) = partitions(rows, s_len, wg as usize);
        let (out, target) = self.attention_targets(a, parts)?;
        let mut cx = KernelCtx::labelled("attention", self.label(a.out), wg);
        let outp = cx.param(target, Word::F32, true);
        let q_sh = cx.kb.shared("q", Ty::F32, dqk as u32);
        let p_sh = cx.kb.shared("p", Ty::F32, wg);
        let red = cx.kb.shared("red", Ty::F32, wg);
        let it = self.begin_attention_item(&mut cx, a, parts, q_sh)?;
        let (item, row, part, bht) = (it.item.clone(), it.row.clone(), it.part.clone(), &it.bht);
        let at = |x: Expr| it.at(x);
        let m = cx.kb.var(Ty::F32, neg_inf());
        let l = cx.kb.var(Ty::F32, Expr::F32(0.0));
        let per_thread = dv.div_ceil(wg as usize);
        let accs: Vec<_> = (0..per_thread)
            .map(|_| cx.kb.var(Ty::F32, Expr::F32(0.0)))
            .collect();
        let start = cx.kb.let_(Ty::U32, part * u32c(chunk as u32));
        let end = cx.kb.let_(
            Ty::U32,
            min(start.clone() + u32c(chunk as u32), u32c(s_len as u32)),
        );
        let tile = cx.kb.begin_for(start, end.clone(), u32c(wg));
        let s = cx.kb.let_(Ty::U32, tile.clone() + local_id());
        let valid = lt(s.clone(), end.clone());
        let vis = self.visible(&mut cx, a, &it, s.clone(), valid)?;
        let score = cx.kb.var(Ty::F32, neg_inf());
        cx.kb.begin_if(vis.clone());
        let dot = cx.kb.var(Ty::F32, Expr::F32(0.0));
        // The key's features a run at a time, every load of a run issued before its products
        // (in the oracle's order), so a run costs one memory latency, not one per feature.
        let run = loads_in_flight(dqk);
        let d0 = cx.kb.begin_for(u32c(0), u32c(dqk as u32), u32c(run));
        let mut keys = Vec::with_capacity(run as usize);
        for j in 0..run {
            let dd = cx.kb.let_(Ty::U32, d0.clone() + u32c(j));
            let kv = self.value_at(&mut cx, a.k, &at_s(bht, s.clone(), dd.clone()))?;
            keys.push((dd, cx.kb.let_(Ty::F32, kv)));
        }
        for (dd, kv) in keys {
            cx.kb
                .set(dot, mul_add(load_shared(q_sh, dd), kv, Expr::Var(dot)));
        }
        cx.kb.end();
        let sidx = at(s.clone());
        cx.set_known(a.scores, &sidx, Expr::Var(dot));
        let logit = self.compute(&mut cx, a.logits, &sidx)?;
        cx.kb.set(score, logit);
        cx.kb.end();
        cx.kb.store_shared(red, local_id(), Expr::Var(score));
        self.tree_reduce(&mut cx, &[red], &|x, y| {
            vec![max(x[0].clone(), y[0].clone())]
        });
        let tile_max = cx.kb.let_(Ty::F32, load_shared(red, u32c(0)));
        let m_new = cx.kb.let_(Ty::F32, max(Expr::Var(m), tile_max.clone()));
        cx.kb.barrier();
        // While nothing is visible the tile adds nothing (barriers stay in uniform control
        // flow).
        let (live, alpha) = rescale(&mut cx, m, &m_new);
        let p = cx.kb.let_(
            Ty::F32,
            select(
                and(live, vis),
                exp(Expr::Var(score) - m_new.clone()),
                Expr::F32(0.0),
            ),
        );
        cx.kb.set(l, Expr::Var(l) * alpha.clone() + p.clone());
        cx.kb.store_shared(p_sh, local_id(), p);
        cx.kb.barrier();
        // A tile with nothing visible adds nothing and leaves the maximum (so the rescaling is
        // exactly 1): skip the pass over its weights (the same branch for the whole workgroup).
        cx.kb.begin_if(cmp(CmpOp::Ne, tile_max, neg_inf()));
        for (j, &acc) in accs.iter().enumerate() {
            let dj = cx.kb.let_(Ty::U32, local_id() + u32c(j as u32 * wg));
            cx.kb.begin_if(lt(dj.clone(), u32c(dv as u32)));
            cx.kb.set(acc, Expr::Var(acc) * alpha.clone());
            // The tile's values a run at a time, loads first (rows past the end clamped to the
            // last position, so every load is in bounds); a zero weight, or a position past
            // the end, leaves the sum as it is, whatever its row holds.
            let run = loads_in_flight(wg as usize);
            let i0 = cx.kb.begin_for(u32c(0), u32c(wg), u32c(run));
            let mut terms = Vec::with_capacity(run as usize);
            for j in 0..run {
                let i = cx.kb.let_(Ty::U32, i0.clone() + u32c(j));
                let si = cx.kb.let_(Ty::U32, tile.clone() + i.clone());
                let pi = cx.kb.let_(Ty::F32, load_shared(p_sh, i));
                let row = min(si.clone(), u32c(s_len as u32 - 1));
                let vv = self.value_at(&mut cx, a.v, &at_s(bht, row, dj.clone()))?;
                let vv = cx.kb.let_(Ty::F32, vv);
                let adds = and(
                    lt(si, end.clone()),
                    cmp(CmpOp::Ne, pi.clone(), Expr::F32(0.0)),
                );
                terms.push((adds, pi, vv));
            }
            for (adds, pi, vv) in terms {
                let sum = mul_add(pi, vv, Expr::Var(acc));
                cx.kb.set(acc, select(adds, sum, Expr::Var(acc)));
            }
            cx.kb.end();
            cx.kb.end();
        }
        cx.kb.end();
        cx.kb.barrier();
        cx.kb.set(m, m_new);
        cx.kb.end();
        cx.kb.store_shared(red, local_id(), Expr::Var(l));
        self.tree_reduce(&mut cx, &[red], &|x, y| vec![x[0].clone() + y[0].clone()]);
        let l_total = cx.kb.let_(Ty::F32, load_shared(red, u32c(0)));
        cx.kb.barrier();
        if parts == 1 {
            let factor = self
                .sink_logit(&mut cx, a, &bht[1])?
                .map(|sink| sink_factor(&mut cx, sink, Expr::Var(m), l_total.clone()));
            for (j, &acc) in accs.iter().enumerate() {
                let dj = cx.kb.let_(Ty::U32, local_id() + u32c(j as u32 * wg));
                cx.kb.begin_if(lt(dj.clone(), u32c(dv as u32)));
                let o =
                    poot_kernel::build::bin(BinOp::Add, row.clone() * u32c(dv as u32), dj.clone());
                if let Some(factor) = &factor {
                    cx.kb.store(outp, o, Expr::Var(acc) * factor.clone());
                } else {
                    cx.kb.begin_if(eq(Expr::Var(m), neg_inf()));
                    let mean = self.mean_of_values(&mut cx, a, bht, dj, s_len)?;
                    cx.kb.store(outp, o.clone(), mean);
                    cx.kb.otherwise();
                    cx.kb.store(outp, o, Expr::Var(acc) / l_total.clone());
                    cx.kb.end();
                }
                cx.kb.end();
            }
        } else {
            let base = cx.kb.let_(Ty::U32, item * u32c((dv + 2) as u32));
            cx.kb.begin_if(eq(local_id(), u32c(0)));
            cx.kb.store(outp, base.clone(), Expr::Var(m));
            cx.kb.store(outp, base.clone() + u32c(1), l_total);
            cx.kb.end();
            for (j, &acc) in accs.iter().enumerate() {
                let dj = cx.kb.let_(Ty::U32, local_id() + u32c(j as u32 * wg));
                cx.kb.begin_if(lt(dj.clone(), u32c(dv as u32)));
                cx.kb
                    .store(outp, base.clone() + u32c(2) + dj, Expr::Var(acc));
                cx.kb.end();
            }
        }
        self.finish_attention(cx, a, parts, target, out)
    }

    /// The buffers an attention over `parts` partitions a row writes: its output, and where the
    /// partition kernel writes (the output itself, or a scratch buffer of per-partition
    /// `(max, sum, weighted values)` records the combine reads).
    pub(super) fn attention_targets(
        &mut self,
        a: &Attention,
        parts: usize,
    ) -> Result<(LBuf, LBuf), PlanError> {
        let out = self.scratch_for(a.out)?;
        if parts == 1 {
            return Ok((out, out));
        }
        let od = self.g.values()[a.out.index()].ty.dims();
        let (rows, dv) = (od[0] * od[1] * od[2], od[3]);
        let size = 4 * (rows * parts * (dv + 2)) as u64;
        self.check_size(a.out, size)?;
        Ok((out, self.new_buffer(BufferRole::Scratch, size)))
    }

    /// Closes the item loop [`Lowering::begin_attention_item`] opened, launches the kernel over
    /// every item, and combines the partitions where there are several.
    pub(super) fn finish_attention(
        &mut self,
        mut cx: KernelCtx,
        a: &Attention,
        parts: usize,
        target: LBuf,
        out: LBuf,
    ) -> Result<(), PlanError> {
        cx.close_prologue();
        cx.kb.end();
        let od = self.g.values()[a.out.index()].ty.dims();
        let items = od[0] * od[1] * od[2] * parts;
        let s_len = self.g.values()[a.scores.index()].ty.dims()[3];
        let grid = self.groups_for(items as u32, 1);
        self.push_kernel(cx, grid)?;
        if parts > 1 {
            self.emit_attention_combine(a, target, out, parts, s_len)?;
        }
        Ok(())
    }

    /// Opens the loop over `a`'s (row, partition) items, `parts` partitions a row, then the
    /// prologue the caller closes, and stages the item's query in `q_sh` (its rotary embedding
    /// and norm computed there, as the graph computes them in place).
    pub(super) fn begin_attention_item(
        &mut self,
        cx: &mut KernelCtx,
        a: &Attention,
        parts: usize,
        q_sh: SharedId,
    ) -> Result<Item, PlanError> {
        let od = self.g.values()[a.out.index()].ty.dims().to_vec();
        let (bsz, heads, tokens) = (od[0], od[1], od[2]);
        let dqk = self.g.values()[a.q.index()].ty.dims()[3] as u32;
        let item = Self::begin_rows(cx, (bsz * heads * tokens * parts) as u32);
        let row = cx.kb.let_(Ty::U32, item.clone() / u32c(parts as u32));
        let part = cx.kb.let_(Ty::U32, item.clone() % u32c(parts as u32));
        let bht = unflatten(cx, row.clone(), &[bsz, heads, tokens]);
        cx.open_prologue();
        let threads = cx.kb.workgroup();
        let d = cx.kb.begin_for(local_id(), u32c(dqk), u32c(threads));
        let it = Item {
            item,
            row,
            part,
            bht,
        };
        let qv = self.value_at(cx, a.q, &it.at(d.clone()))?;
        cx.kb.store_shared(q_sh, d, qv);
        cx.kb.end();
        cx.kb.barrier();
        Ok(it)
    }

    /// Whether position `s` of `it`'s row is visible: `inside` (the position is one the kernel
    /// walks) and, where `a` is masked, its mask (read at `s` clamped into the cache, so a
    /// position past the end reads in bounds), as a variable.
    pub(super) fn visible(
        &mut self,
        cx: &mut KernelCtx,
        a: &Attention,
        it: &Item,
        s: Expr,
        inside: Expr,
    ) -> Result<Expr, PlanError> {
        let vis = match a.mask {
            Some(mask) => {
                let s_len = self.g.values()[a.scores.index()].ty.dims()[3] as u32;
                let seen = self.value_at(cx, mask, &it.at(min(s, u32c(s_len - 1))))?;
                and(inside, seen)
            }
            None => inside,
        };
        Ok(cx.kb.let_(Ty::Bool, vis))
    }

    /// Head `head`'s sink logit where `a` has sinks, as a variable.
    pub(super) fn sink_logit(
        &mut self,
        cx: &mut KernelCtx,
        a: &Attention,
        head: &Expr,
    ) -> Result<Option<Expr>, PlanError> {
        let Some(sinks) = a.sinks else {
            return Ok(None);
        };
        let sink = self.value_at(cx, sinks, std::slice::from_ref(head))?;
        Ok(Some(cx.kb.let_(Ty::F32, sink)))
    }

    /// How the item of row `bht` ends: its partition's `record` where there is one, else its
    /// row's output from the row's maximum `m`, sum `l` and whether anything was `seen`.
    pub(super) fn finish_item(
        &mut self,
        cx: &mut KernelCtx,
        a: &Attention,
        record: Option<Expr>,
        bht: &[Expr],
        (m, l, seen): (Expr, Expr, Expr),
    ) -> Result<Finish, PlanError> {
        if let Some(record) = record {
            return Ok(Finish::Record(record));
        }
        Ok(match self.sink_logit(cx, a, &bht[1])? {
            Some(sink) => Finish::Sink(sink_factor(cx, sink, m, l)),
            None => Finish::Divide { l, seen },
        })
    }

    /// Feature `dj` of an item's result, its `weighted` values ended as `finish` says: into the
    /// output row `row`, or unnormalised into the partition's record.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn store_item_feature(
        &mut self,
        cx: &mut KernelCtx,
        a: &Attention,
        outp: ParamId,
        finish: &Finish,
        (row, bht): (&Expr, &[Expr]),
        dj: Expr,
        weighted: Expr,
    ) -> Result<(), PlanError> {
        let dv = self.g.values()[a.out.index()].ty.dims()[3] as u32;
        let s_len = self.g.values()[a.scores.index()].ty.dims()[3];
        let o = || row.clone() * u32c(dv) + dj.clone();
        match finish {
            Finish::Divide { l, seen } => {
                let o = o();
                cx.kb.begin_if(seen.clone());
                cx.kb.store(outp, o.clone(), weighted / l.clone());
                cx.kb.otherwise();
                let mean = self.mean_of_values(cx, a, bht, dj, s_len)?;
                cx.kb.store(outp, o, mean);
                cx.kb.end();
            }
            Finish::Sink(factor) => cx.kb.store(outp, o(), weighted * factor.clone()),
            Finish::Record(record) => cx.kb.store(outp, record.clone() + u32c(2) + dj, weighted),
        }
        Ok(())
    }

    /// The mean of the values over every position for output feature `dj` of row `bht`: the
    /// oracle's result for a row with no visible position (every weight equal).
    pub(super) fn mean_of_values(
        &mut self,
        cx: &mut KernelCtx,
        a: &Attention,
        bht: &[Expr],
        dj: Expr,
        s_len: usize,
    ) -> Result<Expr, PlanError> {
        let sum = cx.kb.var(Ty::F32, Expr::F32(0.0));
        let s = cx.kb.begin_for(u32c(0), u32c(s_len as u32), u32c(1));
        let vv = self.value_at(cx, a.v, &at_s(bht, s, dj))?;
        cx.kb.set(sum, Expr::Var(sum) + vv);
        cx.kb.end();
        Ok(Expr::Var(sum) / Expr::F32(s_len as f32))
    }

    /// Combines each row's partition results `(max, sum, weighted values)` into the output.
    pub(super) fn emit_attention_combine(
        &mut self,
        a: &Attention,
        partials: LBuf,
        out: LBuf,
        parts: usize,
        s_len: usize,
    ) -> Result<(), PlanError> {
        let od = self.g.values()[a.out.index()].ty.dims().to_vec();
        let (bsz, heads, tokens, dv) = (od[0], od[1], od[2], od[3]);
        let rows = bsz * heads * tokens;
        let wg = row_threads(dv.max(parts.min(256)));
        let stride = (dv + 2) as u32;
        let mut cx = KernelCtx::labelled("attention_combine", self.label(a.out), wg);
        let outp = cx.param(out, Word::F32, true);
        let pp = cx.param(partials, Word::F32, false);
        let red = cx.kb.shared("red", Ty::F32, wg);
        let w_sh = cx.kb.shared("w", Ty::F32, parts as u32);
        let row = Self::begin_rows(&mut cx, rows as u32);
        let bht = unflatten(&mut cx, row.clone(), &[bsz, heads, tokens]);
        let first = cx.kb.let_(Ty::U32, row.clone() * u32c(parts as u32));
        let mx = cx.kb.var(Ty::F32, neg_inf());
        let p = cx.kb.begin_for(local_id(), u32c(parts as u32), u32c(wg));
        let mp = load(pp, (first.clone() + p) * u32c(stride));
        cx.kb.set(mx, max(Expr::Var(mx), mp));
        cx.kb.end();
        cx.kb.store_shared(red, local_id(), Expr::Var(mx));
        self.tree_reduce(&mut cx, &[red], &|x, y| {
            vec![max(x[0].clone(), y[0].clone())]
        });
        let big_m = cx.kb.let_(Ty::F32, load_shared(red, u32c(0)));
        cx.kb.barrier();
        // Each partition's weight, and the total of the sums under it.
        let lsum = cx.kb.var(Ty::F32, Expr::F32(0.0));
        let p = cx.kb.begin_for(local_id(), u32c(parts as u32), u32c(wg));
        let at_p = cx
            .kb
            .let_(Ty::U32, (first.clone() + p.clone()) * u32c(stride));
        let w = cx
            .kb
            .let_(Ty::F32, exp(load(pp, at_p.clone()) - big_m.clone()));
        cx.kb.store_shared(w_sh, p, w.clone());
        cx.kb
            .set(lsum, Expr::Var(lsum) + load(pp, at_p + u32c(1)) * w);
        cx.kb.end();
        cx.kb.store_shared(red, local_id(), Expr::Var(lsum));
        self.tree_reduce(&mut cx, &[red], &|x, y| vec![x[0].clone() + y[0].clone()]);
        let big_l = cx.kb.let_(Ty::F32, load_shared(red, u32c(0)));
        cx.kb.barrier();
        // The sink enters once, against the partitions' combined maximum and sum.
        let factor = self
            .sink_logit(&mut cx, a, &bht[1])?
            .map(|sink| sink_factor(&mut cx, sink, big_m.clone(), big_l.clone()));
        let dj = cx.kb.begin_for(local_id(), u32c(dv as u32), u32c(wg));
        let o = row.clone() * u32c(dv as u32) + dj.clone();
        // Where no partition saw anything the weights are undefined (-inf - -inf): the row is
        // the oracle's without reading them.
        cx.kb.begin_if(eq(big_m, neg_inf()));
        let unseen = match factor {
            Some(_) => Expr::F32(0.0),
            None => self.mean_of_values(&mut cx, a, &bht, dj.clone(), s_len)?,
        };
        cx.kb.store(outp, o.clone(), unseen);
        cx.kb.otherwise();
        let acc = cx.kb.var(Ty::F32, Expr::F32(0.0));
        let p = cx.kb.begin_for(u32c(0), u32c(parts as u32), u32c(1));
        let at_p = (first.clone() + p.clone()) * u32c(stride) + u32c(2) + dj;
        cx.kb
            .set(acc, Expr::Var(acc) + load(pp, at_p) * load_shared(w_sh, p));
        cx.kb.end();
        let result = match factor {
            Some(factor) => Expr::Var(acc) * factor,
            None => Expr::Var(acc) / big_l,
        };
        cx.kb.store(outp, o, result);
        cx.kb.end();
        cx.kb.end();
        // The weights are rewritten for the next row only after everyone read them.
        cx.kb.barrier();
        cx.kb.end();
        let grid = self.groups_for(rows as u32, 1);
        self.push_kernel(cx, grid)
    }
}

/// Loads issued together per run of a walk over `n` items: the largest of 64, 32, 16, 8, 4, 2, 1
/// that divides `n` (a head of 128 features is two memory latencies, not eight).
fn loads_in_flight(n: usize) -> u32 {
    [64, 32, 16, 8, 4, 2, 1]
        .into_iter()
        .find(|r| n.is_multiple_of(*r as usize))
        .unwrap_or(1)
}

/// `[b, h, t]` with the token replaced by position `s`, then feature `d`: a key or value index.
pub(super) fn at_s(bht: &[Expr], s: Expr, d: Expr) -> Vec<Expr> {
    vec![bht[0].clone(), bht[1].clone(), s, d]
}
