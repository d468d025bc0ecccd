//! Incremental decoding: for every corpus string (and random id sequences), the chunks a
//! `StreamDecoder` returns add up to the full decode, and no chunk ends inside a character.

mod support;

use poot_text::{EncodeOptions, GgufTokenizer, GgufVocab, Tokenizer};
use support::*;

/// Streams `ids` and checks the contract; returns how many chunks were held back (empty).
fn check_stream(tok: &Tokenizer, ids: &[u32], skip_special: bool, what: &str) -> usize {
    let full = tok.decode(ids, skip_special).expect("decodes");
    let mut stream = tok.stream_decoder(skip_special);
    let mut joined = String::new();
    let mut held = 0;
    for (i, &id) in ids.iter().enumerate() {
        let chunk = stream.push(id).expect("streams");
        if chunk.is_empty() {
            held += 1;
        }
        joined.push_str(&chunk);
        // Text once emitted is final: it is a prefix of the full decode, so a character is
        // never emitted half (as U+FFFD) and completed later.
        assert!(
            full.starts_with(&joined),
            "{what}: after {} ids, emitted {joined:?} is not a prefix of {full:?}",
            i + 1
        );
    }
    joined.push_str(&stream.finish().expect("finishes"));
    assert_eq!(joined, full, "{what}: chunks do not add up to the decode");
    held
}

fn corpus_strings() -> Vec<String> {
    let reference = fixture("smollm2_gguf_tokenizer_ref.json");
    reference["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| str_of(&c["text"]).to_owned())
        .collect()
}

fn check_corpus(tok: &Tokenizer, name: &str) -> usize {
    let corpus = corpus_strings();
    assert!(corpus.len() >= 200);
    let mut held = 0;
    for text in &corpus {
        for (opts, skip) in [
            (
                EncodeOptions {
                    add_special: true,
                    parse_special: true,
                },
                false,
            ),
            (
                EncodeOptions {
                    add_special: true,
                    parse_special: true,
                },
                true,
            ),
            (
                EncodeOptions {
                    add_special: false,
                    parse_special: false,
                },
                true,
            ),
        ] {
            let ids = tok.encode(text, opts).expect("encodes");
            held += check_stream(tok, &ids, skip, &format!("{name} {text:?}"));
        }
    }
    held
}

/// A small deterministic generator for random id sequences.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[(self.next() as usize) % from.len()]
    }
}

/// Random sequences mixing byte tokens, multibyte-splitting tokens and ordinary ones.
fn check_random(tok: &Tokenizer, interesting: &[u32], name: &str) {
    let mut rng = Lcg(0x5EED);
    let n = tok.vocab_size() as u64;
    for round in 0..300 {
        let len = 1 + (rng.next() % 24) as usize;
        let ids: Vec<u32> = (0..len)
            .map(|_| {
                if rng.next().is_multiple_of(3) {
                    (rng.next() % n) as u32
                } else {
                    rng.pick(interesting)
                }
            })
            .collect();
        check_stream(tok, &ids, round % 2 == 0, &format!("{name} random {ids:?}"));
    }
}

fn ids_of(tok: &Tokenizer, texts: &[&str]) -> Vec<u32> {
    texts.iter().filter_map(|t| tok.token_id(t)).collect()
}

#[test]
fn smollm2_byte_level_stream() {
    let Some(t) = gguf_tokenizer(SMOLLM2) else {
        return;
    };
    let tok = Tokenizer::Gguf(Box::new(t));
    let held = check_corpus(&tok, "smollm2");
    assert!(
        held > 0,
        "byte-level tokens split characters somewhere in the corpus"
    );
    // Byte-level stand-ins for UTF-8 lead and continuation bytes, plus ordinary pieces.
    let interesting = ids_of(
        &tok,
        &[
            "â",
            "Ģ",
            "¬",
            "ð",
            "Ł",
            "ĺ",
            "Ģ",
            "Ġ",
            "a",
            "Ċ",
            "<|im_end|>",
            "é",
            "ä¸",
            "Ń",
        ],
    );
    assert!(interesting.len() > 8);
    check_random(&tok, &interesting, "smollm2");
}

#[test]
fn gemma3_byte_fallback_stream() {
    let Some(t) = gguf_tokenizer(GEMMA3) else {
        return;
    };
    let tok = Tokenizer::Gguf(Box::new(t));
    check_corpus(&tok, "gemma3");
    // `<0xE2>` `<0x82>` `<0xAC>` spell "€" across three tokens.
    let euro = ids_of(&tok, &["<0xE2>", "<0x82>", "<0xAC>"]);
    assert_eq!(euro.len(), 3);
    let mut stream = tok.stream_decoder(false);
    assert_eq!(stream.push(euro[0]).expect("streams"), "");
    assert_eq!(stream.push(euro[1]).expect("streams"), "");
    assert_eq!(stream.push(euro[2]).expect("streams"), "€");
    assert_eq!(stream.finish().expect("finishes"), "");
    let mut interesting: Vec<u32> = (0..=255u8)
        .filter_map(|b| tok.token_id(&format!("<0x{b:02X}>")))
        .collect();
    interesting.extend(ids_of(
        &tok,
        &[
            "▁",
            "▁the",
            "<start_of_turn>",
            "<end_of_turn>",
            "\n",
            "<bos>",
        ],
    ));
    check_random(&tok, &interesting, "gemma3");
}

#[test]
fn space_cleanup_stream() {
    // SmolLM2's vocabulary under the gpt-2 pre-tokenizer decodes with llama.cpp's space
    // cleanup, which rewrites text across token boundaries (" ," -> ",").
    let Some(base) = gguf_vocab(SMOLLM2) else {
        return;
    };
    let vocab = GgufVocab {
        pre: Some("gpt-2".into()),
        ..base
    };
    let tok = Tokenizer::Gguf(Box::new(GgufTokenizer::new(&vocab).expect("builds")));
    check_corpus(&tok, "smollm2/gpt-2");
    let interesting = ids_of(
        &tok,
        &[
            "Ġ", "'", "s", "m", "re", "ve", "?", "!", ".", ",", "Ġ'", "a", "ĠĠ", "t",
        ],
    );
    check_random(&tok, &interesting, "smollm2/gpt-2");
    assert_eq!(
        tok.decode(&ids_of(&tok, &["Hello", "Ġ,", "Ġworld", "Ġ!"]), true)
            .expect("decodes"),
        "Hello, world!"
    );
}

#[test]
fn minilm_wordpiece_stream() {
    let Some(t) = minilm_tokenizer() else { return };
    let tok = Tokenizer::Hf(Box::new(t));
    check_corpus(&tok, "minilm");
    let interesting = ids_of(
        &tok,
        &[
            "[CLS]", "[SEP]", "hello", "##ing", "'", "s", ".", "don", "##'", "t", "[UNK]",
        ],
    );
    check_random(&tok, &interesting, "minilm");
}

#[test]
fn toy_byte_level_tokenizer_json_stream() {
    let tok = Tokenizer::Hf(Box::new(toy_tokenizer("bytelevel")));
    let held = check_corpus(&tok, "toy bytelevel");
    assert!(held > 0);
    let interesting: Vec<u32> = (0..tok.vocab_size() as u32)
        .filter(|&i| i % 7 == 0 || i < 260)
        .collect();
    check_random(&tok, &interesting, "toy bytelevel");
}

#[test]
fn toy_metaspace_tokenizer_json_stream() {
    let tok = Tokenizer::Hf(Box::new(toy_tokenizer("metaspace")));
    check_corpus(&tok, "toy metaspace");
    let mut interesting: Vec<u32> = (0..=255u8)
        .filter_map(|b| tok.token_id(&format!("<0x{b:02X}>")))
        .collect();
    interesting.extend(ids_of(&tok, &["▁", "<s>", "</s>", "[INST]", "▁the", "a"]));
    check_random(&tok, &interesting, "toy metaspace");
}

#[test]
fn sentencepiece_leading_space_stream() {
    // With add_space_prefix the first token's leading space is dropped on decode; the stream
    // must drop it exactly once, and keep the spaces of later "▁" tokens.
    let Some(base) = gguf_vocab(GEMMA3) else {
        return;
    };
    let vocab = GgufVocab {
        add_space_prefix: Some(true),
        ..base
    };
    let tok = Tokenizer::Gguf(Box::new(GgufTokenizer::new(&vocab).expect("builds")));
    check_corpus(&tok, "gemma3/space-prefix");
    let ids = tok
        .encode(
            "Hello world",
            EncodeOptions {
                add_special: false,
                parse_special: false,
            },
        )
        .expect("encodes");
    let mut stream = tok.stream_decoder(true);
    let chunks: Vec<String> = ids
        .iter()
        .map(|&id| stream.push(id).expect("streams"))
        .collect();
    assert_eq!(chunks, ["Hello", " world"]);
}
