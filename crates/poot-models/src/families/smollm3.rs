//! SmolLM3: the Llama decoder with rotary embeddings left out of some layers (NoPE layers):
//! `no_rope_layers` lists per layer whether it turns its queries and keys (1) or not (0),
//! else every `no_rope_layer_interval`-th layer goes without (4: layers 3, 7, 11, ...). A GGUF
//! carries no such key; llama.cpp fixes the interval at 4 and permutes Q and K rows as for a
//! Llama.

use poot_graph_ir::ops::RopeStyle;

use crate::components::dense::build_standard;
use crate::config::{ConfigReader, RawConfig, SourceKind, key};
use crate::error::ModelError;
use crate::limits::LAYERS;
use crate::model::ModelParts;
use crate::registry::FamilyEntry;
use crate::weights::TensorIndex;

pub const ENTRY: FamilyEntry = FamilyEntry {
    family: "smollm3",
    keys: &[
        (SourceKind::HuggingFace, "smollm3"),
        (SourceKind::Gguf, "smollm3"),
    ],
    build,
};

/// Every how many layers one goes without rotary embeddings, where the config does not say
/// (transformers' default, and llama.cpp's fixed rule).
const NO_ROPE_INTERVAL: usize = 4;

fn build(raw: &RawConfig, index: &dyn TensorIndex) -> Result<ModelParts, ModelError> {
    build_standard(raw, index, "smollm3", |cfg, spec| {
        if cfg.kind() == SourceKind::Gguf {
            spec.rope_style = RopeStyle::Interleaved;
            spec.qk_rows_interleaved = true;
            spec.config.chat_format = Some("chatml");
        }
        let sliding = key("use_sliding_window", "");
        if cfg.opt_bool(sliding)? == Some(true) {
            return Err(cfg.unsupported(sliding, true, "false (every layer attends to all)"));
        }
        let rotary = rotary_layers(cfg, spec.config.n_layers)?;
        for (layer, rotary) in spec.layers.iter_mut().zip(rotary) {
            if !rotary {
                layer.rope_table = None;
            }
        }
        Ok(())
    })
}

/// Whether each of the `n_layers` layers uses rotary embeddings.
fn rotary_layers(cfg: &ConfigReader, n_layers: usize) -> Result<Vec<bool>, ModelError> {
    let list_key = key("no_rope_layers", "");
    if let Some(v) = cfg.hf(list_key.hf).filter(|v| !v.is_null()) {
        let bad = || ModelError::KeyType {
            key: list_key.hf.into(),
            expected: "a list of 0 or 1 per layer",
        };
        let flags = v.as_array().ok_or_else(bad)?;
        if flags.len() != n_layers {
            return Err(cfg.unsupported(list_key, flags.len(), "one flag per layer"));
        }
        return flags
            .iter()
            .map(|f| match f.as_u64() {
                Some(0) => Ok(false),
                Some(1) => Ok(true),
                _ => Err(bad()),
            })
            .collect();
    }
    let interval_key = key("no_rope_layer_interval", "");
    let interval = cfg
        .opt_usize_at_most(interval_key, LAYERS)?
        .unwrap_or(NO_ROPE_INTERVAL);
    if interval == 0 {
        return Err(cfg.out_of_range(interval_key, interval, "at least 1"));
    }
    Ok((0..n_layers).map(|l| (l + 1) % interval != 0).collect())
}
