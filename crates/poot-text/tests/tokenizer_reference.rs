//! Token ids, decodes and pieces against the committed references
//! (`scripts/ref/tokenizer_refs.py`): llama.cpp for GGUF vocabularies, Python `tokenizers`
//! for `tokenizer.json`.

mod support;

use poot_text::{EncodeOptions, Tokenizer};
use support::*;

const SPECIAL: EncodeOptions = EncodeOptions {
    add_special: true,
    parse_special: true,
};
const PLAIN: EncodeOptions = EncodeOptions {
    add_special: false,
    parse_special: false,
};

/// Compares every corpus case; returns the number of cases checked.
fn check_gguf(model_name: &str, fixture_name: &str) -> Option<usize> {
    let tok = gguf_tokenizer(model_name)?;
    let reference = fixture(fixture_name);
    let cases = reference["cases"].as_array().expect("cases");
    let mut failures = Vec::new();
    for case in cases {
        let text = str_of(&case["text"]);
        let special = tok.encode(text, SPECIAL).expect("encodes");
        let plain = tok.encode(text, PLAIN).expect("encodes");
        if special != ids(&case["special"]) {
            failures.push(format!(
                "special {text:?}: got {special:?} want {:?}",
                ids(&case["special"])
            ));
        }
        if plain != ids(&case["plain"]) {
            failures.push(format!(
                "plain {text:?}: got {plain:?} want {:?}",
                ids(&case["plain"])
            ));
        }
        let want = ids(&case["special"]);
        let decoded = tok.decode_bytes(&want, false).expect("decodes");
        if decoded != hex(&case["decoded_hex"]) {
            failures.push(format!(
                "decode {text:?}: got {:?}",
                String::from_utf8_lossy(&decoded)
            ));
        }
        let skipped = tok.decode_bytes(&want, true).expect("decodes");
        if skipped != hex(&case["decoded_skip_hex"]) {
            failures.push(format!(
                "decode skip {text:?}: got {:?}",
                String::from_utf8_lossy(&skipped)
            ));
        }
        let plain_decoded = tok
            .decode_bytes(&ids(&case["plain"]), true)
            .expect("decodes");
        if plain_decoded != hex(&case["plain_decoded_hex"]) {
            failures.push(format!(
                "plain decode {text:?}: got {:?}",
                String::from_utf8_lossy(&plain_decoded)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches of {}:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    Some(cases.len())
}

#[test]
fn smollm2_gguf_matches_llama_cpp() {
    if let Some(n) = check_gguf(SMOLLM2, "smollm2_gguf_tokenizer_ref.json") {
        assert!(n >= 200, "corpus has {n} strings");
    }
}

#[test]
fn gemma3_gguf_matches_llama_cpp() {
    if let Some(n) = check_gguf(GEMMA3, "gemma3_gguf_tokenizer_ref.json") {
        assert!(n >= 200, "corpus has {n} strings");
    }
}

fn check_gguf_pieces_and_specials(model_name: &str, fixture_name: &str, check_eot: bool) {
    let Some(tok) = gguf_tokenizer(model_name) else {
        return;
    };
    let reference = fixture(fixture_name);
    assert_eq!(
        tok.vocab_size() as u64,
        reference["n_vocab"].as_u64().expect("n_vocab")
    );
    let sp = tok.special_tokens();
    let opt = |v: &serde_json::Value| v.as_u64().map(|x| x as u32);
    assert_eq!(sp.bos, opt(&reference["bos"]), "bos");
    assert_eq!(sp.eos, opt(&reference["eos"]), "eos");
    assert_eq!(sp.pad, opt(&reference["pad"]), "pad");
    if check_eot {
        assert_eq!(sp.eot, opt(&reference["eot"]), "eot");
    }
    assert_eq!(sp.eog, ids(&reference["eog"]), "end-of-generation set");
    assert_eq!(
        tok.adds_bos(),
        reference["add_bos"].as_bool().expect("add_bos")
    );
    let pieces = reference["pieces"].as_array().expect("pieces");
    for p in pieces {
        let id = p["id"].as_u64().expect("id") as u32;
        assert_eq!(
            tok.token_to_piece(id, false).expect("piece"),
            hex(&p["special_hex"]).as_slice(),
            "piece of {id}"
        );
        assert_eq!(
            tok.token_to_piece(id, true).expect("piece"),
            hex(&p["plain_hex"]).as_slice(),
            "skip piece of {id}"
        );
    }
    assert!(pieces.len() > 400);
}

#[test]
fn smollm2_pieces_and_special_ids() {
    // llama.cpp picks SmolLM2's end-of-turn token in hash-map order (`<|endoftext|>` there);
    // poot takes its list order (`<|im_end|>`). Both are in the end-of-generation set.
    check_gguf_pieces_and_specials(SMOLLM2, "smollm2_gguf_tokenizer_ref.json", false);
}

#[test]
fn gemma3_pieces_and_special_ids() {
    check_gguf_pieces_and_specials(GEMMA3, "gemma3_gguf_tokenizer_ref.json", true);
}

/// A `tokenizer.json` against Python `tokenizers` on every corpus case; also checks that the
/// fragment-wise encode behind chat prompts (forced here by an empty protected range at the
/// end) equals the tokenizer's own special-parsing encode.
fn check_hf(tok: &Tokenizer, fixture_name: &str) -> usize {
    let reference = fixture(fixture_name);
    let cases = reference["cases"].as_array().expect("cases");
    for case in cases {
        let text = str_of(&case["text"]);
        assert_eq!(
            tok.encode(text, SPECIAL).expect("encodes"),
            ids(&case["special"]),
            "special {text:?}"
        );
        assert_eq!(
            tok.encode(text, PLAIN).expect("encodes"),
            ids(&case["plain"]),
            "plain {text:?}"
        );
        let special = ids(&case["special"]);
        assert_eq!(
            tok.decode(&special, false).expect("decodes"),
            str_of(&case["decoded"]),
            "decode {text:?}"
        );
        assert_eq!(
            tok.decode(&special, true).expect("decodes"),
            str_of(&case["decoded_skip"]),
            "decode skip {text:?}"
        );
        assert_eq!(
            tok.decode(&ids(&case["plain"]), true).expect("decodes"),
            str_of(&case["plain_decoded"]),
            "plain decode {text:?}"
        );
        let whole = tok
            .encode(
                text,
                EncodeOptions {
                    add_special: false,
                    parse_special: true,
                },
            )
            .expect("encodes");
        let end = text.len();
        #[allow(clippy::single_range_in_vec_init)]
        let fragments = tok.encode_protected(text, &[end..end]).expect("encodes");
        assert_eq!(fragments, whole, "fragment-wise encode {text:?}");
    }
    cases.len()
}

#[test]
fn minilm_tokenizer_json_matches_python_tokenizers() {
    let Some(tok) = minilm_tokenizer() else {
        return;
    };
    let tok = Tokenizer::Hf(Box::new(tok));
    let reference = fixture("minilm_tokenizer_ref.json");
    assert!(check_hf(&tok, "minilm_tokenizer_ref.json") >= 200);
    assert_eq!(
        tok.vocab_size() as u64,
        reference["n_vocab"].as_u64().expect("n_vocab")
    );
    assert_eq!(tok.special_tokens().unk, Some(100));
    assert_eq!(tok.special_tokens().pad, Some(0));
}

#[test]
fn byte_level_tokenizer_json_matches_python_tokenizers() {
    let tok = Tokenizer::Hf(Box::new(toy_tokenizer("bytelevel")));
    assert!(check_hf(&tok, "toy_bytelevel_ref.json") >= 200);
    assert!(tok.adds_bos());
    assert_eq!(
        tok.special_tokens().eog,
        [2],
        "<|im_end|> is the EOS and an end-of-turn name"
    );
    // Byte-level pieces are raw bytes, possibly part of a character.
    let euro = tok.encode("€", PLAIN).expect("encodes");
    let bytes: Vec<u8> = euro
        .iter()
        .flat_map(|&id| tok.token_to_piece(id, true).expect("piece"))
        .collect();
    assert_eq!(bytes, "€".as_bytes());
}

#[test]
fn metaspace_byte_fallback_tokenizer_json_matches_python_tokenizers() {
    let tok = Tokenizer::Hf(Box::new(toy_tokenizer("metaspace")));
    assert!(check_hf(&tok, "toy_metaspace_ref.json") >= 200);
    assert!(tok.adds_bos());
    let hi = tok.token_id("<0xE2>").expect("byte token");
    assert_eq!(tok.token_to_piece(hi, true).expect("piece"), [0xE2]);
}

#[test]
fn unknown_ids_are_typed_errors() {
    if let Some(tok) = gguf_tokenizer(SMOLLM2) {
        let tok = Tokenizer::Gguf(Box::new(tok));
        assert!(matches!(
            tok.decode(&[1, 999_999], false),
            Err(poot_text::TokenizerError::UnknownId { id: 999_999, .. })
        ));
    }
    if let Some(tok) = minilm_tokenizer() {
        let tok = Tokenizer::Hf(Box::new(tok));
        assert!(matches!(
            tok.decode(&[101, 999_999], false),
            Err(poot_text::TokenizerError::UnknownId { id: 999_999, .. })
        ));
    }
}

/// SmolLM2's vocabulary under other pre-tokenizers, against llama.cpp loading a copy of the
/// file with `tokenizer.ggml.pre` changed: covers the llama3, qwen2, gpt-2 families and their
/// flags (llama3's whole-word lookup, gpt-2's decode-time space cleanup).
#[test]
fn byte_level_pre_tokenizer_variants_match_llama_cpp() {
    let Some(base) = gguf_vocab(SMOLLM2) else {
        return;
    };
    let mut checked = 0;
    for pre in [
        "llama3",
        "qwen2",
        "gpt-2",
        "default",
        "deepseek-v3",
        "gpt-4o",
        "tekken",
        "stablelm2",
    ] {
        let reference = fixture(&format!("smollm2_vocab_pre_{pre}_ref.json"));
        let vocab = poot_text::GgufVocab {
            pre: Some(pre.to_owned()),
            ..base.clone()
        };
        let tok = poot_text::GgufTokenizer::new(&vocab).expect("vocabulary builds");
        let mut failures = Vec::new();
        for case in reference["cases"].as_array().expect("cases") {
            let text = str_of(&case["text"]);
            let special = tok.encode(text, SPECIAL).expect("encodes");
            if special != ids(&case["special"]) {
                failures.push(format!(
                    "{pre} special {text:?}: got {special:?} want {:?}",
                    ids(&case["special"])
                ));
            }
            let plain = tok.encode(text, PLAIN).expect("encodes");
            if plain != ids(&case["plain"]) {
                failures.push(format!(
                    "{pre} plain {text:?}: got {plain:?} want {:?}",
                    ids(&case["plain"])
                ));
            }
            let decoded = tok
                .decode_bytes(&ids(&case["special"]), false)
                .expect("decodes");
            if decoded != hex(&case["decoded_hex"]) {
                failures.push(format!(
                    "{pre} decode {text:?}: got {:?}",
                    String::from_utf8_lossy(&decoded)
                ));
            }
            checked += 1;
        }
        assert!(
            failures.is_empty(),
            "{} mismatches:\n{}",
            failures.len(),
            failures.join("\n")
        );
        assert_eq!(
            tok.adds_bos(),
            reference["add_bos"].as_bool().expect("add_bos"),
            "{pre} add_bos"
        );
    }
    assert!(checked >= 8 * 200);
}

/// Gemma 3's vocabulary with `add_space_prefix` on (the Llama 2 convention), against llama.cpp:
/// the leading "▁" after BOS and after each special token, and its removal on decode.
#[test]
fn sentencepiece_space_prefix_matches_llama_cpp() {
    let Some(base) = gguf_vocab(GEMMA3) else {
        return;
    };
    let vocab = poot_text::GgufVocab {
        add_space_prefix: Some(true),
        ..base
    };
    let tok = poot_text::GgufTokenizer::new(&vocab).expect("vocabulary builds");
    let reference = fixture("gemma3_vocab_space_prefix_ref.json");
    let cases = reference["cases"].as_array().expect("cases");
    for case in cases {
        let text = str_of(&case["text"]);
        assert_eq!(
            tok.encode(text, SPECIAL).expect("encodes"),
            ids(&case["special"]),
            "special {text:?}"
        );
        assert_eq!(
            tok.encode(text, PLAIN).expect("encodes"),
            ids(&case["plain"]),
            "plain {text:?}"
        );
        let special = ids(&case["special"]);
        assert_eq!(
            tok.decode_bytes(&special, false).expect("decodes"),
            hex(&case["decoded_hex"]),
            "decode {text:?}"
        );
        assert_eq!(
            tok.decode_bytes(&special, true).expect("decodes"),
            hex(&case["decoded_skip_hex"]),
            "decode {text:?}"
        );
        let plain = ids(&case["plain"]);
        assert_eq!(
            tok.decode_bytes(&plain, true).expect("decodes"),
            hex(&case["plain_decoded_hex"]),
            "decode {text:?}"
        );
    }
    assert!(cases.len() >= 200);
}
