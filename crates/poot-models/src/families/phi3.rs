//! Phi-3 (and Phi-3.5, Phi-4-mini): the Llama decoder with Q, K and V stored as one `qkv_proj`
//! and gate and up as one `gate_up_proj`, each bound as row ranges of its tensor; a partial
//! rotary factor when present; a sliding window over every layer when the config sets one; and
//! LongRoPE's short factors with transformers' attention scaling while a step's capacity stays
//! within `original_max_position_embeddings` (longer capacities are refused when traced). A
//! GGUF's `rope_factors_*` tensors (llama.cpp's LongRoPE) are refused.

use crate::components::LayerAttention;
use crate::components::dense::QkvLayout;
use crate::components::dense::{STANDARD_DECODER_NAMES, build_standard_named};
use crate::config::{RawConfig, SourceKind, key};
use crate::error::ModelError;
use crate::limits::POSITIONS;
use crate::model::ModelParts;
use crate::registry::FamilyEntry;
use crate::weights::{NameTable, Role, TensorIndex, spell};

pub const ENTRY: FamilyEntry = FamilyEntry {
    family: "phi3",
    keys: &[
        (SourceKind::HuggingFace, "phi3"),
        (SourceKind::Gguf, "phi3"),
    ],
    build,
};

const QKV: (&str, &str) = (
    "model.layers.{l}.self_attn.qkv_proj.weight",
    "blk.{l}.attn_qkv.weight",
);
/// llama.cpp keeps the fused gate and up as `ffn_up`, gate rows first.
const GATE_UP: (&str, &str) = (
    "model.layers.{l}.mlp.gate_up_proj.weight",
    "blk.{l}.ffn_up.weight",
);

const NAMES: NameTable = NameTable::extending(
    &STANDARD_DECODER_NAMES,
    &[
        spell(Role::AttnQ, QKV.0, QKV.1),
        spell(Role::AttnK, QKV.0, QKV.1),
        spell(Role::AttnV, QKV.0, QKV.1),
        spell(Role::FfnGate, GATE_UP.0, GATE_UP.1),
        spell(Role::FfnUp, GATE_UP.0, GATE_UP.1),
    ],
);

/// The tensors llama.cpp's converter writes for LongRoPE's factors.
const GGUF_ROPE_FACTORS: [&str; 2] = ["rope_factors_short.weight", "rope_factors_long.weight"];

fn build(raw: &RawConfig, index: &dyn TensorIndex) -> Result<ModelParts, ModelError> {
    build_standard_named(raw, index, "phi3", &NAMES, |cfg, spec| {
        if let Some(name) = GGUF_ROPE_FACTORS
            .into_iter()
            .find(|n| index.tensor_meta(n).is_some())
        {
            return Err(ModelError::Unsupported {
                key: name.into(),
                value: "present".into(),
                supported: "a GGUF without LongRoPE factor tensors",
            });
        }
        spec.qkv = QkvLayout::Fused;
        spec.fused_gate_up = true;
        // A window of 0 (llama.cpp's converter writes one for none) means full attention.
        let window = cfg
            .opt_usize_at_most(key("sliding_window", "attention.sliding_window"), POSITIONS)?
            .filter(|&w| w > 0);
        spec.layers = vec![
            LayerAttention {
                rope_table: Some(0),
                window
            };
            spec.config.n_layers
        ];
        Ok(())
    })
}
