//! The one tokenizer interface over both sources: a Hugging Face `tokenizer.json` and a GGUF
//! file's vocabulary.

use std::ops::Range;

use crate::error::TokenizerError;
use crate::gguf_tokenizer::GgufTokenizer;
use crate::hf_tokenizer::{HfTokenizer, PairEncoding};
use crate::stream_decoder::StreamDecoder;

/// How to encode a text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Add the tokens the model's convention puts around a sequence (BOS; `[CLS] … [SEP]`).
    pub add_special: bool,
    /// Recognize spelled control tokens (`<|im_start|>`) as their ids. Off for untrusted
    /// text: then a spelled control token is tokenized as the characters it consists of.
    pub parse_special: bool,
}

impl Default for EncodeOptions {
    /// A user prompt: sequence tokens added, control-token spellings kept as text.
    fn default() -> Self {
        EncodeOptions {
            add_special: true,
            parse_special: false,
        }
    }
}

/// The ids a model's conventions give meaning to. `None` when the vocabulary has none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// Beginning of sequence.
    pub bos: Option<u32>,
    /// End of sequence.
    pub eos: Option<u32>,
    /// End of turn (chat models).
    pub eot: Option<u32>,
    /// End of message with a tool call pending (Llama 3.1).
    pub eom: Option<u32>,
    /// Every id that ends generation: EOS, end of turn and the like, ascending.
    pub eog: Vec<u32>,
    /// Padding.
    pub pad: Option<u32>,
    /// Unknown.
    pub unk: Option<u32>,
}

/// Token texts whose presence marks the end-of-turn token (llama.cpp's list, in its order).
pub(crate) const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];

/// Token texts that end generation whatever their type (llama.cpp's EOG list).
pub(crate) const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// A tokenizer from either source.
#[derive(Debug)]
pub enum Tokenizer {
    /// From `tokenizer.json`, run by the `tokenizers` crate.
    Hf(Box<HfTokenizer>),
    /// From GGUF metadata, run by poot's port of llama.cpp.
    Gguf(Box<GgufTokenizer>),
}

impl Tokenizer {
    /// Encodes `text` into token ids.
    pub fn encode(&self, text: &str, options: EncodeOptions) -> Result<Vec<u32>, TokenizerError> {
        match self {
            Tokenizer::Hf(t) => t.encode(text, options),
            Tokenizer::Gguf(t) => t.encode(text, options),
        }
    }

    /// Encodes a pair of texts as one input (a cross-encoder's query and document); see
    /// [`HfTokenizer::encode_pair`](crate::HfTokenizer::encode_pair).
    pub fn encode_pair(
        &self,
        first: &str,
        second: &str,
        max_tokens: usize,
    ) -> Result<PairEncoding, TokenizerError> {
        match self {
            Tokenizer::Hf(t) => t.encode_pair(first, second, max_tokens),
            Tokenizer::Gguf(_) => Err(TokenizerError::PairNeedsTokenizerJson),
        }
    }

    /// Encodes `text` with no sequence tokens added, recognizing control tokens except where
    /// they overlap a `protected` byte range (text that came from a chat message).
    pub fn encode_protected(
        &self,
        text: &str,
        protected: &[Range<usize>],
    ) -> Result<Vec<u32>, TokenizerError> {
        for r in protected {
            if r.start > r.end
                || r.end > text.len()
                || !text.is_char_boundary(r.start)
                || !text.is_char_boundary(r.end)
            {
                return Err(TokenizerError::BadProtectedRange {
                    start: r.start,
                    end: r.end,
                    len: text.len(),
                });
            }
        }
        match self {
            Tokenizer::Hf(t) => t.encode_protected(text, protected),
            Tokenizer::Gguf(t) => t.encode_protected(
                text,
                EncodeOptions {
                    add_special: false,
                    parse_special: true,
                },
                protected,
            ),
        }
    }

    /// Decodes ids to text. With `skip_special`, control tokens contribute nothing. Bytes that
    /// do not form UTF-8 (a decode cut mid-character) become U+FFFD.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        match self {
            Tokenizer::Hf(t) => t.decode(ids, skip_special),
            Tokenizer::Gguf(t) => {
                Ok(String::from_utf8_lossy(&t.decode_bytes(ids, skip_special)?).into_owned())
            }
        }
    }

    /// The bytes one token contributes to decoded text, which may be part of a character.
    pub fn token_to_piece(&self, id: u32, skip_special: bool) -> Result<Vec<u8>, TokenizerError> {
        match self {
            Tokenizer::Hf(t) => t.token_to_piece(id, skip_special),
            Tokenizer::Gguf(t) => t.token_to_piece(id, skip_special).map(<[u8]>::to_vec),
        }
    }

    /// The id of the token spelled exactly `text` in the vocabulary.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        match self {
            Tokenizer::Hf(t) => t.token_id(text),
            Tokenizer::Gguf(t) => t.token_id(text),
        }
    }

    /// A token's vocabulary spelling (`"<|im_end|>"`, `"Ġthe"`, `"▁the"`).
    pub fn token_text(&self, id: u32) -> Option<String> {
        match self {
            Tokenizer::Hf(t) => t.token_text(id),
            Tokenizer::Gguf(t) => t.token_text(id).map(str::to_owned),
        }
    }

    /// The special ids.
    pub fn special_tokens(&self) -> &SpecialTokens {
        match self {
            Tokenizer::Hf(t) => t.special_tokens(),
            Tokenizer::Gguf(t) => t.special_tokens(),
        }
    }

    /// Number of ids, including added tokens.
    pub fn vocab_size(&self) -> usize {
        match self {
            Tokenizer::Hf(t) => t.vocab_size(),
            Tokenizer::Gguf(t) => t.vocab_size(),
        }
    }

    /// Whether encoding with `add_special` starts the sequence with BOS.
    pub fn adds_bos(&self) -> bool {
        match self {
            Tokenizer::Hf(t) => t.adds_bos(),
            Tokenizer::Gguf(t) => t.adds_bos(),
        }
    }

    /// Whether `id` is a control token (hidden by `skip_special`, parsed only on request).
    pub fn is_control(&self, id: u32) -> bool {
        match self {
            Tokenizer::Hf(t) => t.is_control(id),
            Tokenizer::Gguf(t) => t.is_control(id),
        }
    }

    /// Spellings of the control tokens: what a chat message must not be able to produce.
    pub fn control_texts(&self) -> Vec<String> {
        match self {
            Tokenizer::Hf(t) => t.control_texts().map(str::to_owned).collect(),
            Tokenizer::Gguf(t) => t.control_texts().map(str::to_owned).collect(),
        }
    }

    /// A decoder for streamed output, one token at a time.
    pub fn stream_decoder(&self, skip_special: bool) -> StreamDecoder<'_> {
        StreamDecoder::new(self, skip_special)
    }
}
