//! The tokenizer stored in a GGUF file, implemented after llama.cpp's `llama_vocab`: byte-level
//! BPE (`gpt2`) and SentencePiece BPE with byte fallback (`llama`).

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use crate::bpe::{MergeRanks, merge_word};
use crate::byte_level;
use crate::clean_spaces;
use crate::error::{TokenizerError, VocabError};
use crate::gguf_vocab::{GgufVocab, TokenType};
use crate::pre_tokenizer::PreTokenizer;
use crate::special_partition::{Fragment, SpecialMatcher, SpecialToken};
use crate::spm::{self, ScoredVocab};
use crate::tokenizer::{EOG_TEXTS, EOT_TEXTS, EncodeOptions, SpecialTokens};

/// Token attributes as llama.cpp keeps them (a token can gain `CONTROL` by name).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Attr(u16);

impl Attr {
    const UNKNOWN: u16 = 1 << 0;
    const UNUSED: u16 = 1 << 1;
    const NORMAL: u16 = 1 << 2;
    const CONTROL: u16 = 1 << 3;
    const USER_DEFINED: u16 = 1 << 4;
    const BYTE: u16 = 1 << 5;

    fn from_type(t: TokenType) -> Attr {
        Attr(match t {
            TokenType::Undefined => 0,
            TokenType::Normal => Attr::NORMAL,
            TokenType::Unknown => Attr::UNKNOWN,
            TokenType::Control => Attr::CONTROL,
            TokenType::UserDefined => Attr::USER_DEFINED,
            TokenType::Unused => Attr::UNUSED,
            TokenType::Byte => Attr::BYTE,
        })
    }

    fn has(self, bits: u16) -> bool {
        self.0 & bits != 0
    }
}

/// Which merge algorithm the vocabulary uses.
#[derive(Debug)]
enum Model {
    /// `gpt2`: regex pre-tokenizer, byte-level alphabet, ranked merges.
    Bpe {
        ranks: MergeRanks,
        pre: PreTokenizer,
    },
    /// `llama`: SentencePiece scores over "▁"-escaped text, byte fallback.
    Spm,
}

/// Fill-in-the-middle token texts llama.cpp recognizes by name; found ones become control
/// tokens, and the pad/repo/separator ones end generation.
const FIM_TEXTS: &[(&str, &[&str])] = &[
    (
        "pre",
        &[
            "<|fim_prefix|>",
            "<fim-prefix>",
            "<fim_prefix>",
            "<｜fim▁begin｜>",
            "<PRE>",
            "▁<PRE>",
            "<|code_prefix|>",
            "<|prefix|>",
        ],
    ),
    (
        "suf",
        &[
            "<|fim_suffix|>",
            "<fim-suffix>",
            "<fim_suffix>",
            "<｜fim▁hole｜>",
            "<SUF>",
            "▁<SUF>",
            "<|code_suffix|>",
            "<|suffix|>",
        ],
    ),
    (
        "mid",
        &[
            "<|fim_middle|>",
            "<fim-middle>",
            "<fim_middle>",
            "<｜fim▁end｜>",
            "<MID>",
            "▁<MID>",
            "<|code_middle|>",
            "<|middle|>",
        ],
    ),
    (
        "pad",
        &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
    ),
    (
        "rep",
        &[
            "<|fim_repo|>",
            "<|repo_name|>",
            "<fim-repo>",
            "<REPO>",
            "<reponame>",
        ],
    ),
    ("sep", &["<|file_sep|>"]),
];

/// A GGUF vocabulary ready to encode and decode.
#[derive(Debug)]
pub struct GgufTokenizer {
    model: Model,
    texts: Vec<String>,
    attrs: Vec<Attr>,
    scores: Vec<f32>,
    ids: HashMap<String, u32>,
    specials: SpecialMatcher,
    special_ids: SpecialTokens,
    add_bos: bool,
    add_eos: bool,
    add_space_prefix: bool,
    clean_spaces: bool,
    /// `token_to_piece(id, special = true)` for every id, computed once.
    pieces: Vec<Vec<u8>>,
    /// The token for each byte under SentencePiece byte fallback.
    byte_tokens: Vec<Option<u32>>,
}

impl GgufTokenizer {
    /// Builds the tokenizer, applying llama.cpp's defaults and by-name fix-ups.
    pub fn new(vocab: &GgufVocab) -> Result<GgufTokenizer, VocabError> {
        let n = vocab.tokens.len();
        if n == 0 {
            return Err(VocabError::Empty);
        }
        if u32::try_from(n).is_err() {
            return Err(VocabError::TooManyTokens { n_tokens: n });
        }
        let (model, defaults) = match vocab.model.as_str() {
            "gpt2" => {
                let merges = vocab.merges.as_deref().ok_or(VocabError::MissingKey {
                    key: "tokenizer.ggml.merges",
                })?;
                let pre = PreTokenizer::for_name(vocab.pre.as_deref())?;
                let defaults = Defaults {
                    bos: Some(11),
                    eos: Some(11),
                    unk: None,
                    add_bos: pre.add_bos_default,
                    add_space_prefix: false,
                    clean_spaces: pre.clean_spaces,
                };
                (
                    Model::Bpe {
                        ranks: MergeRanks::from_merges(merges),
                        pre,
                    },
                    defaults,
                )
            }
            "llama" => (
                Model::Spm,
                Defaults {
                    bos: Some(1),
                    eos: Some(2),
                    unk: Some(0),
                    add_bos: true,
                    add_space_prefix: true,
                    clean_spaces: false,
                },
            ),
            other => {
                return Err(VocabError::UnsupportedModel {
                    model: other.to_owned(),
                });
            }
        };
        check_len(
            "tokenizer.ggml.token_type",
            vocab.token_types.as_ref().map(Vec::len),
            n,
        )?;
        check_len(
            "tokenizer.ggml.scores",
            vocab.scores.as_ref().map(Vec::len),
            n,
        )?;

        let mut texts = Vec::with_capacity(n);
        let mut ids = HashMap::with_capacity(n);
        for (i, t) in vocab.tokens.iter().enumerate() {
            let id = i as u32;
            // llama.cpp renames empty tokens so every id keeps a distinct spelling.
            let text = if t.is_empty() {
                format!("[EMPTY_{i}]")
            } else {
                t.clone()
            };
            if let Some(first) = ids.insert(text.clone(), id) {
                return Err(VocabError::DuplicateToken {
                    text,
                    first,
                    second: id,
                });
            }
            texts.push(text);
        }
        let mut attrs: Vec<Attr> = match &vocab.token_types {
            Some(types) => types
                .iter()
                .take(n)
                .map(|&t| Attr::from_type(TokenType::from_gguf(t)))
                .collect(),
            None => vec![Attr(Attr::NORMAL); n],
        };
        let scores = vocab
            .scores
            .as_ref()
            .map_or_else(|| vec![0.0; n], |s| s.iter().take(n).copied().collect());

        let in_range = |id: Option<u32>| id.filter(|&i| (i as usize) < n);
        // A key outside the vocabulary is ignored (llama.cpp warns and keeps the default).
        let pick = |key: Option<u32>, default: Option<u32>| in_range(key).or(in_range(default));
        let bos = pick(vocab.bos_token_id, defaults.bos);
        let eos = pick(vocab.eos_token_id, defaults.eos);
        let unk = pick(vocab.unknown_token_id, defaults.unk);
        let pad = in_range(vocab.padding_token_id);
        let mut eot = in_range(vocab.eot_token_id);
        let mut eom = in_range(vocab.eom_token_id);

        let mark_control = |id: u32, attrs: &mut Vec<Attr>| {
            if let Some(a) = attrs.get_mut(id as usize) {
                a.0 |= Attr::CONTROL;
            }
        };
        let find = |names: &[&str]| names.iter().find_map(|t| ids.get(*t).copied());
        if eot.is_none() {
            eot = find(EOT_TEXTS);
            if let Some(id) = eot {
                mark_control(id, &mut attrs);
            }
        }
        if eom.is_none() {
            eom = find(&["<|eom_id|>"]);
            if let Some(id) = eom {
                mark_control(id, &mut attrs);
            }
        }
        let mut eog: Vec<u32> = Vec::new();
        for (role, names) in FIM_TEXTS {
            if let Some(id) = find(names) {
                mark_control(id, &mut attrs);
                if matches!(*role, "pad" | "rep" | "sep") {
                    eog.push(id);
                }
            }
        }
        for name in EOG_TEXTS {
            if let Some(&id) = ids.get(*name) {
                mark_control(id, &mut attrs);
                eog.push(id);
            }
        }
        // gpt-oss renders these markers as text (llama.cpp's USER_DEFINED override).
        for name in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
            if let Some(a) = ids.get(name).and_then(|&id| attrs.get_mut(id as usize)) {
                *a = Attr(Attr::USER_DEFINED);
            }
        }
        eog.extend([eos, eot, eom].into_iter().flatten());
        let eog_set: HashSet<u32> = eog.iter().copied().collect();
        // gpt-oss / solar-open: "<|end|>" separates messages and does not end generation.
        let has = |t: &str| ids.get(t).is_some_and(|id| eog_set.contains(id));
        if let Some(&end) = ids.get("<|end|>")
            && eog_set.contains(&end)
            && ((has("<|return|>") && has("<|call|>"))
                || ((has("<|call|>") || has("<|calls|>")) && has("<|flush|>")))
        {
            eog.retain(|&e| e != end);
            if let Some(a) = attrs.get_mut(end as usize) {
                *a = Attr(Attr::USER_DEFINED);
            }
        }
        let mut eog_ids: Vec<u32> = eog
            .into_iter()
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        eog_ids.sort_unstable();

        let specials = SpecialMatcher::new(
            attrs
                .iter()
                .enumerate()
                .filter(|(_, a)| a.has(Attr::CONTROL | Attr::USER_DEFINED | Attr::UNKNOWN))
                .map(|(i, a)| SpecialToken {
                    id: i as u32,
                    text: texts[i].clone(),
                    needs_parse_special: a.has(Attr::CONTROL | Attr::UNKNOWN),
                })
                .collect(),
        );

        let add_bos = vocab.add_bos_token.unwrap_or(defaults.add_bos);
        let add_eos = vocab.add_eos_token.unwrap_or(false);
        let add_space_prefix = vocab.add_space_prefix.unwrap_or(defaults.add_space_prefix);
        let is_spm = matches!(model, Model::Spm);
        let pieces = (0..n)
            .map(|i| piece_of(&texts[i], attrs[i], is_spm))
            .collect();
        let byte_tokens = (0..=255u8)
            .map(|b| {
                let hex = format!("<0x{b:02X}>");
                ids.get(&hex).copied().or_else(|| {
                    if is_spm {
                        // SentencePiece falls back to the raw byte spelled as text.
                        std::str::from_utf8(&[b])
                            .ok()
                            .and_then(|s| ids.get(s).copied())
                    } else {
                        ids.get(&byte_level::byte_to_char(b).to_string()).copied()
                    }
                })
            })
            .collect();

        Ok(GgufTokenizer {
            model,
            texts,
            attrs,
            scores,
            ids,
            specials,
            special_ids: SpecialTokens {
                bos,
                eos,
                eot,
                eom,
                eog: eog_ids,
                pad,
                unk,
            },
            add_bos,
            add_eos,
            add_space_prefix,
            clean_spaces: defaults.clean_spaces,
            pieces,
            byte_tokens,
        })
    }

    /// Number of token ids.
    pub fn vocab_size(&self) -> usize {
        self.texts.len()
    }

    /// The special ids (BOS, EOS, end-of-generation set, ...).
    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.special_ids
    }

    /// Whether `add_special` encodes start with BOS.
    pub fn adds_bos(&self) -> bool {
        self.add_bos
    }

    /// A token's stored spelling.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.texts.get(id as usize).map(String::as_str)
    }

    /// The id of the token spelled exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// Whether a token is a control or unknown token (hidden when decoding with
    /// `skip_special`, recognized in text only when parsing specials).
    pub fn is_control(&self, id: u32) -> bool {
        self.attrs
            .get(id as usize)
            .is_some_and(|a| a.has(Attr::CONTROL | Attr::UNKNOWN))
    }

    /// Spellings of the control and unknown tokens.
    pub(crate) fn control_texts(&self) -> impl Iterator<Item = &str> {
        self.specials.control_texts()
    }

    /// Encodes `text`; control tokens spelled inside a `protected` byte range stay text.
    pub(crate) fn encode_protected(
        &self,
        text: &str,
        options: EncodeOptions,
        protected: &[Range<usize>],
    ) -> Result<Vec<u32>, TokenizerError> {
        let fragments = self
            .specials
            .partition(text, options.parse_special, protected);
        let mut out = Vec::new();
        if options.add_special && self.add_bos {
            out.push(
                self.special_ids
                    .bos
                    .ok_or(TokenizerError::MissingSpecialToken { which: "BOS" })?,
            );
        }
        let mut prev_special = true;
        for fragment in fragments {
            match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(range) => {
                    let raw = &text[range];
                    let from = out.len();
                    match &self.model {
                        Model::Bpe { ranks, pre } => self.encode_bpe(raw, ranks, pre, &mut out),
                        Model::Spm => {
                            let mut escaped = String::with_capacity(raw.len() + 3);
                            if self.add_space_prefix && prev_special {
                                escaped.push('▁');
                            }
                            escaped.push_str(&raw.replace(' ', "▁"));
                            self.encode_spm(&escaped, &mut out)?;
                        }
                    }
                    // Merges can in principle spell a control token's text; where message text
                    // is protected, that must not slip through as the control token. (The
                    // unknown token is what unencodable text becomes, not a control token.)
                    let unk = self.special_ids.unk;
                    if !protected.is_empty()
                        && let Some(&id) = out[from..]
                            .iter()
                            .find(|&&id| self.is_control(id) && Some(id) != unk)
                    {
                        return Err(TokenizerError::ControlFromText { id });
                    }
                    prev_special = false;
                }
            }
        }
        if options.add_special && self.add_eos {
            out.push(
                self.special_ids
                    .eos
                    .ok_or(TokenizerError::MissingSpecialToken { which: "EOS" })?,
            );
        }
        Ok(out)
    }

    /// Encodes `text`.
    pub fn encode(&self, text: &str, options: EncodeOptions) -> Result<Vec<u32>, TokenizerError> {
        self.encode_protected(text, options, &[])
    }

    fn encode_bpe(&self, text: &str, ranks: &MergeRanks, pre: &PreTokenizer, out: &mut Vec<u32>) {
        for word in pre.split(text) {
            let encoded = byte_level::encode_bytes(text[word].as_bytes());
            if pre.ignore_merges
                && let Some(&id) = self.ids.get(&encoded)
            {
                out.push(id);
                continue;
            }
            for symbol in merge_word(&encoded, ranks) {
                let piece = &encoded[symbol];
                match self.ids.get(piece) {
                    Some(&id) => out.push(id),
                    None => {
                        // Unknown merge result: spell it with single-byte tokens, silently
                        // skipping bytes the vocabulary lacks (llama.cpp does the same).
                        for c in piece.chars() {
                            if let Some(&id) = self.ids.get(c.encode_utf8(&mut [0; 4]) as &str) {
                                out.push(id);
                            }
                        }
                    }
                }
            }
        }
    }

    fn encode_spm(&self, text: &str, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
        for symbol in spm::segment(text, self) {
            let piece = &text[symbol];
            match self.ids.get(piece) {
                Some(&id) => out.push(id),
                None => {
                    for &b in piece.as_bytes() {
                        let id = self
                            .byte_tokens
                            .get(b as usize)
                            .copied()
                            .flatten()
                            .ok_or(TokenizerError::MissingByteToken { byte: b })?;
                        out.push(id);
                    }
                }
            }
        }
        Ok(())
    }

    /// The bytes a token contributes to decoded text; control and unknown tokens contribute
    /// nothing when `skip_special`.
    pub fn token_to_piece(&self, id: u32, skip_special: bool) -> Result<&[u8], TokenizerError> {
        let i = id as usize;
        let attr = self.attrs.get(i).ok_or(TokenizerError::UnknownId {
            id,
            vocab_size: self.texts.len(),
        })?;
        if skip_special && attr.has(Attr::CONTROL | Attr::UNKNOWN) {
            return Ok(&[]);
        }
        Ok(self.pieces.get(i).map(Vec::as_slice).unwrap_or(&[]))
    }

    /// Decodes to raw bytes (a decode need not be valid UTF-8 when it ends mid-character).
    pub fn decode_bytes(&self, ids: &[u32], skip_special: bool) -> Result<Vec<u8>, TokenizerError> {
        let mut out = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            out.extend_from_slice(self.first_aware_piece(id, i == 0, skip_special)?);
        }
        if self.clean_spaces {
            clean_spaces::clean(&mut out);
        }
        Ok(out)
    }

    /// A piece with llama.cpp's detokenize rule applied: with `add_space_prefix`, the first
    /// token of a decode loses one leading space (the one encoding added).
    pub(crate) fn first_aware_piece(
        &self,
        id: u32,
        first: bool,
        skip_special: bool,
    ) -> Result<&[u8], TokenizerError> {
        let piece = self.token_to_piece(id, skip_special)?;
        Ok(if first && self.add_space_prefix {
            piece.strip_prefix(b" ").unwrap_or(piece)
        } else {
            piece
        })
    }

    /// Whether decoding runs the space cleanup (which streaming must hold text back for).
    pub(crate) fn cleans_spaces(&self) -> bool {
        self.clean_spaces
    }
}

impl ScoredVocab for GgufTokenizer {
    fn id_of(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    fn score(&self, id: u32) -> f32 {
        self.scores.get(id as usize).copied().unwrap_or(0.0)
    }
}

/// Per-model defaults llama.cpp applies before reading the optional keys.
struct Defaults {
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    add_bos: bool,
    add_space_prefix: bool,
    clean_spaces: bool,
}

fn check_len(key: &'static str, len: Option<usize>, n_tokens: usize) -> Result<(), VocabError> {
    match len {
        Some(len) if len < n_tokens => Err(VocabError::LengthMismatch { key, len, n_tokens }),
        _ => Ok(()),
    }
}

/// llama.cpp's `token_to_piece(special = true)` for one token.
fn piece_of(text: &str, attr: Attr, is_spm: bool) -> Vec<u8> {
    if attr.has(Attr::UNKNOWN | Attr::CONTROL | Attr::USER_DEFINED) {
        return text.as_bytes().to_vec();
    }
    if attr.has(Attr::NORMAL) {
        return if is_spm {
            text.replace('▁', " ").into_bytes()
        } else {
            byte_level_decode(text)
        };
    }
    if attr.has(Attr::BYTE) {
        return byte_token_value(text).map(|b| vec![b]).unwrap_or_default();
    }
    Vec::new()
}

/// The byte of a `<0xAB>` token.
fn byte_token_value(text: &str) -> Option<u8> {
    let hex = text.get(3..5)?;
    u8::from_str_radix(hex, 16).ok()
}

/// Maps byte-level characters back to bytes; a character outside the alphabet is written as
/// llama.cpp writes it, `[UNK_BYTE_0x..<token>]`.
fn byte_level_decode(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match byte_level::char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                for b in c.encode_utf8(&mut [0; 4]).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
    out
}
