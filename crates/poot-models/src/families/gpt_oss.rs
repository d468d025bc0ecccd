//! gpt-oss: a pre-norm decoder whose attention has Q/K/V/O biases and a learned sink logit per
//! query head, sliding-window layers alternating with full ones (`layer_types`), YaRN rotary
//! scaling, and routed experts with a biased router (top-k of the logits, softmax over the
//! selected: the softmax over all experts renormalized), per-expert biases, gate and up rows
//! interleaved in one stack, and a clamped SwiGLU (`swiglu_alpha`, `swiglu_limit`).
//!
//! transformers stores each layer's experts as `[experts, in, out]` stacks, read transposed.
//! The released checkpoints store them as MXFP4 instead (`quant_method: mxfp4`):
//! `{stack}_blocks` U8 `[experts, out, in / 32, 16]` and `{stack}_scales` U8 `[experts, out,
//! in / 32]`, the gate and up rows still interleaved. When layer 0's gate/up blocks are present,
//! every layer's stacks are bound as MXFP4 `[experts, out, in]` stacks (their bytes repacked
//! into ggml's blocks at upload, read packed by the expert contractions, as a GGUF's are); a
//! layer stored otherwise, or blocks of another shape or type, is a load error naming the
//! tensor.
//!
//! llama.cpp's converter writes arch `gpt-oss`: the interleaved stack split into separate gate
//! and up `[experts, out, in]` stacks (`ffn_{gate,up,down}_exps`, MXFP4 as the released
//! checkpoints' blocks repacked, read packed) with their biases split likewise, the sinks as
//! `attn_sinks.weight`, the pre-feed-forward norm as `post_attention_norm`. Its keys carry no
//! `layer_types` (the default alternation, sliding first, as llama.cpp's pattern of 2), no
//! YaRN truncation (the released configs' `truncate: false` is taken) and no SwiGLU constants:
//! alpha is transformers' default, the limit `swiglu_clamp_exp` when stated (one value for
//! every layer), transformers' default otherwise.

use crate::components::dense::{STANDARD_DECODER_NAMES, build_standard_named, refuse_dense_layers};
use crate::components::rotary::RopeScaling;
use crate::components::{GateUp, GluClamp, LayerAttention, MoeSpec};
use crate::config::{ConfigReader, Key, RawConfig, SourceKind, key};
use crate::error::ModelError;
use crate::families::gemma3;
use crate::limits::{POSITIONS, WIDTH};
use crate::model::ModelParts;
use crate::registry::FamilyEntry;
use crate::weights::{NameTable, Role, TensorIndex, spell};

pub const ENTRY: FamilyEntry = FamilyEntry {
    family: "gpt_oss",
    keys: &[
        (SourceKind::HuggingFace, "gpt_oss"),
        (SourceKind::Gguf, "gpt-oss"),
    ],
    build,
};

const NAMES: NameTable = NameTable::extending(
    &STANDARD_DECODER_NAMES,
    &[
        spell(
            Role::FfnNorm,
            "model.layers.{l}.post_attention_layernorm.weight",
            "blk.{l}.post_attention_norm.weight",
        ),
        spell(
            Role::AttnSinks,
            "model.layers.{l}.self_attn.sinks",
            "blk.{l}.attn_sinks.weight",
        ),
        spell(
            Role::Router,
            "model.layers.{l}.mlp.router.weight",
            "blk.{l}.ffn_gate_inp.weight",
        ),
        spell(
            Role::RouterBias,
            "model.layers.{l}.mlp.router.bias",
            "blk.{l}.ffn_gate_inp.bias",
        ),
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
        spell(Role::ExpertGate, "", "blk.{l}.ffn_gate_exps.weight"),
        spell(Role::ExpertGateBias, "", "blk.{l}.ffn_gate_exps.bias"),
        spell(Role::ExpertUp, "", "blk.{l}.ffn_up_exps.weight"),
        spell(Role::ExpertUpBias, "", "blk.{l}.ffn_up_exps.bias"),
        spell(
            Role::ExpertDown,
            "model.layers.{l}.mlp.experts.down_proj",
            "blk.{l}.ffn_down_exps.weight",
        ),
        spell(
            Role::ExpertDownBias,
            "model.layers.{l}.mlp.experts.down_proj_bias",
            "blk.{l}.ffn_down_exps.bias",
        ),
    ],
);

/// transformers' defaults for the clamped SwiGLU.
const SWIGLU_ALPHA: f32 = 1.702;
const SWIGLU_LIMIT: f32 = 7.0;
/// Every other layer slides, the first one included (transformers' `layer_types` default).
const SLIDING_PATTERN: usize = 2;

fn build(raw: &RawConfig, index: &dyn TensorIndex) -> Result<ModelParts, ModelError> {
    let mxfp4_blocks = NAMES
        .name(SourceKind::HuggingFace, Some(0), Role::ExpertGateUp)
        .is_some_and(|stack| index.tensor_meta(&format!("{stack}_blocks")).is_some());
    build_standard_named(raw, index, "gpt_oss", &NAMES, |cfg, spec| {
        refuse_dense_layers(cfg)?;
        let gguf = cfg.kind() == SourceKind::Gguf;
        let window =
            cfg.usize_at_most(key("sliding_window", "attention.sliding_window"), POSITIONS)?;
        let sliding = gemma3::sliding_layers(cfg, spec.config.n_layers, SLIDING_PATTERN)?;
        spec.layers = sliding
            .iter()
            .map(|&s| LayerAttention {
                rope_table: Some(0),
                window: s.then_some(window),
            })
            .collect();
        spec.attn_sinks = true;
        let expert_ff = match gguf {
            true => cfg.usize_at_most(key("", "expert_feed_forward_length"), WIDTH)?,
            false => spec.intermediate,
        };
        let mut moe = MoeSpec::read(
            cfg,
            key("num_local_experts", "expert_count"),
            key("num_experts_per_tok", "expert_used_count"),
            expert_ff,
            true,
        )?;
        // llama.cpp's converter splits the interleaved stack and stores `[experts, out, in]`, as
        // the MXFP4 blocks are.
        (moe.gate_up, moe.transposed) = match gguf {
            true => (GateUp::Separate, false),
            false => (GateUp::Interleaved, !mxfp4_blocks),
        };
        moe.mxfp4_blocks = mxfp4_blocks;
        moe.biases = true;
        moe.clamp = Some(GluClamp {
            alpha: positive(cfg, key("swiglu_alpha", ""), SWIGLU_ALPHA)?,
            limit: positive(cfg, key("swiglu_limit", "swiglu_clamp_exp"), SWIGLU_LIMIT)?,
        });
        if gguf {
            for rope in &mut spec.ropes {
                if let RopeScaling::Yarn { truncate, .. } = &mut rope.scaling {
                    *truncate = false;
                }
            }
        }
        spec.moe = Some(moe);
        Ok(())
    })
}

/// A finite, positive value at `k` (a GGUF may state it once per layer), `default` when absent.
fn positive(cfg: &ConfigReader, k: Key, default: f32) -> Result<f32, ModelError> {
    let v = cfg.opt_f32_every_layer(k)?.unwrap_or(default);
    if !(v.is_finite() && v > 0.0) {
        return Err(cfg.out_of_range(k, v, "a finite value > 0"));
    }
    Ok(v)
}
