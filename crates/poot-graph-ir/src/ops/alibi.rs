//! ALiBi (attention with linear biases, Press et al. 2022): each head adds `slope * (j - p)`
//! to the score of key position `j` seen from query position `p`, in place of a positional
//! embedding. The slopes are the model's (a constant per query head); the offsets come from the
//! position slot against an iota, like the causal mask, so no slot carries a bias.
//!
//! Transformers adds `slope * j` (BLOOM) or `slope * (j - last key)` (MPT) instead: each differs
//! from `slope * (j - p)` by a constant per row, which a softmax over the row does not see. The
//! offset from the query keeps the biases of the visible keys small (at most zero) at any
//! position, so a long cache adds no large constant to round away.

use super::{Builder, BuilderError, Traced};
use crate::op::InferError;
use crate::types::DType;

/// `f32 [B, 1, T, cap]`: `j - p` for cache position `j` and the absolute position `p` of each
/// new token, from the positions `pos [B, T]`. Keys past a token (`j > p`) get positive
/// offsets; the causal mask hides them.
pub fn key_offsets(b: &Builder, pos: Traced, cap: usize) -> Result<Traced, BuilderError> {
    let (bsz, t) = match b.dims(pos)?.as_slice() {
        &[bsz, t] => (bsz, t),
        other => {
            return Err(BuilderError::Infer {
                at: "key_offsets".to_string(),
                source: InferError::IndexRank {
                    op: "key_offsets",
                    input: 0,
                    rank: other.len(),
                    expected: 2,
                },
            });
        }
    };
    let shape = [bsz, t, cap];
    let keys = b.iota(shape, 2, DType::I32)?;
    let p = b.broadcast(b.reshape(pos, [bsz, t, 1])?, shape)?;
    let offsets = b.cast(b.sub(keys, p)?, DType::F32)?;
    b.reshape(offsets, [bsz, 1, t, cap])
}

/// The ALiBi score bias `f32 [B, H, T, S]`: `slopes [H]` (one per query head, f32) times
/// `offsets [B, 1, T, S]` from [`key_offsets`].
pub fn alibi_bias(b: &Builder, offsets: Traced, slopes: Traced) -> Result<Traced, BuilderError> {
    let (bsz, t, s) = match b.dims(offsets)?.as_slice() {
        &[bsz, _, t, s] => (bsz, t, s),
        other => {
            return Err(BuilderError::Infer {
                at: "alibi_bias".to_string(),
                source: InferError::IndexRank {
                    op: "alibi_bias",
                    input: 0,
                    rank: other.len(),
                    expected: 4,
                },
            });
        }
    };
    let heads: usize = b.dims(slopes)?.iter().product();
    let shape = [bsz, heads, t, s];
    let slopes = b.broadcast(b.reshape(slopes, [1, heads, 1, 1])?, shape)?;
    b.mul(b.broadcast(offsets, shape)?, slopes)
}
