//! Checks that a config's metadata agrees with the checkpoint's tensors, so a block count or a
//! vocabulary size that describes another model fails at load, naming the key and the tensor,
//! instead of running part of the model or reading past a table.

use poot_load::gguf::MetaValue;

use crate::config::{ConfigReader, Key, key};
use crate::error::ModelError;
use crate::weights::{NameTable, Role, TensorIndex};

/// The config's layer count against the layer tensors: the last declared layer's `role` tensor
/// must be present, and the one after it absent (a checkpoint holding more layers than its
/// config declares would otherwise run only the declared ones).
pub fn check_layer_count(
    cfg: &ConfigReader,
    layers_key: Key,
    layers: usize,
    index: &dyn TensorIndex,
    names: &NameTable,
    role: Role,
) -> Result<(), ModelError> {
    let mismatch = |tensor: String, found| ModelError::LayerCount {
        key: cfg.key_name(layers_key),
        declared: layers,
        tensor,
        found,
    };
    if let Some(last) = layers.checked_sub(1)
        && let Some(name) = names.name(cfg.kind(), Some(last), role)
        && index.tensor_meta(&name).is_none()
    {
        return Err(mismatch(name, "missing"));
    }
    if let Some(next) = names.name(cfg.kind(), Some(layers), role)
        && index.tensor_meta(&next).is_some()
    {
        return Err(mismatch(next, "present"));
    }
    Ok(())
}

/// A declared vocabulary size (`vocab_size`, `{arch}.vocab_size`) and a GGUF tokenizer's token
/// list against the embedding's `rows`: llama.cpp requires all three to agree, and a token id
/// past the embedding would read outside it.
pub fn check_vocab(cfg: &ConfigReader, embed_name: &str, rows: usize) -> Result<(), ModelError> {
    const VOCAB: Key = key("vocab_size", "vocab_size");
    const TOKENS: &str = "tokenizer.ggml.tokens";
    if let Some(declared) = cfg.opt_usize(VOCAB)?
        && declared != rows
    {
        return Err(ModelError::VocabSize {
            key: cfg.key_name(VOCAB),
            declared,
            tensor: embed_name.to_string(),
            rows,
        });
    }
    if let Some(MetaValue::Array(tokens)) = cfg.gguf().and_then(|m| m.get(TOKENS))
        && tokens.len() != rows
    {
        return Err(ModelError::VocabSize {
            key: TOKENS.to_string(),
            declared: tokens.len(),
            tensor: embed_name.to_string(),
            rows,
        });
    }
    Ok(())
}
