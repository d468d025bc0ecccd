//! Qwen3-MoE: Qwen3 (an RMS norm on every query and key head) with every feed-forward replaced
//! by routed SwiGLU experts of `moe_intermediate_size` features, softmax-scored, the top-k
//! renormalized when `norm_topk_prob` says so.

use crate::components::MoeSpec;
use crate::components::dense::{STANDARD_DECODER_NAMES, build_standard_named, refuse_dense_layers};
use crate::config::{RawConfig, SourceKind, key};
use crate::error::ModelError;
use crate::limits::WIDTH;
use crate::model::ModelParts;
use crate::registry::FamilyEntry;
use crate::weights::{NameTable, Role, TensorIndex, spell};

pub const ENTRY: FamilyEntry = FamilyEntry {
    family: "qwen3moe",
    keys: &[
        (SourceKind::HuggingFace, "qwen3_moe"),
        (SourceKind::Gguf, "qwen3moe"),
    ],
    build,
};

/// The standard decoder with routed experts under `mlp` (`mlp.gate`, `mlp.experts.{e}`), as
/// Qwen3-MoE and OLMoE store them.
pub(crate) const NAMES: NameTable = NameTable::extending(
    &STANDARD_DECODER_NAMES,
    &[
        spell(
            Role::Router,
            "model.layers.{l}.mlp.gate.weight",
            "blk.{l}.ffn_gate_inp.weight",
        ),
        spell(
            Role::ExpertGate,
            "model.layers.{l}.mlp.experts.{e}.gate_proj.weight",
            "blk.{l}.ffn_gate_exps.weight",
        ),
        spell(
            Role::ExpertUp,
            "model.layers.{l}.mlp.experts.{e}.up_proj.weight",
            "blk.{l}.ffn_up_exps.weight",
        ),
        spell(
            Role::ExpertDown,
            "model.layers.{l}.mlp.experts.{e}.down_proj.weight",
            "blk.{l}.ffn_down_exps.weight",
        ),
    ],
);

fn build(raw: &RawConfig, index: &dyn TensorIndex) -> Result<ModelParts, ModelError> {
    build_standard_named(raw, index, "qwen3moe", &NAMES, |cfg, spec| {
        spec.config.chat_format = Some("chatml");
        spec.qk_norm = true;
        refuse_dense_layers(cfg)?;
        let expert_ff = cfg.usize_at_most(
            key("moe_intermediate_size", "expert_feed_forward_length"),
            WIDTH,
        )?;
        // transformers defaults `norm_topk_prob` to false; llama.cpp always renormalizes.
        let renormalize = cfg
            .opt_bool(key("norm_topk_prob", "expert_weights_norm"))?
            .unwrap_or(cfg.kind() == SourceKind::Gguf);
        // Older configs spell the expert count `num_experts`, transformers 5 `num_local_experts`.
        let legacy = key("num_experts", "expert_count");
        let experts_key = match cfg.hf("num_experts") {
            Some(_) => legacy,
            None if cfg.kind() == SourceKind::HuggingFace => key("num_local_experts", ""),
            None => legacy,
        };
        spec.moe = Some(MoeSpec::read(
            cfg,
            experts_key,
            key("num_experts_per_tok", "expert_used_count"),
            expert_ff,
            renormalize,
        )?);
        Ok(())
    })
}
