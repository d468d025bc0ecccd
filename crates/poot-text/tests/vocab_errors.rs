//! Bad vocabulary metadata is a typed error, never a panic.

use poot_load::gguf::GgufFile;
use poot_text::{EncodeOptions, GgufTokenizer, GgufVocab, TokenizerError, VocabError};

/// A GGUF value for the tiny writer below.
enum V<'a> {
    Str(&'a str),
    U32(u32),
    Bool(bool),
    Strs(&'a [&'a str]),
    I32s(&'a [i32]),
    F32s(&'a [f32]),
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Writes a tensor-free GGUF v3 file holding `kvs`.
fn gguf(kvs: &[(&str, V<'_>)]) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend_from_slice(&3u32.to_le_bytes());
    out.extend_from_slice(&0u64.to_le_bytes());
    out.extend_from_slice(&(kvs.len() as u64).to_le_bytes());
    for (key, value) in kvs {
        put_str(&mut out, key);
        match value {
            V::Str(s) => {
                out.extend_from_slice(&8u32.to_le_bytes());
                put_str(&mut out, s);
            }
            V::U32(x) => {
                out.extend_from_slice(&4u32.to_le_bytes());
                out.extend_from_slice(&x.to_le_bytes());
            }
            V::Bool(b) => {
                out.extend_from_slice(&7u32.to_le_bytes());
                out.push(u8::from(*b));
            }
            V::Strs(list) => {
                out.extend_from_slice(&9u32.to_le_bytes());
                out.extend_from_slice(&8u32.to_le_bytes());
                out.extend_from_slice(&(list.len() as u64).to_le_bytes());
                for s in *list {
                    put_str(&mut out, s);
                }
            }
            V::I32s(list) => {
                out.extend_from_slice(&9u32.to_le_bytes());
                out.extend_from_slice(&5u32.to_le_bytes());
                out.extend_from_slice(&(list.len() as u64).to_le_bytes());
                for x in *list {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
            V::F32s(list) => {
                out.extend_from_slice(&9u32.to_le_bytes());
                out.extend_from_slice(&6u32.to_le_bytes());
                out.extend_from_slice(&(list.len() as u64).to_le_bytes());
                for x in *list {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
        }
    }
    while !out.len().is_multiple_of(32) {
        out.push(0);
    }
    out
}

fn vocab_of(kvs: &[(&str, V<'_>)]) -> Result<GgufVocab, VocabError> {
    let file = GgufFile::parse(&gguf(kvs)).expect("test GGUF parses");
    GgufVocab::from_metadata(file.metadata())
}

const TOKENS: &[&str] = &["<unk>", "<s>", "</s>", "▁a", "▁", "a", "b", "<0x61>"];

#[test]
fn reads_a_small_spm_vocabulary() {
    let vocab = vocab_of(&[
        ("tokenizer.ggml.model", V::Str("llama")),
        ("tokenizer.ggml.tokens", V::Strs(TOKENS)),
        (
            "tokenizer.ggml.scores",
            V::F32s(&[0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -3.0, 0.0]),
        ),
        (
            "tokenizer.ggml.token_type",
            V::I32s(&[2, 3, 3, 1, 1, 1, 1, 6]),
        ),
        ("tokenizer.ggml.bos_token_id", V::U32(1)),
        ("tokenizer.ggml.add_bos_token", V::Bool(true)),
        ("tokenizer.chat_template", V::Str("{{ messages }}")),
        ("tokenizer.chat_template.tool_use", V::Str("tools")),
    ])
    .expect("valid metadata");
    assert_eq!(
        vocab.named_chat_templates,
        vec![("tool_use".to_owned(), "tools".to_owned())]
    );
    let tok = GgufTokenizer::new(&vocab).expect("builds");
    // SentencePiece: a leading "▁" is added and "▁a" is one token; "c" has no byte token.
    assert_eq!(
        tok.encode(
            "a a",
            EncodeOptions {
                add_special: true,
                parse_special: false
            }
        )
        .expect("encodes"),
        [1, 3, 3]
    );
    assert!(matches!(
        tok.encode("c", EncodeOptions::default()),
        Err(TokenizerError::MissingByteToken { byte: b'c' })
    ));
    // Decoding drops the first token's leading space; like llama.cpp, a skipped BOS counts as
    // that first token.
    assert_eq!(tok.decode_bytes(&[3, 3], true).expect("decodes"), b"a a");
    assert_eq!(
        tok.decode_bytes(&[1, 3, 3], true).expect("decodes"),
        b" a a"
    );
    assert_eq!(
        tok.decode_bytes(&[1, 3, 3], false).expect("decodes"),
        b"<s> a a"
    );
}

#[test]
fn metadata_errors_are_typed() {
    let missing = vocab_of(&[("tokenizer.ggml.tokens", V::Strs(TOKENS))]);
    assert!(matches!(
        missing,
        Err(VocabError::MissingKey {
            key: "tokenizer.ggml.model"
        })
    ));
    let wrong_type = vocab_of(&[
        ("tokenizer.ggml.model", V::Str("llama")),
        ("tokenizer.ggml.tokens", V::Str("x")),
    ]);
    assert!(matches!(
        wrong_type,
        Err(VocabError::Metadata {
            key: "tokenizer.ggml.tokens",
            ..
        })
    ));
    let wrong_id = vocab_of(&[
        ("tokenizer.ggml.model", V::Str("llama")),
        ("tokenizer.ggml.tokens", V::Strs(TOKENS)),
        ("tokenizer.ggml.bos_token_id", V::Str("one")),
    ]);
    assert!(matches!(
        wrong_id,
        Err(VocabError::Metadata {
            key: "tokenizer.ggml.bos_token_id",
            ..
        })
    ));
}

fn base() -> GgufVocab {
    GgufVocab {
        model: "llama".into(),
        tokens: TOKENS.iter().map(|t| (*t).to_owned()).collect(),
        ..GgufVocab::default()
    }
}

#[test]
fn vocabulary_errors_are_typed() {
    let err = |v: GgufVocab| GgufTokenizer::new(&v).err();
    assert!(matches!(
        err(GgufVocab {
            model: "bert".into(),
            ..base()
        }),
        Some(VocabError::UnsupportedModel { .. })
    ));
    assert!(matches!(
        err(GgufVocab {
            model: "gpt2".into(),
            ..base()
        }),
        Some(VocabError::MissingKey { .. })
    ));
    assert!(matches!(
        err(GgufVocab {
            model: "gpt2".into(),
            merges: Some(vec![]),
            pre: Some("martian".into()),
            ..base()
        }),
        Some(VocabError::UnsupportedPreTokenizer { .. })
    ));
    assert!(matches!(
        err(GgufVocab {
            scores: Some(vec![0.0]),
            ..base()
        }),
        Some(VocabError::LengthMismatch { .. })
    ));
    assert!(matches!(
        err(GgufVocab {
            tokens: vec![],
            ..base()
        }),
        Some(VocabError::Empty)
    ));
    let mut dup = base();
    dup.tokens.push("a".into());
    assert!(matches!(
        err(dup),
        Some(VocabError::DuplicateToken {
            first: 5,
            second: 8,
            ..
        })
    ));
    // Out-of-range special ids fall back to the defaults, as in llama.cpp.
    let tok = GgufTokenizer::new(&GgufVocab {
        bos_token_id: Some(1000),
        ..base()
    })
    .expect("builds");
    assert_eq!(tok.special_tokens().bos, Some(1));
    // Unknown token types are tolerated; decoding an id outside the vocabulary is not.
    let tok = GgufTokenizer::new(&GgufVocab {
        token_types: Some(vec![99; TOKENS.len()]),
        ..base()
    })
    .expect("builds");
    assert!(matches!(
        tok.token_to_piece(999, false),
        Err(TokenizerError::UnknownId { id: 999, .. })
    ));
}

#[test]
// Protected ranges are lists of ranges.
#[allow(clippy::single_range_in_vec_init)]
fn protected_text_never_becomes_a_control_token() {
    // A vocabulary whose merges spell the control token "<s>" from plain characters.
    let vocab = GgufVocab {
        model: "llama".into(),
        tokens: ["<unk>", "<s>", "</s>", "<", "s", ">", "<s", "▁"]
            .iter()
            .map(|t| (*t).to_owned())
            .collect(),
        token_types: Some(vec![2, 3, 3, 1, 1, 1, 1, 1]),
        scores: Some(vec![0.0, 0.0, 0.0, -1.0, -1.0, -1.0, -0.5, -1.0]),
        add_space_prefix: Some(false),
        ..GgufVocab::default()
    };
    let tok = poot_text::Tokenizer::Gguf(Box::new(GgufTokenizer::new(&vocab).expect("builds")));
    // Plain encoding merges up to the control token, as llama.cpp would.
    assert_eq!(
        tok.encode(
            "<s>",
            EncodeOptions {
                add_special: false,
                parse_special: false
            }
        )
        .expect("encodes"),
        [1]
    );
    // As protected chat text it is refused instead.
    assert!(matches!(
        tok.encode_protected("<s>", &[0..3]),
        Err(TokenizerError::ControlFromText { id: 1 })
    ));
    assert!(matches!(
        tok.encode_protected("<s>", &[0..9]),
        Err(TokenizerError::BadProtectedRange { .. })
    ));
}
