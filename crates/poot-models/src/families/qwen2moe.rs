//! Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B): Qwen2's attention (Q, K and V biases) with every
//! feed-forward replaced by routed SwiGLU experts plus one shared expert that every token runs,
//! scaled by the sigmoid of its own gate logit (`shared_expert_gate`).

use crate::components::dense::{STANDARD_DECODER_NAMES, build_standard_named, refuse_dense_layers};
use crate::components::{MoeSpec, SharedExpert};
use crate::config::{RawConfig, SourceKind, key};
use crate::error::ModelError;
use crate::limits::WIDTH;
use crate::model::ModelParts;
use crate::registry::FamilyEntry;
use crate::weights::{NameTable, Role, TensorIndex, spell};

pub const ENTRY: FamilyEntry = FamilyEntry {
    family: "qwen2moe",
    keys: &[
        (SourceKind::HuggingFace, "qwen2_moe"),
        (SourceKind::Gguf, "qwen2moe"),
    ],
    build,
};

const NAMES: NameTable = NameTable::extending(
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
        spell(
            Role::SharedGate,
            "model.layers.{l}.mlp.shared_expert.gate_proj.weight",
            "blk.{l}.ffn_gate_shexp.weight",
        ),
        spell(
            Role::SharedUp,
            "model.layers.{l}.mlp.shared_expert.up_proj.weight",
            "blk.{l}.ffn_up_shexp.weight",
        ),
        spell(
            Role::SharedDown,
            "model.layers.{l}.mlp.shared_expert.down_proj.weight",
            "blk.{l}.ffn_down_shexp.weight",
        ),
        spell(
            Role::SharedGateLogit,
            "model.layers.{l}.mlp.shared_expert_gate.weight",
            "blk.{l}.ffn_gate_inp_shexp.weight",
        ),
    ],
);

fn build(raw: &RawConfig, index: &dyn TensorIndex) -> Result<ModelParts, ModelError> {
    build_standard_named(raw, index, "qwen2moe", &NAMES, |cfg, spec| {
        spec.config.chat_format = Some("chatml");
        refuse_dense_layers(cfg)?;
        let expert_ff = cfg.usize_at_most(
            key("moe_intermediate_size", "expert_feed_forward_length"),
            WIDTH,
        )?;
        let shared_ff = cfg.usize_at_most(
            key(
                "shared_expert_intermediate_size",
                "expert_shared_feed_forward_length",
            ),
            WIDTH,
        )?;
        // Both transformers and llama.cpp leave the top-k unnormalized unless told otherwise.
        let renormalize = cfg
            .opt_bool(key("norm_topk_prob", "expert_weights_norm"))?
            .unwrap_or(false);
        let mut moe = MoeSpec::read(
            cfg,
            key("num_experts", "expert_count"),
            key("num_experts_per_tok", "expert_used_count"),
            expert_ff,
            renormalize,
        )?;
        moe.shared = Some(SharedExpert {
            intermediate: shared_ff,
            gated: true,
        });
        spec.moe = Some(moe);
        Ok(())
    })
}
