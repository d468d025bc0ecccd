//! OLMoE: a Llama-shaped decoder whose query and key projections are RMS-normalized as a whole
//! (one scale over all heads' features, before the rotary embedding), with every feed-forward
//! replaced by routed SwiGLU experts, softmax-scored, the top-k not renormalized unless
//! `norm_topk_prob` says so. llama.cpp's converter writes it as arch `olmoe`, halves rotated
//! as stored.

use crate::components::dense::build_standard_named;
use crate::components::{MoeSpec, QkNormSpan};
use crate::config::{RawConfig, SourceKind, key};
use crate::error::ModelError;
use crate::model::ModelParts;
use crate::registry::FamilyEntry;
use crate::weights::TensorIndex;

// OLMoE names its tensors as Qwen3-MoE does.
use super::qwen3moe::NAMES;

pub const ENTRY: FamilyEntry = FamilyEntry {
    family: "olmoe",
    keys: &[
        (SourceKind::HuggingFace, "olmoe"),
        (SourceKind::Gguf, "olmoe"),
    ],
    build,
};

fn build(raw: &RawConfig, index: &dyn TensorIndex) -> Result<ModelParts, ModelError> {
    build_standard_named(raw, index, "olmoe", &NAMES, |cfg, spec| {
        spec.qk_norm = true;
        spec.qk_norm_span = QkNormSpan::Projection;
        // Clipping q, k and v (`clip_qkv`) is not a component option yet: refused, not ignored.
        let clip_key = key("clip_qkv", "");
        if let Some(clip) = cfg.opt_f32(clip_key)? {
            return Err(cfg.unsupported(clip_key, clip, "null (no clipping)"));
        }
        // transformers and llama.cpp both leave OLMoE's top-k weights as softmaxed.
        let renormalize = cfg
            .opt_bool(key("norm_topk_prob", "expert_weights_norm"))?
            .unwrap_or(false);
        // transformers 5 spells the count `num_experts` (`num_local_experts` is its alias).
        let experts_key = match cfg.hf("num_experts") {
            None if cfg.kind() == SourceKind::HuggingFace => key("num_local_experts", ""),
            _ => key("num_experts", "expert_count"),
        };
        spec.moe = Some(MoeSpec::read(
            cfg,
            experts_key,
            key("num_experts_per_tok", "expert_used_count"),
            spec.intermediate,
            renormalize,
        )?);
        Ok(())
    })
}
