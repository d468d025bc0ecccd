//! Sentence embeddings on the wgpu backend (lavapipe in CI): all-MiniLM-L6-v2's mean-pooled,
//! normalized embeddings of 12 sentences equal sentence-transformers' within 1e-4 cosine distance,
//! with the same token ids.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use poot_llm::{BackendChoice, SentenceEncoder, open_executor};
use serde::Deserialize;

#[derive(Deserialize)]
struct MiniLm {
    sentences: Vec<String>,
    input_ids: Vec<Vec<u32>>,
    embeddings: Vec<Vec<f32>>,
}

#[test]
fn minilm_embeddings_match_sentence_transformers_on_wgpu() {
    let cache = std::env::var_os("POOT_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/poot")
        });
    let path = cache.join("models/all-minilm-l6-v2");
    if !path.exists() {
        eprintln!(
            "SKIP: {} not found (run scripts/fetch-models.sh)",
            path.display()
        );
        return;
    }
    let exec = match open_executor(BackendChoice::Wgpu) {
        Ok(o) => o.executor,
        Err(e) => {
            eprintln!("SKIP: {e}");
            return;
        }
    };
    let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../poot-models/tests/fixtures/real/minilm.json");
    let r: MiniLm = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let mut enc = SentenceEncoder::load_up_to(&path, exec, r.sentences.len(), 64).unwrap();
    let text = enc.handle().text().unwrap();
    for (s, want) in r.sentences.iter().zip(&r.input_ids) {
        assert_eq!(&text.encode(s).unwrap(), want, "token ids of {s:?}");
    }
    let texts: Vec<&str> = r.sentences.iter().map(String::as_str).collect();
    let vectors = enc.embed(&texts).unwrap();
    for (i, (got, want)) in vectors.iter().zip(&r.embeddings).enumerate() {
        let cos: f64 = got
            .iter()
            .zip(want)
            .map(|(&a, &b)| a as f64 * b as f64)
            .sum();
        assert!(
            1.0 - cos <= 1e-4,
            "sentence {i}: cosine distance {}",
            1.0 - cos
        );
    }
}
