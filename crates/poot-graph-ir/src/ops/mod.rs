//! Composite helpers. Each appends primitive equations through the [`Builder`]; none is an op.
//! Every helper returns a `Result` and records nothing it cannot finish type-checking.
//!
//! Layout conventions: activations are `[.., D]` with features last; attention tensors are
//! `[B, H, T, D]` (batch, heads, positions, head dim); positions are absolute `i32` `[B, T]`.

mod activation;
mod alibi;
mod attention;
mod broadcast;
mod linear;
mod norm;
mod rope;
mod softmax;

pub use activation::{geglu, gelu_erf, gelu_tanh, silu, swiglu};
pub use alibi::{alibi_bias, key_offsets};
pub use attention::{
    AttentionOptions, ScoreTerms, attention_masked, attention_masked_sinks, attention_masked_with,
    causal_mask, repeat_kv,
};
pub use broadcast::{binary_bcast, broadcast_shape, scalar_like, to_f32};
pub use linear::{embed, linear, row_parallel_linear};
pub use norm::{RmsNormOptions, layernorm, rmsnorm, rmsnorm_with};
pub use rope::{RopeStyle, rope};
pub use softmax::softmax;

use crate::builder::{Builder, BuilderError, Traced};
