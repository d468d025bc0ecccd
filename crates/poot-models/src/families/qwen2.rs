//! Qwen2 and Qwen2.5: the standard dense decoder with Q, K and V biases (bound when present).

use poot_graph_ir::ops::RopeStyle;

use crate::components::dense::{DecoderBasics, STANDARD_DECODER_NAMES};
use crate::components::{DenseDecoder, DenseDecoderSpec, RopeConfig};
use crate::config::{ConfigReader, RawConfig, SourceKind};
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
    let cfg = ConfigReader::new(raw);
    let basics = DecoderBasics::read(&cfg, index, &STANDARD_DECODER_NAMES)?;
    let rope = RopeConfig {
        theta: basics.theta,
        dims: basics.rope_dims,
        scaling: RopeConfig::read_scaling(&cfg)?,
    };
    let mut spec = DenseDecoderSpec::standard("qwen2", &basics, rope, RopeStyle::HalfSplit);
    spec.config.chat_format = Some("chatml");
    Ok(ModelParts {
        model: Box::new(DenseDecoder::build(
            spec,
            index,
            &STANDARD_DECODER_NAMES,
            cfg.kind(),
        )?),
    })
}
