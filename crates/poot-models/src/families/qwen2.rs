//! Qwen2 and Qwen2.5: the standard dense decoder with Q, K and V biases (bound when present).

use crate::components::dense::build_standard;
use crate::config::{RawConfig, SourceKind};
use crate::error::ModelError;
use crate::model::ModelParts;
use crate::registry::FamilyEntry;
use crate::weights::TensorIndex;

pub const ENTRY: FamilyEntry = FamilyEntry {
    family: "qwen2",
    keys: &[
        (SourceKind::HuggingFace, "qwen2"),
        (SourceKind::Gguf, "qwen2"),
    ],
    build,
};

fn build(raw: &RawConfig, index: &dyn TensorIndex) -> Result<ModelParts, ModelError> {
    build_standard(raw, index, "qwen2", |_, spec| {
        spec.config.chat_format = Some("chatml");
        Ok(())
    })
}
