//! Llama (1 to 3.x, SmolLM2) and Mistral: the standard dense decoder. A GGUF `llama` with
//! experts is a Mixtral and builds as one.

use poot_graph_ir::ops::RopeStyle;

use crate::components::LayerAttention;
use crate::components::dense::build_standard;
use crate::config::{ConfigReader, RawConfig, SourceKind, key};
use crate::error::ModelError;
use crate::limits::POSITIONS;
use crate::model::ModelParts;
use crate::registry::FamilyEntry;
use crate::weights::TensorIndex;

pub const ENTRY: FamilyEntry = FamilyEntry {
    family: "llama",
    keys: &[
        (SourceKind::HuggingFace, "llama"),
        (SourceKind::HuggingFace, "mistral"),
        (SourceKind::Gguf, "llama"),
    ],
    build,
};

fn build(raw: &RawConfig, index: &dyn TensorIndex) -> Result<ModelParts, ModelError> {
    // llama.cpp writes a Mixtral as a `llama` GGUF with experts.
    let experts = ConfigReader::new(raw).opt_usize(key("", "expert_count"))?;
    if experts.is_some_and(|n| n > 0) {
        return crate::families::mixtral::build(raw, index);
    }
    build_standard(raw, index, "llama", |cfg, spec| {
        // llama.cpp's converter permutes Q and K rows so GGUF Llamas pair features interleaved.
        // A GGUF without a chat template chats as llama.cpp does then: in chatml.
        if cfg.kind() == SourceKind::Gguf {
            spec.rope_style = RopeStyle::Interleaved;
            spec.qk_rows_interleaved = true;
            spec.config.chat_format = Some("chatml");
        }
        // Mistral's sliding window applies to every layer.
        let window = cfg.opt_usize_at_most(key("sliding_window", ""), POSITIONS)?;
        spec.layers = vec![
            LayerAttention {
                rope_table: Some(0),
                window
            };
            spec.config.n_layers
        ];
        Ok(())
    })
}
