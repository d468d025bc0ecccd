//! Gemma 2: Gemma's sandwich norms, scaled embeddings and GeGLU, sliding-window layers
//! alternating with global ones over one rotary table, queries scaled by
//! `query_pre_attn_scalar`, and tanh softcaps on the attention logits and the final logits.

use crate::components::Activation;
use crate::components::LayerAttention;
use crate::components::dense::build_standard_named;
use crate::config::{ConfigReader, Key, RawConfig, SourceKind, key};
use crate::error::ModelError;
use crate::families::gemma3;
use crate::limits::POSITIONS;
use crate::model::ModelParts;
use crate::registry::FamilyEntry;
use crate::weights::TensorIndex;

pub const ENTRY: FamilyEntry = FamilyEntry {
    family: "gemma2",
    keys: &[
        (SourceKind::HuggingFace, "gemma2"),
        (SourceKind::Gguf, "gemma2"),
    ],
    build,
};

/// Every other layer is a sliding-window layer, the first one included (transformers'
/// `layer_types` default and llama.cpp's fixed pattern).
const SLIDING_PATTERN: usize = 2;

fn build(raw: &RawConfig, index: &dyn TensorIndex) -> Result<ModelParts, ModelError> {
    build_standard_named(raw, index, "gemma2", &gemma3::NAMES, |cfg, spec| {
        let eps = match spec.norm {
            crate::components::Norm::Rms(o) => o.eps,
            crate::components::Norm::Layer { eps } => eps,
        };
        spec.config.chat_format = Some("gemma");
        spec.norm = gemma3::norm(cfg, eps);
        spec.sandwich_norms = true;
        spec.activation = Activation::GeluTanh;
        let window_key = key("sliding_window", "attention.sliding_window");
        let window = cfg.usize_at_most(window_key, POSITIONS)?;
        let sliding = gemma3::sliding_layers(cfg, spec.config.n_layers, SLIDING_PATTERN)?;
        spec.layers = sliding
            .iter()
            .map(|&s| LayerAttention {
                rope_table: Some(0),
                window: s.then_some(window),
            })
            .collect();
        spec.attn_scale = query_scale(cfg, spec.head_dim, spec.n_heads)?;
        spec.attn_softcap = softcap(cfg, key("attn_logit_softcapping", "attn_logit_softcapping"))?;
        spec.final_softcap = softcap(
            cfg,
            key("final_logit_softcapping", "final_logit_softcapping"),
        )?;
        spec.embed_scale = Some((spec.config.hidden_size as f32).sqrt());
        Ok(())
    })
}

/// The query scale: `query_pre_attn_scalar^-1/2` from a Hugging Face config. llama.cpp's
/// converter drops that key and scales a Gemma 2 by the head dim's root, the 27B (46 layers)
/// by `hidden / heads`; a GGUF that states `attention.scale` is read as it says.
fn query_scale(cfg: &ConfigReader, head_dim: usize, n_heads: usize) -> Result<f32, ModelError> {
    let scale_key = key("", "attention.scale");
    if let Some(scale) = cfg.opt_f32(scale_key)? {
        if !(scale.is_finite() && scale > 0.0) {
            return Err(cfg.out_of_range(scale_key, scale, "a finite scale > 0"));
        }
        return Ok(scale);
    }
    let scalar_key = key("query_pre_attn_scalar", "");
    let scalar = match cfg.opt_f32(scalar_key)? {
        Some(s) => s,
        None if cfg.kind() == SourceKind::Gguf && cfg.usize(key("", "block_count"))? == 46 => {
            (cfg.usize(key("", "embedding_length"))? / n_heads.max(1)) as f32
        }
        None => head_dim as f32,
    };
    if !(scalar.is_finite() && scalar > 0.0) {
        return Err(cfg.out_of_range(scalar_key, scalar, "a finite scalar > 0"));
    }
    Ok(1.0 / scalar.sqrt())
}

/// A softcap `c` in `c * tanh(x / c)`: absent (or null) for none, else finite and positive.
fn softcap(cfg: &ConfigReader, k: Key) -> Result<Option<f32>, ModelError> {
    match cfg.opt_f32(k)? {
        Some(c) if !(c.is_finite() && c > 0.0) => {
            Err(cfg.out_of_range(k, c, "a finite softcap > 0"))
        }
        c => Ok(c),
    }
}
