//! Multi-head attention (MHA, GQA, MQA) with optional biases, clipped projections, qk-norm,
//! rotary embeddings, ALiBi, sliding window, logit softcap and learned sinks, over the step's KV
//! cache or over the step's own tokens.

use poot_graph_ir::ops::{self, AttentionOptions, RopeStyle, ScoreTerms, scalar_like};
use poot_graph_ir::{BinaryOp, Builder, Traced};

use super::{Norm, Step, adapted, apply_norm};
use crate::error::TraceError;
use crate::tensor_parallel::Heads;
use crate::weights::{Role, WeightRole};

/// Which rotary table pair a layer reads, and how it pairs features.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RopeUse {
    pub table: u8,
    pub style: RopeStyle,
}

/// Where keys and values come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvSource {
    /// The layer's KV cache (a decoder): causal over absolute positions.
    Cache,
    /// The step's own tokens (an encoder): every real token sees every real token.
    SelfOnly,
}

/// What a q/k norm normalizes over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkNormSpan {
    /// Each head's features, with a `[head_dim]` scale (Qwen3, Gemma 3).
    Head,
    /// The whole projection, with a `[heads * head_dim]` scale (OLMoE).
    Projection,
}

/// One layer's attention hyperparameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionParams {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
    pub rope: Option<RopeUse>,
    pub window: Option<usize>,
    pub softcap: Option<f32>,
    /// RMS norm of each query and key head before the rotary embedding (Qwen3, Gemma 3).
    pub qk_norm: Option<Norm>,
    pub qk_norm_span: QkNormSpan,
    pub kv: KvSource,
    /// A learned sink logit per query head (`Role::AttnSinks`, `[n_heads]`) in each softmax
    /// denominator (gpt-oss).
    pub sinks: bool,
    /// ALiBi: each head's slope (`Role::AlibiSlopes`) times the key's offset from the query
    /// added to the scores (MPT, BLOOM); with the KV cache only.
    pub alibi: bool,
    /// Clamps every query, key and value projection to `[-c, c]` (MPT's `clip_qkv`).
    pub clip: Option<f32>,
}

/// Attention of `h` `[rows, tokens, hidden]` for layer `layer`, returning `[rows, tokens, hidden_out]`.
pub fn attention(
    b: &Builder,
    step: &Step,
    layer: usize,
    h: Traced,
    p: &AttentionParams,
) -> Result<Traced, TraceError> {
    let role = |r| WeightRole::layer(layer, r);
    let (rows, tokens) = (step.shape.rows, step.shape.tokens);
    // A tensor-parallel rank attends over its share of the key/value heads and the query heads
    // that read them, so each query head still meets its own key/value head.
    let shard = step.shape.shard;
    let (n_heads, n_kv_heads) = if shard.is_whole() {
        (p.n_heads, p.n_kv_heads)
    } else {
        Heads {
            n_heads: p.n_heads,
            n_kv_heads: p.n_kv_heads,
            head_dim: p.head_dim,
        }
        .share(shard)?
    };
    let heads = |x: Traced, n: usize, norm_role: Option<Role>| -> Result<Traced, TraceError> {
        let norm = match (norm_role, p.qk_norm) {
            (Some(r), Some(norm)) => Some((role(r), norm)),
            _ => None,
        };
        let x = match (norm, p.qk_norm_span) {
            (Some((r, norm)), QkNormSpan::Projection) => apply_norm(b, step, x, r, norm)?,
            _ => x,
        };
        let x = b.reshape(x, [rows, tokens, n, p.head_dim])?;
        let x = match (norm, p.qk_norm_span) {
            (Some((r, norm)), QkNormSpan::Head) => apply_norm(b, step, x, r, norm)?,
            _ => x,
        };
        Ok(b.transpose(x, vec![0, 2, 1, 3])?)
    };
    let proj = |w: Role, bias: Role| -> Result<Traced, TraceError> {
        let y = ops::linear(
            b,
            h,
            step.weight(b, role(w))?,
            step.weight_opt(b, role(bias))?,
        )?;
        let y = adapted(b, step, layer, w, h, y)?;
        match p.clip {
            Some(c) => {
                let hi = scalar_like(b, c, y)?;
                Ok(b.max(b.binary(BinaryOp::Min, y, hi)?, b.neg(hi)?)?)
            }
            None => Ok(y),
        }
    };
    let mut q = heads(
        proj(Role::AttnQ, Role::AttnQBias)?,
        n_heads,
        Some(Role::QNorm),
    )?;
    let mut k = heads(
        proj(Role::AttnK, Role::AttnKBias)?,
        n_kv_heads,
        Some(Role::KNorm),
    )?;
    let v = heads(proj(Role::AttnV, Role::AttnVBias)?, n_kv_heads, None)?;
    if let Some(rope) = p.rope {
        let cos = step.weight(b, WeightRole::global(Role::RopeCos(rope.table)))?;
        let sin = step.weight(b, WeightRole::global(Role::RopeSin(rope.table)))?;
        q = ops::rope(b, q, cos, sin, step.pos, rope.style)?;
        k = ops::rope(b, k, cos, sin, step.pos, rope.style)?;
    }
    let q = b.name(q, "q")?;
    let (k_all, v_all, mask) = match p.kv {
        KvSource::Cache => {
            let (kc, vc) = step.write_kv(b, layer, k, v)?;
            (kc, vc, step.causal_mask(b, p.window)?)
        }
        KvSource::SelfOnly => (k, v, step.padding_mask(b)?),
    };
    let bias = match (p.alibi, p.kv) {
        (false, _) => None,
        (true, KvSource::Cache) => {
            let slopes = step.weight(b, WeightRole::global(Role::AlibiSlopes))?;
            Some(ops::alibi_bias(b, step.key_offsets(b)?, slopes)?)
        }
        (true, KvSource::SelfOnly) => {
            return Err(TraceError::Shape {
                rows,
                tokens,
                capacity: step.shape.capacity,
                why: "ALiBi biases keys by their cache position: attention over the KV cache only",
            });
        }
    };
    let n_rep = n_heads / n_kv_heads.max(1);
    let sinks = match p.sinks {
        true => {
            let w = step.weight(b, role(Role::AttnSinks))?;
            let to = b.aval(q)?.dtype;
            Some(match b.aval(w)?.dtype == to {
                true => w,
                false => b.cast(w, to)?,
            })
        }
        false => None,
    };
    let o = ops::attention_masked_with(
        b,
        q,
        k_all,
        v_all,
        mask,
        AttentionOptions {
            n_rep,
            scale: p.scale,
            softcap: p.softcap,
        },
        ScoreTerms { bias, sinks },
    )?;
    let o = b.transpose(o, vec![0, 2, 1, 3])?;
    let o = b.reshape(o, [rows, tokens, n_heads * p.head_dim])?;
    let y = ops::row_parallel_linear(
        b,
        o,
        step.weight(b, role(Role::AttnO))?,
        step.weight_opt(b, role(Role::AttnOBias))?,
        shard.ranks,
    )?;
    let o = adapted(b, step, layer, Role::AttnO, o, y)?;
    Ok(b.name(o, "attn_out")?)
}
