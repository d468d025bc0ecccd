//! Qwen3: the standard dense decoder with an RMS norm on every query and key head.

use crate::components::dense::build_standard;
use crate::config::{RawConfig, SourceKind};
use crate::error::ModelError;
use crate::model::ModelParts;
use crate::registry::FamilyEntry;
use crate::weights::TensorIndex;

pub const ENTRY: FamilyEntry = FamilyEntry {
    family: "qwen3",
    keys: &[
        (SourceKind::HuggingFace, "qwen3"),
        (SourceKind::Gguf, "qwen3"),
    ],
    build,
};

fn build(raw: &RawConfig, index: &dyn TensorIndex) -> Result<ModelParts, ModelError> {
    build_standard(raw, index, "qwen3", |_, spec| {
        spec.config.chat_format = Some("chatml");
        spec.qk_norm = true;
        Ok(())
    })
}
