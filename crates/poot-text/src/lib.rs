//! Text services for poot: tokenizers, incremental decoding and chat prompts.
//!
//! - [`Tokenizer`]: one interface over a Hugging Face `tokenizer.json` ([`HfTokenizer`], run by
//!   the `tokenizers` crate) and a GGUF vocabulary ([`GgufTokenizer`], poot's port of
//!   llama.cpp's byte-level BPE and SentencePiece tokenizers, fed by the plain [`GgufVocab`]).
//! - [`StreamDecoder`]: streamed output that never splits a character and adds up to the full
//!   decode.
//! - [`ChatTemplate`]: Jinja chat templates rendered the way transformers renders them, and
//!   [`RenderedChat`] prompts whose message text cannot open a turn.
//! - [`TextServices`]: all of it for one model, from a GGUF file or a Hugging Face directory.
//!
//! This crate turns on `serde_json`'s `preserve_order`: a chat template sees messages and tool
//! schemas with their keys in the order the caller wrote them (`tojson` of a tool definition
//! is part of the prompt), as Python's dicts keep them.

mod bpe;
mod byte_level;
mod chat_format;
mod chat_prompt;
mod chat_template;
mod clean_spaces;
mod error;
mod gguf_tokenizer;
mod gguf_vocab;
mod hf_config;
mod hf_tokenizer;
mod pre_tokenizer;
mod python_format;
mod special_partition;
mod spelling_index;
mod spm;
mod stream_decoder;
mod text_services;
mod tokenizer;

pub use chat_format::{builtin_chat_formats, builtin_chat_template};
pub use chat_prompt::{ChatOptions, ChatTokens, RenderedChat};
pub use chat_template::ChatTemplate;
pub use error::{ChatError, HfError, TextError, TokenizerError, VocabError};
pub use gguf_tokenizer::GgufTokenizer;
pub use gguf_vocab::{GgufVocab, TokenType};
pub use hf_tokenizer::{HfSpecialTexts, HfTokenizer, PairEncoding};
pub use stream_decoder::{DecoderState, StreamDecoder};
pub use text_services::{HfTextFiles, TextServices};
pub use tokenizer::{EncodeOptions, SpecialTokens, Tokenizer};
