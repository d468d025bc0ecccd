//! Mixtral: the Mistral decoder with every feed-forward replaced by eight (or any number of)
//! routed SwiGLU experts, the softmax scores of the top two renormalized. A GGUF Mixtral is a
//! `llama` file with `llama.expert_count` set; the llama family hands it here.

use poot_graph_ir::ops::RopeStyle;

use crate::components::dense::{STANDARD_DECODER_NAMES, build_standard_named};
use crate::components::{LayerAttention, MoeSpec};
use crate::config::{RawConfig, SourceKind, key};
use crate::error::ModelError;
use crate::limits::POSITIONS;
use crate::model::ModelParts;
use crate::registry::FamilyEntry;
use crate::weights::{NameTable, Role, TensorIndex, spell};

pub const ENTRY: FamilyEntry = FamilyEntry {
    family: "mixtral",
    keys: &[(SourceKind::HuggingFace, "mixtral")],
    build,
};

/// Hugging Face stores one tensor per expert (`{e}`); GGUF stores each projection's experts
/// as one `[experts, out, in]` stack.
const NAMES: NameTable = NameTable::extending(
    &STANDARD_DECODER_NAMES,
    &[
        spell(
            Role::Router,
            "model.layers.{l}.block_sparse_moe.gate.weight",
            "blk.{l}.ffn_gate_inp.weight",
        ),
        spell(
            Role::ExpertGate,
            "model.layers.{l}.block_sparse_moe.experts.{e}.w1.weight",
            "blk.{l}.ffn_gate_exps.weight",
        ),
        spell(
            Role::ExpertUp,
            "model.layers.{l}.block_sparse_moe.experts.{e}.w3.weight",
            "blk.{l}.ffn_up_exps.weight",
        ),
        spell(
            Role::ExpertDown,
            "model.layers.{l}.block_sparse_moe.experts.{e}.w2.weight",
            "blk.{l}.ffn_down_exps.weight",
        ),
    ],
);

/// Builds a Mixtral from a Hugging Face `mixtral` config or a GGUF `llama` one with experts.
pub fn build(raw: &RawConfig, index: &dyn TensorIndex) -> Result<ModelParts, ModelError> {
    build_standard_named(raw, index, "mixtral", &NAMES, |cfg, spec| {
        // As a GGUF Llama: Q and K rows permuted by llama.cpp's converter, chatml by default.
        if cfg.kind() == SourceKind::Gguf {
            spec.rope_style = RopeStyle::Interleaved;
            spec.qk_rows_interleaved = true;
            spec.config.chat_format = Some("chatml");
        }
        let window = cfg.opt_usize_at_most(key("sliding_window", ""), POSITIONS)?;
        spec.layers = vec![
            LayerAttention {
                rope_table: Some(0),
                window
            };
            spec.config.n_layers
        ];
        spec.moe = Some(MoeSpec::read(
            cfg,
            key("num_local_experts", "expert_count"),
            key("num_experts_per_tok", "expert_used_count"),
            spec.intermediate,
            true,
        )?);
        Ok(())
    })
}
