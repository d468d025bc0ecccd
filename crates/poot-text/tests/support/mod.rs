//! Shared helpers for poot-text's integration tests: locating real checkpoints and fixtures.

#![allow(dead_code)]

use std::path::PathBuf;

use poot_text::{GgufTokenizer, GgufVocab, HfSpecialTexts, HfTokenizer, TextServices};

/// The model cache (`$POOT_CACHE/models`, default `~/.cache/poot/models`).
pub fn models_dir() -> PathBuf {
    let cache = std::env::var_os("POOT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/poot")
        });
    cache.join("models")
}

/// A checkpoint in the model cache, or `None` after printing the skip reason.
pub fn model(name: &str) -> Option<PathBuf> {
    let path = models_dir().join(name);
    if path.exists() {
        Some(path)
    } else {
        eprintln!(
            "SKIP: {} not found (run scripts/fetch-models.sh)",
            path.display()
        );
        None
    }
}

pub fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

pub fn fixture(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(fixture_path(name)).expect("fixture is committed");
    serde_json::from_str(&text).expect("fixture is valid JSON")
}

pub const SMOLLM2: &str = "smollm2-135m-instruct-q4_1.gguf";
pub const GEMMA3: &str = "gemma3-270m-q4_k_m.gguf";
pub const MINILM: &str = "all-minilm-l6-v2";

pub fn gguf_vocab(name: &str) -> Option<GgufVocab> {
    let path = model(name)?;
    let file = poot_load::gguf::GgufFile::open(&path).expect("checkpoint GGUF parses");
    Some(GgufVocab::from_metadata(file.metadata()).expect("vocabulary metadata reads"))
}

pub fn gguf_tokenizer(name: &str) -> Option<GgufTokenizer> {
    Some(GgufTokenizer::new(&gguf_vocab(name)?).expect("vocabulary builds"))
}

pub fn minilm_tokenizer() -> Option<HfTokenizer> {
    let dir = model(MINILM)?;
    let bytes = std::fs::read(dir.join("tokenizer.json")).expect("tokenizer.json reads");
    let names = HfSpecialTexts {
        unk: Some("[UNK]".into()),
        pad: Some("[PAD]".into()),
        ..Default::default()
    };
    Some(HfTokenizer::from_bytes(&bytes, &names).expect("tokenizer.json loads"))
}

/// A committed toy `tokenizer.json` (`scripts/ref/hf_toy_tokenizers.py`): `bytelevel` or
/// `metaspace`.
pub fn toy_tokenizer(name: &str) -> HfTokenizer {
    let bytes =
        std::fs::read(fixture_path(&format!("toy_{name}_tokenizer.json"))).expect("fixture");
    let names = match name {
        "bytelevel" => HfSpecialTexts {
            bos: Some("<|begin_of_text|>".into()),
            eos: Some("<|im_end|>".into()),
            ..Default::default()
        },
        _ => HfSpecialTexts {
            bos: Some("<s>".into()),
            eos: Some("</s>".into()),
            unk: Some("<unk>".into()),
            ..Default::default()
        },
    };
    HfTokenizer::from_bytes(&bytes, &names).expect("toy tokenizer loads")
}

pub fn gguf_services(name: &str, fallback_format: Option<&str>) -> Option<TextServices> {
    let path = model(name)?;
    let file = poot_load::gguf::GgufFile::open(&path).expect("checkpoint GGUF parses");
    Some(TextServices::from_gguf(file.metadata(), fallback_format).expect("text services build"))
}

pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .expect("id list")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

pub fn hex(v: &serde_json::Value) -> Vec<u8> {
    let s = v.as_str().expect("hex string");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

pub fn str_of(v: &serde_json::Value) -> &str {
    v.as_str().expect("string")
}
