//! Guided decoding: a request's output constrained to a JSON schema, any JSON object, a regular
//! expression or a Lark grammar, by llguidance (the library llama.cpp, vLLM and mistral.rs use).
//!
//! [`Guides`] holds the tokenizer's token trie, built once per model; [`Guides::compile`] turns
//! a [`Constraint`] into a [`Guide`], one per request, which gives the allowed-token bit mask
//! for the next pick ([`Guide::mask`], the layout the sampling suffix's
//! [`crate::sampling::MASK_SLOT`] reads) and advances by each token the sequence commits. The
//! end-of-generation tokens are allowed only where the grammar accepts; a grammar that can take
//! nothing more stops the sequence.

use std::sync::Arc;

use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};
use llguidance::{Matcher, ParserFactory};
use poot_text::Tokenizer;

use crate::sampling::mask_words;

/// What a request's output must match.
#[derive(Clone, Debug, PartialEq)]
pub enum Constraint {
    /// A JSON value valid under this JSON schema (llguidance's subset: most of draft 2020-12).
    JsonSchema(serde_json::Value),
    /// Any JSON object (OpenAI's `json_object` response format).
    JsonObject,
    /// Text matching this regular expression in full (Rust `regex` syntax).
    Regex(String),
    /// Text the grammar derives (llguidance's Lark dialect).
    Lark(String),
}

impl Constraint {
    /// How a message names the kind of constraint.
    pub fn kind(&self) -> &'static str {
        match self {
            Constraint::JsonSchema(_) => "JSON schema",
            Constraint::JsonObject => "JSON object",
            Constraint::Regex(_) => "regex",
            Constraint::Lark(_) => "Lark grammar",
        }
    }

    fn grammar(&self) -> TopLevelGrammar {
        match self {
            Constraint::JsonSchema(schema) => TopLevelGrammar::from_json_schema(bounded(schema)),
            Constraint::JsonObject => {
                TopLevelGrammar::from_json_schema(bounded(&serde_json::json!({"type": "object"})))
            }
            Constraint::Regex(rx) => TopLevelGrammar::from_regex(rx),
            Constraint::Lark(lark) => TopLevelGrammar::from_lark(lark.clone()),
        }
    }
}

/// Whitespace a JSON output may put between two tokens of its syntax: at most
/// [`JSON_WHITESPACE_RUN`] characters (llama.cpp bounds it likewise). llguidance's default is
/// unbounded, and a small model can then spend its whole budget on spaces. A schema that sets
/// its own `x-guidance` options keeps them.
pub fn bounded(schema: &serde_json::Value) -> serde_json::Value {
    let mut schema = schema.clone();
    if let Some(o) = schema.as_object_mut()
        && !o.contains_key("x-guidance")
    {
        let pattern = format!("[\\x20\\x0A\\x0D\\x09]{{1,{JSON_WHITESPACE_RUN}}}");
        o.insert(
            "x-guidance".into(),
            serde_json::json!({ "whitespace_pattern": pattern }),
        );
    }
    schema
}

/// The longest whitespace run between two tokens of a guided JSON output.
pub const JSON_WHITESPACE_RUN: usize = 20;

/// Why a constraint could not be built or followed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GuideError {
    /// The schema, regex or grammar is invalid (or beyond llguidance's limits): the request's
    /// fault; `message` is llguidance's.
    #[error("invalid {kind}: {message}")]
    Invalid { kind: &'static str, message: String },
    /// The tokenizer's vocabulary could not be turned into a token trie.
    #[error("guided decoding cannot use this tokenizer: {0}")]
    Vocabulary(String),
    /// The matcher failed while following the output (a token it did not allow, or a limit
    /// reached mid-generation).
    #[error("guided decoding failed at generated token {at}: {message}")]
    Failed { at: usize, message: String },
}

/// The token trie of one model's tokenizer, shared by every guided request.
pub struct Guides {
    factory: ParserFactory,
    vocab: usize,
}

impl std::fmt::Debug for Guides {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guides")
            .field("vocab", &self.vocab)
            .finish()
    }
}

impl Guides {
    /// The trie of `tokenizer`'s tokens over a model vocabulary of `vocab` ids (ids past the
    /// tokenizer's, padding rows of the embedding, are never allowed). `eog` are the tokens that
    /// end generation: allowed where the grammar accepts.
    pub fn new(tokenizer: &Tokenizer, vocab: usize, eog: &[u32]) -> Result<Guides, GuideError> {
        let bad = |m: String| GuideError::Vocabulary(m);
        let mut words = Vec::with_capacity(vocab);
        for id in 0..vocab as u32 {
            if id as usize >= tokenizer.vocab_size() {
                words.push(Vec::new());
            } else if tokenizer.is_control(id) {
                // llguidance names special tokens by a 0xFF byte and their spelling.
                let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                w.extend(tokenizer.token_text(id).unwrap_or_default().into_bytes());
                words.push(w);
            } else {
                let piece = tokenizer
                    .token_to_piece(id, false)
                    .map_err(|e| bad(format!("token {id}: {e}")))?;
                words.push(piece);
            }
        }
        let mut eos: Vec<u32> = eog
            .iter()
            .copied()
            .filter(|&t| (t as usize) < vocab)
            .collect();
        eos.sort_unstable();
        eos.dedup();
        let Some(&first) = eos.first() else {
            return Err(bad("the tokenizer names no end-of-generation token".into()));
        };
        let info = TokRxInfo::new(vocab as u32, first);
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos);
        let env: TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| bad(e.to_string()))?;
        factory.quiet();
        // Bound what one request's grammar may cost (llguidance's defaults, stated here).
        *factory.limits_mut() = ParserLimits::default();
        Ok(Guides { factory, vocab })
    }

    /// The model vocabulary the masks cover.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// A fresh guide for one request, or why `constraint` is invalid.
    pub fn compile(&self, constraint: &Constraint) -> Result<Guide, GuideError> {
        // llguidance's messages can span lines (a regex error draws a caret): one line reads
        // better in an error line or a JSON body.
        let invalid = |message: String| GuideError::Invalid {
            kind: constraint.kind(),
            message: message
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect::<Vec<_>>()
                .join(" "),
        };
        let parser = self
            .factory
            .create_parser(constraint.grammar())
            .map_err(|e| invalid(e.to_string()))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(message) = matcher.get_error() {
            return Err(invalid(message));
        }
        Ok(Guide {
            matcher,
            words: mask_words(self.vocab),
            consumed: 0,
        })
    }
}

/// One request's position in its grammar.
pub struct Guide {
    matcher: Matcher,
    words: usize,
    consumed: usize,
}

impl std::fmt::Debug for Guide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guide")
            .field("consumed", &self.consumed)
            .finish()
    }
}

impl Guide {
    /// The tokens allowed next, as `mask_words(vocab)` u32 words (bit `t % 32` of word `t / 32`
    /// for token `t`). End-of-generation tokens are set only where the grammar accepts, and
    /// alone once it can take nothing more. An empty mask is an error, never sent to a device.
    pub fn mask(&mut self) -> Result<Vec<u32>, GuideError> {
        let vob = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| self.failed(e.to_string()))?;
        let mut words = vob.as_slice().to_vec();
        words.resize(self.words, 0);
        if words.iter().all(|&w| w == 0) {
            return Err(self.failed("the grammar allows no token".into()));
        }
        Ok(words)
    }

    /// Follows `token`, the sequence's next output token.
    pub fn advance(&mut self, token: u32) -> Result<(), GuideError> {
        self.matcher
            .consume_token(token)
            .map_err(|e| self.failed(e.to_string()))?;
        self.consumed += 1;
        Ok(())
    }

    /// The grammar accepts the output so far (an end token is allowed now).
    pub fn is_accepting(&mut self) -> bool {
        self.matcher.is_accepting().unwrap_or(false)
    }

    /// The grammar is complete and can take nothing more: the sequence stops here.
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped() && !self.matcher.is_error()
    }

    fn failed(&self, message: String) -> GuideError {
        GuideError::Failed {
            at: self.consumed,
            message,
        }
    }
}
