use super::{Builder, BuilderError, Traced, scalar_like, softmax};
use crate::op::{CompareOp, InferError, Scalar};
use crate::types::DType;

/// Expands `[B, H_kv, S, D]` to `[B, H_kv * n_rep, S, D]` (GQA/MQA) with reshape, broadcast,
/// reshape: query head `h` reads key head `h / n_rep`.
pub fn repeat_kv(b: &Builder, kv: Traced, n_rep: usize) -> Result<Traced, BuilderError> {
    if n_rep == 1 {
        return Ok(kv);
    }
    let (bsz, h_kv, seq, d) = dims4(b, kv, "repeat_kv")?;
    let r = b.reshape(kv, [bsz, h_kv, 1, seq, d])?;
    let r = b.broadcast(r, [bsz, h_kv, n_rep, seq, d])?;
    b.reshape(r, [bsz, h_kv * n_rep, seq, d])
}

/// Which cache positions each new token may attend to, `bool [B, 1, T, cap]`: key `j` is visible
/// from absolute position `p` when `j <= p`, and with a sliding `window`, when `p - j < window`.
/// Built from the position slot against an iota, so no slot carries a mask.
pub fn causal_mask(
    b: &Builder,
    pos: Traced,
    cap: usize,
    window: Option<usize>,
) -> Result<Traced, BuilderError> {
    let pd = b.dims(pos)?;
    let (bsz, t) = match pd.as_slice() {
        &[bsz, t] => (bsz, t),
        _ => {
            return Err(BuilderError::Infer {
                at: "causal_mask".to_string(),
                source: InferError::IndexRank {
                    op: "causal_mask",
                    input: 0,
                    rank: pd.len(),
                    expected: 2,
                },
            });
        }
    };
    let shape = [bsz, t, cap];
    let keys = b.iota(shape, 2, DType::I32)?;
    let p = b.broadcast(b.reshape(pos, [bsz, t, 1])?, shape)?;
    let mut visible = b.compare(CompareOp::Le, keys, p)?;
    if let Some(w) = window {
        let w = i32::try_from(w).unwrap_or(i32::MAX);
        let lo = b.sub(p, b.broadcast(b.literal(Scalar::I32(w))?, shape)?)?;
        visible = b.binary(
            crate::op::BinaryOp::And,
            visible,
            b.compare(CompareOp::Gt, keys, lo)?,
        )?;
    }
    b.reshape(visible, [bsz, 1, t, cap])
}

/// Attention parameters beyond the tensors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionOptions {
    /// Query heads per key/value head.
    pub n_rep: usize,
    /// Score scale, usually `1 / sqrt(head_dim)`.
    pub scale: f32,
    /// `c * tanh(s / c)` on the scores before masking (Gemma 2).
    pub softcap: Option<f32>,
}

/// `softmax(mask(q k^T * scale)) v` over the whole cache: `q [B, Hq, T, D]`, `k`/`v`
/// `[B, Hkv, S, D]`, `mask` bool broadcastable to `[B, Hq, T, S]`. Masked scores become the most
/// negative finite f32, so a row never divides by zero.
pub fn attention_masked(
    b: &Builder,
    q: Traced,
    k: Traced,
    v: Traced,
    mask: Traced,
    opts: AttentionOptions,
) -> Result<Traced, BuilderError> {
    attention_masked_with(b, q, k, v, mask, opts, ScoreTerms::default())
}

/// [`attention_masked`] with an optional learned sink logit per query head, `sinks [Hq]`
/// (gpt-oss): each row's softmax denominator also counts `exp(sink)`, and the sink carries no
/// value, so a row may give less than all of its weight to the positions. Its max includes the
/// sink, as `softmax(concat(x, sink))[..., :S]` computes it.
pub fn attention_masked_sinks(
    b: &Builder,
    q: Traced,
    k: Traced,
    v: Traced,
    mask: Traced,
    opts: AttentionOptions,
    sinks: Option<Traced>,
) -> Result<Traced, BuilderError> {
    let terms = ScoreTerms { bias: None, sinks };
    attention_masked_with(b, q, k, v, mask, opts, terms)
}

/// What an attention adds to its scores beyond `q k^T * scale` (and the softcap).
#[derive(Clone, Copy, Debug, Default)]
pub struct ScoreTerms {
    /// Added to every score after the scale and softcap, before masking: f32, broadcastable to
    /// `[B, Hq, T, S]` (ALiBi's [`alibi_bias`](super::alibi_bias)).
    pub bias: Option<Traced>,
    /// A learned sink logit per query head `[Hq]` in each softmax denominator (see
    /// [`attention_masked_sinks`]).
    pub sinks: Option<Traced>,
}

/// [`attention_masked`] with the extra score terms of `terms`. A bias stays a same-shape
/// element-wise step between the scores and the mask, so the flash-attention rewrite computes
/// it with the rest of the logits; a sink changes the softmax, which the rewrite recognises and
/// applies once each row's maximum and sum are whole.
pub fn attention_masked_with(
    b: &Builder,
    q: Traced,
    k: Traced,
    v: Traced,
    mask: Traced,
    opts: AttentionOptions,
    terms: ScoreTerms,
) -> Result<Traced, BuilderError> {
    let (bsz, hq, t, _) = dims4(b, q, "attention")?;
    let k = repeat_kv(b, k, opts.n_rep)?;
    let v = repeat_kv(b, v, opts.n_rep)?;
    let s_len = dims4(b, k, "attention")?.2;
    let mut scores = b.matmul(q, k, true)?; // [B, Hq, T, S]
    scores = b.mul(scores, scalar_like(b, opts.scale, scores)?)?;
    if let Some(c) = opts.softcap {
        let inner = b.tanh(b.mul(scores, scalar_like(b, 1.0 / c, scores)?)?)?;
        scores = b.mul(inner, scalar_like(b, c, inner)?)?;
    }
    let shape = [bsz, hq, t, s_len];
    if let Some(bias) = terms.bias {
        let bias = if b.dims(bias)? == shape {
            bias
        } else {
            b.broadcast(bias, shape)?
        };
        scores = b.add(scores, bias)?;
    }
    let mask = if b.dims(mask)? == shape {
        mask
    } else {
        b.broadcast(mask, shape)?
    };
    let floor = scalar_like(b, f32::MIN, scores)?;
    let scores = b.select(mask, scores, floor)?;
    let p = match terms.sinks {
        None => softmax(b, scores, 3)?,
        Some(sinks) => softmax_with_sink(b, scores, sinks, shape)?,
    };
    b.matmul(p, v, false)
}

/// `exp(x - m) / (sum(exp(x - m)) + exp(sink - m))` along the last axis of `x [B, H, T, S]`,
/// with `m` the larger of the row's max and its head's sink.
fn softmax_with_sink(
    b: &Builder,
    x: Traced,
    sinks: Traced,
    shape: [usize; 4],
) -> Result<Traced, BuilderError> {
    let [bsz, hq, t, _] = shape;
    let rows = [bsz, hq, t, 1];
    let sink = b.broadcast(b.reshape(sinks, [1, hq, 1, 1])?, rows)?;
    let m = b.max(b.reduce_max(x, 3)?, sink)?;
    let e = b.exp(b.sub(x, b.broadcast(m, shape)?)?)?;
    let sum = b.add(b.reduce_sum(e, 3)?, b.exp(b.sub(sink, m)?)?)?;
    b.div(e, b.broadcast(sum, shape)?)
}

fn dims4(
    b: &Builder,
    x: Traced,
    op: &'static str,
) -> Result<(usize, usize, usize, usize), BuilderError> {
    match b.dims(x)?.as_slice() {
        &[a, h, s, d] => Ok((a, h, s, d)),
        other => Err(BuilderError::Infer {
            at: op.to_string(),
            source: InferError::IndexRank {
                op,
                input: 0,
                rank: other.len(),
                expected: 4,
            },
        }),
    }
}
