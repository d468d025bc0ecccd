//! Incremental decoding for streamed generation.
//!
//! The contract: the concatenation of everything [`StreamDecoder::push`] and
//! [`StreamDecoder::finish`] return equals [`Tokenizer::decode`] of all pushed ids, and no
//! returned chunk ends inside a UTF-8 character (an incomplete character waits for the tokens
//! that complete it).
//!
//! GGUF vocabularies decode token by token (each token's bytes, then an optional space
//! cleanup), so their stream works on bytes: it assembles characters across byte-fallback
//! (`<0xE2>`) and byte-level tokens and holds back only what the cleanup could still change.
//! A `tokenizer.json` decoder pipeline is not token-local (Metaspace strips the first space,
//! ByteFallback renders a whole run of byte tokens at once), so its stream re-decodes a small
//! window of recent ids, the way text-generation-inference does, emits only what the window
//! adds, and waits while a run of byte-fallback tokens is open.

use crate::clean_spaces;
use crate::error::TokenizerError;
use crate::tokenizer::Tokenizer;

/// Turns a stream of ids into text chunks. Create one with [`Tokenizer::stream_decoder`].
#[derive(Debug)]
pub struct StreamDecoder<'t> {
    tokenizer: &'t Tokenizer,
    skip_special: bool,
    state: State,
}

/// A [`StreamDecoder`]'s progress without its borrow of the tokenizer, for a caller that keeps
/// many streams alive next to the tokenizer (a server's open sequences).
#[derive(Debug)]
pub struct DecoderState {
    skip_special: bool,
    state: State,
}

#[derive(Debug)]
enum State {
    /// GGUF: raw bytes not yet past cleanup, and bytes of an unfinished character.
    Bytes {
        first: bool,
        raw: Vec<u8>,
        utf8: Utf8Assembler,
    },
    /// tokenizer.json: all ids; `prefix..read` is the context window already emitted;
    /// `open_run` while the last rendered token is a byte-fallback byte.
    Window {
        ids: Vec<u32>,
        prefix: usize,
        read: usize,
        open_run: bool,
    },
}

impl<'t> StreamDecoder<'t> {
    pub(crate) fn new(tokenizer: &'t Tokenizer, skip_special: bool) -> StreamDecoder<'t> {
        let state = match tokenizer {
            Tokenizer::Gguf(_) => State::Bytes {
                first: true,
                raw: Vec::new(),
                utf8: Utf8Assembler::default(),
            },
            Tokenizer::Hf(_) => State::Window {
                ids: Vec::new(),
                prefix: 0,
                read: 0,
                open_run: false,
            },
        };
        StreamDecoder {
            tokenizer,
            skip_special,
            state,
        }
    }

    /// Keeps the progress, releasing the tokenizer.
    pub fn detach(self) -> DecoderState {
        DecoderState {
            skip_special: self.skip_special,
            state: self.state,
        }
    }

    /// Continues a detached stream. `tokenizer` must be the one the stream started with.
    pub fn resume(tokenizer: &'t Tokenizer, saved: DecoderState) -> StreamDecoder<'t> {
        StreamDecoder {
            tokenizer,
            skip_special: saved.skip_special,
            state: saved.state,
        }
    }

    /// Adds one id and returns the text it completes (often empty while a character or a
    /// cleanup decision is pending).
    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        match (&mut self.state, self.tokenizer) {
            (State::Bytes { first, raw, utf8 }, Tokenizer::Gguf(t)) => {
                raw.extend_from_slice(t.first_aware_piece(id, *first, self.skip_special)?);
                *first = false;
                if !t.cleans_spaces() {
                    let text = utf8.push(raw);
                    raw.clear();
                    return Ok(text);
                }
                let Some(stable) = clean_spaces::stable_prefix_len(raw) else {
                    return Ok(String::new());
                };
                let mut done: Vec<u8> = raw.drain(..stable).collect();
                clean_spaces::clean(&mut done);
                Ok(utf8.push(&done))
            }
            (
                State::Window {
                    ids,
                    prefix,
                    read,
                    open_run,
                },
                tokenizer,
            ) => {
                // Validate before keeping the id, so a bad id leaves the stream usable.
                tokenizer.decode(&[id], self.skip_special)?;
                ids.push(id);
                if let Tokenizer::Hf(hf) = tokenizer {
                    if hf.is_fallback_byte(id) {
                        *open_run = true;
                    } else if !(self.skip_special && hf.is_control(id)) {
                        // A skipped token renders nothing and so does not end a byte run.
                        *open_run = false;
                    }
                }
                if *open_run {
                    return Ok(String::new());
                }
                let before = tokenizer.decode(&ids[*prefix..*read], self.skip_special)?;
                let after = tokenizer.decode(&ids[*prefix..], self.skip_special)?;
                if after.len() > before.len()
                    && !after.ends_with('\u{FFFD}')
                    && after.starts_with(&before)
                {
                    let chunk = after[before.len()..].to_owned();
                    *prefix = *read;
                    *read = ids.len();
                    return Ok(chunk);
                }
                Ok(String::new())
            }
            (State::Bytes { .. }, Tokenizer::Hf(_)) => Ok(String::new()),
        }
    }

    /// Ends the stream and returns the text still held back (an unfinished character
    /// becomes U+FFFD, as in [`Tokenizer::decode`]).
    pub fn finish(&mut self) -> Result<String, TokenizerError> {
        match (&mut self.state, self.tokenizer) {
            (State::Bytes { raw, utf8, .. }, Tokenizer::Gguf(t)) => {
                let mut rest = std::mem::take(raw);
                if t.cleans_spaces() {
                    clean_spaces::clean(&mut rest);
                }
                let mut text = utf8.push(&rest);
                text.push_str(&utf8.flush());
                Ok(text)
            }
            (
                State::Window {
                    ids, prefix, read, ..
                },
                tokenizer,
            ) => {
                let before = tokenizer.decode(&ids[*prefix..*read], self.skip_special)?;
                let after = tokenizer.decode(&ids[*prefix..], self.skip_special)?;
                *prefix = ids.len();
                *read = ids.len();
                // The window only grew, so `before` is a prefix of `after` for every decoder
                // whose output for earlier ids does not depend on later ones.
                let common = common_prefix_len(&before, &after);
                Ok(after[common..].to_owned())
            }
            (State::Bytes { .. }, Tokenizer::Hf(_)) => Ok(String::new()),
        }
    }
}

/// Length in bytes of the longest common prefix of two strings, on a char boundary.
fn common_prefix_len(a: &str, b: &str) -> usize {
    a.char_indices()
        .zip(b.chars())
        .find(|((_, ca), cb)| ca != cb)
        .map_or_else(|| a.len().min(b.len()), |((i, _), _)| i)
}

/// Assembles UTF-8 from byte chunks, exactly as `String::from_utf8_lossy` would over the
/// concatenation: complete characters go out at once, a sequence that cannot become valid
/// becomes one U+FFFD per maximal invalid part, an incomplete tail waits.
#[derive(Debug, Default)]
pub(crate) struct Utf8Assembler {
    pending: Vec<u8>,
}

impl Utf8Assembler {
    pub(crate) fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            rest = after.get(n..).unwrap_or(&[]);
                        }
                        None => {
                            rest = after;
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }

    /// Ends the input: an incomplete character becomes U+FFFD.
    pub(crate) fn flush(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Any split of any byte sequence assembles to `from_utf8_lossy` of the whole.
        #[test]
        fn assembler_matches_lossy(bytes in proptest::collection::vec(any::<u8>(), 0..64), cuts in proptest::collection::vec(0usize..64, 0..8)) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            cuts.sort_unstable();
            let mut a = Utf8Assembler::default();
            let mut out = String::new();
            let mut last = 0;
            for c in cuts {
                out.push_str(&a.push(&bytes[last..c]));
                last = c;
            }
            out.push_str(&a.push(&bytes[last..]));
            out.push_str(&a.flush());
            prop_assert_eq!(out, String::from_utf8_lossy(&bytes).into_owned());
        }
    }

    #[test]
    fn holds_back_partial_characters() {
        let mut a = Utf8Assembler::default();
        assert_eq!(a.push(&[0xE2, 0x82]), "");
        assert_eq!(a.push(&[0xAC, b'x']), "€x");
        assert_eq!(a.push(&[0xF0]), "");
        assert_eq!(a.flush(), "\u{FFFD}");
    }
}
