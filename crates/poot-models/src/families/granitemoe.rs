//! IBM Granite-MoE (3.x): Granite's four multipliers over a decoder whose every feed-forward
//! is routed SwiGLU experts. The router softmaxes the top-k logits, which is the softmax over
//! all experts renormalized over the selected ones. Hugging Face stores the experts already
//! stacked, gate and up fused as `input_linear` `[experts, 2 * inter, hidden]` (gate rows
//! first), contracted once and split in the graph; llama.cpp's converter splits them into
//! `ffn_gate_exps` and `ffn_up_exps`.

use crate::components::dense::{STANDARD_DECODER_NAMES, build_standard_named};
use crate::components::{GateUp, MoeSpec};
use crate::config::{RawConfig, SourceKind, key};
use crate::error::ModelError;
use crate::model::ModelParts;
use crate::registry::FamilyEntry;
use crate::weights::{NameTable, Role, TensorIndex, spell};

pub const ENTRY: FamilyEntry = FamilyEntry {
    family: "granitemoe",
    keys: &[
        (SourceKind::HuggingFace, "granitemoe"),
        (SourceKind::Gguf, "granitemoe"),
    ],
    build,
};

const NAMES: NameTable = NameTable::extending(
    &STANDARD_DECODER_NAMES,
    &[
        spell(
            Role::Router,
            "model.layers.{l}.block_sparse_moe.router.layer.weight",
            "blk.{l}.ffn_gate_inp.weight",
        ),
        spell(
            Role::ExpertGateUp,
            "model.layers.{l}.block_sparse_moe.input_linear.weight",
            "",
        ),
        spell(Role::ExpertGate, "", "blk.{l}.ffn_gate_exps.weight"),
        spell(Role::ExpertUp, "", "blk.{l}.ffn_up_exps.weight"),
        spell(
            Role::ExpertDown,
            "model.layers.{l}.block_sparse_moe.output_linear.weight",
            "blk.{l}.ffn_down_exps.weight",
        ),
    ],
);

fn build(raw: &RawConfig, index: &dyn TensorIndex) -> Result<ModelParts, ModelError> {
    build_standard_named(raw, index, "granitemoe", &NAMES, |cfg, spec| {
        crate::families::granite::apply_multipliers(cfg, spec)?;
        let mut moe = MoeSpec::read(
            cfg,
            key("num_local_experts", "expert_count"),
            key("num_experts_per_tok", "expert_used_count"),
            spec.intermediate,
            true,
        )?;
        if cfg.kind() == SourceKind::HuggingFace {
            moe.gate_up = GateUp::Fused;
        }
        spec.moe = Some(moe);
        Ok(())
    })
}
