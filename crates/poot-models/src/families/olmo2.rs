//! OLMo 2: the dense decoder with its norms after each block (`x += norm(block(x))`, none
//! before) and an RMS norm over the whole query and key projections.

use crate::components::QkNormSpan;
use crate::components::dense::{STANDARD_DECODER_NAMES, build_standard_named};
use crate::config::{RawConfig, SourceKind};
use crate::error::ModelError;
use crate::model::ModelParts;
use crate::registry::FamilyEntry;
use crate::weights::{NameTable, Role, TensorIndex, spell};

pub const ENTRY: FamilyEntry = FamilyEntry {
    family: "olmo2",
    keys: &[
        (SourceKind::HuggingFace, "olmo2"),
        (SourceKind::Gguf, "olmo2"),
    ],
    build,
};

const NAMES: NameTable = NameTable::extending(
    &STANDARD_DECODER_NAMES,
    &[
        // No norm before either block.
        spell(Role::AttnNorm, "", ""),
        spell(Role::FfnNorm, "", ""),
        spell(
            Role::PostAttnNorm,
            "model.layers.{l}.post_attention_layernorm.weight",
            "blk.{l}.post_attention_norm.weight",
        ),
        spell(
            Role::PostFfnNorm,
            "model.layers.{l}.post_feedforward_layernorm.weight",
            "blk.{l}.post_ffw_norm.weight",
        ),
    ],
);

fn build(raw: &RawConfig, index: &dyn TensorIndex) -> Result<ModelParts, ModelError> {
    build_standard_named(raw, index, "olmo2", &NAMES, |_, spec| {
        spec.pre_norms = false;
        spec.qk_norm = true;
        spec.qk_norm_span = QkNormSpan::Projection;
        Ok(())
    })
}
