//! A Hugging Face `tokenizer.json`, run by the `tokenizers` crate.

use std::collections::HashSet;
use std::ops::Range;

use tokenizers::decoders::DecoderWrapper;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::metaspace::PrependScheme;

use crate::byte_level;
use crate::error::TokenizerError;
use crate::tokenizer::{EOG_TEXTS, EOT_TEXTS, EncodeOptions, SpecialTokens};

/// Spellings of the special tokens a model's `tokenizer_config.json` names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HfSpecialTexts {
    /// `bos_token`.
    pub bos: Option<String>,
    /// `eos_token`.
    pub eos: Option<String>,
    /// `pad_token`.
    pub pad: Option<String>,
    /// `unk_token`.
    pub unk: Option<String>,
}

/// A special added token, matched in text by [`HfTokenizer::encode_protected`].
#[derive(Clone, Debug)]
struct SpecialAdded {
    id: u32,
    content: String,
    lstrip: bool,
    rstrip: bool,
}

/// A `tokenizer.json` tokenizer.
///
/// Padding and truncation stored in the file are turned off: one text encodes whole, and
/// batching or length limits belong to the caller.
/// Two texts encoded as one input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairEncoding {
    pub ids: Vec<u32>,
    /// The segment of each id (0 for the first text and its tokens, 1 for the second).
    pub type_ids: Vec<u32>,
}

#[derive(Debug)]
pub struct HfTokenizer {
    /// Recognizes special added tokens in text.
    parse: tokenizers::Tokenizer,
    /// Treats special added tokens' spellings as text (`encode_special_tokens`).
    plain: tokenizers::Tokenizer,
    /// `plain` for text that does not start the input: a Metaspace pre-tokenizer that prepends
    /// "▁" only to the first split must not prepend to a later fragment.
    plain_rest: Option<tokenizers::Tokenizer>,
    special_ids: SpecialTokens,
    /// Special added tokens, longest first, for splitting around protected text.
    special_added: Vec<SpecialAdded>,
    special_id_set: HashSet<u32>,
    /// Every added token (special or not): they decode to their content as is.
    added_id_set: HashSet<u32>,
    /// What the decoder pipeline does, for [`HfTokenizer::token_to_piece`].
    decoder_kinds: DecoderKinds,
    adds_bos: bool,
    vocab_size: usize,
}

impl HfTokenizer {
    /// Loads `tokenizer.json` bytes; `names` are the special-token spellings from
    /// `tokenizer_config.json` (BOS, EOS, PAD, UNK).
    pub fn from_bytes(
        tokenizer_json: &[u8],
        names: &HfSpecialTexts,
    ) -> Result<HfTokenizer, TokenizerError> {
        let mut parse = tokenizers::Tokenizer::from_bytes(tokenizer_json)
            .map_err(|source| TokenizerError::HfLoad { source })?;
        parse.with_padding(None);
        parse
            .with_truncation(None)
            .map_err(|source| TokenizerError::HfLoad { source })?;
        let mut plain = parse.clone();
        plain.set_encode_special_tokens(true);
        let plain_rest = without_first_prepend(&plain);

        let added = parse.get_added_tokens_decoder();
        let mut special_added: Vec<SpecialAdded> = added
            .iter()
            .filter(|(_, t)| t.special && !t.normalized && !t.content.is_empty())
            .map(|(&id, t)| SpecialAdded {
                id,
                content: t.content.clone(),
                lstrip: t.lstrip,
                rstrip: t.rstrip,
            })
            .collect();
        special_added.sort_by(|a, b| b.content.len().cmp(&a.content.len()).then(a.id.cmp(&b.id)));
        let special_id_set: HashSet<u32> = added
            .iter()
            .filter(|(_, t)| t.special)
            .map(|(&id, _)| id)
            .collect();
        let added_id_set = added.keys().copied().collect();
        let mut decoder_kinds = DecoderKinds::default();
        if let Some(decoder) = parse.get_decoder() {
            decoder_kinds.collect(decoder);
        }

        let id = |name: &Option<String>| name.as_deref().and_then(|n| parse.token_to_id(n));
        let bos = id(&names.bos);
        let eos = id(&names.eos);
        let unk = id(&names.unk).or_else(|| model_unk(&parse));
        // End-of-turn and end-of-generation tokens by name, as llama.cpp finds them, among the
        // special added tokens.
        let special_named = |texts: &[&str]| -> Vec<u32> {
            texts
                .iter()
                .filter_map(|t| parse.token_to_id(t))
                .filter(|i| special_id_set.contains(i))
                .collect()
        };
        let eot = special_named(EOT_TEXTS).first().copied();
        let eom = special_named(&["<|eom_id|>"]).first().copied();
        let mut eog: Vec<u32> = eos.into_iter().chain(special_named(EOG_TEXTS)).collect();
        eog.sort_unstable();
        eog.dedup();
        let special_ids = SpecialTokens {
            bos,
            eos,
            eot,
            eom,
            eog,
            pad: id(&names.pad),
            unk,
        };
        let probe = parse
            .encode("", true)
            .map_err(|source| TokenizerError::HfEncode { source })?;
        let adds_bos = bos.is_some() && probe.get_ids().first().copied() == bos;
        // Ids are not always dense: the size is one past the highest id.
        let vocab_size = parse
            .get_vocab(true)
            .values()
            .copied()
            .max()
            .map_or(0, |m| m as usize + 1);
        Ok(HfTokenizer {
            parse,
            plain,
            plain_rest,
            special_ids,
            special_added,
            special_id_set,
            added_id_set,
            decoder_kinds,
            adds_bos,
            vocab_size,
        })
    }

    /// Number of ids (one past the highest).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The special ids.
    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.special_ids
    }

    /// Whether `add_special` encodes start with BOS.
    pub fn adds_bos(&self) -> bool {
        self.adds_bos
    }

    /// The id of a token spelled exactly `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.parse.token_to_id(text)
    }

    /// A token's vocabulary spelling.
    pub fn token_text(&self, id: u32) -> Option<String> {
        self.parse.id_to_token(id)
    }

    /// Whether `id` is a special added token.
    pub fn is_control(&self, id: u32) -> bool {
        self.special_id_set.contains(&id)
    }

    /// Spellings of the special added tokens.
    pub(crate) fn control_texts(&self) -> impl Iterator<Item = &str> {
        self.special_added.iter().map(|t| t.content.as_str())
    }

    /// Encodes `text`.
    pub fn encode(&self, text: &str, options: EncodeOptions) -> Result<Vec<u32>, TokenizerError> {
        let tokenizer = if options.parse_special {
            &self.parse
        } else {
            &self.plain
        };
        let encoding = tokenizer
            .encode(text, options.add_special)
            .map_err(|source| TokenizerError::HfEncode { source })?;
        Ok(encoding.get_ids().to_vec())
    }

    /// Encodes `first` and `second` as one input, joined the way the tokenizer's
    /// post-processor joins a pair (BERT: `[CLS] first [SEP] second [SEP]`, token types 0 then
    /// 1); control-token spellings stay text. When the pair is over `max_tokens`, `second` is
    /// cut from its end to fit (the `only_second` truncation); a `first` that leaves no room
    /// for one token of `second` is refused.
    pub fn encode_pair(
        &self,
        first: &str,
        second: &str,
        max_tokens: usize,
    ) -> Result<PairEncoding, TokenizerError> {
        use tokenizers::PostProcessor;
        let encode = |text: &str| {
            self.plain
                .encode(text, false)
                .map_err(|source| TokenizerError::HfEncode { source })
        };
        let a = encode(first)?;
        let mut b = encode(second)?;
        let added = self
            .plain
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(true));
        let fixed = a.len() + added;
        if fixed + 1 > max_tokens {
            return Err(TokenizerError::PairFirstTooLong {
                tokens: fixed,
                max_tokens: max_tokens.saturating_sub(1),
            });
        }
        if fixed + b.len() > max_tokens {
            b.truncate(
                max_tokens - fixed,
                0,
                tokenizers::TruncationDirection::Right,
            );
        }
        let joined = self
            .plain
            .post_process(a, Some(b), true)
            .map_err(|source| TokenizerError::HfEncode { source })?;
        Ok(PairEncoding {
            ids: joined.get_ids().to_vec(),
            type_ids: joined.get_type_ids().to_vec(),
        })
    }

    /// Encodes with special tokens recognized except inside `protected` ranges, no sequence
    /// tokens added.
    ///
    /// The text is split at the special tokens that count (longest match at the leftmost
    /// position, like the `tokenizers` added vocabulary), honouring their `lstrip`/`rstrip`, and
    /// each fragment between is encoded as plain text.
    pub(crate) fn encode_protected(
        &self,
        text: &str,
        protected: &[Range<usize>],
    ) -> Result<Vec<u32>, TokenizerError> {
        if protected.is_empty() {
            return self.encode(
                text,
                EncodeOptions {
                    add_special: false,
                    parse_special: true,
                },
            );
        }
        let mut out = Vec::new();
        let mut fragment_start = 0;
        let mut pos = 0;
        let mut pending_rstrip = false;
        while pos < text.len() {
            let found = self.special_added.iter().find(|t| {
                text[pos..].starts_with(&t.content)
                    && !protected
                        .iter()
                        .any(|p| p.start < pos + t.content.len() && pos < p.end)
            });
            let Some(token) = found else {
                pos += text[pos..].chars().next().map_or(1, char::len_utf8);
                continue;
            };
            let mut fragment = &text[fragment_start..pos];
            if pending_rstrip {
                fragment = fragment.trim_start();
            }
            if token.lstrip {
                fragment = fragment.trim_end();
            }
            self.encode_fragment(fragment, fragment_start == 0, &mut out)?;
            out.push(token.id);
            pending_rstrip = token.rstrip;
            pos += token.content.len();
            fragment_start = pos;
        }
        let mut tail = &text[fragment_start..];
        if pending_rstrip {
            tail = tail.trim_start();
        }
        self.encode_fragment(tail, fragment_start == 0, &mut out)?;
        Ok(out)
    }

    fn encode_fragment(
        &self,
        fragment: &str,
        at_start: bool,
        out: &mut Vec<u32>,
    ) -> Result<(), TokenizerError> {
        if fragment.is_empty() {
            return Ok(());
        }
        let tokenizer = if at_start {
            &self.plain
        } else {
            self.plain_rest.as_ref().unwrap_or(&self.plain)
        };
        let encoding = tokenizer
            .encode(fragment, false)
            .map_err(|source| TokenizerError::HfEncode { source })?;
        // The model's own vocabulary may spell a special token's text; that must not slip
        // through as the special token where message text is protected.
        // (The unknown token is what unencodable text becomes, not a control token.)
        let unk = self.special_ids.unk;
        if let Some(&id) = encoding
            .get_ids()
            .iter()
            .find(|&&id| self.special_id_set.contains(&id) && Some(id) != unk)
        {
            return Err(TokenizerError::ControlFromText { id });
        }
        out.extend_from_slice(encoding.get_ids());
        Ok(())
    }

    /// Whether `id` is a `<0xAB>` byte-fallback token. The ByteFallback decoder renders a
    /// whole run of them at once (as U+FFFD per byte when the run is not UTF-8), so text of an
    /// unfinished run can still change.
    pub(crate) fn is_fallback_byte(&self, id: u32) -> bool {
        self.decoder_kinds.byte_fallback
            && self
                .parse
                .id_to_token(id)
                .is_some_and(|t| t.len() == 6 && t.starts_with("<0x") && t.ends_with('>'))
    }

    fn check_ids(&self, ids: &[u32]) -> Result<(), TokenizerError> {
        match ids.iter().find(|&&id| self.parse.id_to_token(id).is_none()) {
            Some(&id) => Err(TokenizerError::UnknownId {
                id,
                vocab_size: self.vocab_size,
            }),
            None => Ok(()),
        }
    }

    /// Decodes ids with the file's decoder.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        self.check_ids(ids)?;
        self.parse
            .decode(ids, skip_special)
            .map_err(|source| TokenizerError::HfDecode { source })
    }

    /// The bytes one token contributes: byte-level tokens map back to raw bytes, `<0xAB>`
    /// byte-fallback tokens to their byte, "▁" to a space, WordPiece `##` continuations lose
    /// the prefix and word starts gain a space.
    pub fn token_to_piece(&self, id: u32, skip_special: bool) -> Result<Vec<u8>, TokenizerError> {
        self.check_ids(&[id])?;
        let token = self.parse.id_to_token(id).unwrap_or_default();
        if self.special_id_set.contains(&id) {
            return Ok(if skip_special {
                Vec::new()
            } else {
                token.into_bytes()
            });
        }
        if self.added_id_set.contains(&id) {
            return Ok(token.into_bytes());
        }
        let kinds = &self.decoder_kinds;
        if kinds.byte_level {
            let mut out = Vec::with_capacity(token.len());
            for c in token.chars() {
                match byte_level::char_to_byte(c) {
                    Some(b) => out.push(b),
                    None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                }
            }
            return Ok(out);
        }
        if kinds.byte_fallback
            && token.len() == 6
            && token.starts_with("<0x")
            && token.ends_with('>')
            && let Some(Ok(b)) = token.get(3..5).map(|h| u8::from_str_radix(h, 16))
        {
            return Ok(vec![b]);
        }
        if let Some(prefix) = &kinds.wordpiece_prefix {
            return Ok(match token.strip_prefix(prefix.as_str()) {
                Some(rest) => rest.as_bytes().to_vec(),
                None => format!(" {token}").into_bytes(),
            });
        }
        if kinds.metaspace {
            return Ok(token.replace('▁', " ").into_bytes());
        }
        Ok(token.into_bytes())
    }
}

/// What a decoder pipeline does, as far as single-token pieces need to know.
#[derive(Debug, Default)]
struct DecoderKinds {
    byte_level: bool,
    byte_fallback: bool,
    metaspace: bool,
    wordpiece_prefix: Option<String>,
}

impl DecoderKinds {
    fn collect(&mut self, decoder: &DecoderWrapper) {
        match decoder {
            DecoderWrapper::ByteLevel(_) => self.byte_level = true,
            DecoderWrapper::ByteFallback(_) => self.byte_fallback = true,
            DecoderWrapper::Metaspace(_) => self.metaspace = true,
            DecoderWrapper::Replace(r) => self.metaspace |= r.content == " ",
            DecoderWrapper::WordPiece(w) => self.wordpiece_prefix = Some(w.prefix.clone()),
            DecoderWrapper::Sequence(s) => s.get_decoders().iter().for_each(|d| self.collect(d)),
            DecoderWrapper::BPE(_)
            | DecoderWrapper::CTC(_)
            | DecoderWrapper::Fuse(_)
            | DecoderWrapper::Strip(_) => {}
        }
    }
}

/// The model's own unknown token (WordPiece and BPE models name one).
fn model_unk(t: &tokenizers::Tokenizer) -> Option<u32> {
    let json = serde_json::to_value(t.get_model()).ok()?;
    let unk = json.get("unk_token")?.as_str()?;
    t.token_to_id(unk)
}

/// A copy of `t` whose Metaspace pre-tokenizer never prepends, or `None` when `t` has no
/// Metaspace pre-tokenizer with the `first` scheme (then fragments encode alike).
fn without_first_prepend(t: &tokenizers::Tokenizer) -> Option<tokenizers::Tokenizer> {
    fn patch(p: &mut PreTokenizerWrapper) -> bool {
        match p {
            PreTokenizerWrapper::Metaspace(m) if m.get_prepend_scheme() == PrependScheme::First => {
                m.set_prepend_scheme(PrependScheme::Never);
                true
            }
            PreTokenizerWrapper::Sequence(s) => {
                s.as_mut().iter_mut().fold(false, |acc, p| patch(p) | acc)
            }
            _ => false,
        }
    }
    let mut pre = t.get_pre_tokenizer()?.clone();
    if !patch(&mut pre) {
        return None;
    }
    let mut copy = t.clone();
    copy.with_pre_tokenizer(Some(pre));
    Some(copy)
}
