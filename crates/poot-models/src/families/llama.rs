//! Llama (1 to 3.x, SmolLM2) and Mistral: the standard dense decoder.

use poot_graph_ir::ops::RopeStyle;

use crate::components::dense::{DecoderBasics, STANDARD_DECODER_NAMES};
use crate::components::{DenseDecoder, DenseDecoderSpec, LayerAttention, RopeConfig};
use crate::config::{ConfigReader, RawConfig, SourceKind, key};
use crate::error::ModelError;
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
    let cfg = ConfigReader::new(raw);
    let basics = DecoderBasics::read(&cfg, index, &STANDARD_DECODER_NAMES)?;
    let rope = RopeConfig {
        theta: basics.theta,
        dims: basics.rope_dims,
        scaling: RopeConfig::read_scaling(&cfg)?,
    };
    // llama.cpp's converter permutes Q and K rows so GGUF Llamas pair features interleaved.
    let style = match cfg.kind() {
        SourceKind::HuggingFace => RopeStyle::HalfSplit,
        SourceKind::Gguf => RopeStyle::Interleaved,
    };
    let mut spec = DenseDecoderSpec::standard("llama", &basics, rope, style);
    // Mistral's sliding window applies to every layer.
    let window = cfg.opt_usize(key("sliding_window", ""))?;
    spec.layers = vec![
        LayerAttention {
            rope_table: 0,
            window
        };
        basics.layers
    ];
    Ok(ModelParts {
        model: Box::new(DenseDecoder::build(
            spec,
            index,
            &STANDARD_DECODER_NAMES,
            cfg.kind(),
        )?),
    })
}
