//! The tokenizer half of a GGUF file's metadata, as a plain struct.
//!
//! [`GgufVocab`] holds exactly the `tokenizer.*` keys llama.cpp reads, with no interpretation,
//! so it can be filled from any GGUF reader (or by hand in a test) and handed to
//! [`GgufTokenizer::new`](crate::GgufTokenizer::new), which validates it.

use poot_load::LoadError;
use poot_load::gguf::{GgufMetadata, MetaArray, MetaValue};

use crate::error::VocabError;

/// The GGUF token types (`tokenizer.ggml.token_type`), as llama.cpp numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TokenType {
    /// 0, or any value outside 1..=6: rendered as nothing and never matched as a whole.
    Undefined,
    /// 1: an ordinary piece of text.
    Normal,
    /// 2: the unknown token.
    Unknown,
    /// 3: a control token (BOS, EOS, turn markers), parsed from text only on request.
    Control,
    /// 4: a user-defined token, always matched as a whole in text.
    UserDefined,
    /// 5: a reserved slot.
    Unused,
    /// 6: one raw byte, spelled `<0xAB>` (SentencePiece byte fallback).
    Byte,
}

impl TokenType {
    /// Maps the stored value the way llama.cpp does: unknown values become `Undefined`.
    pub fn from_gguf(value: i32) -> TokenType {
        match value {
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => TokenType::Undefined,
        }
    }
}

/// The `tokenizer.*` metadata of a GGUF file.
///
/// Optional keys are `None` when absent; [`GgufTokenizer::new`](crate::GgufTokenizer::new)
/// applies llama.cpp's defaults for them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GgufVocab {
    /// `tokenizer.ggml.model`: `"gpt2"` (byte-level BPE) or `"llama"` (SentencePiece BPE).
    pub model: String,
    /// `tokenizer.ggml.pre`: which pre-tokenizer regexes a `gpt2` vocabulary uses.
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`: each token's text, indexed by id.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.token_type`: each token's [`TokenType`] as stored.
    pub token_types: Option<Vec<i32>>,
    /// `tokenizer.ggml.scores`: SentencePiece merge scores.
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.merges`: BPE merges `"left right"`, highest priority first.
    pub merges: Option<Vec<String>>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos_token_id: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos_token_id: Option<u32>,
    /// `tokenizer.ggml.eot_token_id`: end of turn.
    pub eot_token_id: Option<u32>,
    /// `tokenizer.ggml.eom_token_id`: end of message (tool call pending).
    pub eom_token_id: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`.
    pub unknown_token_id: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`.
    pub padding_token_id: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`.
    pub add_bos_token: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`.
    pub add_eos_token: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix`: SentencePiece's leading "▁" on the first text.
    pub add_space_prefix: Option<bool>,
    /// `tokenizer.chat_template`: the default Jinja chat template.
    pub chat_template: Option<String>,
    /// `tokenizer.chat_template.<name>`: named templates (e.g. `tool_use`), in file order.
    pub named_chat_templates: Vec<(String, String)>,
}

impl GgufVocab {
    /// Reads the tokenizer keys from a GGUF file's metadata.
    pub fn from_metadata(meta: &GgufMetadata) -> Result<GgufVocab, VocabError> {
        let model = required(meta, KEY_MODEL, meta.get_str(KEY_MODEL))?.to_owned();
        let tokens = required(meta, KEY_TOKENS, meta.get_string_array(KEY_TOKENS))?.to_vec();
        let named_chat_templates = meta
            .iter()
            .filter_map(|(key, value)| {
                let name = key.strip_prefix("tokenizer.chat_template.")?;
                match value {
                    MetaValue::String(s) => Some((name.to_owned(), s.clone())),
                    _ => None,
                }
            })
            .collect();
        Ok(GgufVocab {
            model,
            pre: optional(meta, KEY_PRE, meta.get_str(KEY_PRE))?.map(str::to_owned),
            tokens,
            token_types: optional(meta, KEY_TOKEN_TYPE, meta.get_i32_array(KEY_TOKEN_TYPE))?
                .map(|v| v.into_owned()),
            scores: optional(meta, KEY_SCORES, scores(meta))?,
            merges: optional(meta, KEY_MERGES, meta.get_string_array(KEY_MERGES))?
                .map(<[String]>::to_vec),
            bos_token_id: optional(meta, KEY_BOS, meta.get_u32(KEY_BOS))?,
            eos_token_id: optional(meta, KEY_EOS, meta.get_u32(KEY_EOS))?,
            eot_token_id: optional(meta, KEY_EOT, meta.get_u32(KEY_EOT))?,
            eom_token_id: optional(meta, KEY_EOM, meta.get_u32(KEY_EOM))?,
            unknown_token_id: optional(meta, KEY_UNK, meta.get_u32(KEY_UNK))?,
            padding_token_id: optional(meta, KEY_PAD, meta.get_u32(KEY_PAD))?,
            add_bos_token: optional(meta, KEY_ADD_BOS, meta.get_bool(KEY_ADD_BOS))?,
            add_eos_token: optional(meta, KEY_ADD_EOS, meta.get_bool(KEY_ADD_EOS))?,
            add_space_prefix: optional(meta, KEY_ADD_PREFIX, meta.get_bool(KEY_ADD_PREFIX))?,
            chat_template: optional(meta, KEY_TEMPLATE, meta.get_str(KEY_TEMPLATE))?
                .map(str::to_owned),
            named_chat_templates,
        })
    }
}

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const KEY_SCORES: &str = "tokenizer.ggml.scores";
const KEY_MERGES: &str = "tokenizer.ggml.merges";
const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";
const KEY_EOS: &str = "tokenizer.ggml.eos_token_id";
const KEY_EOT: &str = "tokenizer.ggml.eot_token_id";
const KEY_EOM: &str = "tokenizer.ggml.eom_token_id";
const KEY_UNK: &str = "tokenizer.ggml.unknown_token_id";
const KEY_PAD: &str = "tokenizer.ggml.padding_token_id";
const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const KEY_ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
const KEY_ADD_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
const KEY_TEMPLATE: &str = "tokenizer.chat_template";

/// Scores may be stored as f32 (the convention) or as integers (llama.cpp accepts i32).
fn scores(meta: &GgufMetadata) -> Result<Vec<f32>, LoadError> {
    if let Some(MetaValue::Array(MetaArray::I32(v))) = meta.get(KEY_SCORES) {
        return Ok(v.iter().map(|&s| s as f32).collect());
    }
    meta.get_f32_array(KEY_SCORES).map(|v| v.into_owned())
}

fn required<T>(
    meta: &GgufMetadata,
    key: &'static str,
    got: Result<T, LoadError>,
) -> Result<T, VocabError> {
    match optional(meta, key, got)? {
        Some(v) => Ok(v),
        None => Err(VocabError::MissingKey { key }),
    }
}

/// `None` when the key is absent; a typed error when it is present with the wrong type.
fn optional<T>(
    meta: &GgufMetadata,
    key: &'static str,
    got: Result<T, LoadError>,
) -> Result<Option<T>, VocabError> {
    if !meta.contains(key) {
        return Ok(None);
    }
    got.map(Some).map_err(|source| VocabError::Metadata {
        key,
        source: Box::new(source),
    })
}
