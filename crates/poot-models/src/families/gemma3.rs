//! Gemma 3 (text): sandwich norms, qk-norm, scaled embeddings, GeGLU, and five sliding-window
//! layers (local rotary base) per global layer (global rotary base).

use poot_graph_ir::ops::{RmsNormOptions, RopeStyle};

use crate::components::dense::{DecoderBasics, STANDARD_DECODER_NAMES, check_rope_base};
use crate::components::{
    Activation, DenseDecoder, DenseDecoderSpec, LayerAttention, Norm, RopeConfig, RopeScaling,
};
use crate::config::{ConfigReader, RawConfig, SourceKind, key};
use crate::error::ModelError;
use crate::limits::POSITIONS;
use crate::model::ModelParts;
use crate::registry::FamilyEntry;
use crate::weights::{NameTable, Role, TensorIndex, spell};

pub const ENTRY: FamilyEntry = FamilyEntry {
    family: "gemma3",
    keys: &[
        (SourceKind::HuggingFace, "gemma3_text"),
        (SourceKind::Gguf, "gemma3"),
    ],
    build,
};

/// Gemma's spellings (shared with Gemma 2): sandwich norms around attention and the MLP.
pub(crate) const NAMES: NameTable = NameTable::extending(
    &STANDARD_DECODER_NAMES,
    &[
        spell(
            Role::PostAttnNorm,
            "model.layers.{l}.post_attention_layernorm.weight",
            "blk.{l}.post_attention_norm.weight",
        ),
        spell(
            Role::FfnNorm,
            "model.layers.{l}.pre_feedforward_layernorm.weight",
            "blk.{l}.ffn_norm.weight",
        ),
        spell(
            Role::PostFfnNorm,
            "model.layers.{l}.post_feedforward_layernorm.weight",
            "blk.{l}.post_ffw_norm.weight",
        ),
    ],
);

/// Layers per global layer when a config does not list layer types (llama.cpp fixes it at 6).
const SLIDING_PATTERN: usize = 6;

fn build(raw: &RawConfig, index: &dyn TensorIndex) -> Result<ModelParts, ModelError> {
    let cfg = ConfigReader::new(raw);
    let basics = DecoderBasics::read(&cfg, index, &NAMES)?;
    let global = RopeConfig {
        theta: basics.theta,
        dims: basics.rope_dims,
        scaling: RopeConfig::read_scaling(&cfg, basics.rope_dims)?,
    };
    let local_key = key("rope_local_base_freq", "");
    let local_theta = cfg.opt_f32(local_key)?.unwrap_or(10000.0);
    check_rope_base(&cfg, local_key, local_theta)?;
    let local = RopeConfig {
        theta: local_theta,
        dims: basics.rope_dims,
        scaling: RopeScaling::None,
    };
    let window = cfg.usize_at_most(key("sliding_window", "attention.sliding_window"), POSITIONS)?;
    let sliding = sliding_layers(&cfg, basics.layers, SLIDING_PATTERN)?;

    let mut spec =
        DenseDecoderSpec::standard("gemma3", &basics, global.clone(), RopeStyle::HalfSplit);
    spec.config.chat_format = Some("gemma");
    spec.norm = norm(&cfg, basics.eps);
    spec.sandwich_norms = true;
    spec.qk_norm = true;
    spec.activation = Activation::GeluTanh;
    spec.ropes = vec![global, local];
    spec.layers = sliding
        .iter()
        .map(|&s| {
            if s {
                LayerAttention {
                    rope_table: Some(1),
                    window: Some(window),
                }
            } else {
                LayerAttention {
                    rope_table: Some(0),
                    window: None,
                }
            }
        })
        .collect();
    let scalar = cfg
        .opt_f32(key("query_pre_attn_scalar", ""))?
        .unwrap_or(basics.head_dim as f32);
    spec.attn_scale = 1.0 / scalar.sqrt();
    spec.attn_softcap = cfg.opt_f32(key("attn_logit_softcapping", ""))?;
    spec.final_softcap = cfg.opt_f32(key("final_logit_softcapping", ""))?;
    spec.embed_scale = Some((basics.hidden as f32).sqrt());
    Ok(ModelParts {
        model: Box::new(DenseDecoder::build(spec, index, &NAMES, cfg.kind())?),
    })
}

/// Gemma's RMS norm, which scales by `(1 + w)`; llama.cpp's converter stores `w + 1`, so a GGUF
/// scales by `w`.
pub(crate) fn norm(cfg: &ConfigReader, eps: f32) -> Norm {
    let weight_offset = match cfg.kind() {
        SourceKind::HuggingFace => 1.0,
        SourceKind::Gguf => 0.0,
    };
    Norm::Rms(RmsNormOptions { eps, weight_offset })
}

/// Which layers use the sliding window: Hugging Face's `layer_types` when given, otherwise every
/// layer but each `sliding_window_pattern`-th (`default_pattern` when the config has none).
pub(crate) fn sliding_layers(
    cfg: &ConfigReader,
    layers: usize,
    default_pattern: usize,
) -> Result<Vec<bool>, ModelError> {
    if let Some(types) = cfg.hf("layer_types") {
        let bad = || ModelError::KeyType {
            key: "layer_types".into(),
            expected: "a list of sliding_attention / full_attention",
        };
        let list = types.as_array().ok_or_else(bad)?;
        if list.len() != layers {
            return Err(ModelError::Unsupported {
                key: "layer_types".into(),
                value: format!("{} entries", list.len()),
                supported: "one entry per layer",
            });
        }
        return list
            .iter()
            .map(|t| match t.as_str() {
                Some("sliding_attention") => Ok(true),
                Some("full_attention") => Ok(false),
                _ => Err(bad()),
            })
            .collect();
    }
    let pattern = cfg
        .opt_usize(key("sliding_window_pattern", ""))?
        .unwrap_or(default_pattern)
        .max(1);
    Ok((0..layers).map(|l| (l + 1) % pattern != 0).collect())
}
