//! gpt-oss: a pre-norm decoder whose attention has Q/K/V/O biases and a learned sink logit per
//! query head, sliding-window layers alternating with full ones (`layer_types`), YaRN rotary
//! scaling, and routed experts with a biased router (top-k of the logits, softmax over the
//! selected: the softmax over all experts renormalized), per-expert biases, gate and up rows
//! interleaved in one stack, and a clamped SwiGLU (`swiglu_alpha`, `swiglu_limit`).
//!
//! transformers stores each layer's experts as `[experts, in, out]` stacks, read transposed.
//! The released checkpoints quantize those stacks to MXFP4 (`*_blocks`, `*_scales`), which no
//! weight format here reads: such a checkpoint is refused with `ModelError::TensorType`
//! naming the blocks tensor; a bf16 or f32 conversion loads.

use crate::components::dense::{STANDARD_DECODER_NAMES, build_standard_named, refuse_dense_layers};
use crate::components::{GateUp, GluClamp, LayerAttention, MoeSpec};
use crate::config::{ConfigReader, RawConfig, SourceKind, key};
use crate::error::ModelError;
use crate::families::gemma3;
use crate::limits::POSITIONS;
use crate::model::ModelParts;
use crate::registry::FamilyEntry;
use crate::weights::{NameTable, Role, TensorIndex, spell};

pub const ENTRY: FamilyEntry = FamilyEntry {
    family: "gpt_oss",
    keys: &[(SourceKind::HuggingFace, "gpt_oss")],
    build,
};

const NAMES: NameTable = NameTable::extending(
    &STANDARD_DECODER_NAMES,
    &[
        spell(Role::AttnSinks, "model.layers.{l}.self_attn.sinks", ""),
        spell(Role::Router, "model.layers.{l}.mlp.router.weight", ""),
        spell(Role::RouterBias, "model.layers.{l}.mlp.router.bias", ""),
        spell(
            Role::ExpertGateUp,
            "model.layers.{l}.mlp.experts.gate_up_proj",
            "",
        ),
        spell(
            Role::ExpertGateUpBias,
            "model.layers.{l}.mlp.experts.gate_up_proj_bias",
            "",
        ),
        spell(
            Role::ExpertDown,
            "model.layers.{l}.mlp.experts.down_proj",
            "",
        ),
        spell(
            Role::ExpertDownBias,
            "model.layers.{l}.mlp.experts.down_proj_bias",
            "",
        ),
    ],
);

/// transformers' defaults for the clamped SwiGLU.
const SWIGLU_ALPHA: f32 = 1.702;
const SWIGLU_LIMIT: f32 = 7.0;
/// Every other layer slides, the first one included (transformers' `layer_types` default).
const SLIDING_PATTERN: usize = 2;

fn build(raw: &RawConfig, index: &dyn TensorIndex) -> Result<ModelParts, ModelError> {
    let mxfp4 = "model.layers.0.mlp.experts.gate_up_proj_blocks";
    if index.tensor_meta(mxfp4).is_some() {
        return Err(ModelError::TensorType {
            name: mxfp4.into(),
            stored: "MXFP4 blocks and scales (expert stacks read f32, f16 or bf16)",
        });
    }
    build_standard_named(raw, index, "gpt_oss", &NAMES, |cfg, spec| {
        refuse_dense_layers(cfg)?;
        let window = cfg.usize_at_most(key("sliding_window", ""), POSITIONS)?;
        let sliding = gemma3::sliding_layers(cfg, spec.config.n_layers, SLIDING_PATTERN)?;
        spec.layers = sliding
            .iter()
            .map(|&s| LayerAttention {
                rope_table: Some(0),
                window: s.then_some(window),
            })
            .collect();
        spec.attn_sinks = true;
        let mut moe = MoeSpec::read(
            cfg,
            key("num_local_experts", ""),
            key("num_experts_per_tok", ""),
            spec.intermediate,
            true,
        )?;
        moe.gate_up = GateUp::Interleaved;
        moe.biases = true;
        moe.transposed = true;
        moe.clamp = Some(GluClamp {
            alpha: positive(cfg, "swiglu_alpha", SWIGLU_ALPHA)?,
            limit: positive(cfg, "swiglu_limit", SWIGLU_LIMIT)?,
        });
        spec.moe = Some(moe);
        Ok(())
    })
}

/// A finite, positive value at `hf_key`, `default` when absent.
fn positive(cfg: &ConfigReader, hf_key: &'static str, default: f32) -> Result<f32, ModelError> {
    let k = key(hf_key, "");
    let v = cfg.opt_f32(k)?.unwrap_or(default);
    if !(v.is_finite() && v > 0.0) {
        return Err(cfg.out_of_range(k, v, "a finite value > 0"));
    }
    Ok(v)
}
