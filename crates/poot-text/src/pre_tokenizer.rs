//! Pre-tokenizers of byte-level BPE vocabularies: the regexes a GGUF's `tokenizer.ggml.pre`
//! selects, and the splitting rule llama.cpp applies with them.
//!
//! The table follows llama.cpp's `llm_tokenizer_bpe`, written with each model's original
//! `tokenizer.json` regex where llama.cpp stores an adapted one (its adaptations exist only
//! because `std::regex` lacks Unicode classes; `fancy-regex` has them).

use fancy_regex::Regex;

use crate::error::VocabError;

/// How a BPE vocabulary splits text before merging, plus the decode flags llama.cpp ties to
/// the same `tokenizer.ggml.pre` value.
#[derive(Debug)]
pub(crate) struct PreTokenizer {
    /// Applied in order: each regex splits every piece the previous ones produced.
    regexes: Vec<Regex>,
    /// llama.cpp's `clean_spaces` (drop spaces before punctuation when decoding).
    pub(crate) clean_spaces: bool,
    /// Whole words found in the vocabulary skip the merges (llama3-style vocabularies).
    pub(crate) ignore_merges: bool,
    /// The default of `add_bos_token` for this pre-tokenizer.
    pub(crate) add_bos_default: bool,
}

/// GPT-2's regex.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's regex (GPT-4's cl100k).
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 2's regex: Llama 3's with single digits.
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 3.5's regex: marks join letters.
const QWEN35: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// GPT-4o's regex (o200k).
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Mistral's Tekken regex.
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// DeepSeek V3's word regex (after its digit and CJK splits).
const DEEPSEEK3: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;
/// Bloom-family splitting on punctuation.
const BLOOM: &str = r" ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+";

/// One row of the table: the `tokenizer.ggml.pre` names, their regexes and flags.
struct Row {
    names: &'static [&'static str],
    regexes: &'static [&'static str],
    clean_spaces: bool,
    ignore_merges: bool,
    add_bos: bool,
}

const fn row(
    names: &'static [&'static str],
    regexes: &'static [&'static str],
    clean_spaces: bool,
) -> Row {
    Row {
        names,
        regexes,
        clean_spaces,
        ignore_merges: false,
        add_bos: false,
    }
}

/// Every pre-tokenizer poot knows, from llama.cpp's `llama_vocab::impl::load`.
const TABLE: &[Row] = &[
    row(
        &["default"],
        &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
        true,
    ),
    Row {
        names: &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
        ],
        regexes: &[LLAMA3],
        clean_spaces: true,
        ignore_merges: true,
        add_bos: true,
    },
    row(&["dbrx", "smaug-bpe"], &[LLAMA3], true),
    row(
        &["deepseek-llm"],
        &[
            r"[\r\n]",
            r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+",
            r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+",
            r"\s+$",
            r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+",
            r"\p{N}+",
        ],
        false,
    ),
    row(
        &["deepseek-coder"],
        &[
            r"[\r\n]",
            r"\s?\p{L}+",
            r"\s?\p{P}+",
            r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+",
            r"\p{N}",
        ],
        false,
    ),
    row(
        &["deepseek-v3"],
        &[
            r"\p{N}{1,3}",
            r"[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+",
            DEEPSEEK3,
        ],
        false,
    ),
    row(
        &["falcon"],
        &[r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"],
        true,
    ),
    row(
        &[
            "starcoder",
            "refact",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        &[r"\p{N}", GPT2],
        true,
    ),
    row(&["smollm", "command-r"], &[r"\p{N}", GPT2], false),
    row(
        &[
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "jina-v1-en",
            "jina-v2-code",
            "roberta-bpe",
            "mpt",
            "olmo",
            "jais",
            "exaone4",
        ],
        &[GPT2],
        true,
    ),
    row(&["trillion", "granite-docling"], &[GPT2], false),
    row(
        &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "hunyuan",
            "solar-open",
            "grok-2",
        ],
        &[QWEN2],
        false,
    ),
    row(&["stablelm2", "megrez"], &[QWEN2], true),
    row(&["qwen35"], &[QWEN35], false),
    row(&["poro-chat"], &[BLOOM], false),
    row(&["bloom", "gpt3-finnish"], &[BLOOM], true),
    row(&["viking"], &[BLOOM, r"\p{N}"], false),
    Row {
        names: &["tekken"],
        regexes: &[TEKKEN],
        clean_spaces: false,
        ignore_merges: true,
        add_bos: true,
    },
    row(
        &["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"],
        &[GPT4O],
        false,
    ),
    row(
        &["seed-coder"],
        &[
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+",
        ],
        false,
    ),
    row(
        &["bailingmoe", "bailingmoe2", "llada-moe"],
        &[
            r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
        ],
        false,
    ),
];

impl PreTokenizer {
    /// The pre-tokenizer for a `tokenizer.ggml.pre` value (`None`: llama.cpp's `default`).
    pub(crate) fn for_name(pre: Option<&str>) -> Result<PreTokenizer, VocabError> {
        let name = pre.filter(|p| !p.is_empty()).unwrap_or("default");
        let row = TABLE
            .iter()
            .find(|r| r.names.contains(&name))
            .ok_or_else(|| VocabError::UnsupportedPreTokenizer {
                pre: name.to_owned(),
            })?;
        let regexes = row
            .regexes
            .iter()
            .map(|p| {
                Regex::new(p).map_err(|e| VocabError::Regex {
                    pattern: (*p).to_owned(),
                    source: Box::new(e),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PreTokenizer {
            regexes,
            clean_spaces: row.clean_spaces,
            ignore_merges: row.ignore_merges,
            add_bos_default: row.add_bos,
        })
    }

    /// Splits `text` into words, as byte ranges of `text`.
    ///
    /// Each regex splits every current piece: a match becomes a piece and so does the text
    /// between matches, so no byte is ever dropped (llama.cpp's `unicode_regex_split`).
    pub(crate) fn split(&self, text: &str) -> Vec<std::ops::Range<usize>> {
        let mut pieces: Vec<std::ops::Range<usize>> = Vec::new();
        if !text.is_empty() {
            pieces.push(0..text.len());
        }
        for regex in &self.regexes {
            let mut next = Vec::with_capacity(pieces.len());
            for piece in pieces {
                let sub = &text[piece.clone()];
                let mut last = 0;
                let mut at = 0;
                while at <= sub.len() {
                    // A regex that cannot run (backtrack limit) leaves the rest as one piece.
                    let Ok(Some(m)) = regex.find_from_pos(sub, at) else {
                        break;
                    };
                    if m.end() == m.start() {
                        // Empty matches split nothing; step over one character.
                        at = m.end() + sub[m.end()..].chars().next().map_or(1, char::len_utf8);
                        continue;
                    }
                    if m.start() > last {
                        next.push(piece.start + last..piece.start + m.start());
                    }
                    next.push(piece.start + m.start()..piece.start + m.end());
                    last = m.end();
                    at = m.end();
                }
                if last < sub.len() {
                    next.push(piece.start + last..piece.end);
                }
            }
            pieces = next;
        }
        pieces
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pre: &str, text: &str) -> Vec<String> {
        let p = PreTokenizer::for_name(Some(pre)).expect("known pre-tokenizer");
        p.split(text)
            .into_iter()
            .map(|r| text[r].to_owned())
            .collect()
    }

    #[test]
    fn every_row_compiles() {
        for row in TABLE {
            for name in row.names {
                PreTokenizer::for_name(Some(name)).expect("table regex compiles");
            }
        }
    }

    #[test]
    fn gpt2_splits_like_the_reference_regex() {
        assert_eq!(
            words("gpt-2", "Hello world  it's 42!"),
            ["Hello", " world", " ", " it", "'s", " 42", "!"]
        );
        assert_eq!(words("gpt-2", "a   "), ["a", "   "]);
    }

    #[test]
    fn smollm_isolates_digits_first() {
        assert_eq!(words("smollm", "ab 123"), ["ab", " ", "1", "2", "3"]);
    }

    #[test]
    fn llama3_groups_three_digits() {
        assert_eq!(words("llama3", "12345 x"), ["123", "45", " x"]);
    }

    #[test]
    fn unknown_pre_is_refused() {
        assert!(matches!(
            PreTokenizer::for_name(Some("no-such-pre")),
            Err(VocabError::UnsupportedPreTokenizer { .. })
        ));
    }
}
