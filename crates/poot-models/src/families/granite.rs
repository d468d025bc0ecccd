//! IBM Granite (3.x dense): the Llama decoder with four multipliers: the embeddings are scaled
//! by `embedding_multiplier`, attention scores by `attention_multiplier` (in place of
//! `1/sqrt(head_dim)`), each block's output by `residual_multiplier` before the residual add,
//! and the logits divided by `logits_scaling`. A GGUF Granite (llama.cpp's converter) permutes
//! Q and K rows as a Llama's.

use poot_graph_ir::ops::RopeStyle;

use crate::components::DenseDecoderSpec;
use crate::components::dense::build_standard;
use crate::config::{ConfigReader, Key, RawConfig, SourceKind, key};
use crate::error::ModelError;
use crate::model::ModelParts;
use crate::registry::FamilyEntry;
use crate::weights::TensorIndex;

pub const ENTRY: FamilyEntry = FamilyEntry {
    family: "granite",
    keys: &[
        (SourceKind::HuggingFace, "granite"),
        (SourceKind::Gguf, "granite"),
    ],
    build,
};

fn build(raw: &RawConfig, index: &dyn TensorIndex) -> Result<ModelParts, ModelError> {
    build_standard(raw, index, "granite", |cfg, spec| {
        apply_multipliers(cfg, spec)
    })
}

/// Reads Granite's multipliers into `spec` (and the GGUF row order); Granite-MoE shares them.
/// A multiplier that is not finite, an attention scale or logit divisor that is not positive,
/// is refused by key.
pub fn apply_multipliers(
    cfg: &ConfigReader,
    spec: &mut DenseDecoderSpec,
) -> Result<(), ModelError> {
    if cfg.kind() == SourceKind::Gguf {
        spec.rope_style = RopeStyle::Interleaved;
        spec.qk_rows_interleaved = true;
    }
    let finite = |k: Key, default: f32| -> Result<f32, ModelError> {
        let v = cfg.opt_f32(k)?.unwrap_or(default);
        if v.is_finite() {
            Ok(v)
        } else {
            Err(cfg.out_of_range(k, v, "a finite multiplier"))
        }
    };
    let positive = |k: Key, default: f32| -> Result<f32, ModelError> {
        let v = finite(k, default)?;
        if v > 0.0 {
            Ok(v)
        } else {
            Err(cfg.out_of_range(k, v, "a finite value > 0"))
        }
    };
    spec.embed_scale = Some(finite(key("embedding_multiplier", "embedding_scale"), 1.0)?);
    spec.residual_scale = Some(finite(key("residual_multiplier", "residual_scale"), 1.0)?);
    // transformers defaults the attention multiplier to 1; llama.cpp reads an absent scale as
    // the usual 1/sqrt(head_dim).
    let default_scale = match cfg.kind() {
        SourceKind::HuggingFace => 1.0,
        SourceKind::Gguf => spec.attn_scale,
    };
    spec.attn_scale = positive(
        key("attention_multiplier", "attention.scale"),
        default_scale,
    )?;
    spec.logit_divisor = Some(positive(key("logits_scaling", "logit_scale"), 1.0)?);
    Ok(())
}
